"""Where a home keeps its files (``HomeLayout``): paths only, so the CLI can find a running
daemon without importing the registry (SQLite, secrets): a CLI start is short (SPEC P10).
``stet.sync.home`` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class HomeLayout:
    root: Path

    @property
    def config_file(self) -> Path:
        return self.root / "config.toml"

    @property
    def home_db(self) -> Path:
        return self.root / "home.db"

    @property
    def vaults_dir(self) -> Path:
        return self.root / "vaults"

    def vault_db(self, vault_id: str) -> Path:
        return self.vaults_dir / f"{vault_id}.db"

    @property
    def daemon_json(self) -> Path:
        return self.root / "daemon.json"

    @property
    def starting_json(self) -> Path:
        """What a starting daemon is doing (a long rescan), until it is ready."""
        return self.root / "starting.json"

    @property
    def socket(self) -> Path:
        return self.root / "stet.sock"

    @property
    def lock_file(self) -> Path:
        """Held (flock, exclusive) by the running daemon for its whole life: one daemon
        per home, and the CLI's proof that the pid in ``daemon.json`` is that daemon."""
        return self.root / "daemon.lock"

    @property
    def owner_token_file(self) -> Path:
        return self.root / "owner.token"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    @property
    def keyring_service(self) -> str:
        """Keyring service name: one per home, so several daemons never share secrets."""
        import hashlib

        digest = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:16]
        return f"stet:{digest}"

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.vaults_dir.mkdir(exist_ok=True, mode=0o700)
        self.log_dir.mkdir(exist_ok=True, mode=0o700)
        from .home import secure_home  # home.py imports this module: loaded on use

        secure_home(self.root)
