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

``DiskWrites`` keeps the dirty notes, the flush's timing, the batch's durability and its
recording, and the replaced files watched; it composes the steps, each given the writer
as a narrow ``Protocol``: planning (``write_plans.WritePlans``), the temp files and
renames (``write_renames.WriteRenames``), the files of deleted and moved notes
(``deletes_and_moves.DeletesAndMoves``), and the timer's flush
(``background_flush.BackgroundFlush``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from stet.daemon.base.atomic_files import make_durable
from stet.daemon.base.thread_priority import lower_this_thread
from stet.daemon.folder.checks import FolderChecks
from stet.daemon.folder.replaced_files import MAX_WATCHED, RECHECK_AFTER_S, ReplacedFile, landed
from stet.daemon.folder.replaced_rechecks import Rechecks
from stet.daemon.folder.replica import FolderReplica
from stet.daemon.folder.writer.background_flush import BackgroundFlush
from stet.daemon.folder.writer.deletes_and_moves import DeletesAndMoves
from stet.daemon.folder.writer.folders import WriterFolders
from stet.daemon.folder.writer.fresh_notes import FreshNotes
from stet.daemon.folder.writer.plans import PlannedWrite, WritePlans
from stet.daemon.folder.writer.ports import WriterHost
from stet.daemon.folder.writer.temp_files import WriteRenames
from stet.daemon.notes.changes import Change
from stet.sync.change_kinds import ChangeKind, Source
from stet.sync.folder_scan import FileStat, SkipFile, decode_note
from stet.sync.note_doc import revision_of
from stet.sync.note_rows import DiskState
from stet.sync.write_pacing import WritePacing

logger = logging.getLogger(__name__)

DISK = Source.DISK
DISK_SOURCES = (DISK, Source.GIT)  # read from this vault's files (git's own changes too: SPEC §3.16)
WRITE_BATCH = 256  # notes per batch: one commit before the renames, one after
# Notes a ``flush_writes(busy_wait=True)`` takes at most. The timer's flush takes more
# (``background_flush.FLUSH_NOTES``): it awaits the fsyncs in worker threads while the
# loop goes on, planning and renaming in 20 ms slices.
TIMER_FLUSH_NOTES = 64
WRITE_THREADS = 4  # temp files written side by side (made durable together after: make_durable)
SYNCFS_MIN_FILES = 16  # a batch this big is made durable by one syncfs, a smaller one file by file


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
        self.plans = WritePlans(self)  # each note's write planned, the batch's recorded as begun
        self._pool: ThreadPoolExecutor | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._flush_ended = -float("inf")  # monotonic time the last timed flush ended
        self._flusher = BackgroundFlush(self)  # the timer's flush
        self.folders = WriterFolders(root)  # the batch's folders, ours remembered
        self.fresh_notes = FreshNotes()  # a peer's new notes' texts, written without loading their documents
        self.durable_calls = 0  # batches made durable at once (tests)
        # The temp files written and renamed into place, what is ours until recorded, and
        # the arrivals awaited (``write_renames``).
        self.renames = WriteRenames(self)
        self.moves = DeletesAndMoves(self)  # the files of notes deleted or moved elsewhere
        replica.subscribe(self.on_change)

    def loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def on_change(self, change: Change) -> None:
        """The change stream (after each commit): write out what did not come from here."""
        self.fresh_notes.offer(change)  # a peer's new note kept; any other change forgets the note
        if change.source in DISK_SOURCES and change.device is None:
            return  # read from this disk: the file already holds it
        if change.kind in (ChangeKind.CHANGED, ChangeKind.CREATED):
            self._pacing.changed(change.note_id, time.monotonic())
            self.mark_dirty(change.note_id)
        elif change.kind == ChangeKind.DELETED:
            self.moves.remove_file(change)
        elif change.kind == ChangeKind.MOVED:
            self.moves.move_file(change)

    def mark_dirty(self, note_id: str) -> None:
        self.dirty.add(note_id)
        if self._write_timer is None:
            try:
                loop = self.loop()
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
        finishes first (it takes the kept ones first: ``take_dirty``). Running ahead only
        made the writer load those notes' documents again later (P8: 4,700 of 10,000, ~1 ms
        of B's loop each); the folder is identical no sooner. At most one flush's wait per
        slice: no flush in flight, no wait."""
        if self.fresh_notes.crowded() and self._flusher.running:
            await self._flusher.wait()

    async def wait_flushed(self) -> None:
        """Let a timed flush in flight finish (before ``flush_writes`` at shutdown)."""
        await self._flusher.wait()

    def after_flush(self) -> None:
        self._flush_ended = time.monotonic()
        if self.dirty and self._write_timer is None:
            # More to write: at once if some of it may be written now -- after whatever
            # else is ready (a timed flush writes TIMER_FLUSH_NOTES at most, so a backlog
            # is written in turns with the rest of the daemon: the loop waits for one
            # turn's fsyncs, not for a whole first sync's) -- else when the first hot
            # note's interval is up.
            now = time.monotonic()
            due = min(self._pacing.due(note, now) for note in self.dirty)
            self._write_timer = self.loop().call_later(max(0.0, due - now), self._flush_soon)

    def take_dirty(self, *, busy_wait: bool, at_most: int | None = None) -> list[str]:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        now = time.monotonic()
        self._pacing.forget_quiet(now)
        # One pass over what is dirty now: a note marked again while this pass runs (its
        # file changing under us) waits for the next flush instead of spinning here.
        # The notes whose texts ``FreshNotes`` keeps first: a receiving peer's writer lags
        # its intake by more notes than the cache holds, and taken in id order it would
        # load most of their documents again on the loop; written first, they free room
        # for the notes arriving meanwhile (the cache's size unchanged: P7).
        kept = self.fresh_notes.among(self.dirty)
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
        todo = self.take_dirty(busy_wait=busy_wait)
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
        self.renames.write_temps(plans)
        dirs, done, watched = self.renames.rename_batch(plans)
        self.make_durable(done, dirs)  # the batch durable at once, before it is recorded
        try:
            return self.end_batch(done, watched)
        finally:
            self.tidy_temp_dir()

    def _begin_batch(self, note_ids: list[str]) -> list[PlannedWrite]:
        return self.begin_some(note_ids)[0]

    def begin_some(self, note_ids: list[str], over: Callable[[], bool] | None = None
                    ) -> tuple[list[PlannedWrite], int]:
        """Plan the first notes of ``note_ids`` and record their writes as begun
        (``WritePlans.begin_some``)."""
        return self.plans.begin_some(note_ids, over)

    def write_temp(self, plan: PlannedWrite) -> None:
        """Write the plan's temp file (``WriteRenames.write_temp``)."""
        self.renames.write_temp(plan)

    def rename_batch(self, plans: list[PlannedWrite], folders: FolderChecks | None = None,
                      places: dict[str, str | None] | None = None
                      ) -> tuple[set[Path], list[PlannedWrite], list[ReplacedFile]]:
        """Rename the plans' temp files into place (``WriteRenames.rename_batch``)."""
        return self.renames.rename_batch(plans, folders, places)

    def places_of(self, plans: list[PlannedWrite]) -> dict[str, str | None]:
        """Where each plan's note is now (``WriteRenames.places_of``)."""
        return self.renames.places_of(plans)

    def arrived_as_written(self, path: str) -> bool:
        """From the watcher's thread: the event is the echo of our own write
        (``WriteRenames.arrived_as_written``)."""
        return self.renames.arrived_as_written(path)

    def forget_own_writes(self, plans: list[PlannedWrite]) -> None:
        self.renames.forget_own_writes(plans)

    @property
    def echoes_dropped(self) -> int:
        """Arrival events of our own writes dropped early (tests)."""
        return self.renames.echoes_dropped

    @property
    def pending(self) -> int:
        """Notes whose files are still to be written: dirty, or in the flush in flight."""
        return len(self.dirty) + self._flusher.in_flight

    def write_pending(self, path: str) -> bool:
        """A file of ours was renamed to ``path`` and is not recorded yet."""
        return self.renames.write_pending(path)

    def is_own_write(self, path: str, st: FileStat) -> bool:
        """``path`` holds a file we renamed into place and are about to record
        (``WriteRenames.is_own_write``)."""
        return self.renames.is_own_write(path, st)

    def end_batch(self, done: list[PlannedWrite], watched: list[ReplacedFile]) -> int:
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
            self.forget_own_writes(done)
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

    def make_durable(self, done: list[PlannedWrite], dirs: set[Path]) -> None:
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
