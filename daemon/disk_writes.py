"""CRDT → disk: how the file bridge writes notes changed by agents and peers (SPEC §3.3,
§3.4). Composed into ``FileBridge``: what it needs of the bridge is ``WriterHost``; what
it records (the write begun, the file in sync, an edit merged first) goes through the
folder replica, in the same unit of work.

A non-disk change marks its note dirty; dirty notes are written together shortly after
(a burst is one write; a hot note waits: ``stet.sync.write_pacing``), in
batches: the writes recorded as begun in one commit, temp files written (no fsync each)
side by side in worker threads, each renamed over its file unless the file changed
meanwhile, the batch made durable at once (``atomic_files.make_durable``: one
``syncfs``), the new file states recorded in one commit. Before a note is
written its file is checked against what the daemon last saw: an edit not read yet is
merged first, so a disk edit is never clobbered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stet.sync.change_kinds import ChangeKind, Source
from stet.sync.folder_scan import FileChanged, FileStat, SkipFile, decode_note, read_note_file
from stet.sync.note_doc import revision_of
from stet.sync.note_paths import InvalidPath, resolve_inside
from stet.sync.note_rows import DiskState, NoteRow
from stet.sync.write_pacing import WritePacing

from .atomic_files import (
    _stat_or_none,
    fsync_dir,
    make_durable,
    replace_with,
    trash_unlink,
    write_temp,
)
from .background_flush import FIRST_LOOKUP, BackgroundFlush
from .changes import Change
from .emptied_folders import remove_emptied_folders
from .folder_checks import FolderChecks
from .folder_replica import FolderReplica
from .fresh_notes import FreshNotes
from .rename_detection import _same_stat
from .replaced_files import MAX_WATCHED, RECHECK_AFTER_S, ReplacedFile, landed, open_for_watch
from .replaced_rechecks import Rechecks
from .thread_priority import lower_this_thread
from .writer_folders import WriterFolders

logger = logging.getLogger(__name__)

DISK = Source.DISK
DISK_SOURCES = (DISK, Source.GIT)  # read from this vault's files (git's own changes too: SPEC §3.16)
WRITE_BATCH = 256  # notes per batch: one commit before the renames, one after
# Notes a ``flush_writes(busy_wait=True)`` takes at most. The timer's flush takes more
# (``background_flush.FLUSH_NOTES``): it awaits the fsyncs in worker threads while the
# loop goes on, planning and renaming in 20 ms slices.
TIMER_FLUSH_NOTES = 64
WRITE_THREADS = 4  # temp files written side by side (made durable together after: make_durable)
PLAN_LOOKUP = 256  # rows a plan looks up at once (a timed flush's batch: FLUSH_NOTES)
SYNCFS_MIN_FILES = 16  # a batch this big is made durable by one syncfs, a smaller one file by file
MAX_ARRIVALS = 4096  # our writes whose arrival event is awaited (``arrived_as_written``)


@dataclass(slots=True)
class _PlannedWrite:
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


def _unchanged(plan: _PlannedWrite) -> bool:
    """The file is still what it was when the write was planned."""
    return _stat_or_none(plan.target) == plan.checked


class WriterHost(Protocol):
    """What the writer needs of the file bridge: a path read again once it settles (a
    save that raced our write), and a note whose file is gone taken as a rename or delete."""

    def schedule(self, path: str, *, awaiting_close: bool) -> None: ...

    def moved_or_deleted(self, row: NoteRow) -> bool: ...


class DiskWrites:
    """Writes notes changed by other sources to their files (CRDT → disk)."""

    def __init__(
        self,
        root: Path,
        replica: FolderReplica,
        host: WriterHost,
        *,
        max_bytes: int,
        settle_s: float,
        unclosed_write_s: float,
        write_delay_s: float,
        busy_note_interval_s: float,
    ) -> None:
        self.root = root
        self._root_str = str(root)
        self.replica = replica
        self.host = host
        self.max_bytes = max_bytes
        self.settle_s = settle_s
        self.unclosed_write_s = unclosed_write_s
        self.write_delay_s = write_delay_s
        # A hot note (an agent appending hundreds of lines a second) goes to disk at most
        # once per interval; any other note, a live editor's keystrokes too, at once.
        self.busy_note_interval_s = busy_note_interval_s
        self._pacing = WritePacing(busy_note_interval_s)
        self.dirty: set[str] = set()
        self._watched: set[int] = set()  # replaced files kept open a moment (replaced_files)
        self._rechecks = Rechecks(self._check_replaced)  # their later looks, a group at a time
        self._waited: dict[str, float] = {}  # note -> until when its vanished file gets time
        self._pool: ThreadPoolExecutor | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._flush_ended = -float("inf")  # monotonic time the last timed flush ended
        self._flusher = BackgroundFlush(self)  # the timer's flush
        self._own_writes: dict[str, FileStat] = {}  # renamed into place, not recorded yet
        self.folders = WriterFolders(root)  # the batch's folders, ours remembered
        self._fresh = FreshNotes()  # a peer's new notes' texts, written without loading their documents
        self.durable_calls = 0  # batches made durable at once (tests)
        # Files we are renaming into place, by path: their arrival events are dropped in
        # the watcher's thread (``arrived_as_written``), never handed to the loop.
        self._arrivals: dict[str, FileStat] = {}
        self._arrivals_lock = threading.Lock()
        self.echoes_dropped = 0  # arrival events of our own writes dropped early (tests)
        replica.subscribe(self.on_change)

    def _loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def on_change(self, change: Change) -> None:
        """The change stream (after each commit): write out what did not come from here."""
        self._fresh.offer(change)  # a peer's new note kept; any other change forgets the note
        if change.source in DISK_SOURCES and change.device is None:
            return  # read from this disk: the file already holds it
        if change.kind in (ChangeKind.CHANGED, ChangeKind.CREATED):
            self._pacing.changed(change.note_id, time.monotonic())
            self.mark_dirty(change.note_id)
        elif change.kind == ChangeKind.DELETED:
            self._remove_file(change)
        elif change.kind == ChangeKind.MOVED:
            self._move_file(change)

    def mark_dirty(self, note_id: str) -> None:
        self.dirty.add(note_id)
        if self._write_timer is None:
            try:
                loop = self._loop()
            except RuntimeError:
                return  # no loop (offline tools): the caller flushes
            # ``write_delay_s`` counted from the end of the last flush, not from this
            # change: the first change after a quiet spell (a peer's save, an agent's
            # write) is written at once -- the changes of the same commit are all marked
            # before the loop runs the flush -- and a burst still gets flushes spaced
            # by the delay (P1 during P9: 5-6 ms of every save's 25-34 ms).
            wait = self.write_delay_s - (time.monotonic() - self._flush_ended)
            self._write_timer = loop.call_later(max(0.0, wait), self._flush_soon)

    def _flush_soon(self) -> None:
        self._write_timer = None
        if self._flusher.running:
            return  # the flush in flight schedules the next one when it is done
        # The slow steps (temp files' and folders' fsyncs) in worker threads while the
        # loop goes on: ``background_flush``.
        self._flusher.start()

    async def room_for_new_notes(self) -> None:
        """A peer's intake asks before each slice of notes it applies: while the new notes
        it brought crowd what ``FreshNotes`` keeps (half of it or more), the flush in flight
        finishes first (it takes the kept ones first: ``_take_dirty``). Running ahead only
        made the writer load those notes' documents again later (P8: 4,700 of 10,000, ~1 ms
        of B's loop each); the folder is identical no sooner. At most one flush's wait per
        slice: no flush in flight, no wait."""
        if self._fresh.crowded() and self._flusher.running:
            await self._flusher.wait()

    async def wait_flushed(self) -> None:
        """Let a timed flush in flight finish (before ``flush_writes`` at shutdown)."""
        await self._flusher.wait()

    def _after_flush(self) -> None:
        self._flush_ended = time.monotonic()
        if self.dirty and self._write_timer is None:
            # More to write: at once if some of it may be written now -- after whatever
            # else is ready (a timed flush writes TIMER_FLUSH_NOTES at most, so a backlog
            # is written in turns with the rest of the daemon: the loop waits for one
            # turn's fsyncs, not for a whole first sync's) -- else when the first hot
            # note's interval is up.
            now = time.monotonic()
            due = min(self._pacing.due(note, now) for note in self.dirty)
            self._write_timer = self._loop().call_later(max(0.0, due - now), self._flush_soon)

    def _take_dirty(self, *, busy_wait: bool, at_most: int | None = None) -> list[str]:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        now = time.monotonic()
        self._pacing.forget_quiet(now)
        # One pass over what is dirty now: a note marked again while this pass runs (its
        # file changing under us) waits for the next flush instead of spinning here.
        # The notes whose texts ``FreshNotes`` keeps first: a receiving peer's writer lags
        # its intake by more notes than the cache holds, and taken in id order it loaded
        # the documents of most (~9 % of the loop in P8); written first, they free room
        # for the notes arriving meanwhile (the cache's size unchanged: P7).
        kept = self._fresh.among(self.dirty)
        todo = sorted(kept) + sorted(self.dirty - kept)
        if busy_wait:
            todo = [n for n in todo if self._pacing.due(n, now) <= now][:at_most or TIMER_FLUSH_NOTES]
        self.dirty.difference_update(todo)
        return todo

    def flush_writes(self, *, busy_wait: bool = False) -> int:
        """Write every dirty note to disk now; returns how many files were written.

        ``busy_wait``: leave a hot note written less than ``busy_note_interval_s`` ago
        (``WritePacing.due``) dirty for a later flush, and write ``TIMER_FLUSH_NOTES``
        notes at most. Notes are written in batches of ``WRITE_BATCH`` (one pair of
        commits each).
        """
        todo = self._take_dirty(busy_wait=busy_wait)
        written = 0
        for i in range(0, len(todo), WRITE_BATCH):
            written += self._write_batch(todo[i : i + WRITE_BATCH])
        return written

    def _write_batch(self, note_ids: list[str]) -> int:
        """Write these notes' files: plan each (merging any disk edit first), record the
        writes as begun in one commit, write the temp files side by side in worker
        threads, rename each unless its file changed meanwhile, make the batch durable at
        once, and record the files as in sync in one commit."""
        plans = self._begin_batch(note_ids)
        if not plans:
            return 0
        self._write_temps(plans)
        dirs, done, watched = self._rename_batch(plans)
        self.make_durable(done, dirs)  # the batch durable at once, before it is recorded
        try:
            return self._end_batch(done, watched)
        finally:
            self.tidy_temp_dir()

    def _begin_batch(self, note_ids: list[str]) -> list[_PlannedWrite]:
        return self._begin_some(note_ids)[0]

    def _begin_some(self, note_ids: list[str], over: Callable[[], bool] | None = None
                    ) -> tuple[list[_PlannedWrite], int]:
        """Plan the first notes of ``note_ids`` -- all, or until ``over()`` -- and record
        their writes as begun; returns the plans and how many notes were taken."""
        plans: list[_PlannedWrite] = []
        taken = 0
        # The batch's rows in one lookup (a few, growing, if the slice may end early: see
        # ``FIRST_LOOKUP``), each folder checked once (``FolderChecks``).
        chunk = PLAN_LOOKUP if over is None else FIRST_LOOKUP
        rows = self.replica.store.notes(note_ids[:chunk])
        looked = chunk
        folders = FolderChecks(self.root)
        # One unit: the disk edits merged first and the writes recorded as begun -- durable
        # before any rename, so a crash after one is recognised as our own write.
        with self.replica.unit(DISK):
            for note_id in note_ids:
                if taken and over is not None and over():
                    break
                if taken == looked and looked < PLAN_LOOKUP:
                    chunk = min(2 * chunk, PLAN_LOOKUP - looked)
                    rows.update(self.replica.store.notes(note_ids[looked : looked + chunk]))
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
            self.replica.begin_writes([(plan.note_id, plan.revision, plan.snapshot) for plan in plans])
        return plans, taken

    def _place(self, plan: _PlannedWrite, dirs: set[Path]) -> bool:
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
        self.folders.make_parents(plan.target.parent)
        return replace_with(plan.tmp, plan.target, dirs_to_sync=dirs, unchanged=unchanged, new=True)

    def _rename_batch(self, plans: list[_PlannedWrite], folders: FolderChecks | None = None,
                      places: dict[str, str | None] | None = None
                      ) -> tuple[set[Path], list[_PlannedWrite], list[ReplacedFile]]:
        """``folders``, ``places``: the slice's folder checks and the notes' paths it
        looked up (``places_of``: current, as the loop has not run since)."""
        dirs: set[Path] = set()
        done: list[_PlannedWrite] = []
        watched: list[ReplacedFile] = []
        folders = folders or FolderChecks(self.root)
        for plan in plans:
            if plan.tmp is None:
                continue
            if not self._still_at(plan, folders, places):
                with contextlib.suppress(OSError):
                    os.unlink(plan.tmp)
                self.mark_dirty(plan.note_id)  # written where it is now, if anywhere
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
                    self._loop().call_later(self.settle_s, self.mark_dirty, plan.note_id)
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

    def _forget_own_writes(self, plans: list[_PlannedWrite]) -> None:
        for plan in plans:
            if self._own_writes.get(plan.rel) == plan.written:
                del self._own_writes[plan.rel]

    @property
    def pending(self) -> int:
        """Notes whose files are still to be written: dirty, or in the flush in flight."""
        return len(self.dirty) + self._flusher.in_flight

    def write_pending(self, path: str) -> bool:
        """A file of ours was renamed to ``path`` and is not recorded yet."""
        return path in self._own_writes

    def is_own_write(self, path: str, st: FileStat) -> bool:
        """``path`` holds a file we renamed into place and are about to record (a timed
        flush fsyncs the folder in between): its events are the echo of our own write."""
        return self._own_writes.get(path) == st

    def places_of(self, plans: list[_PlannedWrite]) -> dict[str, str | None]:
        """Where each plan's note is now: its path if it is a live note, else None (no
        row, or deleted), in one lookup."""
        ids = [plan.note_id for plan in plans]
        found = self.replica.store.live_note_paths(ids)
        return {note_id: found.get(note_id) for note_id in ids}

    def _still_at(self, plan: _PlannedWrite, folders: FolderChecks,
                  places: dict[str, str | None] | None = None) -> bool:
        """The note is still live at the path the plan writes (a timed flush lets the loop
        run between the plan and the rename: it may have been moved or deleted since)."""
        if places is not None and plan.note_id in places:
            path = places[plan.note_id]
        else:
            row = self.replica.store.note(plan.note_id)
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

    def _end_batch(self, done: list[_PlannedWrite], watched: list[ReplacedFile]) -> int:
        states: list[tuple[str, DiskState]] = []
        for plan in done:
            assert plan.written is not None
            fst = plan.written
            state = DiskState(plan.revision, fst.mtime_ns, fst.size, fst.ino, plan.snapshot)
            states.append((plan.note_id, state))
        try:
            with self.replica.unit(DISK):  # the batch's files recorded in sync: two statements
                self.replica.mark_synced_many(states)
        finally:
            self._forget_own_writes(done)
        now = time.monotonic()
        for plan in done:
            self._pacing.written(plan.note_id, now)
        for item in watched:
            self._check_replaced(item, keep=len(self._watched) < MAX_WATCHED)
        return len(done)

    def _check_replaced(self, item: ReplacedFile, *, keep: bool = True) -> None:
        """Merge what landed in a replaced file since it was checked; look again later
        (``RECHECK_AFTER_S``) while ``keep``, then close it."""
        self._watched.discard(item.fd)
        try:
            found = landed(item)
            if found is not None:
                self._take_landed_edit(item, *found)
        except Exception:
            logger.exception("failed to check the replaced file of %s", item.path)
            keep = False
        if keep and item.checks_left > 0:
            delay = RECHECK_AFTER_S[len(RECHECK_AFTER_S) - item.checks_left]
            item.checks_left -= 1
            try:
                self._rechecks.after(delay, item)  # with the others due then, in slices
                self._watched.add(item.fd)
                return
            except RuntimeError:
                pass  # no loop (offline tools): the immediate check was the last
        item.close()

    def _take_landed_edit(self, item: ReplacedFile, st: FileStat, data: bytes) -> None:
        revision = revision_of(data)
        item.seen = st
        if revision == item.base_revision:
            return  # touched, not edited
        try:
            text = decode_note(data)
        except SkipFile as exc:
            logger.warning("%s: an edit landed in the file we replaced, but %s", item.path, exc.message)
            return
        if not self.replica.merge_landed(item.note_id, text, item.base_revision, item.base_snapshot):
            logger.warning("%s: an edit landed in the file we replaced after its note went", item.path)
            return
        logger.info("%s: an edit landed in the file as we replaced it; merged it", item.path)
        self.mark_dirty(item.note_id)

    def tidy_temp_dir(self) -> None:
        """After a batch: the temp folder removed once empty, the folders checked again by
        the next batch (``WriterFolders.tidy``)."""
        self.folders.tidy()

    def created_dir(self, path: str) -> bool:
        """``path`` is a folder we created for a note's file (``WriterFolders.created_dir``)."""
        return self.folders.created_dir(path)

    def forget_dirs(self, path: str | None = None) -> None:
        self.folders.forget_dirs(path)

    def _write_temp(self, plan: _PlannedWrite) -> None:
        folder = plan.target.parent
        try:
            try:
                self._write_temp_in(plan, self.folders.ready(folder))
            except FileNotFoundError:  # a folder removed since it was made ready: again
                self.folders.forget(folder)
                self._write_temp_in(plan, self.folders.ready(folder))
        except OSError:
            logger.exception("failed to write %s", plan.target)

    def _write_temp_in(self, plan: _PlannedWrite, temp_dir: Path | None) -> None:
        # No fsync per file: the batch is made durable at once after its renames
        # (``make_durable``), before it is recorded as written. The folders exist (made
        # ready just now, or earlier in this batch): no mkdir per file.
        plan.tmp, plan.written = write_temp(plan.target, plan.data, temp_dir, sync=False,
                                            copy_mode=plan.checked is not None, folders_ready=True)

    def _write_temps(self, plans: list[_PlannedWrite]) -> None:
        if len(plans) == 1:
            self._write_temp(plans[0])
            return
        list(self.executor().map(self._write_temp, plans))  # the fsyncs overlap; the loop waits for all

    def make_durable(self, done: list[_PlannedWrite], dirs: set[Path]) -> None:
        """The renamed files' data and their folders' entries on disk, in one call (a
        worker thread's, for the timed flush): ``atomic_files.make_durable``. Until it
        returns, a power loss may leave any of them empty or cut short; the writes are
        recorded as begun, so the next start knows them for ours (``FolderReplica``)."""
        if done or dirs:
            self.durable_calls += 1
            # A few files (a live editor's keystroke, an agent's note): their own fsyncs, so
            # they never wait for other programs' writeback on the file system, as a
            # ``syncfs`` does; a batch: one ``syncfs``.
            make_durable([plan.target for plan in done], dirs, use_syncfs=len(done) >= SYNCFS_MIN_FILES)

    def executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=WRITE_THREADS, thread_name_prefix="stet-write",
                                            initializer=lower_this_thread)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _plan_write(self, note_id: str, row: NoteRow | None = None,
                    folders: FolderChecks | None = None, *, own_unit: bool = False) -> _PlannedWrite | None:
        """``row``: the note's row if the caller looked it up (else it is looked up here);
        ``folders``: the batch's folder checks. ``own_unit``: what the plan records (an
        edit on disk merged first, a file gone taken as a rename or delete) is a nested
        unit of its own, undone alone if it fails -- opened only when it may record
        something: a peer's new note planned from ``FreshNotes`` records nothing, and its
        SAVEPOINT and RELEASE were two of a written note's ten SQLite calls."""
        if row is None:
            row = self.replica.store.note(note_id)
        if row is None or row.deleted:
            return None
        fresh = self._fresh.take(row)
        try:
            target, checked = (folders or FolderChecks(self.root)).target(row.path)
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
                until = self._waited[row.id] = now + self.unclosed_write_s + self.settle_s
                with contextlib.suppress(RuntimeError):  # no loop (offline tools): write now
                    self._loop().call_later(until - now, self.mark_dirty, row.id)
                    return None
            elif now < until:
                return None
        self._waited.pop(row.id, None)
        if fresh is not None and checked is None:
            # A peer's new note, never written, no file in its place: its text and the
            # snapshot it has are what the change brought (``FreshNotes``).
            data, snapshot = fresh
            return _PlannedWrite(row.id, row.path, target, None, data, row.revision, snapshot)
        with self.replica.unit(DISK) if own_unit else contextlib.nullcontext():
            return self._plan_from_doc(row, target, checked)

    def _plan_from_doc(self, found: NoteRow, target: Path, checked: FileStat | None) -> _PlannedWrite | None:
        """The plan from the note's document, after any edit on disk is merged first."""
        gone = checked is None and found.disk is not None  # and its time for events is up
        row = self._ingest_foreign_edit(found, target, checked)
        if row is None:
            return None
        doc = self.replica.doc(row.id)
        if row.disk is not None and row.disk.revision == doc.revision:
            if gone and not os.path.lexists(target):
                # Nothing new to write, and the file is gone: deleted here under the name it
                # had before a peer's move of it arrived (the delete's event named a path the
                # note no longer has). Take that delete now -- or the rename, if the file
                # turns up elsewhere -- rather than leave a note with no file.
                self.host.moved_or_deleted(row)
            return None  # the file already holds this text
        base = row.disk
        return _PlannedWrite(row.id, row.path, target, checked, doc.text.encode("utf-8"), doc.revision,
                             doc.snapshot(),
                             base.revision if base else None, base.snapshot if base else None)

    def _ingest_foreign_edit(self, row: NoteRow, target: Path, st: FileStat | None) -> NoteRow | None:
        """If the file holds something the daemon has not seen, merge it in first
        (``st``: the file's stat as the plan found it, None for no file)."""
        if st is None:
            return row
        if _same_stat(row.disk, st):
            return row
        for _attempt in range(5):
            try:
                data, fst = read_note_file(self.root, row.path, self.max_bytes)
                text = decode_note(data)
            except FileNotFoundError:
                return row
            except FileChanged:
                continue
            except SkipFile as exc:
                # Not a note we can read any more (too big, not UTF-8): leave it alone.
                logger.warning("not writing %s over a file we cannot read: %s", row.path, exc.message)
                self.replica.store.set_skipped(row.path, exc.message)
                return None
            revision = revision_of(data)
            disk = DiskState(revision, fst.mtime_ns, fst.size, fst.ino)
            if row.disk is not None and row.disk.revision == revision:
                # Touched, not edited: same text, keep the base snapshot.
                return self.replica.touched(row, disk)
            logger.info("%s was edited on disk before our write: merging that edit first", row.path)
            return self.replica.ingest(row.path, text, disk).note
        logger.warning("%s keeps changing; will write it later", row.path)
        self.mark_dirty(row.id)
        return None

    def _remove_file(self, change: Change) -> None:
        """A note was deleted by an agent or a peer: remove its file unless edited since."""
        try:
            target = resolve_inside(self.root, change.path)
            data, _ = read_note_file(self.root, change.path, self.max_bytes)
        except (FileNotFoundError, InvalidPath, SkipFile, FileChanged):
            return
        if revision_of(data) != change.revision_before:
            logger.warning("%s changed on disk; keeping the file (and the note)", change.path)
            self.host.schedule(change.path, awaiting_close=False)
            return
        trash_unlink(target)
        remove_emptied_folders(self.root, change.path)  # the folders this left empty

    def _move_file(self, change: Change) -> None:
        assert change.old_path is not None
        try:
            src = resolve_inside(self.root, change.old_path)
            dst = resolve_inside(self.root, change.path)
        except InvalidPath as exc:
            logger.error("cannot move %s: %s", change.old_path, exc.reason)
            return
        if dst.exists():
            logger.warning("not moving %s over existing %s", change.old_path, change.path)
            self.mark_dirty(change.note_id)
            return
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(src, dst)
            fsync_dir(dst.parent)
        except FileNotFoundError:
            self.mark_dirty(change.note_id)  # renamed or deleted here meanwhile: see _plan_write
            return
        remove_emptied_folders(self.root, change.old_path)  # the folders the move left empty
        row = self.replica.store.note(change.note_id)
        if row is not None and row.disk is not None and not _same_stat(row.disk, FileStat.of(os.lstat(dst))):
            # A rename keeps mtime, size and inode: the file holds an edit not read yet
            # (saved just before the move arrived). Read it at its new path; taking its
            # stat as ours would hide that edit for good.
            self.host.schedule(change.path, awaiting_close=False)

