"""The CRDT state behind every revision handed out (SPEC §6.4 ``baseRevision``).

Each time a reader or writer is given a revision, the note's snapshot at that moment is
remembered; a later rewrite "made at that revision" forks the note there. Entries live
at least ``max_age`` (one hour by default) and are pruned after that.
"""

from __future__ import annotations

from .store import VaultStore

DEFAULT_MAX_AGE_S = 3600.0


class RevisionMemory:
    def __init__(self, store: VaultStore, *, max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        self.store = store
        self.max_age_s = max_age_s

    def remember(self, note_id: str, revision: str, snapshot: bytes, now: float) -> None:
        with self.store.transaction():
            self.store.db.execute(
                "INSERT INTO revision_states (note_id, revision, snapshot, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(note_id, revision) DO UPDATE SET created_at = excluded.created_at",
                (note_id, revision, snapshot, now),
            )

    def lookup(self, note_id: str, revision: str, now: float) -> bytes | None:
        row = self.store.db.execute(
            "SELECT snapshot, created_at FROM revision_states WHERE note_id = ? AND revision = ?",
            (note_id, revision),
        ).fetchone()
        if row is None or now - float(row[1]) > self.max_age_s:
            return None
        return bytes(row[0])

    def prune(self, now: float) -> int:
        with self.store.transaction():
            cur = self.store.db.execute(
                "DELETE FROM revision_states WHERE created_at < ?", (now - self.max_age_s,)
            )
        return cur.rowcount
