"""A keyring backend for tests that keeps secrets OUTSIDE the home (like the OS keyring):
a JSON file named by ``STET_TEST_KEYRING``. With it the daemon keeps its owner token and
device key where the system keyring would, so a test can show what a copy of the home
alone is worth. (``keyring.backends.fail`` makes the daemon use its documented fallback:
0600 files in the home.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend


class OutsideKeyring(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    @property
    def _file(self) -> Path:
        return Path(os.environ["STET_TEST_KEYRING"])

    def _load(self) -> dict[str, str]:
        try:
            data: dict[str, str] = json.loads(self._file.read_text())
            return data
        except FileNotFoundError:
            return {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._load().get(f"{service}\0{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        data = self._load()
        data[f"{service}\0{username}"] = password
        tmp = self._file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.chmod(tmp, 0o600)
        tmp.replace(self._file)

    def delete_password(self, service: str, username: str) -> None:
        data = self._load()
        data.pop(f"{service}\0{username}", None)
        self._file.write_text(json.dumps(data))
