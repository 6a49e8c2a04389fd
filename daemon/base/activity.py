"""Long work a person may be waiting on -- a rescan of a vault folder -- and how far it
has got: told to the log (every 5 s), and, while the daemon is still starting (its API
not announced yet), written to ``<home>/starting.json`` for ``stet start`` to show.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stet.sync.home import write_private_file

logger = logging.getLogger(__name__)

FILE_EVERY_S = 0.25  # starting.json is rewritten at most this often
LOG_EVERY_S = 5.0  # and the log told at most this often


class Activity:
    def __init__(self, starting_file: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.starting_file = starting_file
        self.clock = clock
        self.ready = False
        self._current: dict[tuple[str, str], dict[str, Any]] = {}
        self._file_at = float("-inf")
        self._logged_at: dict[tuple[str, str], float] = {}

    def progress(self, vault: str, kind: str) -> Callable[[int, int], None]:
        """A ``progress(done, total)`` callback for ``kind`` of work on ``vault``."""
        key = (vault, kind)

        def report(done: int, total: int) -> None:
            now = self.clock()
            entry = self._current.setdefault(key, {"vault": vault, "kind": kind, "startedAt": time.time()})
            entry.update(done=done, total=total)
            if now - self._logged_at.get(key, 0.0) >= LOG_EVERY_S or done >= total:
                self._logged_at[key] = now
                if total:
                    logger.info("%s of %s: %d of %d files", kind, vault, done, total)
            if not self.ready and (now - self._file_at >= FILE_EVERY_S or done >= total):
                self._file_at = now
                self._write_file()

        return report

    def finish(self, vault: str, kind: str) -> None:
        self._current.pop((vault, kind), None)
        self._logged_at.pop((vault, kind), None)

    def snapshot(self) -> list[dict[str, Any]]:
        return [dict(v) for v in self._current.values()]

    def mark_ready(self) -> None:
        self.ready = True
        with contextlib.suppress(FileNotFoundError):
            self.starting_file.unlink()

    def _write_file(self) -> None:
        try:
            write_private_file(self.starting_file, json.dumps({"activity": self.snapshot()}).encode())
        except OSError as exc:  # progress is a courtesy; never fail the work over it
            logger.debug("could not write %s: %s", self.starting_file, exc)

