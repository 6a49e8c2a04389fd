"""The folder side's outflow of attachments (index → folder, SPEC §3.14): ``plan_outflow``
over what the index shows (paths a peer sent that cannot hold an attachment here are left
alone): blobs held are written to their paths (``daemon/attachment_disk``: temp + fsync +
rename, never over a file that changed since seen); missing blobs are asked of the
``BlobFetcher`` (``BlobWants``); moves, removals, the executable bit; each replaced or
removed file is first kept as a version. After each step the seen state is what was
written, so our own writes never come back as changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from stet.daemon.attachments.disk import move_file, remove_files, set_executable, write_blobs
from stet.daemon.attachments.folder_view import FolderView
from stet.daemon.attachments.index_watch import IndexWatch
from stet.daemon.attachments.keeping import DISK, AttachmentKeeping, entry_source
from stet.daemon.attachments.seen import SeenFiles
from stet.daemon.attachments.wants import BlobWants
from stet.daemon.base.emptied_folders import remove_emptied_folders
from stet.sync.attachment_entry import AttachmentEntry, bytes_winner, saw_bytes
from stet.sync.attachment_plan import (
    Fetch,
    Forget,
    MoveFile,
    OnDisk,
    Relabel,
    RemoveFile,
    SeenFile,
    SetExecutable,
    WriteFile,
    plan_outflow,
)
from stet.sync.attachment_scan import is_attachment_path
from stet.sync.attachment_versions import BEFORE_OVERWRITE, CONCURRENT
from stet.sync.blob_store import BlobStore
from stet.sync.errors import StetError
from stet.sync.ignore_rules import IgnoreRules
from stet.sync.note_paths import InvalidPath
from stet.sync.store import VaultStore

logger = logging.getLogger(__name__)

FILES_PER_TRIP = 128  # files removed or written per worker-thread trip


class AttachmentOutflow:
    def __init__(self, root: Path, blobs: BlobStore, store: VaultStore, *, extensions: tuple[str, ...],
                 device_id: str, watch: IndexWatch, seen: SeenFiles, view: FolderView,
                 keeping: AttachmentKeeping, wants: BlobWants, held_paths: Callable[[], set[str]],
                 make_parents: Callable[[Path], None] | None) -> None:
        self.root = root
        self.blobs = blobs
        self.store = store
        self.extensions = extensions
        self.device_id = device_id
        self.watch = watch
        self.seen = seen
        self.view = view
        self.keeping = keeping
        self.wants = wants
        self.held_paths = held_paths  # not written over: held by the brake, waiting the delete delay
        self.make_parents = make_parents  # the vault's folders made by the daemon (None: a plain mkdir)
        self.counts = {"attachments": 0, "bytes": 0}
        # For `stet join` (SPEC §7): files the index shows that are not in place yet after the
        # last outflow.
        self.to_place = 0
        self.placed = (0, 0)  # (files, bytes) of the index's attachments in place

    def _live_here(self, rules: IgnoreRules) -> dict[str, AttachmentEntry]:
        live = {}
        for path, entry in self.watch.index.live().items():
            if is_attachment_path(path, rules, self.extensions):
                live[path] = entry
            else:
                logger.debug("attachment %s cannot be placed in this folder: left out", path)
        return live

    async def run(self, disk: dict[str, OnDisk], rules: IgnoreRules) -> bool:
        """Write what the index shows; returns whether something must be tried again."""
        held = self.held_paths()
        self.watch.map_changed = False  # what changes the index from here on is looked at again
        live = self._live_here(rules)
        self.counts = {"attachments": len(live), "bytes": sum(e.size for e in live.values())}
        live = {p: e for p, e in live.items() if p not in held}
        disk = {p: d for p, d in disk.items() if p not in held}
        self._adopt_same_bytes(disk, live)
        seen = {p: s for p, s in self.seen.by_path.items() if p not in held}
        actions = plan_outflow(disk, seen, live, self.blobs.has)
        retry = False
        fetch: dict[str, int] = {}
        released: set[str] = set()
        unplaced: set[str] = set()  # attachments not written at their path in this pass
        # Runs of removals, and of writes, are done together: one worker-thread trip and
        # one fsync per folder for each run (a peer's burst of 1,300 changes).
        removals: list[RemoveFile] = []
        writes: list[WriteFile] = []

        async def flush() -> bool:
            nonlocal removals, writes
            again = False
            if removals:
                again |= await self._remove(removals, unplaced, released, rules)
                removals = []
            if writes:
                again |= await self._write_all(writes, unplaced, released)
                writes = []
            return again

        for a in actions:
            if isinstance(a, RemoveFile):
                if writes or len(removals) >= FILES_PER_TRIP:
                    retry |= await flush()
                removals.append(a)
                continue
            if isinstance(a, WriteFile):
                if removals or len(writes) >= FILES_PER_TRIP:
                    retry |= await flush()
                writes.append(a)
                continue
            retry |= await flush()
            try:
                if isinstance(a, Fetch):
                    fetch[a.sha256] = a.size
                elif isinstance(a, MoveFile):
                    st = await asyncio.to_thread(move_file, self.root, a.old_path, a.new_path,
                                                 seen[a.old_path])
                    if st is None:
                        retry = True
                        continue
                    self.view.wrote(a.old_path, None)
                    self.view.wrote(a.new_path, st)
                    await asyncio.to_thread(remove_emptied_folders, self.root, a.old_path, rules.is_ignored)
                    e = a.entry
                    with self.store.transaction():
                        self.seen.set(a.old_path, None)
                        self.seen.set(a.new_path, SeenFile(e.id, e.sha256, st.size, st.mtime_ns, st.ino,
                                                           st.executable, e.hlc))
                elif isinstance(a, SetExecutable):
                    # What the path holds now: a MoveFile earlier in this plan may have put
                    # the file there (a rename and a chmod in one change), after ``seen``
                    # was taken (issue 37: a KeyError every pass until a restart).
                    s = self.seen.get(a.path)
                    if s is None:
                        retry = True  # its move was not done: looked at again
                        continue
                    st = await asyncio.to_thread(set_executable, self.root, a.path, a.entry.executable, s)
                    if st is None:
                        retry = True
                        continue
                    self.view.wrote(a.path, st)
                    self.seen.set(a.path, replace(s, size=st.size, mtime_ns=st.mtime_ns, ino=st.ino,
                                                  executable=st.executable, hlc=a.entry.hlc))
                elif isinstance(a, Forget):
                    self.seen.set(a.path, None)
                elif isinstance(a, Relabel):
                    s = self.seen.get(a.path)
                    if s is not None and s.sha256 == a.entry.sha256:
                        self.seen.set(a.path, replace(s, att_id=a.entry.id, hlc=a.entry.hlc))
            except (OSError, InvalidPath, StetError) as exc:
                # Not a race with the user (those return None above): a file where a folder
                # should be, no permission... Tried again at the next event or periodic pass.
                logger.warning("attachment %s: %s not done: %s", getattr(a, "path", "?"), type(a).__name__,
                               exc)
                self.view.forget()  # what the step left is not known: the next pass walks
                if isinstance(a, WriteFile):
                    unplaced.add(a.entry.id)
        retry |= await flush()
        self.wants.to_write = fetch
        missing = [e for p, e in live.items()
                   if (placed := self.seen.get(p)) is None or placed.sha256 != e.sha256]
        self.to_place = len(missing)
        # Files and bytes in place of those the index shows (held ones aside): what the
        # `stet join` bar counts -- files that land, not the unique blobs behind them.
        missing_bytes = sum(e.size for e in missing)
        self.placed = (len(live) - len(missing), sum(e.size for e in live.values()) - missing_bytes)
        self.wants.refresh()
        await self.keeping.drop_blobs(released)
        return retry

    async def _remove(self, removals: list[RemoveFile], unplaced: set[str], released: set[str],
                      rules: IgnoreRules) -> bool:
        """Remove files the index shows deleted, each kept as a version first; returns
        whether one must be tried again. The versions in one transaction, the files in one
        worker-thread trip (``remove_files``), what was done in one more transaction."""
        retry = False
        todo: list[RemoveFile] = []
        with self.store.transaction():
            for a in removals:
                if a.seen.att_id in unplaced:
                    retry = True  # its new path is not written: the old file stays meanwhile
                    continue
                winner = self.watch.index.current(a.seen.att_id)
                source = entry_source(winner, self.device_id) if winner is not None else DISK
                try:
                    with self.store.transaction():
                        released |= self.keeping.keep(a.seen, a.path, a.version_kind, source)
                except StetError as exc:
                    logger.warning("attachment %s: RemoveFile not done: %s", a.path, exc)
                    continue
                todo.append(a)
        outcomes = await asyncio.to_thread(remove_files, self.root, [(a.path, a.seen) for a in todo],
                                           rules.is_ignored)
        with self.store.transaction():
            for a, outcome in zip(todo, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    # Not a race with the user: a folder where the file was, no permission...
                    logger.warning("attachment %s: RemoveFile not done: %s", a.path, outcome)
                    self.view.forget()  # what the step left is not known: the next pass walks
                elif not outcome:
                    retry = True  # the path changed (the intake records that first)
                else:
                    self.view.wrote(a.path, None)
                    self.seen.set(a.path, None)
        return retry

    def _adopt_same_bytes(self, disk: dict[str, OnDisk], live: dict[str, AttachmentEntry]) -> None:
        """A file that holds the bytes of a later change of its attachment (the same bytes
        recorded by another device too, e.g. both had a copy before joining) reflects that
        change: a local change made on it later is made on it (its ``base``), so those
        same-bytes entries never count as a concurrent change it had not seen."""
        adopted = []
        for path, entry in live.items():
            s, d = self.seen.get(path), disk.get(path)
            if (s is not None and d is not None and s.same_stat(d) and s.att_id == entry.id
                    and s.sha256 == entry.sha256 and s.hlc < entry.hlc):
                adopted.append((path, replace(s, hlc=entry.hlc)))
        if adopted:
            with self.store.transaction():
                for path, s in adopted:
                    self.seen.set(path, s)

    async def _write_all(self, writes: list[WriteFile], unplaced: set[str], released: set[str]) -> bool:
        """Write files the index shows, the bytes each replaces kept as a version first;
        returns whether one must be tried again (its attachment is then ``unplaced``)."""
        todo: list[WriteFile] = []
        with self.store.transaction():
            for a in writes:
                try:
                    with self.store.transaction():
                        self._keep_replaced(a, released)
                except StetError as exc:
                    logger.warning("attachment %s: WriteFile not done: %s", a.path, exc)
                    unplaced.add(a.entry.id)
                    continue
                todo.append(a)
        outcomes = await asyncio.to_thread(
            write_blobs, self.blobs, self.root,
            [(a.path, a.entry.sha256, a.entry.executable, a.replaces) for a in todo],
            make_parents=self.make_parents)
        retry = False
        with self.store.transaction():
            for a, st in zip(todo, outcomes, strict=True):
                e = a.entry
                if isinstance(st, Exception):
                    # Not a race with the user: a file where a folder should be, no permission...
                    logger.warning("attachment %s: WriteFile not done: %s", a.path, st)
                    self.view.forget()  # what the step left is not known: the next pass walks
                    unplaced.add(e.id)
                elif st is None:
                    retry = True  # the path changed (the intake records that first)
                    unplaced.add(e.id)
                else:
                    self.view.wrote(a.path, st)
                    self.seen.set(a.path, SeenFile(e.id, e.sha256, st.size, st.mtime_ns, st.ino,
                                                   st.executable, e.hlc))
        return retry

    def _keep_replaced(self, a: WriteFile, released: set[str]) -> None:
        """The bytes a write replaces, kept as a version (they are in the blob store since
        intake): before overwrite, or concurrent where the winning change never saw them."""
        e = a.entry
        if a.replaces is None or a.version_kind is None:
            return
        kind = a.version_kind
        r = a.replaces
        slots = self.watch.index.slots(e.id)
        shown = next((x for x in slots if (x.hlc, x.sha256) == (r.hlc, r.sha256)), None)
        judge = bytes_winner(slots)  # the change whose bytes won: did it see these?
        if shown is not None and judge is not None and judge.sha256 == e.sha256 and judge.seen:
            # its ancestry says whether it saw them
            kind = BEFORE_OVERWRITE if saw_bytes(judge, shown) else CONCURRENT
        released |= self.keeping.keep(a.replaces, a.path, kind, entry_source(e, self.device_id))
