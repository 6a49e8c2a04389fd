"""Snapshot reads (SPEC §6.4): the vault as it stood at one moment, for an agent's task.

A snapshot is a store position, not a copy: the largest update sequence number
(``update_seq``) and note-history sequence number (``history_seq``) when it was opened.

- A note's *content* at the snapshot is its update rows up to ``update_seq``. Rows are
  ordered by sequence, never by clock, and compaction merges rows only between snapshot
  positions (``VaultStore.compact``), so this holds for as long as the snapshot lives.
- *Where* a note was (path, deleted or not) is its ``notes`` row, unless it changed since:
  then the first ``note_history`` row after ``history_seq`` holds what it was before
  (a trigger writes those rows with every path or deletion change while a snapshot
  exists). A note whose first update came after ``update_seq`` did not exist yet.

A snapshot therefore costs one row, plus one history row per move or deletion made
while it lives. It lives ``SNAPSHOT_TTL_S`` (one hour), across restarts (it is in the
store); then ``expired_snapshot``.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from .errors import StetError
from .note_doc import NoteDoc
from .note_rows import NOTE_COLUMNS, NoteRow, note_row
from .store import VaultStore

SNAPSHOT_TTL_S = 3600.0
_ID = re.compile(r"snap_[0-9a-f]{32}\Z")


@dataclass(frozen=True, slots=True)
class Snapshot:
    id: str
    created_at: float
    update_seq: int
    history_seq: int


@dataclass(frozen=True, slots=True)
class NoteThen:
    """A note as it stood at a snapshot: live at ``path``; ``changed``: its content or
    place differs from now (read it from the rows, not the current document)."""

    note_id: str
    path: str
    changed: bool
    row: NoteRow | None = None  # its current index row, when unchanged (its facts then too)


def expired(snapshot_id: str) -> StetError:
    return StetError(
        f"snapshot {snapshot_id} is unknown or older than {int(SNAPSHOT_TTL_S // 60)} minutes; "
        "open a new one (open_snapshot) and read again", code="expired_snapshot", snapshot=snapshot_id)


class Snapshots:
    def __init__(self, store: VaultStore, *, ttl_s: float = SNAPSHOT_TTL_S) -> None:
        self.store = store
        self.ttl_s = ttl_s

    # -- lifetime --------------------------------------------------------------------

    def open(self, now: float) -> Snapshot:
        db = self.store.db
        with self.store.transaction():
            update_seq = int(db.execute("SELECT coalesce(max(seq), 0) FROM updates").fetchone()[0])
            history_seq = int(db.execute("SELECT coalesce(max(seq), 0) FROM note_history").fetchone()[0])
            snap = Snapshot("snap_" + secrets.token_hex(16), now, update_seq, history_seq)
            db.execute("INSERT INTO snapshots (id, created_at, update_seq, history_seq) VALUES (?, ?, ?, ?)",
                       (snap.id, snap.created_at, snap.update_seq, snap.history_seq))
        return snap

    def get(self, snapshot_id: object, now: float) -> Snapshot:
        if not isinstance(snapshot_id, str) or not _ID.match(snapshot_id):
            raise StetError("snapshot must be an id returned by open_snapshot", code="bad_request")
        row = self.store.db.execute(
            "SELECT id, created_at, update_seq, history_seq FROM snapshots WHERE id = ?", (snapshot_id,)
        ).fetchone()
        if row is None or now - float(row[1]) > self.ttl_s:
            raise expired(snapshot_id)
        return Snapshot(str(row[0]), float(row[1]), int(row[2]), int(row[3]))

    def prune(self, now: float) -> int:
        """Forget expired snapshots, and the history rows no live snapshot needs."""
        db = self.store.db
        with self.store.transaction():
            gone = db.execute("DELETE FROM snapshots WHERE created_at < ?", (now - self.ttl_s,)).rowcount
            oldest = db.execute("SELECT min(history_seq) FROM snapshots").fetchone()[0]
            if oldest is None:
                db.execute("DELETE FROM note_history")
            else:
                db.execute("DELETE FROM note_history WHERE seq <= ?", (int(oldest),))
        return int(gone)

    def count(self) -> int:
        return int(self.store.db.execute("SELECT count(*) FROM snapshots").fetchone()[0])

    # -- the vault then --------------------------------------------------------------

    def _content_changed(self, snap: Snapshot) -> set[str]:
        rows = self.store.db.execute("SELECT DISTINCT note_id FROM updates WHERE seq > ?", (snap.update_seq,))
        return {str(r[0]) for r in rows}

    def _places_then(self, snap: Snapshot) -> dict[str, tuple[str, bool]]:
        """note id -> (path, deleted) at the snapshot, for the notes moved or (un)deleted since."""
        rows = self.store.db.execute(
            "SELECT note_id, path, deleted FROM note_history WHERE seq > ? ORDER BY seq", (snap.history_seq,)
        ).fetchall()
        out: dict[str, tuple[str, bool]] = {}
        for note_id, path, deleted in rows:
            out.setdefault(str(note_id), (str(path), bool(deleted)))
        return out

    def _existed(self, note_id: str, snap: Snapshot) -> bool:
        return self.store.db.execute(
            "SELECT 1 FROM updates WHERE note_id = ? AND seq <= ? LIMIT 1", (note_id, snap.update_seq)
        ).fetchone() is not None

    def changed_then(self, snap: Snapshot) -> tuple[list[NoteThen], set[str]]:
        """The notes live at the snapshot whose text or place changed since (by path), and
        the ids of every note changed since (also those created or deleted since)."""
        changed = self._content_changed(snap)
        places = self._places_then(snap)
        touched = changed | set(places)
        out: list[NoteThen] = []
        current = self.rows(sorted(touched - set(places)))
        for note_id in touched:
            if note_id in places:
                path, deleted = places[note_id]
            else:
                row = current.get(note_id)
                if row is None:
                    continue
                path, deleted = row.path, row.deleted  # not moved nor (un)deleted since
            if not deleted and self._existed(note_id, snap):
                out.append(NoteThen(note_id, path, True))
        out.sort(key=lambda n: n.path)
        return out, touched

    def page_then(self, snap: Snapshot, *, prefix: str = "", after: str = "", limit: int,
                  allow: Callable[[str], bool]) -> tuple[list[NoteThen], bool]:
        """Notes live at the snapshot, by path (then), after ``after``, that ``allow`` lets
        through: at most ``limit``, and whether more follow. Reads the current rows in
        path order, 500 at a time, merged with the notes changed since."""
        changed, touched = self.changed_then(snap)
        pending = [n for n in changed if n.path.startswith(prefix) and n.path > after and allow(n.path)]
        out: list[NoteThen] = []
        cursor, i = after, 0
        while len(out) <= limit:
            rows = [note_row(r) for r in self.store.db.execute(
                f"SELECT {NOTE_COLUMNS} FROM notes WHERE deleted = 0 AND path > ? AND substr(path, 1, ?) = ? "
                "ORDER BY path LIMIT 500", (cursor, len(prefix), prefix),
            )]
            for row in rows:
                while i < len(pending) and pending[i].path < row.path:
                    out.append(pending[i])
                    i += 1
                if row.id not in touched and allow(row.path):
                    out.append(NoteThen(row.id, row.path, False, row))
                if len(out) > limit:
                    break
            if len(rows) < 500:
                break
            cursor = rows[-1].path
        if len(out) <= limit:
            out.extend(pending[i:])
        return out[:limit], len(out) > limit

    def note_then(self, snap: Snapshot, path: str) -> NoteThen | None:
        """The note that was live at ``path`` at the snapshot, if any."""
        places = self._places_then(snap)
        for note_id, (then_path, deleted) in places.items():
            if then_path == path and not deleted and self._existed(note_id, snap):
                return NoteThen(note_id, path, True)
        row = self.store.note_at(path)
        if row is None or row.id in places:
            return None
        changed = self.store.db.execute(
            "SELECT 1 FROM updates WHERE note_id = ? AND seq > ? LIMIT 1", (row.id, snap.update_seq)
        ).fetchone() is not None
        if changed and not self._existed(row.id, snap):
            return None
        return NoteThen(row.id, path, changed)

    def rows(self, note_ids: list[str]) -> dict[str, NoteRow]:
        """The current index rows of some notes, in one query per 500."""
        out: dict[str, NoteRow] = {}
        for start in range(0, len(note_ids), 500):
            chunk = note_ids[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            for r in self.store.db.execute(f"SELECT {NOTE_COLUMNS} FROM notes WHERE id IN ({marks})", chunk):
                row = note_row(r)
                out[row.id] = row
        return out

    def doc_then(self, snap: Snapshot, note_id: str) -> NoteDoc:
        rows = self.store.db.execute(
            "SELECT data FROM updates WHERE note_id = ? AND seq <= ? ORDER BY seq", (note_id, snap.update_seq)
        ).fetchall()
        return NoteDoc.from_updates([bytes(r[0]) for r in rows])

    def last_write_then(self, snap: Snapshot, note_id: str) -> tuple[float, str] | None:
        """(when, source) of the last update of the note at the snapshot."""
        row = self.store.db.execute(
            "SELECT created_at, source FROM updates WHERE note_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
            (note_id, snap.update_seq),
        ).fetchone()
        return None if row is None else (float(row[0]), str(row[1]))
