"""CRDT → disk, the first step of a batch: each dirty note's write planned and the
batch's writes recorded as begun, in one unit of work (SPEC §3.3, §3.4). Composed into
``DiskWrites`` (daemon/folder/writer/disk_writes.py), which hands it the notes to plan; what it needs of
the writer is ``PlanHost``.

A plan is the note's text and snapshot and the file's stat as it was checked. Before a
note is planned its file is checked against what the daemon last saw: an edit not read
yet is merged first, so a disk edit is never clobbered; a file gone is given time for its
events (a rename or delete here) first. The plans' temp files are then written and
renamed into place by ``WriteRenames`` (daemon/folder/writer/temp_files.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stet.daemon.folder.checks import FolderChecks
from stet.daemon.folder.rename_detection import stat_matches
from stet.daemon.folder.writer.background_flush import FIRST_LOOKUP
from stet.sync.change_kinds import Source
from stet.sync.folder_scan import FileChanged, FileStat, SkipFile, decode_note, read_note_file
from stet.sync.note_doc import revision_of
from stet.sync.note_paths import InvalidPath
from stet.sync.note_rows import DiskState, NoteRow

if TYPE_CHECKING:

    from stet.daemon.folder.writer.ports import PlanHost

logger = logging.getLogger(__name__)

DISK = Source.DISK
PLAN_LOOKUP = 256  # rows a plan looks up at once (a timed flush's batch: FLUSH_NOTES)


@dataclass(slots=True)
class PlannedWrite:
    note_id: str
    rel: str  # the note's path when planned (``target`` relative to the vault, POSIX)
    target: Path
    checked: FileStat | None  # the file as it was when the write was planned
    data: bytes
    revision: str
    snapshot: bytes
    base_revision: str | None = None  # what the file being replaced was based on
    base_snapshot: bytes | None = None
    tmp: Path | None = None
    written: FileStat | None = None


class WritePlans:
    """Plans a batch's writes and records them as begun (CRDT → disk, first step)."""

    def __init__(self, writer: PlanHost) -> None:
        self.writer = writer
        self._waited: dict[str, float] = {}  # note -> until when its vanished file gets time

    def begin_some(self, note_ids: list[str], over: Callable[[], bool] | None = None
                   ) -> tuple[list[PlannedWrite], int]:
        """Plan the first notes of ``note_ids`` -- all, or until ``over()`` -- and record
        their writes as begun; returns the plans and how many notes were taken."""
        plans: list[PlannedWrite] = []
        taken = 0
        # The batch's rows in one lookup (a few, growing, if the slice may end early: see
        # ``FIRST_LOOKUP``), each folder checked once (``FolderChecks``).
        chunk = PLAN_LOOKUP if over is None else FIRST_LOOKUP
        rows = self.writer.replica.store.notes(note_ids[:chunk])
        looked = chunk
        folders = FolderChecks(self.writer.root)
        # One unit: the disk edits merged first and the writes recorded as begun -- durable
        # before any rename, so a crash after one is recognised as our own write.
        with self.writer.replica.unit(DISK):
            for note_id in note_ids:
                if taken and over is not None and over():
                    break
                if taken == looked and looked < PLAN_LOOKUP:
                    chunk = min(2 * chunk, PLAN_LOOKUP - looked)
                    rows.update(self.writer.replica.store.notes(note_ids[looked : looked + chunk]))
                    looked += chunk
                taken += 1
                try:  # (a failure undoes this note's part only: ``own_unit``)
                    plan = self._plan_write(note_id, rows.pop(note_id, None) if rows else None, folders,
                                            own_unit=True)
                except Exception:
                    logger.exception("failed to write note %s to disk", note_id)
                    continue
                if plan is not None:
                    plans.append(plan)
            self.writer.replica.begin_writes([(plan.note_id, plan.revision, plan.snapshot) for plan in plans])
        return plans, taken

    def _plan_write(self, note_id: str, row: NoteRow | None = None,
                    folders: FolderChecks | None = None, *, own_unit: bool = False) -> PlannedWrite | None:
        """``row``: the note's row if the caller looked it up (else it is looked up here);
        ``folders``: the batch's folder checks. ``own_unit``: what the plan records (an
        edit on disk merged first, a file gone taken as a rename or delete) is a nested
        unit of its own, undone alone if it fails -- opened only when it may record
        something: a peer's new note planned from ``FreshNotes`` records nothing, and its
        SAVEPOINT and RELEASE were two of a written note's ten SQLite calls."""
        if row is None:
            row = self.writer.replica.store.note(note_id)
        if row is None or row.deleted:
            return None
        fresh = self.writer.fresh_notes.take(row)
        try:
            target, checked = (folders or FolderChecks(self.writer.root)).target(row.path)
        except InvalidPath as exc:
            logger.error("not writing %s: %s", row.path, exc.reason)
            return None
        if checked is None and row.disk is not None:
            # The file we knew is gone: renamed or deleted here (its event perhaps not read
            # yet, or a folder rename). Writing the note now would take the place of what
            # happened to it -- a second copy, an undone delete -- so let events come first,
            # whatever asks for the write meanwhile.
            now = time.monotonic()
            until = self._waited.get(row.id)
            if until is None:
                until = self._waited[row.id] = now + self.writer.unclosed_write_s + self.writer.settle_s
                with contextlib.suppress(RuntimeError):  # no loop (offline tools): write now
                    self.writer.loop().call_later(until - now, self.writer.mark_dirty, row.id)
                    return None
            elif now < until:
                return None
        self._waited.pop(row.id, None)
        if fresh is not None and checked is None:
            # A peer's new note, never written, no file in its place: its text and the
            # snapshot it has are what the change brought (``FreshNotes``).
            data, snapshot = fresh
            return PlannedWrite(row.id, row.path, target, None, data, row.revision, snapshot)
        with self.writer.replica.unit(DISK) if own_unit else contextlib.nullcontext():
            return self._plan_from_doc(row, target, checked)

    def _plan_from_doc(self, found: NoteRow, target: Path, checked: FileStat | None) -> PlannedWrite | None:
        """The plan from the note's document, after any edit on disk is merged first."""
        gone = checked is None and found.disk is not None  # and its time for events is up
        row = self._ingest_foreign_edit(found, target, checked)
        if row is None:
            return None
        doc = self.writer.replica.doc(row.id)
        if row.disk is not None and row.disk.revision == doc.revision:
            if gone and not os.path.lexists(target):
                # Nothing new to write, and the file is gone: deleted here under the name it
                # had before a peer's move of it arrived (the delete's event named a path the
                # note no longer has). Take that delete now -- or the rename, if the file
                # turns up elsewhere -- rather than leave a note with no file.
                self.writer.host.moved_or_deleted(row)
            return None  # the file already holds this text
        base = row.disk
        return PlannedWrite(row.id, row.path, target, checked, doc.text.encode("utf-8"), doc.revision,
                             doc.snapshot(),
                             base.revision if base else None, base.snapshot if base else None)

    def _ingest_foreign_edit(self, row: NoteRow, target: Path, st: FileStat | None) -> NoteRow | None:
        """If the file holds something the daemon has not seen, merge it in first
        (``st``: the file's stat as the plan found it, None for no file)."""
        if st is None:
            return row
        if stat_matches(row.disk, st):
            return row
        for _attempt in range(5):
            try:
                data, fst = read_note_file(self.writer.root, row.path, self.writer.max_bytes)
                text = decode_note(data)
            except FileNotFoundError:
                return row
            except FileChanged:
                continue
            except SkipFile as exc:
                # Not a note we can read any more (too big, not UTF-8): leave it alone.
                logger.warning("not writing %s over a file we cannot read: %s", row.path, exc.message)
                self.writer.replica.store.set_skipped(row.path, exc.message)
                return None
            revision = revision_of(data)
            disk = DiskState(revision, fst.mtime_ns, fst.size, fst.ino)
            if row.disk is not None and row.disk.revision == revision:
                # Touched, not edited: same text, keep the base snapshot.
                return self.writer.replica.touched(row, disk)
            logger.info("%s was edited on disk before our write: merging that edit first", row.path)
            return self.writer.replica.ingest(row.path, text, disk).note
        logger.warning("%s keeps changing; will write it later", row.path)
        self.writer.mark_dirty(row.id)
        return None

