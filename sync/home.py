"""The home directory: where a daemon keeps its state, and the registry of vaults.

A home holds ``config.toml``, ``home.db`` (vault registry, tokens), one SQLite store
per vault under ``vaults/``, ``daemon.json`` while a daemon runs, the API socket
``stet.sock`` and logs. Several homes on one machine = several daemons.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import sqlite3
import stat
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from .errors import AlreadyExists, NotFound, StetError, StoreError
from .home_layout import HomeLayout

logger = logging.getLogger(__name__)

HOME_SCHEMA_VERSION = 3


def secure_home(root: Path) -> int:
    """Home 0700, every folder in it 0700 and every file 0600 (SPEC R4), also for a home
    made before (an older Stet, a copy, a hand-made folder): fixed, not just checked.
    Symlinks are left alone (never followed). Returns how many modes were changed; a
    home this user cannot fix is refused with one sentence."""
    changed = 0
    try:
        for dirpath, _dirnames, filenames in os.walk(root, followlinks=False):
            changed += _chmod(Path(dirpath))
            for name in filenames:
                changed += _chmod(Path(dirpath) / name)
    except PermissionError as exc:
        raise StetError(f"cannot make {root} private (mode 0700, files 0600): {exc.strerror} on "
                        f"{exc.filename}; fix its owner or run `chmod -R go= {root}`") from None
    if changed:
        logger.warning("made %d item(s) in %s private (folders 0700, files 0600)", changed, root)
    return changed


def _chmod(path: Path) -> int:
    """Take group and other bits away (a folder stays 0700, a file 0600)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0  # gone meanwhile (a temp file)
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or mode & 0o077 == 0:
        return 0
    os.chmod(path, mode & 0o700)
    return 1


def create_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist (before SQLite opens it:
    its -wal and -shm files then take the same mode)."""
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


@dataclass(frozen=True, slots=True)
class TokenRecord:
    name: str
    vault_id: str
    scopes: dict[str, list[str]]
    created_at: float
    last_used_at: float | None
    revoked_at: float | None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "vault": self.vault_id,
            "scopes": self.scopes,
            "createdAt": self.created_at,
            "lastUsedAt": self.last_used_at,
            "revokedAt": self.revoked_at,
        }


def token_hash(token: str) -> str:
    # A header that was not UTF-8 arrives with lone surrogates: hash it anyway (no match).
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


TOKEN_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


@dataclass(frozen=True, slots=True)
class VaultEntry:
    id: str
    name: str
    path: Path
    created_at: float


def new_vault_id() -> str:
    """A random vault id: 20 lowercase base32 characters (100 bits)."""
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    return "".join(secrets.choice(alphabet) for _ in range(20))


_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE vaults (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        path TEXT NOT NULL UNIQUE,
        created_at REAL NOT NULL
    );
    """,
    2: """
    CREATE TABLE tokens (
        name TEXT PRIMARY KEY,
        vault_id TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        created_at REAL NOT NULL,
        last_used_at REAL,
        revoked_at REAL
    );
    """,
    3: """
    CREATE TABLE invites (
        key_hash TEXT PRIMARY KEY,
        vault_id TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        used_at REAL,
        used_by TEXT
    );
    CREATE TABLE pending_joins (
        vault_id TEXT PRIMARY KEY,
        invite TEXT NOT NULL,
        path TEXT NOT NULL,
        name TEXT,
        created_at REAL NOT NULL,
        error TEXT
    );
    """,
}


class HomeRegistry:
    """The vault registry in ``home.db``. Safe to use from the CLI and the daemon at once."""

    def __init__(self, layout: HomeLayout) -> None:
        layout.ensure()
        self.layout = layout
        create_private(layout.home_db)
        self._db = sqlite3.connect(layout.home_db, timeout=10, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _migrate(self) -> None:
        with self._tx() as db:
            current = int(db.execute("PRAGMA user_version").fetchone()[0])
            if current > HOME_SCHEMA_VERSION:
                raise StoreError(
                    f"{self.layout.home_db} was written by a newer Stet (schema {current}); "
                    "upgrade Stet to use this home"
                )
            for version in range(current + 1, HOME_SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[version].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version={version}")

    def vaults(self) -> list[VaultEntry]:
        rows = self._db.execute("SELECT id, name, path, created_at FROM vaults ORDER BY name").fetchall()
        return [VaultEntry(r[0], r[1], Path(r[2]), r[3]) for r in rows]

    def find(self, ref: str | None) -> VaultEntry:
        """A vault by name or id; ``None`` means "the only vault"."""
        vaults = self.vaults()
        if ref is None:
            if len(vaults) == 1:
                return vaults[0]
            if not vaults:
                raise NotFound("no vault is registered yet: run `stet init PATH` first")
            names = ", ".join(v.name for v in vaults)
            raise StetError(f"there are several vaults ({names}): name one with --vault")
        for v in vaults:
            if ref in (v.name, v.id):
                return v
        raise NotFound(f"no vault named {ref!r}")

    def add(self, name: str, path: Path) -> VaultEntry:
        path = path.resolve()
        self.check_new(name, path)
        entry = VaultEntry(new_vault_id(), name, path, time.time())
        with self._tx() as db:
            db.execute(
                "INSERT INTO vaults (id, name, path, created_at) VALUES (?, ?, ?, ?)",
                (entry.id, entry.name, str(entry.path), entry.created_at),
            )
        return entry

    def check_new(self, name: str, path: Path) -> None:
        """Refuse a vault whose name is taken or whose folder is, holds or lies inside
        another vault of this home (``stet init`` asks before it creates anything)."""
        path = path.resolve()
        for v in self.vaults():
            if v.path == path:
                raise AlreadyExists(f"{path} is already the vault {v.name!r}")
            if v.name == name:
                raise AlreadyExists(f"a vault named {name!r} exists already (pick --name)")
            if path.is_relative_to(v.path):
                raise AlreadyExists(f"{path} lies inside the vault {v.name!r} at {v.path}: "
                                    "a folder can belong to one vault only")
            if v.path.is_relative_to(path):
                raise AlreadyExists(f"{path} holds the vault {v.name!r} at {v.path}: "
                                    "a folder can belong to one vault only")

    # -- agent tokens (only their hashes are stored) ---------------------------------

    def create_token(self, name: str, vault_id: str, scopes: dict[str, list[str]]) -> str:
        if not TOKEN_NAME_RE.match(name):
            raise StetError(f"invalid token name {name!r}: use letters, digits, '.', '_' or '-'")
        token = "stet_" + secrets.token_urlsafe(32)
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO tokens (name, vault_id, token_hash, scopes, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (name, vault_id, token_hash(token), json.dumps(scopes), time.time()),
                )
        except sqlite3.IntegrityError:
            raise AlreadyExists(f"a token named {name!r} exists already (revoke it first)") from None
        return token

    def tokens(self) -> list[TokenRecord]:
        rows = self._db.execute(
            "SELECT name, vault_id, scopes, created_at, last_used_at, revoked_at FROM tokens ORDER BY name"
        ).fetchall()
        return [TokenRecord(r[0], r[1], json.loads(r[2]), r[3], r[4], r[5]) for r in rows]

    def data_version(self) -> int:
        """Changes whenever another connection (the CLI) commits to home.db."""
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def lookup_token(self, token: str) -> TokenRecord | None:
        """The live (not revoked) token with this secret, if any."""
        r = self._db.execute(
            "SELECT name, vault_id, scopes, created_at, last_used_at, revoked_at FROM tokens "
            "WHERE token_hash = ? AND revoked_at IS NULL",
            (token_hash(token),),
        ).fetchone()
        return None if r is None else TokenRecord(r[0], r[1], json.loads(r[2]), r[3], r[4], r[5])

    def live_token_hashes(self, hashes: Collection[str]) -> set[str]:
        """Which of these token hashes belong to live (not revoked) tokens."""
        wanted = list(hashes)
        live: set[str] = set()
        for i in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
            part = wanted[i:i + 500]
            rows = self._db.execute(
                f"SELECT token_hash FROM tokens WHERE revoked_at IS NULL AND token_hash IN "
                f"({', '.join('?' * len(part))})", part).fetchall()
            live.update(str(r[0]) for r in rows)
        return live

    def revoke_token(self, name: str) -> None:
        with self._tx() as db:
            cur = db.execute("DELETE FROM tokens WHERE name = ?", (name,))
        if cur.rowcount == 0:
            raise NotFound(f"no token named {name!r}")

    def touch_tokens(self, used: dict[str, float]) -> None:
        with self._tx() as db:
            db.executemany(
                "UPDATE tokens SET last_used_at = ? WHERE name = ?", [(at, name) for name, at in used.items()]
            )

    # -- pairing ---------------------------------------------------------------------

    def create_invite(self, vault_id: str, ttl_s: float, key: tuple[str, str] | None = None) -> str:
        """A single-use join key for ``vault_id`` (for the invite line); only its public half
        is kept (column ``key_hash``: ``ed25519:<hex>``), which checks proofs, never makes one.
        ``key``: (secret, verify key) made elsewhere (the daemon makes it in a child process)."""
        if key is None:
            from .invites import new_invite_key

            key = new_invite_key()
        secret, verify_key = key
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO invites (key_hash, vault_id, created_at, expires_at) VALUES (?, ?, ?, ?)",
                (verify_key, vault_id, now, now + ttl_s),
            )
        return secret

    def open_invites(self, vault_id: str, now: float) -> list[str]:
        """Verify keys of the vault's unused, unexpired invites (``ed25519:<hex>``)."""
        rows = self._db.execute(
            "SELECT key_hash FROM invites WHERE vault_id = ? AND used_at IS NULL AND expires_at > ?",
            (vault_id, now),
        ).fetchall()
        return [r[0] for r in rows]

    def use_invite(self, key_hash: str, device_id: str) -> bool:
        """Mark an invite used; False if it was used (or raced) already."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE invites SET used_at = ?, used_by = ? WHERE key_hash = ? AND used_at IS NULL",
                (time.time(), device_id, key_hash),
            )
        return cur.rowcount == 1

    def add_pending_join(self, vault_id: str, invite: str, path: Path, name: str | None) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO pending_joins (vault_id, invite, path, name, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(vault_id) DO UPDATE SET invite = excluded.invite, path = excluded.path, "
                "name = excluded.name, error = NULL",
                (vault_id, invite, str(path), name, time.time()),
            )

    def pending_joins(self) -> list[tuple[str, str, Path, str | None, str | None]]:
        rows = self._db.execute(
            "SELECT vault_id, invite, path, name, error FROM pending_joins ORDER BY created_at"
        ).fetchall()
        return [(r[0], r[1], Path(r[2]), r[3], r[4]) for r in rows]

    def finish_pending_join(self, vault_id: str, error: str | None) -> None:
        with self._tx() as db:
            if error is None:
                db.execute("DELETE FROM pending_joins WHERE vault_id = ?", (vault_id,))
            else:
                db.execute("UPDATE pending_joins SET error = ? WHERE vault_id = ?", (error, vault_id))

    def add_with_id(self, vault_id: str, name: str, path: Path) -> VaultEntry:
        """Register a vault joined from a peer (its id is the inviter's)."""
        path = path.resolve()
        for v in self.vaults():
            if v.id == vault_id:
                return v
            if v.path == path or path.is_relative_to(v.path) or v.path.is_relative_to(path):
                raise AlreadyExists(f"{path} overlaps the vault {v.name!r} at {v.path}")
        taken = {v.name for v in self.vaults()}
        final = name
        n = 2
        while final in taken:
            final = f"{name}-{n}"
            n += 1
        entry = VaultEntry(vault_id, final, path, time.time())
        with self._tx() as db:
            db.execute(
                "INSERT INTO vaults (id, name, path, created_at) VALUES (?, ?, ?, ?)",
                (entry.id, entry.name, str(entry.path), entry.created_at),
            )
        return entry

    def remove(self, vault_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM vaults WHERE id = ?", (vault_id,))

    def unregister(self, vault_id: str) -> int:
        """Forget a vault (``stet vaults remove``): its entry, its agent tokens, its open
        invites and a pending join. Its folder and its store file are left alone.
        Returns how many agent tokens went with it."""
        with self._tx() as db:
            db.execute("DELETE FROM vaults WHERE id = ?", (vault_id,))
            tokens = db.execute("DELETE FROM tokens WHERE vault_id = ?", (vault_id,)).rowcount
            db.execute("DELETE FROM invites WHERE vault_id = ?", (vault_id,))
            db.execute("DELETE FROM pending_joins WHERE vault_id = ?", (vault_id,))
        return int(tokens)


def write_private_file(path: Path, data: bytes) -> None:
    """Write ``data`` atomically to a 0600 file (temp, fsync, rename, fsync dir)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
