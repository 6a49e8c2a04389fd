"""Access to the ``versions`` and ``version_due`` tables of a vault store (SPEC §5).

Versions are local to this machine and live in the vault's SQLite store, so they
survive restarts. Every write joins the caller's transaction when there is one (an
agent's write and the version it caused commit together).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .store import VaultStore
from .versions import VersionMeta, VersionPolicy, preview, versions_to_drop

_INFO_COLS = ("id, note_id, path, kind, source, created_at, revision, length(text), "
              "length(CAST(text AS BLOB)), substr(text, 1, 400)")


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """A version without its full text (for listings)."""

    id: int
    note_id: str
    path: str  # the note's path when the version was saved
    kind: str
    source: str
    created_at: float
    revision: str
    chars: int
    size: int  # UTF-8 bytes
    preview: str

    @property
    def meta(self) -> VersionMeta:
        return VersionMeta(self.id, self.kind, self.created_at)


@dataclass(frozen=True, slots=True)
class Version:
    id: int
    note_id: str
    path: str
    kind: str
    source: str
    created_at: float
    revision: str
    text: str


def _info(r: Sequence[Any]) -> VersionInfo:
    return VersionInfo(int(r[0]), r[1], r[2], r[3], r[4], float(r[5]), r[6], int(r[7]), int(r[8]),
                       preview(r[9]))


class VersionStore:
    def __init__(self, store: VaultStore) -> None:
        self.store = store

    @property
    def _db(self) -> Any:
        return self.store.db

    # -- versions -----------------------------------------------------------------

    def add(self, *, note_id: str, path: str, kind: str, source: str, created_at: float,
            revision: str, text: str) -> Version:
        with self.store.transaction():
            cur = self._db.execute(
                "INSERT INTO versions (note_id, path, kind, source, created_at, revision, text) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (note_id, path, kind, source, created_at, revision, text),
            )
        return Version(int(cur.lastrowid), note_id, path, kind, source, created_at, revision, text)

    def same_text(self, note_id: str, text: str) -> int | None:
        """A kept version of the note holding exactly ``text`` (the newest such), or None."""
        r = self._db.execute(
            "SELECT id FROM versions WHERE note_id = ? AND text = ? "
            "ORDER BY created_at DESC, id DESC LIMIT 1",
            (note_id, text),
        ).fetchone()
        return None if r is None else int(r[0])

    def refresh(self, version_id: int, *, path: str, kind: str, source: str, created_at: float) -> Version:
        """Keep an existing version as if saved now (SPEC §5.7: no duplicate versions):
        its time, and the path, kind and source of the latest reason to keep it."""
        with self.store.transaction():
            self._db.execute(
                "UPDATE versions SET path = ?, kind = ?, source = ?, created_at = ? WHERE id = ?",
                (path, kind, source, created_at, version_id),
            )
        version = self.get(version_id)
        assert version is not None
        return version

    def get(self, version_id: int) -> Version | None:
        r = self._db.execute(
            "SELECT id, note_id, path, kind, source, created_at, revision, text FROM versions WHERE id = ?",
            (version_id,),
        ).fetchone()
        if r is None:
            return None
        return Version(int(r[0]), r[1], r[2], r[3], r[4], float(r[5]), r[6], r[7])

    def for_note(self, note_id: str) -> list[VersionInfo]:
        """A note's versions, newest first."""
        rows = self._db.execute(
            f"SELECT {_INFO_COLS} FROM versions WHERE note_id = ? ORDER BY created_at DESC, id DESC",
            (note_id,),
        ).fetchall()
        return [_info(r) for r in rows]

    def note_ids_at(self, path: str) -> list[str]:
        """Notes that had a version saved while at ``path`` (newest version first)."""
        rows = self._db.execute(
            "SELECT note_id, max(id) AS last FROM versions WHERE path = ? "
            "GROUP BY note_id ORDER BY last DESC",
            (path,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def newest(self, note_id: str) -> VersionInfo | None:
        r = self._db.execute(
            f"SELECT {_INFO_COLS} FROM versions WHERE note_id = ? ORDER BY created_at DESC, id DESC LIMIT 1",
            (note_id,),
        ).fetchone()
        return None if r is None else _info(r)

    def count(self, note_id: str | None = None) -> int:
        if note_id is None:
            return int(self._db.execute("SELECT count(*) FROM versions").fetchone()[0])
        row = self._db.execute("SELECT count(*) FROM versions WHERE note_id = ?", (note_id,)).fetchone()
        return int(row[0])

    # -- retention ------------------------------------------------------------------

    def protected_ids(self, note_id: str) -> set[int]:
        """Versions a change still held by the brake points at: never dropped."""
        rows = self._db.execute(
            "SELECT version_id FROM held WHERE note_id = ? AND state = 'held' AND version_id IS NOT NULL",
            (note_id,),
        ).fetchall()
        return {int(r[0]) for r in rows}

    def apply_retention(self, note_id: str, now: float, policy: VersionPolicy) -> list[int]:
        """Drop what the retention rules no longer keep; returns the dropped ids."""
        metas = [
            VersionMeta(int(r[0]), r[1], float(r[2]))
            for r in self._db.execute(
                "SELECT id, kind, created_at FROM versions WHERE note_id = ?", (note_id,)
            ).fetchall()
        ]
        if len(metas) <= policy.keep:
            return []
        drop = versions_to_drop(metas, now, policy, self.protected_ids(note_id))
        if drop:
            with self.store.transaction():
                self._db.executemany("DELETE FROM versions WHERE id = ?", [(i,) for i in drop])
        return drop

    def notes_over(self, keep: int) -> list[str]:
        """Notes with more than ``keep`` versions (candidates for time-based retention)."""
        rows = self._db.execute(
            "SELECT note_id FROM versions GROUP BY note_id HAVING count(*) > ?", (keep,)
        ).fetchall()
        return [str(r[0]) for r in rows]

    # -- idle versions due ------------------------------------------------------------

    def mark_due(self, note_id: str) -> None:
        self.store.write_one("INSERT OR IGNORE INTO version_due (note_id) VALUES (?)", (note_id,))

    def mark_due_many(self, note_ids: list[str]) -> None:
        """``mark_due`` of each, one statement for them all."""
        self.store.write_many("INSERT OR IGNORE INTO version_due (note_id) VALUES (?)",
                              [(i,) for i in note_ids])

    def clear_due(self, note_id: str) -> None:
        self.store.write_one("DELETE FROM version_due WHERE note_id = ?", (note_id,))

    def due_times(self) -> dict[str, float]:
        """Notes waiting for an idle version -> when their row last changed (-inf: the
        row is gone, so due at once)."""
        rows = self._db.execute(
            "SELECT d.note_id, n.updated_at FROM version_due d LEFT JOIN notes n ON n.id = d.note_id"
        ).fetchall()
        return {str(r[0]): float(r[1]) if r[1] is not None else -math.inf for r in rows}

    def due_ids(self) -> set[str]:
        return {str(r[0]) for r in self._db.execute("SELECT note_id FROM version_due").fetchall()}
