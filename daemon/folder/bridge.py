"""The bridge between a vault folder and its notes (SPEC §3).

Disk → CRDT: file events only mark a path; the path is read once it has settled
(a close-after-write, a rename into place, or no further event for a while), and
its text is merged through the folder replica (``folder_replica``) into the note on the
write path (``NotesService``), against the state the file was based on. A file that changes while
being read is read again later, so a half-written file never becomes an edit.

CRDT → disk: a change from any other source marks the note dirty; dirty notes are
written together after a short delay (a burst is one write), atomically (temp file,
fsync, rename, fsync dir). Before writing, the file is checked against what the
daemon last saw of it: if someone edited it meanwhile, that edit is ingested (merged)
first and the merged text is written, so a disk edit is never clobbered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from stet.daemon.base.atomic_files import TEMP_DIR, sweep_temps
from stet.daemon.base.loop_slices import turn_deadline
from stet.daemon.folder.git_watch import GitWatch
from stet.daemon.folder.intake_batch import IntakeBatch, NewFileRead
from stet.daemon.folder.rename_detection import RenameDetection, stat_matches
from stet.daemon.folder.replica import FolderReplica, ReplicaService
from stet.daemon.folder.watcher import FsEvent
from stet.daemon.folder.writer.disk_writes import DiskWrites
from stet.daemon.notes.changes import Change, NewFile
from stet.sync.change_kinds import ChangeKind, Source
from stet.sync.errors import StetError
from stet.sync.folder_scan import (
    CASE_CLASH,
    FileChanged,
    FileStat,
    ScanResult,
    SkipFile,
    decode_note,
    read_note_file,
    scan_folder,
)
from stet.sync.ignore_rules import STETIGNORE_NAME, IgnoreRules
from stet.sync.note_doc import revision_of
from stet.sync.note_paths import InvalidPath, is_note_name, normalize_note_path, resolve_inside
from stet.sync.note_rows import DiskState, NoteRow

logger = logging.getLogger(__name__)

DISK = Source.DISK
RECONCILE_STEP = 200  # files a rescan compares between two progress reports
# The intake takes in files for this long, then lets the loop run: the turn's whole budget
# (``loop_slices.TURN_BUDGET_S``, shared with the turn's other long work, and cut for a
# request in flight). At 10 ms a slice's unit held ~13 new files (P8): a commit, an index
# update and a pair of frames to each peer per 13 notes.
DRAIN_SLICE_S = 0.02
PREFETCH_MIN = 16  # a queue this long is read ahead in worker threads
PREFETCH_BATCH = 128  # files per read-ahead
PREFETCH_AHEAD = 4 * PREFETCH_BATCH  # files read and waiting, at most, before more are read
COMPARE_SLICE_S = 0.02  # a rescan compares stats for this long between two turns of the loop
QUIET_RECHECK_S = 1.0  # ``until_quiet`` looks again at least this often (paths settling)

Progress = Callable[[int, int], None]
"""progress(done, total) of long work."""


@dataclass(slots=True)
class _PathState:
    timer: asyncio.TimerHandle | None = None
    awaiting_close: bool = False
    created: bool = False  # a file was created at this path (it may be a rename's other half)
    seen_at: float | None = None  # the first event's time (wall clock): was it git's?


@dataclass(frozen=True, slots=True)
class _Read:
    """A file read (and hashed) ahead in a worker thread."""

    stat: FileStat
    data: bytes
    revision: str


def _read_many(root: Path, paths: list[str], max_bytes: int) -> dict[str, _Read | None]:
    """Read and hash files in a worker thread (None: read it on the loop instead)."""
    out: dict[str, _Read | None] = {}
    for path in paths:
        try:
            data, fst = read_note_file(root, path, max_bytes)
        except Exception:  # gone, changing, skipped: the loop's own read says what
            out[path] = None
            continue
        out[path] = _Read(fst, data, revision_of(data))
    return out


@dataclass(slots=True)
class ReconcileReport:
    scanned: int = 0
    changed: int = 0
    created: int = 0
    deleted: int = 0
    moved: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    other_files: int = 0


class FileBridge:
    """The folder side of a vault, composed of: the folder replica (each file's base and
    the merge of file edits: ``folder_replica``), the writer (CRDT → disk: ``disk_writes``)
    and rename detection (``rename_detection``). The bridge itself turns file events and
    rescans into an intake queue read one path at a time; it is the ``WriterHost`` and
    ``RenameHost`` its collaborators are given."""

    on_other_files: Callable[[], None] | None = None  # a non-note path appeared, moved or went

    def __init__(
        self,
        root: Path,
        service: ReplicaService,
        *,
        extensions: tuple[str, ...],
        max_bytes: int,
        settle_s: float = 0.03,
        unclosed_write_s: float = 2.0,
        write_delay_s: float = 0.005,
        busy_note_interval_s: float = 0.1,
    ) -> None:
        self.root = root.resolve()
        self._root_prefix = os.fspath(self.root) + os.sep  # for joins on the hot paths (no pathlib)
        self.service = service
        self.extensions = extensions
        self.max_bytes = max_bytes
        self.settle_s = settle_s
        self.unclosed_write_s = unclosed_write_s
        self.replica = FolderReplica(service)
        self.writer = DiskWrites(self.root, self.replica, self, max_bytes=max_bytes, settle_s=settle_s,
                                 unclosed_write_s=unclosed_write_s, write_delay_s=write_delay_s,
                                 busy_note_interval_s=busy_note_interval_s)
        self.renames = RenameDetection(self.root, max_bytes, self.replica, self)
        self.rules = IgnoreRules.load(self.root)
        self.git = GitWatch(self.root)
        self._paths: dict[str, _PathState] = {}
        # Paths settled and waiting to be read, in order: taken in by ``_drain`` a slice at
        # a time (one commit per slice; the loop runs between slices).
        self._ready: dict[str, float | None] = {}  # path -> when its change was first seen
        self._fresh: dict[str, FileStat] = {}  # new files a rescan found (a missing note may be one)
        self._drain_handle: asyncio.Handle | None = None
        # Queued paths read ahead in worker threads (None: read it on the loop).
        self._prefetched: dict[str, _Read | None] = {}
        self._prefetching: asyncio.Future[dict[str, _Read | None]] | None = None
        self._new_file_s = 0.0001  # what making a new file a note costs in a batch (learnt)
        self._idle: asyncio.Event | None = None
        self._report: ReconcileReport | None = None  # the running rescan's, counting its paths
        self._report_paths: set[str] = set()
        self._reconcile_requested: asyncio.Event | None = None
        self._quiet: asyncio.Event | None = None  # someone waits for an empty queue
        self.on_reconcile_needed: Callable[[], None] | None = None
        self.replica.subscribe(self._recheck_case_clashes)

    # -- status ---------------------------------------------------------------------

    @property
    def pending_writes(self) -> int:
        return self.writer.pending

    @property
    def pending_reads(self) -> int:
        return sum(1 for s in self._paths.values() if s.timer is not None) + len(self._ready)

    @property
    def intake_waiting(self) -> bool:
        """Some file is settling or queued to be read. Cheap and safe from another thread
        (the search index's worker asks it: ``SearchIndexer.busy``)."""
        return bool(self._ready) or bool(self._paths)

    def _loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    async def until_quiet(self, max_wait_s: float) -> None:
        """Wait (at most ``max_wait_s``) until no file is waiting to be read: no event
        settling, nothing in the intake queue. A rescan asked for meanwhile (folders made
        by an unzip) then compares a folder the intake has caught up with, once, instead
        of running beside it (and competing with it for the interpreter) again and again."""
        deadline = time.monotonic() + max_wait_s
        try:
            while self.pending_reads:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._quiet = asyncio.Event()  # set by ``_drain`` when the queue is empty
                with contextlib.suppress(TimeoutError):  # paths still settling: look again
                    await asyncio.wait_for(self._quiet.wait(), min(left, QUIET_RECHECK_S))
        finally:
            self._quiet = None

    # -- the writer and rename detection (composed; the bridge is their host) -------------

    def flush_writes(self, *, busy_wait: bool = False) -> int:
        """Write every dirty note to disk now (``DiskWrites.flush_writes``)."""
        return self.writer.flush_writes(busy_wait=busy_wait)

    async def wait_flushed(self) -> None:
        """Let a timed flush in flight finish (``DiskWrites.wait_flushed``)."""
        await self.writer.wait_flushed()

    def close(self) -> None:
        self.writer.close()

    def mark_dirty(self, note_id: str) -> None:
        self.writer.mark_dirty(note_id)

    def moved_or_deleted(self, row: NoteRow, source: str = DISK) -> bool:
        """The file of ``row`` is gone: follow it if renamed, else delete the note."""
        return self.renames.moved_or_deleted(row, source)

    def _recheck_case_clashes(self, change: Change) -> None:
        """A note left its path (deleted or moved, by anyone): a file skipped for differing
        from it only by case is read again now, not at the next hourly rescan -- its skip
        leaves ``stet status`` and it becomes a note (issue 37 item 6)."""
        if change.kind == ChangeKind.DELETED:
            gone = change.path
        elif change.kind == ChangeKind.MOVED and change.old_path:
            gone = change.old_path
        else:
            return
        rows = self.service.store.db.execute("SELECT path FROM skipped WHERE reason = ?",
                                             (f"{CASE_CLASH} {gone}",)).fetchall()
        for (path,) in rows:
            self.schedule(str(path), awaiting_close=False)

    # -- disk → CRDT: events ------------------------------------------------------

    def is_candidate(self, rel: str) -> bool:
        # The name first: it is quick, and it turns away our own temp files, whose events
        # are most of what a busy vault sees.
        if not rel or rel == STETIGNORE_NAME or not is_note_name(rel, self.extensions):
            return False
        return not self.rules.is_ignored(rel)

    def on_fs_event(self, event: FsEvent) -> None:
        """Entry point from the watcher (runs on the loop)."""
        try:
            self._on_fs_event(event)
        except Exception:
            logger.exception("failed to handle %s", event)
        for path in (event.path, event.dest):
            state = self._paths.get(path) if path else None
            if state is not None and state.seen_at is None:
                state.seen_at = event.at

    def _on_fs_event(self, event: FsEvent) -> None:
        kind, path, dest = event.kind, event.path, event.dest
        if kind == "overflow":
            logger.warning("file events were lost (inotify overflow): rescanning the vault")
            self.writer.forget_dirs()  # a folder's delete may be among them
            self._request_reconcile()
            return
        if kind != "modified" and STETIGNORE_NAME in (path, dest):
            # Written in place (closed), created, deleted, or saved by renaming a temp
            # file onto it (the rename's destination): reload the rules.
            self.rules = IgnoreRules.load(self.root)
        if kind in ("dir_created", "dir_deleted", "dir_moved"):
            self._on_dir_event(kind, path or "", dest)
            return
        assert path is not None
        if kind == "moved":
            self._on_move(path, dest)
            self._on_other_path(path)
            if dest is not None:
                self._on_other_path(dest)
            return
        if not self.is_candidate(path):
            if kind in ("created", "deleted"):
                self._on_other_path(path)
            return
        if kind == "modified":
            self.schedule(path, awaiting_close=True)
        elif kind == "closed":
            self.schedule(path, awaiting_close=False)
        elif kind == "created":
            # Whoever created the file may still be writing it (vim renames the note to
            # note~ and then writes a new file; a script streams into a new file): wait
            # for the close, as for a modification, or for unclosed_write_s without one
            # (a hard link, a file moved in from outside the vault).
            if path not in self._paths and self._is_own_echo(path):
                return  # our own write, renamed in from the unwatched temp folder
            self.schedule(path, awaiting_close=True)
            self._paths[path].created = True
        else:  # deleted
            state = self._paths.get(path)
            self.schedule(path, awaiting_close=state.awaiting_close if state else False)

    def _is_own_echo(self, path: str) -> bool:
        """The file at ``path`` is exactly the one we wrote there (recorded, or renamed
        into place and about to be): its event tells nothing new."""
        # A file we did not write, at a path with no file on record (an unzip's new
        # file), is no echo: no lstat for it.
        pending = self.writer.write_pending(path)
        row = None if pending else self.service.store.note_at(path)
        if not pending and (row is None or row.disk is None):
            return False
        try:
            st = FileStat.of(os.lstat(self._root_prefix + path))
        except OSError:
            return False
        if pending and self.writer.is_own_write(path, st):
            return True
        if pending:
            row = self.service.store.note_at(path)
        return row is not None and stat_matches(row.disk, st)

    def _on_other_path(self, path: str) -> None:
        """A path that is not a note appeared, moved or went away.

        The folder scan reports a symlink to a folder as skipped (never followed); a
        rescan keeps ``stet status`` true when one appears, or when a skipped path goes.
        """
        if not path or self.is_candidate(path) or self.rules.is_ignored(path):
            return
        if self.on_other_files is not None:
            self.on_other_files()  # stet status's OTHER column (daemon/folder/other_files.py)
        full = self.root / path
        if (os.path.islink(full) and os.path.isdir(full)) or path in self.service.store.skipped():
            self._request_reconcile()

    def _on_move(self, src: str, dest: str | None) -> None:
        src_is_note = self.is_candidate(src)
        if dest is not None and self.is_candidate(dest):
            row = self.service.store.note_at(src) if src_is_note else None
            if row is not None and self.service.store.note_at(dest) is None and self.is_contained(dest):
                self.cancel(src)
                try:
                    self.replica.moved(row, dest, DISK)
                except StetError as exc:
                    logger.warning("cannot follow the rename %s -> %s: %s", src, dest, exc)
                    self.schedule(src, awaiting_close=False)
            elif src_is_note:
                self.schedule(src, awaiting_close=False)
            self.schedule(dest, awaiting_close=False)
        elif src_is_note:
            # Renamed to something that is not a note (vim's backup `note~`), or out of
            # the vault: check the source once things settle.
            self.schedule(src, awaiting_close=False)

    def _on_dir_event(self, kind: str, path: str, dest: str | None) -> None:
        if path == TEMP_DIR:
            return  # our temp folder, made and removed around each batch of writes
        if kind in ("dir_deleted", "dir_moved"):
            self.writer.forget_dirs(path)  # a folder made there again is not one of ours
            if dest is not None:
                self.writer.forget_dirs(dest)
        if kind == "dir_moved" and dest is not None:
            moved = 0
            prefix = path + "/"
            for row in self.service.store.live_notes(prefix=prefix):
                new_path = dest + "/" + row.path[len(prefix) :]
                if self.is_candidate(new_path) and self.service.store.note_at(new_path) is None:
                    try:
                        self.replica.moved(row, new_path, DISK)
                        moved += 1
                    except StetError as exc:
                        logger.warning("cannot follow %s -> %s: %s", row.path, new_path, exc)
            logger.info("folder %s moved to %s: %d notes followed", path, dest, moved)
        if kind == "dir_created" and self.writer.created_dir(path):
            return  # made by our own write of a note (its files are ours): nothing missed
        # Anything else about folders (created with files inside, deleted, moved out):
        # reconcile; it is stat-based and cheap.
        self._request_reconcile()

    def is_contained(self, rel: str) -> bool:
        try:
            resolve_inside(self.root, normalize_note_path(rel))
        except InvalidPath:
            return False
        return True

    def schedule(self, path: str, *, awaiting_close: bool) -> None:
        self._prefetched.pop(path, None)
        seen_at = self._ready.pop(path, None)
        if path in self._report_paths:
            self._forget_report_path(path)  # its event decides when it is read
        state = self._paths.setdefault(path, _PathState())
        if state.seen_at is None:
            state.seen_at = seen_at
        if state.timer is not None:
            state.timer.cancel()
        state.awaiting_close = awaiting_close
        delay = self.unclosed_write_s if awaiting_close else self.settle_s
        state.timer = self._loop().call_later(delay, self._settled, path)

    def cancel(self, path: str) -> None:
        self._prefetched.pop(path, None)
        self._ready.pop(path, None)
        self._fresh.pop(path, None)
        self._forget_report_path(path)
        state = self._paths.pop(path, None)
        if state is not None and state.timer is not None:
            state.timer.cancel()

    def _settled(self, path: str) -> None:
        state = self._paths.pop(path, None)
        self._enqueue(path, state.seen_at if state is not None else None)

    def _source(self, path: str, seen_at: float | None = None) -> str:
        """``"git"`` for a change git made (SPEC §3.16), else ``"disk"``."""
        return self.git.source_for(path, time.time() if seen_at is None else seen_at)

    # -- disk → CRDT: the intake queue -------------------------------------------------

    def _enqueue(self, path: str, seen_at: float | None = None) -> None:
        """Read ``path`` soon, in the next slice of the intake. ``seen_at``: when its
        change was first seen (wall clock; to tell git's changes), kept from the first."""
        first = self._ready.get(path)
        self._ready[path] = seen_at if first is None else first
        if self._drain_handle is None:
            with contextlib.suppress(RuntimeError):  # no loop (offline tools): the caller drains
                self._drain_handle = self._loop().call_soon(self._drain)

    def _drain(self) -> None:
        """Take in ready paths for at most ``DRAIN_SLICE_S``, one unit of work (one
        commit) for the slice, then let the loop run; continue in the next turn. A long
        queue is read ahead in worker threads (``_read_ahead``): the slice takes in only
        paths already read, and waits for the reads otherwise."""
        self._drain_handle = None
        bulk = len(self._ready) >= PREFETCH_MIN
        if bulk and self._read_ahead():
            return  # resumed when the reads in flight are done
        self.drain(DRAIN_SLICE_S, read_ahead_only=bulk)
        if self._ready:
            self._drain_handle = self._loop().call_soon(self._drain)
            return
        if self._idle is not None:
            self._idle.set()
        if self._quiet is not None:
            self._quiet.set()

    def _read_ahead(self) -> bool:
        """Keep the next ``PREFETCH_BATCH`` queued paths being read in worker threads;
        True if the head of the queue is not read yet (the drain waits for it)."""
        head = next(iter(self._ready))
        ahead = head in self._prefetched
        # Reads that wait are bounded: choosing the next ones walks the queue past those
        # already read (thousands when the reads outrun the drain, walked on the loop each
        # time), and each holds its file's bytes.
        if self._prefetching is None and not (ahead and len(self._prefetched) >= PREFETCH_AHEAD):
            # Every file is read ahead, even one the store says is unchanged: asking the
            # store and lstat-ing each here was a few ms of the loop per read-ahead; the
            # slice compares the stat before using a read anyway.
            paths: list[str] = []
            for path in self._ready:
                if len(paths) >= PREFETCH_BATCH:
                    break
                if path not in self._prefetched:
                    paths.append(path)
            if paths:
                future = self._loop().run_in_executor(self.writer.executor(), _read_many, self.root, paths,
                                                      self.max_bytes)
                self._prefetching = future
                future.add_done_callback(functools.partial(self._read_done, paths=paths))
        return not ahead

    def _read_done(self, future: asyncio.Future[dict[str, _Read | None]], paths: list[str]) -> None:
        self._prefetching = None
        if future.cancelled() or future.exception() is not None:
            reads: dict[str, _Read | None] = dict.fromkeys(paths)  # read on the loop, as usual
        else:
            reads = future.result()
        for path, read in reads.items():
            if path in self._ready:  # not taken over by an event meanwhile
                self._prefetched[path] = read
        if self._ready and self._drain_handle is None:
            self._drain_handle = self._loop().call_soon(self._drain)

    def drain(self, budget_s: float | None = None, *, read_ahead_only: bool = False) -> int:
        """Take in ready paths (all of them, or for ``budget_s``); returns how many.

        Each path is read and compared with its note's stored base exactly as when its
        event settles (``_ingest_path``: lstat, compare, read, fork-and-merge), inside a
        nested unit so that one failure undoes that path only; new files wait in an
        ``IntakeBatch`` and become notes together (``_take_in_new``), before any path that
        must see them in the store, and within the budget."""
        done = 0
        deadline = turn_deadline(budget_s) if budget_s is not None else None  # shared per turn
        if deadline is not None and deadline <= time.monotonic():
            # Cut for a request in flight (requests first): nothing this turn. Its one item
            # would be a new file made a note alone -- a commit, a vault-index update and a
            # frame to each peer (and a unit there) for one note: 1,000-2,000 of P8's
            # 10,000 went so. The request is answered in the next turn; long work is cut
            # for at most ``loop_slices.REQUEST_FIRST_S`` in a row.
            return 0
        retry: list[tuple[str, float | None]] = []
        batch = IntakeBatch()  # new files, made notes together (``_take_in_new``)
        with self.service.write(DISK):
            while self._ready:
                path = next(iter(self._ready))
                if read_ahead_only and path not in self._prefetched:
                    break  # its read is in flight: the next slice
                seen_at = self._ready.pop(path)
                self._fresh.pop(path, None)
                outcome = self._ingest_one(path, seen_at, batch)
                if outcome == "wait":  # taken in alone, once the new files before it are notes
                    retry += self._take_in_new(batch)
                    outcome = self._ingest_one(path, seen_at, None)
                self._prefetched.pop(path, None)  # its read, if it was not used (unchanged, skipped)
                done += 1
                if outcome == "retry":
                    retry.append((path, seen_at))
                if outcome != "batched":
                    self._count(path, outcome)
                if batch.full:
                    retry += self._take_in_new(batch)
                # The slice's budget includes making the waiting files notes.
                if deadline is not None and time.monotonic() + len(batch) * self._new_file_s >= deadline:
                    break
            retry += self._take_in_new(batch)
        for path, seen_at in retry:
            self.schedule(path, awaiting_close=False)
            self._paths[path].seen_at = seen_at
        return done

    def _ingest_one(self, path: str, seen_at: float | None, batch: IntakeBatch | None) -> str:
        """``_ingest_path`` in a nested unit (a failure undoes this path only). With a
        batch, no unit of its own: every write ``_ingest_path`` makes then (a skipped
        file's record, a rename followed) is atomic by itself, anything more is "wait"
        (taken in alone, in a unit), and a SAVEPOINT per new file was a fifth of the
        intake's loop time."""
        try:
            if batch is not None:
                return self._ingest_path(path, seen_at=seen_at, batch=batch)
            with self.service.write(DISK):
                return self._ingest_path(path, seen_at=seen_at)
        except Exception:
            logger.exception("failed to read %s", path)
            return "failed"

    def _take_in_new(self, batch: IntakeBatch) -> list[tuple[str, float | None]]:
        """Make the waiting new files notes, together (``NotesService.create_many``: one
        statement per table, one index update), in a nested unit; if that fails, it is
        undone and each file is taken in alone (so one bad file costs only itself).
        Returns the paths to read again later."""
        items = batch.take()
        if not items:
            return []
        started = time.monotonic()
        again = items
        try:
            with self.service.write(DISK):
                rows = self.service.create_many([NewFile(i.path, i.text, i.disk) for i in items],
                                                items[0].source)
                self.service.store.clear_skipped_many([i.path for i, row in zip(items, rows, strict=True)
                                                       if row is not None])
        except Exception:
            logger.warning("taking in %d new files together failed; one at a time", len(items), exc_info=True)
        else:
            again = []
            for row, item in zip(rows, items, strict=True):
                if row is None:
                    again.append(item)  # a note this store knows (deleted here): brought back alone
                    continue
                self._count(item.path, "created")
            # What a new file costs in a batch, to end a slice in time (a running mean).
            self._new_file_s = 0.8 * self._new_file_s + 0.2 * (time.monotonic() - started) / len(items)
        retry: list[tuple[str, float | None]] = []
        for item in again:  # known notes (brought back) and a failed batch: one at a time
            self._prefetched[item.path] = _Read(item.stat, item.data, item.disk.revision)
            outcome = self._ingest_one(item.path, item.seen_at, None)
            if outcome == "retry":
                retry.append((item.path, item.seen_at))
            self._count(item.path, outcome)
        return retry

    def _count(self, path: str, outcome: str) -> None:
        report = self._report
        if report is None or path not in self._report_paths:
            return
        if outcome in ("changed", "created", "moved", "deleted"):
            setattr(report, outcome, getattr(report, outcome) + 1)
        self._forget_report_path(path)

    def _forget_report_path(self, path: str) -> None:
        self._report_paths.discard(path)
        if not self._report_paths and self._idle is not None:
            self._idle.set()

    # -- disk → CRDT: reading one path -----------------------------------------------

    def ingest_path(self, path: str, *, seen_at: float | None = None) -> bool:
        """Bring the note at ``path`` in line with the file. Returns True to retry later.

        One unit of work (one commit), its skipped-file bookkeeping included. ``seen_at``:
        when the change was first seen (to tell git's changes)."""
        with self.service.write(DISK):
            return self._ingest_path(path, seen_at=seen_at) == "retry"

    def _ingest_path(self, path: str, *, seen_at: float | None = None,
                     batch: IntakeBatch | None = None) -> str:
        """What ``ingest_path`` does; returns what came of it: "retry", "changed",
        "created", "moved", "deleted", "skipped" or "same". With ``batch``, a new file is
        read and left in it ("batched": made a note with the others), and a path that
        must be judged after the files waiting there returns "wait", having done nothing."""
        store = self.service.store
        try:
            norm = normalize_note_path(path)
            bad_name = None if norm == path else "name is not in Unicode normal form C"
        except InvalidPath as exc:
            bad_name = f"name cannot be synced: {exc.reason}"
        if bad_name is not None:
            if os.path.lexists(self.root / path):
                store.set_skipped(path, bad_name)
            else:  # gone: no longer skipped
                store.clear_skipped(path)
            return "skipped"
        row = store.note_at(path)
        if row is not None and batch is not None:
            return "wait"  # a note's file: alone, in a unit, against the store with the new files in it
        try:
            st = os.lstat(self._root_prefix + path)
        except FileNotFoundError:
            outcome = "same"
            if row is not None and row.disk is None:
                # A note not written out since it was (re)created here -- a peer's note
                # brought back after our own removal of its file, whose event this is:
                # its file is owed, not deleted (as in ``reconcile``).
                self.mark_dirty(row.id)
            elif row is not None:
                outcome = "moved" if self.moved_or_deleted(row, self._source(path, seen_at)) else "deleted"
            store.clear_skipped(path)
            return outcome
        except OSError as exc:
            store.set_skipped(path, f"cannot be read: {exc.strerror}")
            return "skipped"
        if not stat.S_ISREG(st.st_mode):
            link = stat.S_ISLNK(st.st_mode)
            store.set_skipped(path, "symbolic link (never followed)" if link else "not a regular file")
            return "skipped"
        if row is not None and self.writer.is_own_write(path, FileStat.of(st)):
            return "same"  # our own write, renamed into place; recorded once its folder is synced
        if row is not None and self.writer.write_pending(path):
            # Edited after our rename, before our write was recorded: what it is based on
            # (our write) is not the base on record yet -- merged against the older base,
            # our own lines came back doubled (test_append_race). Read it once recorded.
            return "retry"
        if row is not None and stat_matches(row.disk, FileStat.of(st)):
            if row.disk is not None and row.disk.revision != row.revision:
                self.mark_dirty(row.id)  # the file is behind the note (a write cut short)
            return "same"  # our own write, or nothing new
        source = self._source(path, seen_at)
        if row is None and batch is not None and batch.must_wait(path, st.st_ino, source):
            return "wait"
        if row is None and self.renames.known_file_moved(path, FileStat.of(st)):
            return "moved"
        if row is None:
            clash = self.renames.case_clash(path)
            if clash is not None:
                store.set_skipped(path, f"{CASE_CLASH} {clash}")
                return "skipped"
        ahead = self._prefetched.pop(path, None)
        try:
            if ahead is not None and ahead.stat == FileStat.of(st):
                # Read in a worker thread (the same contained, checked read) and the file
                # is still exactly that file: take that read.
                data, fst, revision = ahead.data, ahead.stat, ahead.revision
            else:
                data, fst = read_note_file(self.root, path, self.max_bytes)
                revision = revision_of(data)
            text = decode_note(data)
        except FileNotFoundError:
            return "retry"  # renamed away between the stat and the open: look again
        except FileChanged:
            return "retry"
        except SkipFile as exc:
            store.set_skipped(path, exc.message)
            logger.warning("skipping %s: %s", path, exc.message)
            return "skipped"
        disk = DiskState(revision, fst.mtime_ns, fst.size, fst.ino)
        if row is None and batch is not None:
            batch.add(NewFileRead(path, text, disk, source, seen_at, fst, data))
            return "batched"
        result = self.replica.ingest(path, text, disk, source)
        if result.needs_write:
            self.mark_dirty(result.note.id)
        store.clear_skipped(path)
        if row is None:
            return "created"
        return "changed" if result.changed else "same"

    # -- reconcile -------------------------------------------------------------------

    def _request_reconcile(self) -> None:
        if self.on_reconcile_needed is not None:
            self.on_reconcile_needed()

    def reconcile(self, progress: Progress | None = None) -> ReconcileReport:
        """Compare the whole folder with the store and take in every difference now,
        without letting the loop run (offline tools, tests). The daemon uses
        ``reconcile_async``, which does the same in slices."""
        self.rules = IgnoreRules.load(self.root)
        scan = scan_folder(self.root, self.rules, self.extensions, self.max_bytes)
        report = self._begin_report(scan)
        for _ in self._compare(scan, report, progress):
            pass
        while self._ready:
            self.drain(None)
        return self._end_report(report, progress)

    async def reconcile_async(self, progress: Progress | None = None, *,
                              wait_recent: bool = False) -> ReconcileReport:
        """Compare the whole folder with the store, letting the loop run every
        ``COMPARE_SLICE_S`` (SPEC §3.15): the stat scan runs in a worker thread; the
        comparison is of stats only; every file found different goes to the intake queue
        and is read and applied there like a settled event (lstat, compare with the stored
        base, read, fork-and-merge, one note at a time, each against the store *as it is
        then*). Nothing decided from the scan is applied without that check, so events,
        agents and peers acting on a note meanwhile lose and double nothing (the earlier
        yielding rescan applied what it had read before a yield; the long R1 run caught
        it). ``wait_recent`` (a rescan while running): a file written in the last
        ``unclosed_write_s`` is left to its events (read once closed), not read now."""
        self.rules = IgnoreRules.load(self.root)
        if not wait_recent and not self.writer.dirty:
            # At start, before any write of ours: temp files a killed run left behind.
            swept = await asyncio.to_thread(sweep_temps, self.root)
            if swept:
                logger.info("removed %d temp files left by an interrupted write", swept)
        scan = await asyncio.to_thread(scan_folder, self.root, self.rules, self.extensions, self.max_bytes)
        report = self._begin_report(scan)
        deadline = turn_deadline(COMPARE_SLICE_S)
        for _ in self._compare(scan, report, progress, wait_recent=wait_recent):
            if time.monotonic() >= deadline:
                await asyncio.sleep(0)
                deadline = turn_deadline(COMPARE_SLICE_S)
        while self._report_paths:
            self._idle = asyncio.Event()
            if self._drain_handle is None and self._ready:
                self._drain_handle = self._loop().call_soon(self._drain)
            if not self._ready:
                break  # the rest were taken over by events (``_schedule``) or cancelled
            await self._idle.wait()
        return self._end_report(report, progress)

    def _begin_report(self, scan: ScanResult) -> ReconcileReport:
        report = ReconcileReport(scanned=len(scan.notes), other_files=scan.other_files)
        self._report = report
        self._report_paths = set()
        return report

    def _end_report(self, report: ReconcileReport, progress: Progress | None) -> ReconcileReport:
        if progress is not None:
            progress(report.scanned, report.scanned)
        self._report = None
        self._report_paths = set()
        self._idle = None
        report.skipped = self.service.store.skipped()
        return report

    def _compare(self, scan: ScanResult, report: ReconcileReport, progress: Progress | None,
                 *, wait_recent: bool = False) -> Iterator[None]:
        """Compare stats, queue what differs; yields between files (the caller decides
        when to let the loop run). Every look at the store is fresh (as it is now)."""
        store = self.service.store
        total = len(scan.notes)
        new_files: dict[str, FileStat] = {}
        for done, (path, fst) in enumerate(scan.notes.items()):
            if done % RECONCILE_STEP == 0 and progress is not None:
                progress(done, total)
            yield
            if self._busy(path):
                continue  # its event (or the queue) reads it
            row = store.note_at(path)
            if row is not None and stat_matches(row.disk, fst):
                if row.disk is not None and row.disk.revision != row.revision:
                    self.mark_dirty(row.id)  # the file is behind the note (a write cut short)
                continue
            if wait_recent and time.time_ns() - fst.mtime_ns < self.unclosed_write_s * 1e9:
                # Written a moment ago: perhaps still being written, its events not handled
                # yet. Treat it as they will: wait for its close (or the quiet that ends an
                # unclosed write), never read it half-written here.
                self.schedule(path, awaiting_close=True)
                continue
            if row is None:
                new_files[path] = fst
            else:
                self._queue_for_report(path)
        # Skipped files: what the scan found, plus those skipped on reading (not UTF-8)
        # that are still there; the queue updates them as it reads.
        known = store.skipped()
        skipped = dict(scan.skipped)
        for path, reason in known.items():
            if path in scan.notes:
                skipped.setdefault(path, reason)
        if skipped != known:  # a rescan that finds nothing new writes nothing
            with self.service.write(DISK):
                store.replace_skipped(skipped)
        # New files first become move candidates (a missing note whose file turns up
        # at one of them is that note, moved); missing notes are looked at before them.
        for path, fst in new_files.items():
            self._add_fresh(path, fst)
        for row in self._live_pages():
            yield
            if row.path in scan.notes or self._busy(row.path):
                continue
            if row.disk is None:
                # Never written out (an agent's or a peer's new note, the daemon stopped
                # before its first write): its file is owed, not deleted.
                self.mark_dirty(row.id)
                continue
            if os.path.lexists(self.root / row.path) and self.is_candidate(row.path):
                continue  # its file appeared after the scan: its event will tell
            self._queue_for_report(row.path)
        for path in new_files:
            if path in self._fresh:
                self._queue_for_report(path)

    def _live_pages(self, page: int = 256) -> Iterator[NoteRow]:
        """Every live note, a page at a time (the caller may let the loop run between
        rows; a note moved meanwhile may be missed or seen twice -- the queue's check
        of each path decides)."""
        after = ""
        while True:
            rows = self.service.store.live_notes(after=after, limit=page)
            yield from rows
            if len(rows) < page:
                return
            after = rows[-1].path

    def _busy(self, path: str) -> bool:
        """A read of ``path`` is pending (its event settles, or it is queued)."""
        state = self._paths.get(path)
        return (state is not None and state.timer is not None) or path in self._ready

    def _queue_for_report(self, path: str) -> None:
        self._report_paths.add(path)
        self._enqueue(path)

    def _add_fresh(self, path: str, fst: FileStat) -> None:
        self._fresh[path] = fst

    def move_candidates(self, size: int, disk: DiskState | None) -> list[tuple[str, bool]]:
        """Paths where a note whose file went missing may have gone: (path, created)."""
        out = [(path, state.created) for path, state in self._paths.items()]
        out += [(path, True) for path, fst in self._fresh.items()
                if fst.size == size or (disk is not None and fst.size == disk.size)]
        return out
