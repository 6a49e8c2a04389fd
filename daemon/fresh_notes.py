"""A peer's new notes, written to the folder without loading their documents again
(issue 18 P4).

In a first sync the folder's writer planned each new note by loading its document from
the store (the intake's copy long evicted from the service's cache of 256 by then): a
tenth of the receiving peer's loop. The intake's Change of a new note carries its text,
revision and snapshot; the writer keeps them here until it writes the note, and uses them
only if the note's row still says exactly that state: its first and only update, that
revision, no file recorded. Anything else (edited since, compacted, written already) and
the entry is dropped and the document is loaded as before. Bounded: past ``MAX_TEXT``
characters waiting, further notes are not kept (they are written the usual way).
"""

from __future__ import annotations

from stet.sync.change_kinds import ChangeKind
from stet.sync.store import NoteRow

from .changes import Change

MAX_TEXT = 16 << 20  # characters of text kept waiting at most (a first sync's backlog)


class FreshNotes:
    def __init__(self, max_text: int = MAX_TEXT) -> None:
        self.max_text = max_text
        self._waiting: dict[str, tuple[str, str, bytes]] = {}  # note -> (revision, text, snapshot)
        self._size = 0

    def offer(self, change: Change) -> None:
        """Keep a new note's state (a change that carries its snapshot); forget a note
        changed otherwise."""
        if (change.kind == ChangeKind.CREATED and change.snapshot is not None
                and change.text_after is not None and change.revision_after is not None):
            self._drop(change.note_id)
            if self._size + len(change.text_after) <= self.max_text:
                self._waiting[change.note_id] = (change.revision_after, change.text_after, change.snapshot)
                self._size += len(change.text_after)
            return
        self._drop(change.note_id)

    def take(self, row: NoteRow) -> tuple[str, bytes] | None:
        """(text, snapshot) of ``row``'s note if kept and still exactly its state."""
        kept = self._waiting.get(row.id)
        if kept is None:
            return None
        self._drop(row.id)
        revision, text, snapshot = kept
        if row.update_count != 1 or row.revision != revision or row.disk is not None or row.deleted:
            return None
        return text, snapshot

    def _drop(self, note_id: str) -> None:
        kept = self._waiting.pop(note_id, None)
        if kept is not None:
            self._size -= len(kept[1])

    def __len__(self) -> int:
        return len(self._waiting)
