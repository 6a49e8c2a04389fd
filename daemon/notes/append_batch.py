"""A group's appends to one note: one CRDT transaction, one row write (P2).

The appends of one loop turn already share a commit (``group_commit.py``). Inside that
group each append is still checked, recorded (its idempotency key) and answered on its
own, but the note itself changes once: while the group runs, an append to a note only
queues its text here and is given the revision the note has after it (the SHA-256 of the
text so far, hashed from the state before it -- no document change); at the end of the
group the queued texts are inserted in one ``doc.transaction()``, the note's row and
update are written once, and each append is announced as its own change (the change log
keeps every applied change with its revisions, SPEC §6.10). Every revision handed out stays
rebuildable for ``baseRevision``: the state after the k-th append is the state before
the group with this client's clock advanced (``sync/snapshot_clock.py``).

Failure isolation is kept: an append refused or failing inside its own savepoint drops
its queued text when that savepoint rolls back (``on_rollback``); the group's insertion
happens inside the group's unit, so if it fails the whole group rolls back and every
caller of the group gets the error (nothing of it was acknowledged). A read of a note
with queued appends (``NotesService.doc``) applies them first.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from stet.daemon.notes.changes import Change, WriteResult
from stet.sync.change_kinds import ChangeKind
from stet.sync.errors import CrdtError
from stet.sync.note_rows import NoteRow
from stet.sync.snapshot_clock import after_insertions, client_clock, utf16_length
from stet.sync.snapshot_state import insertion_prefixes
from stet.sync.text_diff import Splice

if TYPE_CHECKING:
    from stet.daemon.notes.service import NotesService

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _State:
    """The note as the next append sees it."""

    row: NoteRow  # its revision, size, updated_at/by after the appends so far
    text: str
    hasher: Any  # hashlib SHA-256 state of ``text``'s bytes
    size: int  # bytes of ``text``


@dataclass(slots=True)
class _Queued:
    """The appends queued for one note; ``states[k]``: after the first k of them."""

    states: list[_State]
    pieces: list[tuple[str, str]] = field(default_factory=list)  # (text, source)


class AppendBatch:
    def __init__(self, service: NotesService) -> None:
        self.service = service
        self.queued: dict[str, _Queued] = {}
        self.paths: dict[str, NoteRow] = {}  # path -> the row of a note with queued appends
        self.transactions = 0  # CRDT transactions made by ``flush`` (for tests)

    def row_at(self, path: str) -> NoteRow | None:
        """The note at ``path`` if it has queued appends (nothing but appends writes inside
        a group, so no row is read again for them)."""
        return self.paths.get(path)

    def view(self, row: NoteRow) -> tuple[NoteRow, str, int] | None:
        """(row, text, byte size) of a note with queued appends, as the next append sees it."""
        queued = self.queued.get(row.id)
        if queued is None:
            return None
        state = queued.states[-1]
        return state.row, state.text, state.size

    def add(self, row: NoteRow, text: str, source: str) -> WriteResult | None:
        """Queue ``text`` at the end of the note ``row``; the row it has after it. None:
        ``row`` is not the note's current state here (the caller takes the general path)."""
        service = self.service
        queued = self.queued.get(row.id)
        if queued is None:
            doc = service.doc(row.id)
            if doc.revision != row.revision:
                return None
            hasher, size = doc.hash_state()
            queued = self.queued[row.id] = _Queued([_State(row, doc.text, hasher, size)])
            self.paths[row.path] = row
        state = queued.states[-1]
        if row.revision != state.row.revision:  # a row read past the queue (``appendable`` is not)
            raise CrdtError(f"{row.path}: an append read the note before the group's appends")
        new_text = state.text + text
        service._guard(source, state.row, state.text, new_text)
        data = text.encode("utf-8")
        hasher = state.hasher.copy()
        hasher.update(data)
        size = state.size + len(data)
        new_row = replace(state.row, revision=hasher.hexdigest(), size=size, updated_at=service.clock(),
                          updated_by=source)
        queued.states.append(_State(new_row, new_text, hasher, size))
        queued.pieces.append((text, source))
        # This append's savepoint rolls back (its key could not be saved...): it never happened.
        service.store.on_rollback(functools.partial(self._truncate, row.id, len(queued.pieces) - 1))
        return WriteResult(new_row, True)

    def _truncate(self, note_id: str, keep: int) -> None:
        queued = self.queued.get(note_id)
        if queued is None:
            return
        if keep == 0:
            del self.queued[note_id]
            self.paths.pop(queued.states[0].row.path, None)
            return
        del queued.pieces[keep:]
        del queued.states[keep + 1:]

    def flush(self) -> None:
        """Apply every queued append (inside the group's unit)."""
        while self.queued:
            self.flush_note(next(iter(self.queued)))

    def flush_note(self, note_id: str) -> None:
        queued = self.queued.pop(note_id, None)
        if queued is None:
            return
        self.paths.pop(queued.states[0].row.path, None)
        if not queued.pieces:
            return
        service = self.service
        first, last = queued.states[0], queued.states[-1]
        doc = service.doc(note_id)
        old_text = doc.text
        if doc.revision != first.row.revision:  # nothing else writes inside a group
            raise CrdtError(f"{first.row.path} changed under a group of appends")
        before = doc.snapshot()
        client = doc.doc.client_id
        joined = "".join(text for text, _source in queued.pieces)
        update = doc.apply_splices(old_text, [Splice(len(old_text), len(old_text), joined)])
        self.transactions += 1
        if update is None or doc.revision != last.row.revision:
            raise CrdtError(f"{first.row.path}: a group of appends did not give the revisions answered")
        now = service.clock()
        # Every revision handed out, rebuildable for an hour (the last is the current one).
        lengths = [utf16_length(text) for text, _source in queued.pieces]
        before_clock = client_clock(before, client)
        remembered = [(note_id, first.row.revision, before)]
        remembered += [(note_id, state.row.revision, snapshot) for state, snapshot in
                       zip(queued.states[1:-1], after_insertions(before, client, lengths[:-1]), strict=True)]
        service.revisions.remember_many(remembered, now)
        row = service._persist(first.row, doc, update, last.row.updated_by)
        # One change per append, as if each had been applied alone (SPEC §6.10: every
        # applied change is logged, with its revisions and characters; here and on peers).
        # Append k's update is the group's insertion cut where it ends
        # (``snapshot_state.insertion_prefixes``): it holds the appends before it too,
        # which a peer applying them in order already has -- what is new to it is exactly
        # this append's text. Told together (the change log: one statement); nothing is
        # destroyed by an append.
        runs = [(k, k + 1) for k in range(len(queued.pieces))]
        ends = [before_clock + sum(lengths[:end]) for _start, end in runs[:-1]]
        parts = (insertion_prefixes(update, client, ends) + [update]) if ends else [update]
        changes: list[Change] = []
        for (start, end), part in zip(runs, parts, strict=True):
            inserted = sum(len(text) for text, _s in queued.pieces[start:end])
            changes.append(Change(
                ChangeKind.CHANGED, note_id, row.path, queued.pieces[start][1],
                queued.states[start].row.revision, queued.states[end].row.revision, at=row.updated_at,
                text_before=queued.states[start].text, text_after=queued.states[end].text,
                inserted=inserted, deleted=0, update=part,
            ))
        service._emit_many(changes)
