"""Refused writes, recorded so a person can see them (SPEC §6.8, ``stet conflicts``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .store import VaultStore


@dataclass(frozen=True, slots=True)
class Conflict:
    id: int
    at: float
    token: str
    path: str
    operation: str
    code: str
    attempted: dict[str, Any]
    current_revision: str | None
    # Promotion (SPEC §6.4): the note it was aimed at, the revision and CRDT state of the
    # text it was made against (what the agent had read), and its promotion if any.
    note_id: str | None = None
    base_revision: str | None = None
    base_state: bytes | None = None
    promoted_at: float | None = None
    promoted_by: str | None = None
    promoted_revision: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "at": self.at, "token": self.token, "path": self.path,
            "operation": self.operation, "code": self.code, "attempted": self.attempted,
            "currentRevision": self.current_revision, "baseRevision": self.base_revision,
            "promoted": None if self.promoted_at is None else {
                "at": self.promoted_at, "by": self.promoted_by, "revision": self.promoted_revision},
        }


_COLS = ("id, at, token, path, operation, code, attempted, current_revision, note_id, base_revision, "
         "base_state, promoted_at, promoted_by, promoted_revision")


def _conflict(r: Any) -> Conflict:
    return Conflict(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[8], r[9],
                    None if r[10] is None else bytes(r[10]), r[11], r[12], r[13])


class ConflictLog:
    def __init__(self, store: VaultStore) -> None:
        self.store = store

    def record(self, *, at: float, token: str, path: str, operation: str, code: str,
               attempted: dict[str, Any], current_revision: str | None, note_id: str | None = None,
               base_revision: str | None = None, base_state: bytes | None = None) -> Conflict:
        with self.store.transaction():
            cur = self.store.db.execute(
                "INSERT INTO conflicts (at, token, path, operation, code, attempted, current_revision, "
                "note_id, base_revision, base_state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (at, token, path, operation, code, json.dumps(attempted, ensure_ascii=False),
                 current_revision, note_id, base_revision, base_state),
            )
        return Conflict(int(cur.lastrowid or 0), at, token, path, operation, code, attempted,
                        current_revision, note_id, base_revision, base_state)

    def list(self, *, limit: int = 100, since: float | None = None) -> list[Conflict]:
        rows = self.store.db.execute(
            f"SELECT {_COLS} FROM conflicts WHERE at >= ? ORDER BY id DESC LIMIT ?",
            (since or 0.0, limit),
        ).fetchall()
        return [_conflict(r) for r in rows]

    def get(self, conflict_id: int) -> Conflict | None:
        row = self.store.db.execute(f"SELECT {_COLS} FROM conflicts WHERE id = ?", (conflict_id,)).fetchone()
        return None if row is None else _conflict(row)

    def latest(self, note_id: str, code: str) -> Conflict | None:
        """The newest conflict of ``code`` recorded for note ``note_id``."""
        row = self.store.db.execute(
            f"SELECT {_COLS} FROM conflicts WHERE note_id = ? AND code = ? ORDER BY id DESC LIMIT 1",
            (note_id, code)).fetchone()
        return None if row is None else _conflict(row)

    def revise(self, conflict_id: int, *, attempted: dict[str, Any], current_revision: str | None) -> None:
        """A conflict's record grown (a third side of an overlap still listed)."""
        with self.store.transaction():
            self.store.db.execute(
                "UPDATE conflicts SET attempted = ?, current_revision = ? WHERE id = ?",
                (json.dumps(attempted, ensure_ascii=False), current_revision, conflict_id))

    def mark_promoted(self, conflict_id: int, *, at: float, by: str, revision: str | None) -> None:
        with self.store.transaction():
            self.store.db.execute(
                "UPDATE conflicts SET promoted_at = ?, promoted_by = ?, promoted_revision = ? WHERE id = ?",
                (at, by, revision, conflict_id),
            )
