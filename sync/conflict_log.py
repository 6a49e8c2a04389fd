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

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "at": self.at, "token": self.token, "path": self.path,
            "operation": self.operation, "code": self.code, "attempted": self.attempted,
            "currentRevision": self.current_revision,
        }


class ConflictLog:
    def __init__(self, store: VaultStore) -> None:
        self.store = store

    def record(self, *, at: float, token: str, path: str, operation: str, code: str,
               attempted: dict[str, Any], current_revision: str | None) -> Conflict:
        with self.store.transaction():
            cur = self.store.db.execute(
                "INSERT INTO conflicts (at, token, path, operation, code, attempted, current_revision) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (at, token, path, operation, code, json.dumps(attempted, ensure_ascii=False),
                 current_revision),
            )
        return Conflict(int(cur.lastrowid or 0), at, token, path, operation, code, attempted,
                        current_revision)

    def list(self, *, limit: int = 100, since: float | None = None) -> list[Conflict]:
        rows = self.store.db.execute(
            "SELECT id, at, token, path, operation, code, attempted, current_revision FROM conflicts "
            "WHERE at >= ? ORDER BY id DESC LIMIT ?",
            (since or 0.0, limit),
        ).fetchall()
        return [Conflict(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7]) for r in rows]
