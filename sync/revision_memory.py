"""The CRDT state behind every revision handed out (SPEC §6.4 ``baseRevision``).

Each time a reader or writer is given a revision, the note's snapshot at that moment is
remembered; a later rewrite "made at that revision" forks the note there. Entries live
at least ``max_age`` (one hour by default) and are pruned after that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from .store import VaultStore

DEFAULT_MAX_AGE_S = 3600.0
_FILE_WRITE_KEY = "file_write:"  # meta key prefix: the revision a note's file is being given


class RevisionMemory:
    def __init__(self, store: VaultStore, *, max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        self.store = store
        self.max_age_s = max_age_s

    def remember(self, note_id: str, revision: str, snapshot: bytes, now: float) -> None:
        self.store.write_one(
            "INSERT INTO revision_states (note_id, revision, snapshot, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(note_id, revision) DO UPDATE SET created_at = excluded.created_at",
            (note_id, revision, snapshot, now),
        )

    def remember_many(self, states: Sequence[tuple[str, str, bytes]], now: float) -> None:
        """``remember`` each (note id, revision, snapshot): one ``executemany`` (a group of
        appends hands out a revision per append, daemon/notes/append_batch.py)."""
        self.store.write_many(
            "INSERT INTO revision_states (note_id, revision, snapshot, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(note_id, revision) DO UPDATE SET created_at = excluded.created_at",
            [(note_id, revision, snapshot, now) for note_id, revision, snapshot in states])

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

    # -- the file write in progress ------------------------------------------------------
    # A note's file is replaced (temp file, rename) and then its disk state is recorded.
    # Should the daemon die in between, the file holds a revision the store does not
    # name as the file's; read back as an edit made on the older text, its difference
    # would be merged again (everything written in between, twice). So the revision a
    # file is about to hold is recorded first, with its state, until the write is.

    def begin_file_write(self, note_id: str, revision: str, snapshot: bytes, now: float) -> None:
        # Two statements: in the caller's transaction as they are (the writer records a
        # batch's writes in one; a failure leaves through it), else in one of their own.
        with contextlib.nullcontext() if self.store.in_transaction else self.store.transaction():
            self.remember(note_id, revision, snapshot, now)
            self.store.set_meta(_FILE_WRITE_KEY + note_id, revision)

    def begin_file_writes(self, writes: Sequence[tuple[str, str, bytes]], now: float) -> None:
        """``begin_file_write`` for a batch of (note id, revision, snapshot): two
        ``executemany`` statements in the caller's transaction (or one of their own)."""
        if not writes:
            return
        with contextlib.nullcontext() if self.store.in_transaction else self.store.transaction():
            self.store.db.executemany(
                "INSERT INTO revision_states (note_id, revision, snapshot, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(note_id, revision) DO UPDATE SET created_at = excluded.created_at",
                [(note_id, revision, snapshot, now) for note_id, revision, snapshot in writes])
            self.store.db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [(_FILE_WRITE_KEY + note_id, revision) for note_id, revision, _snapshot in writes])

    def end_file_writes(self, note_ids: Sequence[str]) -> None:
        """``end_file_write`` for a batch: one ``executemany``."""
        self.store.write_many("DELETE FROM meta WHERE key = ?", [(_FILE_WRITE_KEY + n,) for n in note_ids])

    def file_write_in_progress(self, note_id: str) -> tuple[str, bytes] | None:
        """(revision, snapshot) of a file write that was begun and not recorded as done."""
        revision = self.store.get_meta(_FILE_WRITE_KEY + note_id)
        if revision is None:
            return None
        row = self.store.db.execute(
            "SELECT snapshot FROM revision_states WHERE note_id = ? AND revision = ?", (note_id, revision)
        ).fetchone()
        return None if row is None else (revision, bytes(row[0]))

    def file_writes_in_progress(self) -> set[str]:
        """The notes whose file write was begun and not recorded as done (at open: the ones
        a crash left; ``stet.sync.torn_writes``)."""
        rows = self.store.db.execute("SELECT key FROM meta WHERE key >= ? AND key < ?",
                                     (_FILE_WRITE_KEY, _FILE_WRITE_KEY[:-1] + ";")).fetchall()
        return {str(key)[len(_FILE_WRITE_KEY):] for (key,) in rows}

    def end_file_write(self, note_id: str) -> None:
        self.store.write_one("DELETE FROM meta WHERE key = ?", (_FILE_WRITE_KEY + note_id,))
