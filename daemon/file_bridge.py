"""The bridge between a vault folder and its notes (SPEC §3).

Disk → CRDT: file events only mark a path; the path is read once it has settled
(a close-after-write, a rename into place, or no further event for a while), and
its text becomes a minimal diff through ``NotesService``. A file that changes while
being read is read again later, so a half-written file never becomes an edit.

CRDT → disk: a change from any other source marks the note dirty; dirty notes are
written together after a short delay (a burst is one write), atomically (temp file,
fsync, rename, fsync dir). Before writing, the file is checked against what the
daemon last saw of it: if someone edited it meanwhile, that edit is ingested (merged)
first and the merged text is written, so a disk edit is never clobbered.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from stet.sync.errors import StetError
from stet.sync.folder_scan import (
    FileChanged,
    FileStat,
    SkipFile,
    decode_note,
    read_note_file,
    scan_folder,
)
from stet.sync.ignore_rules import STETIGNORE_NAME, IgnoreRules
from stet.sync.note_doc import revision_of
from stet.sync.note_paths import InvalidPath, is_note_name, normalize_note_path, resolve_inside
from stet.sync.store import DiskState, NoteRow

from .disk_writes import DiskWrites
from .folder_watcher import FsEvent
from .git_watch import GitWatch
from .notes_service import NotesService
from .rename_detection import RenameDetection, _same_stat

logger = logging.getLogger(__name__)

DISK = "disk"
RECONCILE_STEP = 200  # files a rescan compares between two progress reports

Progress = Callable[[int, int], None]
"""progress(done, total) of long work."""


@dataclass(slots=True)
class _PathState:
    timer: asyncio.TimerHandle | None = None
    awaiting_close: bool = False
    created: bool = False  # a file was created at this path (it may be a rename's other half)
    seen_at: float | None = None  # the first event's time (wall clock): was it git's?


@dataclass(slots=True)
class ReconcileReport:
    scanned: int = 0
    changed: int = 0
    created: int = 0
    deleted: int = 0
    moved: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    other_files: int = 0


class FileBridge(DiskWrites, RenameDetection):
    on_other_files: Callable[[], None] | None = None  # a non-note path appeared, moved or went

    def __init__(
        self,
        root: Path,
        service: NotesService,
        *,
        extensions: tuple[str, ...],
        max_bytes: int,
        settle_s: float = 0.03,
        unclosed_write_s: float = 2.0,
        write_delay_s: float = 0.005,
        busy_note_interval_s: float = 0.1,
    ) -> None:
        self.root = root.resolve()
        self.service = service
        self.extensions = extensions
        self.max_bytes = max_bytes
        self.settle_s = settle_s
        self.unclosed_write_s = unclosed_write_s
        self.write_delay_s = write_delay_s
        # A note written over and over (an agent appending hundreds of lines a second)
        # goes to disk at most once per interval; a quiet note is written at once.
        self.busy_note_interval_s = busy_note_interval_s
        self._last_written: dict[str, float] = {}  # note -> when (monotonic) its file was
        self._pool: ThreadPoolExecutor | None = None
        self.rules = IgnoreRules.load(self.root)
        self.git = GitWatch(self.root)
        self._paths: dict[str, _PathState] = {}
        self._dirty: set[str] = set()
        self._waited: dict[str, float] = {}  # note -> until when its vanished file gets time
        self._write_timer: asyncio.TimerHandle | None = None
        self._reconcile_requested: asyncio.Event | None = None
        self.on_reconcile_needed: Callable[[], None] | None = None
        service.subscribe(self._on_change)

    # -- status ---------------------------------------------------------------------

    @property
    def pending_writes(self) -> int:
        return len(self._dirty)

    @property
    def pending_reads(self) -> int:
        return sum(1 for s in self._paths.values() if s.timer is not None)

    def _loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    # -- disk → CRDT: events ------------------------------------------------------

    def _is_candidate(self, rel: str) -> bool:
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
        if not self._is_candidate(path):
            if kind in ("created", "deleted"):
                self._on_other_path(path)
            return
        if kind == "modified":
            self._schedule(path, awaiting_close=True)
        elif kind == "closed":
            self._schedule(path, awaiting_close=False)
        elif kind == "created":
            # Whoever created the file may still be writing it (vim renames the note to
            # note~ and then writes a new file; a script streams into a new file): wait
            # for the close, as for a modification, or for unclosed_write_s without one
            # (a hard link, a file moved in from outside the vault).
            self._schedule(path, awaiting_close=True)
            self._paths[path].created = True
        else:  # deleted
            state = self._paths.get(path)
            self._schedule(path, awaiting_close=state.awaiting_close if state else False)

    def _on_other_path(self, path: str) -> None:
        """A path that is not a note appeared, moved or went away.

        The folder scan reports a symlink to a folder as skipped (never followed); a
        rescan keeps ``stet status`` true when one appears, or when a skipped path goes.
        """
        if not path or self._is_candidate(path) or self.rules.is_ignored(path):
            return
        if self.on_other_files is not None:
            self.on_other_files()  # stet status's OTHER column (daemon/other_files.py)
        full = self.root / path
        if (os.path.islink(full) and os.path.isdir(full)) or path in self.service.store.skipped():
            self._request_reconcile()

    def _on_move(self, src: str, dest: str | None) -> None:
        src_is_note = self._is_candidate(src)
        if dest is not None and self._is_candidate(dest):
            row = self.service.store.note_at(src) if src_is_note else None
            if row is not None and self.service.store.note_at(dest) is None and self._is_contained(dest):
                self._cancel(src)
                try:
                    self.service.move(src, dest, DISK)
                except StetError as exc:
                    logger.warning("cannot follow the rename %s -> %s: %s", src, dest, exc)
                    self._schedule(src, awaiting_close=False)
            elif src_is_note:
                self._schedule(src, awaiting_close=False)
            self._schedule(dest, awaiting_close=False)
        elif src_is_note:
            # Renamed to something that is not a note (vim's backup `note~`), or out of
            # the vault: check the source once things settle.
            self._schedule(src, awaiting_close=False)

    def _on_dir_event(self, kind: str, path: str, dest: str | None) -> None:
        if kind == "dir_moved" and dest is not None:
            moved = 0
            prefix = path + "/"
            for row in self.service.store.live_notes(prefix=prefix):
                new_path = dest + "/" + row.path[len(prefix) :]
                if self._is_candidate(new_path) and self.service.store.note_at(new_path) is None:
                    try:
                        self.service.move(row.path, new_path, DISK)
                        moved += 1
                    except StetError as exc:
                        logger.warning("cannot follow %s -> %s: %s", row.path, new_path, exc)
            logger.info("folder %s moved to %s: %d notes followed", path, dest, moved)
        # Anything else about folders (created with files inside, deleted, moved out):
        # reconcile; it is stat-based and cheap.
        self._request_reconcile()

    def _is_contained(self, rel: str) -> bool:
        try:
            resolve_inside(self.root, normalize_note_path(rel))
        except InvalidPath:
            return False
        return True

    def _schedule(self, path: str, *, awaiting_close: bool) -> None:
        state = self._paths.setdefault(path, _PathState())
        if state.timer is not None:
            state.timer.cancel()
        state.awaiting_close = awaiting_close
        delay = self.unclosed_write_s if awaiting_close else self.settle_s
        state.timer = self._loop().call_later(delay, self._settled, path)

    def _cancel(self, path: str) -> None:
        state = self._paths.pop(path, None)
        if state is not None and state.timer is not None:
            state.timer.cancel()

    def _settled(self, path: str) -> None:
        state = self._paths.pop(path, None)
        seen_at = state.seen_at if state is not None else None
        try:
            retry = self.ingest_path(path, seen_at=seen_at)
        except Exception:
            logger.exception("failed to read %s", path)
            return
        if retry:
            self._schedule(path, awaiting_close=False)
            self._paths[path].seen_at = seen_at

    def _source(self, path: str, seen_at: float | None = None) -> str:
        """``"git"`` for a change git made (SPEC §3.16), else ``"disk"``."""
        return self.git.source_for(path, time.time() if seen_at is None else seen_at)

    # -- disk → CRDT: reading one path -----------------------------------------------

    def ingest_path(self, path: str, *, seen_at: float | None = None) -> bool:
        """Bring the note at ``path`` in line with the file. Returns True to retry later.

        ``seen_at``: when the change was first seen (to tell git's changes)."""
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
            return False
        row = store.note_at(path)
        try:
            st = os.lstat(self.root / path)
        except FileNotFoundError:
            if row is not None and row.disk is None:
                # A note not written out since it was (re)created here -- a peer's note
                # brought back after our own removal of its file, whose event this is:
                # its file is owed, not deleted (as in ``reconcile``).
                self._mark_dirty(row.id)
            elif row is not None:
                self._moved_or_deleted(row, self._source(path, seen_at))
            store.clear_skipped(path)
            return False
        except OSError as exc:
            store.set_skipped(path, f"cannot be read: {exc.strerror}")
            return False
        if not stat.S_ISREG(st.st_mode):
            link = stat.S_ISLNK(st.st_mode)
            store.set_skipped(path, "symbolic link (never followed)" if link else "not a regular file")
            return False
        if row is not None and _same_stat(row.disk, FileStat.of(st)):
            return False  # our own write, or nothing new
        if row is None and self._known_file_moved(path, FileStat.of(st)):
            return False
        if row is None:
            clash = self._case_clash(path)
            if clash is not None:
                store.set_skipped(path, f"differs only by case from {clash}")
                return False
        try:
            data, fst = read_note_file(self.root, path, self.max_bytes)
            text = decode_note(data)
        except FileNotFoundError:
            return True  # renamed away between the stat and the open: look again
        except FileChanged:
            return True
        except SkipFile as exc:
            store.set_skipped(path, exc.message)
            logger.warning("skipping %s: %s", path, exc.message)
            return False
        disk = DiskState(revision_of(data), fst.mtime_ns, fst.size, fst.ino)
        result = self.service.ingest_disk(path, text, disk, self._source(path, seen_at))
        if result.needs_write:
            self._mark_dirty(result.note.id)
        store.clear_skipped(path)
        return False

    # -- reconcile -------------------------------------------------------------------

    def _request_reconcile(self) -> None:
        if self.on_reconcile_needed is not None:
            self.on_reconcile_needed()

    def reconcile(self, progress: Progress | None = None) -> ReconcileReport:
        """Compare the whole folder with the store (stat first, read only what changed).

        It runs to the end without letting the loop run: a rescan that yielded between
        steps let events, agents and peers act on the notes it was comparing, and the
        long R1 run then lost and doubled text (seeds 8 and 13, 3 of 6 runs). Its
        ``progress`` (every ``RECONCILE_STEP`` files) is for a person: the log, and
        ``starting.json`` while starting. The second half works from the store as it is
        then, not as the scan found it, in case ``progress``'s listener changed a note.
        """
        self.rules = IgnoreRules.load(self.root)
        scan = scan_folder(self.root, self.rules, self.extensions, self.max_bytes)
        report = ReconcileReport(scanned=len(scan.notes), other_files=scan.other_files)
        skipped = dict(scan.skipped)
        store = self.service.store
        total = len(scan.notes)
        # A path with a read pending is being written (or renamed) right now: the event
        # path reads it once it settles. Reading it here could take a half-written file.
        pending = self._paths_pending()
        live = {row.path: row for row in store.live_notes() if row.path not in pending}
        new_files: dict[str, tuple[str, DiskState]] = {}
        for done, (path, fst) in enumerate(scan.notes.items()):
            if done % RECONCILE_STEP == 0 and progress is not None:
                progress(done, total)
            if path in pending:
                continue
            row = live.pop(path, None)
            if row is not None:
                row = store.note(row.id)  # as it is now (a progress listener may have acted)
                if row is None or row.deleted or row.path != path:
                    continue  # moved or deleted meanwhile: nothing left to compare here
            if row is not None and _same_stat(row.disk, fst):
                if row.disk is not None and row.disk.revision != row.revision:
                    self._mark_dirty(row.id)  # the file is behind the note (a write cut short)
                continue
            try:
                data, rst = read_note_file(self.root, path, self.max_bytes)
                text = decode_note(data)
            except (FileNotFoundError, FileChanged):
                self._schedule(path, awaiting_close=False)
                continue
            except SkipFile as exc:
                skipped[path] = exc.message
                continue
            disk = DiskState(revision_of(data), rst.mtime_ns, rst.size, rst.ino)
            if row is None:
                new_files[path] = (text, disk)
                continue
            result = self.service.ingest_disk(path, text, disk, self._source(path))
            report.changed += result.changed
            if result.needs_write:
                self._mark_dirty(result.note.id)
        if progress is not None:
            progress(total, total)
        # The store as it is now, events pending now.
        pending = self._paths_pending()
        live = {path: now for path, then in live.items()
                if path not in pending and (now := store.note(then.id)) is not None
                and not now.deleted and now.path == path}
        # Missing notes whose exact text reappeared elsewhere were moved while we looked away.
        by_revision: dict[str, list[NoteRow]] = {}
        for row in live.values():
            if row.disk is not None:  # a note never written to disk cannot have moved there
                by_revision.setdefault(row.revision, []).append(row)
        # Every note's last-seen file, those at a path with a read pending included.
        by_file = {(row.disk.ino, row.disk.mtime_ns, row.disk.size): row
                   for row in store.live_notes() if row.disk is not None}
        for path, (text, disk) in sorted(new_files.items()):
            if path in pending or store.note_at(path) is not None:
                continue  # taken in by its event meanwhile
            same = by_file.pop((disk.ino, disk.mtime_ns, disk.size), None)
            if same is not None and not os.path.lexists(self.root / same.path):
                # The very file we last saw (same inode, mtime, size), under a new name; the
                # note may hold changes it lacks (written out next).
                live.pop(same.path, None)
                self.service.move(same.path, path, DISK)
                self._mark_dirty(same.id)
                report.moved += 1
                continue
            candidates = [c for c in by_revision.get(disk.revision, []) if c.path in live]
            if candidates:
                row = candidates.pop(0)
                del live[row.path]
                self.service.move(row.path, path, DISK, disk=disk)
                report.moved += 1
            else:
                self.service.ingest_disk(path, text, disk, self._source(path))
                report.created += 1
        for row in live.values():
            if row.disk is None:
                # Never written out (an agent's or a peer's new note, the daemon stopped
                # before its first write): its file is owed, not deleted.
                self._mark_dirty(row.id)
                continue
            if row.path not in scan.notes and os.path.lexists(self.root / row.path) \
                    and self._is_candidate(row.path):
                continue  # its file appeared after the scan: its event will tell
            if self._moved_or_deleted(row, self._source(row.path)):
                report.moved += 1
            else:
                report.deleted += 1
        store.replace_skipped(skipped)
        report.skipped = skipped
        return report

    def _paths_pending(self) -> set[str]:
        return {path for path, state in self._paths.items() if state.timer is not None}
