"""The one place client/ reads a store itself: read-only SQLite, for when no daemon answers.

The CLI reaches a vault's store through the daemon (HTTP). Without one, `stet status`,
`stet doctor` and `stet init`'s claim check still need a few facts; they read them here,
each through a connection opened with ``mode=ro`` (SQLite refuses every write on it), so
a CLI command can never change a store the daemon may be writing. (`stet init`'s first
import is the one writer: ``stet.sync.vault_import.import_new_vault``, before any daemon
knows the vault.) ``tests/test_layers.py`` checks that no other client module imports
``sqlite3`` or a sync module that opens vault stores.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DatabaseError = sqlite3.Error  # what a damaged, locked or foreign file raises


@contextmanager
def read_only(path: Path, *, timeout: float = 5.0) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the SQLite file at ``path`` (never created if missing)."""
    db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=timeout)
    try:
        yield db
    finally:
        db.close()


def vault_summary(path: Path) -> tuple[int, dict[str, str]]:
    """(live notes, skipped files with their reasons) of a vault's store."""
    with read_only(path) as db:
        notes = int(db.execute("SELECT count(*) FROM notes WHERE deleted = 0").fetchone()[0])
        skipped = {str(p): str(r) for p, r in db.execute("SELECT path, reason FROM skipped ORDER BY path")}
    return notes, skipped


def held_count(path: Path) -> int | None:
    """How many changes the burst brake holds (None: the store cannot tell)."""
    try:
        with read_only(path) as db:
            return int(db.execute("SELECT count(*) FROM held WHERE state = 'held'").fetchone()[0])
    except sqlite3.Error:
        return None


def latest_change(path: Path) -> float | None:
    """When the store's newest note changed (None: unknown)."""
    try:
        with read_only(path) as db:
            row = db.execute("SELECT max(updated_at) FROM notes").fetchone()
    except sqlite3.Error:
        return None
    return None if row is None or row[0] is None else float(row[0])


def integrity_problems(path: Path) -> list[str]:
    """What SQLite's integrity check finds wrong (empty: nothing). Raises
    ``DatabaseError`` if the file cannot be opened or checked."""
    with read_only(path, timeout=10) as db:
        rows = db.execute("PRAGMA integrity_check").fetchall()
    return [str(r[0]) for r in rows if r and r[0] != "ok"]


def vault_name_at(home_db: Path, folder: Path) -> str | None:
    """The name of the vault a home's registry (``home.db``) has at ``folder``."""
    if not home_db.is_file():
        return None
    try:
        with read_only(home_db) as db:
            row = db.execute("SELECT name FROM vaults WHERE path = ?", (str(folder),)).fetchone()
    except sqlite3.Error:
        return None
    return str(row[0]) if row else None
