"""The attributed change log (SPEC §6.10): who changed which note, when, by how much."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .change_kinds import made_on
from .store import VaultStore


@dataclass(frozen=True, slots=True)
class LogEntry:
    note_id: str
    path: str
    kind: str  # created | changed | deleted | moved | restored
    source: str
    at: float
    revision_before: str | None
    revision_after: str | None
    inserted: int = 0
    deleted: int = 0
    old_path: str | None = None
    device: str | None = None
    id: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "kind": self.kind,
            "source": self.source,
            "device": self.device,
            "at": self.at,
            "revisionBefore": self.revision_before,
            "revisionAfter": self.revision_after,
            "inserted": self.inserted,
            "deleted": self.deleted,
            "oldPath": self.old_path,
        }


# The newest entries kept per path (P13, issue 35): a note edited a thousand times a
# day would otherwise grow the log without bound (~300 B an entry with its index).
KEEP_PER_PATH = 200
# A path's log is pruned back to ``KEEP_PER_PATH`` after one edit in ~``PRUNE_STRIDE`` of
# it, picked by the edit's revision (a content hash): a busy note costs one small range
# delete per ~this many of its writes, whatever other notes are edited between (a counter
# shared by all paths would always land on the same one of two notes edited in turn), and
# nothing is kept per path (a 100,000-note intake would hold 100,000 counters). Only
# edits count: the notes a bulk intake creates have one entry each, nothing to prune.
PRUNE_STRIDE = 50

_COLS = ("id, note_id, path, kind, source, at, revision_before, revision_after, inserted, deleted, "
         "old_path, device")


class ChangeLog:
    def __init__(self, store: VaultStore) -> None:
        self.store = store

    def append(self, e: LogEntry) -> int:
        cur = self.store.write_one(
            "INSERT INTO change_log (note_id, path, kind, source, at, revision_before, revision_after, "
            "inserted, deleted, old_path, device) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (e.note_id, e.path, e.kind, e.source, e.at, e.revision_before, e.revision_after,
             e.inserted, e.deleted, e.old_path, e.device),
        )
        return int(cur.lastrowid or 0)

    def append_many(self, entries: list[LogEntry]) -> None:
        """``append`` of each, one statement for them all (a bulk intake's new notes)."""
        self.store.write_many(
            "INSERT INTO change_log (note_id, path, kind, source, at, revision_before, revision_after, "
            "inserted, deleted, old_path, device) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(e.note_id, e.path, e.kind, e.source, e.at, e.revision_before, e.revision_after,
              e.inserted, e.deleted, e.old_path, e.device) for e in entries],
        )

    def prune_path(self, path: str, keep: int = KEEP_PER_PATH) -> int:
        """Drop all but the newest ``keep`` entries at ``path`` (the ``(path, id)`` index:
        one seek for the boundary, then a range delete). How many went."""
        row = self.store.db.execute(
            "SELECT id FROM change_log WHERE path = ? ORDER BY id DESC LIMIT 1 OFFSET ?", (path, keep - 1)
        ).fetchone()
        if row is None:
            return 0
        cur = self.store.write_one("DELETE FROM change_log WHERE path = ? AND id < ?", (path, int(row[0])))
        return int(cur.rowcount)

    def query(self, *, path: str | None = None, since: float | None = None,
              limit: int = 100) -> list[LogEntry]:
        where: list[str] = []
        args: list[str | float] = []
        if path is not None:
            where.append("(path = ? OR old_path = ?)")
            args += [path, path]
        if since is not None:
            where.append("at >= ?")
            args.append(since)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self.store.db.execute(
            f"SELECT {_COLS} FROM change_log {clause} ORDER BY id DESC LIMIT ?", (*args, limit)
        ).fetchall()
        return [
            LogEntry(note_id=r[1], path=r[2], kind=r[3], source=r[4], at=r[5], revision_before=r[6],
                     revision_after=r[7], inserted=r[8], deleted=r[9], old_path=r[10], device=r[11], id=r[0])
            for r in rows
        ]

    def last_writer(self, note_id: str, path: str, *, here: str) -> str | None:
        """Who wrote the note's text last, as every device names it (``disk on D``: the
        change's source on the device it was made on, ``here`` for this one); None when the
        log holds no change of it at ``path``. A change that left the text as it was (a peer
        naming a merge's sides) wrote none of it."""
        row = self.store.db.execute(
            "SELECT source, device FROM change_log WHERE path = ? AND note_id = ? "
            "AND (kind = 'created' OR (kind = 'changed' AND inserted + deleted > 0)) "
            "ORDER BY id DESC LIMIT 1", (path, note_id)).fetchone()
        if row is None:
            return None
        source, device = str(row[0]), row[1]
        return made_on(source, str(device or here))
