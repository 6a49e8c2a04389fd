"""The timer's flush of dirty notes to disk, with its slow steps off the loop (issue 11
P8 "on the peer too", issue 18 P4).

``DiskWrites.flush_writes`` does a batch in one go: plan, record the writes as begun
(one commit), write and fsync the temp files in worker threads, rename, fsync the
folders, record the new file states (one commit) -- while the loop waits for every
fsync. On a receiving peer (a first sync, a bulk intake streamed from A) that wait was
the longest step of the loop: 0.1-2.3 s per flush of 64 notes on a loaded machine
(asyncio debug's slow-callback log), most of the API's worst answers.

Here the same steps run as a task: planning in time slices (each slice one unit of
work, its writes recorded as begun before any rename), the temp files' writes (no
fsync each) awaited in worker threads, renames in time slices, the batch made durable
at once (one ``syncfs``: ``atomic_files.make_durable``) in a worker, and only then the
new states recorded in one unit. One flush is in flight at a time; a note dirtied
meanwhile waits for the next one. Whatever happens to a note while its temp file is
written is checked at the rename: moved or deleted since -> dropped (written where it is
now, if anywhere); its file changed since the plan -> not replaced (read, then written
again); changed again in the store -> written, recorded with the text it holds, and
written again (it is dirty). Shutdown, offline tools and tests use ``flush_writes``
(the loop waits) after ``wait_flushed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from stet.daemon.base.loop_slices import TimeSlice
from stet.daemon.folder.checks import FolderChecks

if TYPE_CHECKING:

    from stet.daemon.folder.replaced_files import ReplacedFile
    from stet.daemon.folder.writer.plans import PlannedWrite
    from stet.daemon.folder.writer.ports import FlushWriter

logger = logging.getLogger(__name__)

FLUSH_NOTES = 256  # notes a timed flush takes (planned and renamed in 20 ms slices)
RENAME_LOOKUP = 64  # rows looked up at once before renames
# A slice that may end early looks its rows up as it goes, this many first and twice as
# many each time after (planning: up to ``write_plans.PLAN_LOOKUP``): a slice cut to one
# note for a request (requests first) would look up 256 rows for one note: lookups
# nobody uses, paid on the loop while a request waits.
FIRST_LOOKUP = 8
END_CHUNK = 128  # written files recorded as in sync per unit of work (two statements each)
WRITE_JOBS = 4  # worker jobs the temp files' writes (and the folders' fsyncs) are dealt into
T = TypeVar("T")


class BackgroundFlush:
    def __init__(self, writer: FlushWriter) -> None:
        self.writer = writer
        self._task: asyncio.Task[None] | None = None
        self.in_flight = 0  # notes the flush in flight took (not yet recorded on disk)

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        """Flush now, as a task (the caller checked none is in flight)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="stet-flush")

    async def wait(self) -> None:
        """Let a flush in flight finish (before a flush that the loop waits for, at shutdown)."""
        task = self._task
        if task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(task)

    async def _run(self) -> None:
        try:
            todo = self.writer.take_dirty(busy_wait=True, at_most=FLUSH_NOTES)
            self.in_flight = len(todo)
            if todo:
                await self._batch(todo)
        except Exception:
            logger.exception("writing notes to disk failed")
        finally:
            self._task = None
            self.in_flight = 0
        self.writer.after_flush()

    async def _batch(self, note_ids: list[str]) -> None:
        writer = self.writer
        slice_ = TimeSlice()
        plans: list[PlannedWrite] = []
        i = 0
        while i < len(note_ids):  # planned (and recorded as begun: one unit) a slice at a time
            if slice_.cut_before_it_began():
                # Cut for a request in flight before it began (requests first): nothing
                # this turn. Its one note was a unit of work -- a commit -- of its own.
                await slice_.pause()
                continue
            some, taken = writer.begin_some(note_ids[i:], slice_.over)
            plans += some
            i += taken
            if i < len(note_ids):
                await slice_.pause()
        if not plans:
            return
        try:
            await self._write(plans, slice_)
        finally:
            writer.forget_own_writes(plans)  # recorded, or not written after all
            # An rmdir waits on the folder's lock while the writer threads' fsyncs run:
            # 0.08-0.12 s on the loop of a loaded receiving peer (daemon/base/loop_holds.py).
            await asyncio.get_running_loop().run_in_executor(writer.executor(), writer.tidy_temp_dir)

    async def _write(self, plans: list[PlannedWrite], slice_: TimeSlice) -> None:
        writer = self.writer
        loop = asyncio.get_running_loop()
        pool = writer.executor()
        # One job per writer thread, each writing and fsyncing its share in turn: as many
        # fsyncs in flight as before, but a handful of futures for the loop to submit and
        # be woken by, not one per note (256 of them held the loop for up to 0.26 s).
        await asyncio.gather(*(loop.run_in_executor(pool, _each, writer.write_temp, share)
                               for share in _shares(plans, WRITE_JOBS)))
        slice_.restart()
        dirs: set[Path] = set()
        done: list[PlannedWrite] = []
        watched: list[ReplacedFile] = []
        # Each folder checked once per slice, the rows looked up RENAME_LOOKUP at a time
        # (both current within the slice: the loop does not run in it).
        # A slice cut short (for a request: one rename) looked up RENAME_LOOKUP rows; the
        # lookups of a slice start at FIRST_LOOKUP rows and double.
        folders = FolderChecks(writer.root)
        places: dict[str, str | None] = {}
        chunk = FIRST_LOOKUP
        for n, plan in enumerate(plans):  # each checked at its own rename
            if plan.note_id not in places:
                places = writer.places_of(plans[n : n + chunk])
                chunk = min(2 * chunk, RENAME_LOOKUP)
            d, ok, w = writer.rename_batch([plan], folders, places)
            dirs |= d
            done += ok
            watched += w
            if slice_.over() and n + 1 < len(plans):
                await slice_.pause()
                folders, places, chunk = FolderChecks(writer.root), {}, FIRST_LOOKUP
        # The renamed files and their folders made durable at once (no fsync per file:
        # a first sync of 10,000 notes made 10,000), in a worker, before any is recorded.
        await loop.run_in_executor(pool, writer.make_durable, done, dirs)
        slice_.restart()
        for i in range(0, max(len(done), 1), END_CHUNK):  # recorded in chunks, each one unit
            last = i + END_CHUNK >= len(done)
            writer.end_batch(done[i : i + END_CHUNK], watched if last else [])
            if not last and slice_.over():
                await slice_.pause()


def _shares(items: list[T], jobs: int) -> list[list[T]]:
    """``items`` dealt into at most ``jobs`` lists (round robin: big and small mixed)."""
    return [share for share in (items[i::jobs] for i in range(jobs)) if share]


def _each(fn: Callable[[T], None], items: list[T]) -> None:
    for item in items:
        fn(item)

