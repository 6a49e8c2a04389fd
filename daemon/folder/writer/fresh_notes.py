"""A peer's new notes, written to the folder without loading their documents again
(issue 18 P4).

In a first sync the folder's writer planned each new note by loading its document from
the store (the intake's copy long evicted from the service's cache of 256 by then): a
tenth of the receiving peer's loop. The intake's Change of a new note carries its text,
revision and snapshot; the writer keeps them here until it writes the note, and uses them
only if the note's row still says exactly that state: its first and only update, that
revision, no file recorded. Anything else (edited since, compacted, written already) and
the entry is dropped and the document is loaded as before. Kept as the file's bytes
(UTF-8: a str with one emoji takes 4 bytes per character) and bounded: past ``MAX_BYTES``
waiting, further notes are not kept (they are written the usual way). Measured in P4
(bench/history/rounds.md): 16 M characters of str kept raised the receiving peer's peak memory
from 126 to 200 MB; 8 MB of bytes left it at 121 MB just after the sync (82 MB before)
for ~2 % of its loop; 2 MB: 92 MB. A first sync's writer lags the intake by thousands of
notes, so most of them are loaded again anyway; a stream of notes (P8's peer) fits.
"""

from __future__ import annotations

from stet.daemon.notes.changes import Change
from stet.sync.change_kinds import ChangeKind
from stet.sync.note_rows import NoteRow

MAX_BYTES = 2 << 20  # bytes of files kept waiting at most (measured: above)


class FreshNotes:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._waiting: dict[str, tuple[str, bytes, bytes]] = {}  # note -> (revision, data, snapshot)
        self._size = 0
        self.full = False  # a new note did not fit, and none was taken or dropped since

    def offer(self, change: Change) -> None:
        """Keep a new note's state (a change that carries its snapshot); forget a note
        changed otherwise."""
        if (change.kind == ChangeKind.CREATED and change.snapshot is not None
                and change.text_after is not None and change.revision_after is not None):
            self._drop(change.note_id)
            if self._size + len(change.text_after) <= self.max_bytes:  # (a str is no shorter than its UTF-8)
                data = change.text_after.encode("utf-8")
                if self._size + len(data) <= self.max_bytes:
                    self._waiting[change.note_id] = (change.revision_after, data, change.snapshot)
                    self._size += len(data)
                    return
            self.full = bool(self._waiting)  # (one note bigger than the cap alone: not full)
            return
        self._drop(change.note_id)

    def take(self, row: NoteRow) -> tuple[bytes, bytes] | None:
        """(the file's bytes, snapshot) of ``row``'s note if kept and still exactly its state."""
        kept = self._waiting.get(row.id)
        if kept is None:
            return None
        self._drop(row.id)
        revision, data, snapshot = kept
        if row.update_count != 1 or row.revision != revision or row.disk is not None or row.deleted:
            return None
        return data, snapshot

    def _drop(self, note_id: str) -> None:
        kept = self._waiting.pop(note_id, None)
        if kept is not None:
            self._size -= len(kept[1])
            self.full = False

    def crowded(self) -> bool:
        """Half full or more (a slice of a peer's notes, ~20 ms of them, may fill the rest):
        the intake lets the writer catch up (``DiskWrites.room_for_new_notes``)."""
        return self.full or self._size >= self.max_bytes // 2

    def among(self, note_ids: set[str]) -> set[str]:
        """The notes of ``note_ids`` whose states are kept (the writer takes them first)."""
        return note_ids & self._waiting.keys()

    def __len__(self) -> int:
        return len(self._waiting)
