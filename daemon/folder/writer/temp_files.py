"""CRDT → disk, the middle of a batch: the planned writes' temp files written (no fsync
each) side by side in worker threads, and each renamed over its file unless the file
changed meanwhile (SPEC §3.3, §3.4). Composed into ``DiskWrites`` (daemon/folder/writer/disk_writes.py),
which makes the renamed files durable at once and records them; what it needs of the
writer is ``TempFileHost``.

It also keeps what it renamed into place until that is recorded (``write_pending``,
``is_own_write``), and the arrivals it awaits: a file's "created" event that shows exactly
the file we renamed there is the echo of our own write, dropped in the watcher's thread
(``arrived_as_written``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from pathlib import Path

from stet.daemon.base.atomic_files import replace_with, stat_or_none, write_temp
from stet.daemon.folder.checks import FolderChecks
from stet.daemon.folder.replaced_files import ReplacedFile, open_for_watch
from stet.daemon.folder.writer.plans import PlannedWrite
from stet.daemon.folder.writer.ports import TempFileHost
from stet.sync.folder_scan import FileStat
from stet.sync.note_paths import InvalidPath

logger = logging.getLogger(__name__)

MAX_ARRIVALS = 4096  # our writes whose arrival event is awaited (``arrived_as_written``)


def _unchanged(plan: PlannedWrite) -> bool:
    """The file is still what it was when the write was planned."""
    return stat_or_none(plan.target) == plan.checked


class WriteRenames:
    """Writes a batch's temp files and renames each into place (CRDT → disk, middle step)."""

    def __init__(self, writer: TempFileHost) -> None:
        self.writer = writer
        self._root_str = str(writer.root)
        self._own_writes: dict[str, FileStat] = {}  # renamed into place, not recorded yet
        # Files we are renaming into place, by path: their arrival events are dropped in
        # the watcher's thread (``arrived_as_written``), never handed to the loop.
        self._arrivals: dict[str, FileStat] = {}
        self._arrivals_lock = threading.Lock()
        self.echoes_dropped = 0  # arrival events of our own writes dropped early (tests)

    def _place(self, plan: PlannedWrite, dirs: set[Path]) -> bool:
        """Rename the temp file into place. A new file (none there at the plan) is placed
        only if there still is none. Its folder made for it and removed while the batch's
        temp files were written (empty then: an emptied folder tidied away) is made again,
        once: the note is the store's, and no one saw a file of it there."""
        assert plan.tmp is not None
        unchanged = functools.partial(_unchanged, plan)
        try:
            return replace_with(plan.tmp, plan.target, dirs_to_sync=dirs, unchanged=unchanged,
                                new=plan.checked is None)
        except FileNotFoundError:
            if plan.checked is not None or plan.target.parent.exists() or not plan.tmp.exists():
                raise
        self.writer.folders.make_parents(plan.target.parent)
        return replace_with(plan.tmp, plan.target, dirs_to_sync=dirs, unchanged=unchanged, new=True)

    def rename_batch(self, plans: list[PlannedWrite], folders: FolderChecks | None = None,
                     places: dict[str, str | None] | None = None
                     ) -> tuple[set[Path], list[PlannedWrite], list[ReplacedFile]]:
        """``folders``, ``places``: the slice's folder checks and the notes' paths it
        looked up (``places_of``: current, as the loop has not run since)."""
        dirs: set[Path] = set()
        done: list[PlannedWrite] = []
        watched: list[ReplacedFile] = []
        folders = folders or FolderChecks(self.writer.root)
        for plan in plans:
            if plan.tmp is None:
                continue
            if not self._still_at(plan, folders, places):
                with contextlib.suppress(OSError):
                    os.unlink(plan.tmp)
                self.writer.mark_dirty(plan.note_id)  # written where it is now, if anywhere
                continue
            # The old file, opened before the check: what lands in it after (a `>>` that
            # opened it before our rename) is read from here, not lost with it.
            old_fd = open_for_watch(plan.target) if plan.checked is not None else None
            rel = plan.rel
            if plan.written is not None:
                self._expect_arrival(rel, plan.written)
            try:
                replaced = self._place(plan, dirs)
            except OSError:
                logger.exception("failed to write %s", plan.target)
                if old_fd is not None:
                    os.close(old_fd)
                continue
            if old_fd is not None:
                if replaced and plan.checked is not None:
                    watched.append(ReplacedFile(plan.note_id, rel,
                                                old_fd, plan.checked, plan.base_revision, plan.base_snapshot))
                else:
                    os.close(old_fd)
            if replaced:
                done.append(plan)
                if plan.written is not None:  # its events are ours until it is recorded
                    self._own_writes[rel] = plan.written
            else:
                # Saved in place while we wrote (the temp file's fsync takes a while):
                # read that save first, then write again.
                with contextlib.suppress(RuntimeError):  # no loop (offline tools): next flush
                    self.writer.loop().call_later(self.writer.settle_s, self.writer.mark_dirty, plan.note_id)
        return dirs, done, watched

    def _expect_arrival(self, rel: str, written: FileStat) -> None:
        with self._arrivals_lock:
            self._arrivals.pop(rel, None)  # (re)inserted last: the oldest go first
            self._arrivals[rel] = written
            while len(self._arrivals) > MAX_ARRIVALS:  # events lost (an overflow): forget
                del self._arrivals[next(iter(self._arrivals))]

    def arrived_as_written(self, path: str) -> bool:
        """From the watcher's thread, for a file's "created" event: ``path`` now holds
        exactly the file we renamed there (same inode, size, mtime), so the event is the
        echo of our own write and tells nothing new -- drop it before it reaches the loop
        (an event per note written: 10,000 in a first sync, each handed over, settled and
        compared on the loop). Anything else -- an edit since, another file -- is not
        dropped, and the bridge judges it as before."""
        with self._arrivals_lock:
            expected = self._arrivals.get(path)
        if expected is None:
            return False
        try:  # (a str path: asked for every note written, no Path made for it)
            st = FileStat.of(os.lstat(os.path.join(self._root_str, path)))
        except OSError:
            return False
        if st != expected:
            return False
        with self._arrivals_lock:
            if self._arrivals.get(path) == expected:
                del self._arrivals[path]  # one arrival per write
        self.echoes_dropped += 1
        return True

    def forget_own_writes(self, plans: list[PlannedWrite]) -> None:
        for plan in plans:
            if self._own_writes.get(plan.rel) == plan.written:
                del self._own_writes[plan.rel]

    def write_pending(self, path: str) -> bool:
        """A file of ours was renamed to ``path`` and is not recorded yet."""
        return path in self._own_writes

    def is_own_write(self, path: str, st: FileStat) -> bool:
        """``path`` holds a file we renamed into place and are about to record (a timed
        flush fsyncs the folder in between): its events are the echo of our own write."""
        return self._own_writes.get(path) == st

    def places_of(self, plans: list[PlannedWrite]) -> dict[str, str | None]:
        """Where each plan's note is now: its path if it is a live note, else None (no
        row, or deleted), in one lookup."""
        ids = [plan.note_id for plan in plans]
        found = self.writer.replica.store.live_note_paths(ids)
        return {note_id: found.get(note_id) for note_id in ids}

    def _still_at(self, plan: PlannedWrite, folders: FolderChecks,
                  places: dict[str, str | None] | None = None) -> bool:
        """The note is still live at the path the plan writes (a timed flush lets the loop
        run between the plan and the rename: it may have been moved or deleted since)."""
        if places is not None and plan.note_id in places:
            path = places[plan.note_id]
        else:
            row = self.writer.replica.store.note(plan.note_id)
            path = None if row is None or row.deleted else row.path
        if path != plan.rel:
            return False
        try:
            # Its folders proven again (one may be a symlink now; a missing one is made
            # again by ``_place``); the file itself is left to ``replace_with``'s check,
            # which compares it with the plan's stat.
            folders.proven(plan.rel)
        except InvalidPath:
            return False
        return True

    def write_temp(self, plan: PlannedWrite) -> None:
        folder = plan.target.parent
        try:
            try:
                self._write_temp_in(plan, self.writer.folders.ready(folder))
            except FileNotFoundError:  # a folder removed since it was made ready: again
                self.writer.folders.forget(folder)
                self._write_temp_in(plan, self.writer.folders.ready(folder))
        except OSError:
            logger.exception("failed to write %s", plan.target)

    def _write_temp_in(self, plan: PlannedWrite, temp_dir: Path | None) -> None:
        # No fsync per file: the batch is made durable at once after its renames
        # (``make_durable``), before it is recorded as written. The folders exist (made
        # ready just now, or earlier in this batch): no mkdir per file.
        plan.tmp, plan.written = write_temp(plan.target, plan.data, temp_dir, sync=False,
                                            copy_mode=plan.checked is not None, folders_ready=True)

    def write_temps(self, plans: list[PlannedWrite]) -> None:
        if len(plans) == 1:
            self.write_temp(plans[0])
            return
        list(self.writer.executor().map(self.write_temp, plans))  # the fsyncs overlap; the loop waits for all

