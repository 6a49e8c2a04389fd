"""The vault folder as a replica of its notes, like a peer (issue 11).

A peer session keeps what it last exchanged with its peer and sends and applies CRDT
updates; the folder replica keeps what it last exchanged with the folder: per note, the
file's stat and the CRDT state its text was based on (its *base*: ``DiskState``, kept in
the ``notes`` table's ``disk_*`` columns, written by no one else). A file edit is applied
as a peer's edit is: the replica forks the note at the file's base, makes the file's text
there, and hands the resulting update to the write path (``apply_update``), so whatever
changed since (an agent's append, a peer's edit not written out yet) is merged, not lost
(three-way, by the CRDT). It talks to ``NotesService`` only through ``ReplicaService``
-- apply-style calls (``apply_update``, ``apply_splices``, ``write_text``, ``move``,
``delete``) inside the caller's unit of work -- and hears of other sources' changes on
the change stream (``daemon/folder/writer/disk_writes.py`` writes them out). Its own bookkeeping
(``begin_write``, ``mark_synced``, the base recorded with each ingest) joins the same unit,
so one disk edit is one commit.

The file system itself is the bridge's (events, the intake queue, the rescan:
``daemon/folder/bridge.py``), the writer's (``daemon/folder/writer/disk_writes.py``) and rename
detection's (``daemon/folder/rename_detection.py``); this module does no I/O but the store's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Protocol

from stet.daemon.notes.changes import Listener, NewFile, WriteResult
from stet.daemon.notes.write_unit import WriteUnit
from stet.sync.errors import CrdtError
from stet.sync.note_doc import NoteDoc, text_revision
from stet.sync.note_rows import DiskState, NoteRow
from stet.sync.revision_memory import RevisionMemory
from stet.sync.store import VaultStore
from stet.sync.text_diff import Splice, union_splices
from stet.sync.torn_writes import torn_write

logger = logging.getLogger(__name__)

DISK = "disk"


class ReplicaService(Protocol):
    """What the folder replica needs of the write path (``NotesService``): reads, the
    unit of work, apply-style writes and the change stream. Nothing about files."""

    @property
    def store(self) -> VaultStore: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    def write(self, source: str = "") -> AbstractContextManager[WriteUnit]: ...

    def doc(self, note_id: str) -> NoteDoc: ...

    def apply_update(self, note_id: str, update: bytes, source: str) -> WriteResult: ...

    def merge_fork(self, row: NoteRow, fork: NoteDoc, text: str,
                   source: str) -> tuple[WriteResult, bytes | None]: ...

    def apply_splices(self, path: str, splices: list[Splice], source: str) -> WriteResult: ...

    def write_text(self, path: str, text: str, source: str, *, create: bool = True,
                   must_create: bool = False) -> WriteResult: ...

    def move(self, old_path: str, new_path: str, source: str, *, device: str | None = None) -> NoteRow: ...

    def delete(self, path: str, source: str, *, device: str | None = None,
               seen: bytes | None = None) -> NoteRow: ...

    def subscribe(self, listener: Listener, *, in_unit: bool = False) -> None: ...

    def create_many(self, files: Sequence[NewFile], source: str) -> list[NoteRow | None]: ...


def same_stat(disk: DiskState | None, st_mtime_ns: int, st_size: int, st_ino: int) -> bool:
    """The file looks exactly as when the replica last read or wrote it."""
    return disk is not None and (disk.mtime_ns, disk.size, disk.ino) == (st_mtime_ns, st_size, st_ino)


class FolderReplica:
    """The folder's side of every note: its file's base, and file edits merged against it."""

    def __init__(self, service: ReplicaService) -> None:
        self.service = service
        self.store = service.store
        # The file write in progress is remembered in the store (a crash between the
        # rename and ``mark_synced`` must be recognised as our own write at the next start).
        self.revisions = RevisionMemory(self.store)
        # The writes the last run began and did not record (it died): only these files
        # may have been cut short by a power loss (``stet.sync.torn_writes``); a write of
        # this run is recorded only once durable.
        self._left_by_crash = self.revisions.file_writes_in_progress()

    def unit(self, source: str = DISK) -> AbstractContextManager[WriteUnit]:
        """A unit of work on the write path (the writer's batches: one commit each)."""
        return self.service.write(source)

    def doc(self, note_id: str) -> NoteDoc:
        """The note's document (read; changed only through the write path)."""
        return self.service.doc(note_id)

    def subscribe(self, listener: Listener) -> None:
        """Hear of every change after its unit committed (the writer's way to know what
        to write out)."""
        self.service.subscribe(listener)

    # -- what the replica knows of each file ----------------------------------------------

    def base(self, note_id: str) -> DiskState | None:
        """The file's recorded state (stat, revision, and the snapshot it was based on)."""
        row = self.store.note(note_id)
        return None if row is None else row.disk

    def notes_with_file(self, ino: int) -> list[NoteRow]:
        """Live notes whose file was last seen with inode ``ino`` (rename detection)."""
        query = "SELECT id FROM notes WHERE disk_ino = ? AND deleted = 0"
        rows = [self.store.note(note_id) for (note_id,) in self.store.db.execute(query, (ino,)).fetchall()]
        return [row for row in rows if row is not None]

    # -- the folder → the notes ----------------------------------------------------------

    def ingest(self, path: str, text: str, disk: DiskState, source: str = DISK) -> WriteResult:
        """Take in the text a file now holds (one unit of work with its bookkeeping).

        If the note changed since the file was last in sync with it (a peer's or an
        agent's edit not yet written out), the file's change is made on a fork at the
        file's base and merged (three-way), so neither side is lost; ``needs_write`` then
        says the file must be rewritten with the merged text.
        """
        with self._unit(source):
            return self._ingest(path, text, disk, source)

    def _ingest(self, path: str, text: str, disk: DiskState, source: str) -> WriteResult:
        row = self.store.note_at(path)
        if row is None:
            created = self.service.write_text(path, text, source, must_create=True)
            state = replace(disk, snapshot=self.service.doc(created.note.id).snapshot())
            self._record(created.note.id, state)
            return replace(created, note=replace(created.note, disk=state))
        doc = self.service.doc(row.id)
        old_text = doc.text
        base = row.disk
        own = self.revisions.file_write_in_progress(row.id)
        if (own is not None and own[0] != disk.revision and row.id in self._left_by_crash
                and (base is None or base.revision != disk.revision)
                and self._cut_short(doc, text, own[1])):
            # Our own write, cut short by a power loss between its rename and the batch's
            # syncfs: not the user's edit (it would empty or cut the note everywhere). The
            # note keeps its text and the file is written again; nothing says what it is
            # based on meanwhile (an edit made to it now is added, never taken as a cut).
            logger.warning("%s: our write to it was cut short by a crash; writing it again", path)
            state = replace(disk, snapshot=None)
            self._record(row.id, state)
            return WriteResult(replace(row, disk=state), False, needs_write=True)
        if own is not None and own[0] == disk.revision and (base is None or base.revision != own[0]):
            # The file holds our own write, cut short before it was recorded (a crash):
            # that is what it is based on, not the older state the row still names.
            base = replace(disk, snapshot=own[1])
        fork = None
        if base is not None and base.snapshot is not None and row.revision != base.revision:
            try:
                fork = doc.fork_at(base.snapshot)
            except CrdtError:
                logger.warning("%s: cannot rebuild what the file was based on; taking it as is", path)
            if fork is not None and text_revision(fork.text) != base.revision:
                fork = None
        result: WriteResult | None = None
        if fork is not None:
            # Merged by the one rule (whole lines where both changed the same words); the
            # file's base is then the state its text was made as (None: its change was
            # already in the note, which the writer now writes out).
            result, file_snapshot = self.service.merge_fork(row, fork, text, source)
            file_state = replace(disk, snapshot=file_snapshot)
        elif old_text != text and (base is None or row.revision != base.revision):
            # A file this note was never written to (a path two notes claimed, a file
            # that appeared before our first write), or one whose base cannot be rebuilt
            # while the note changed since (`stet init` records no snapshot): nothing says
            # what it was based on, so its text is added, never taken as the authority to
            # delete the note's.
            splices = union_splices(old_text, text)
            if splices:
                result = self.service.apply_splices(path, splices, source)
            file_state = replace(disk, snapshot=None)
        else:
            if old_text != text:
                result = self.service.write_text(path, text, source, create=False)
            file_state = replace(disk, snapshot=self.service.doc(row.id).snapshot())
        if result is None or not result.changed:
            known = row.disk
            if known is None or not file_state.same_file(known) or known.snapshot != file_state.snapshot:
                self._record(row.id, file_state)
                row = replace(row, disk=file_state)
            return WriteResult(row, False, needs_write=row.revision != disk.revision)
        self._record(row.id, file_state)
        note = replace(result.note, disk=file_state)
        return WriteResult(note, True, needs_write=note.revision != disk.revision)

    @staticmethod
    def _cut_short(doc: NoteDoc, text: str, snapshot: bytes) -> bool:
        try:
            intended = doc.fork_at(snapshot).text
        except CrdtError:
            return False
        return torn_write(text, intended)

    def touched(self, row: NoteRow, disk: DiskState) -> NoteRow:
        """The file was touched, not edited (same text, a new stat): keep its base."""
        state = replace(disk, snapshot=row.disk.snapshot if row.disk is not None else None)
        with self._unit(DISK):
            self._record(row.id, state)
        return replace(row, disk=state)

    def merge_landed(self, note_id: str, text: str, base_revision: str | None,
                     base_snapshot: bytes | None) -> bool:
        """Merge an edit that landed in a file as the writer replaced it (the replaced
        file's text, made on the state that file was based on). False if the note is gone."""
        row = self.store.note(note_id)
        if row is None or row.deleted:
            return False
        with self.service.write(DISK):
            doc = self.service.doc(row.id)
            fork = None
            if base_snapshot is not None:
                with contextlib.suppress(CrdtError):
                    fork = doc.fork_at(base_snapshot)
                if fork is not None and text_revision(fork.text) != base_revision:
                    fork = None
            if fork is not None:
                self.service.merge_fork(row, fork, text, DISK)
            else:  # nothing says what it was based on: add what it has that the note lacks
                splices = union_splices(doc.text, text)
                if splices:
                    self.service.apply_splices(row.path, splices, DISK)
        return True

    def moved(self, row: NoteRow, new_path: str, source: str = DISK, *,
              file: DiskState | None = None) -> NoteRow:
        """The note's file is now at ``new_path`` (a rename here). ``file``: the file found
        there holds the note's current text (its base becomes the note's state now);
        without it the very file moved and keeps its recorded base."""
        with self.service.write(source):
            moved = self.service.move(row.path, new_path, source)
            if file is not None:
                state = replace(file, snapshot=self.service.doc(row.id).snapshot())
                self._record(row.id, state)
                moved = replace(moved, disk=state)
        return moved

    def deleted(self, row: NoteRow, source: str = DISK) -> NoteRow:
        """The note's file was deleted here. What came since the file's base (an agent's
        write, a peer's edit not written out yet) was not seen by whoever deleted the
        file, so it wins over the delete (SPEC §3.9)."""
        seen = row.disk.snapshot if row.disk is not None else None
        return self.service.delete(row.path, source, seen=seen)

    # -- the notes → the folder (the writer's bookkeeping) -------------------------------

    def begin_write(self, note_id: str, snapshot: bytes | None = None) -> None:
        """The note's file is about to be given the note's current text (see
        ``RevisionMemory``). ``snapshot``: the note's current snapshot, if known."""
        doc = self.service.doc(note_id)
        snap = snapshot if snapshot is not None else doc.snapshot()
        with self._unit(DISK):
            self.revisions.begin_file_write(note_id, doc.revision, snap, self.service.clock())
        self._left_by_crash.discard(note_id)  # its file was checked (ingested) first

    def mark_synced(self, note_id: str, disk: DiskState, snapshot: bytes | None = None) -> None:
        """The file now holds the note's text as of ``snapshot`` (just written or checked)."""
        snap = snapshot if snapshot is not None else self.service.doc(note_id).snapshot()
        with self._unit(DISK):
            self._record(note_id, replace(disk, snapshot=snap))
            self.revisions.end_file_write(note_id)
        self._left_by_crash.discard(note_id)

    def begin_writes(self, writes: list[tuple[str, str, bytes]]) -> None:
        """``begin_write`` for a batch of (note id, revision, snapshot) the writer planned
        (the revision and snapshot it took from the note's document): two statements."""
        with self._unit(DISK):
            self.revisions.begin_file_writes(writes, self.service.clock())
        if self._left_by_crash:  # their files were checked (ingested) first
            self._left_by_crash.difference_update(note_id for note_id, _r, _s in writes)

    def mark_synced_many(self, states: list[tuple[str, DiskState]]) -> None:
        """``mark_synced`` for a batch of written files (each state with its snapshot)."""
        with self._unit(DISK):
            self.store.set_disk_states(states)
            self.revisions.end_file_writes([note_id for note_id, _state in states])
        if self._left_by_crash:
            self._left_by_crash.difference_update(note_id for note_id, _state in states)

    def _unit(self, source: str) -> AbstractContextManager[object]:
        """A unit of work, unless the caller's is open: the bridge's intake gives each
        file a nested unit of its own and the writer does its batches in one; another
        SAVEPOINT here undid nothing more (a failure leaves through the caller's) and was
        most of a flushed note's SQLite calls (14 of 20; each call lets go of the
        interpreter lock, a chance for the watcher's threads to keep the loop waiting)."""
        if self.store.in_transaction:
            return contextlib.nullcontext()
        return self.service.write(source)

    def _record(self, note_id: str, state: DiskState | None) -> None:
        self.store.set_disk_state(note_id, state)
