"""The folder side of attachments (SPEC §3.14): one ``AttachmentReplica`` per vault.

A *pass* (debounced after folder events, a peer's index update or a blob's arrival;
at start; and every ``rescan_seconds``: ``attachment_passes``) does, under one lock:

1. **Scan** the folder's attachments, stat-only, in a thread (``attachment_folder_view``,
   ``sync/attachment_scan``); files over ``attachments.max_bytes`` are skipped and counted.
2. **Intake** (folder → index, ``attachment_intake``): the files whose stat differs from
   what was seen are copied into the blob store while hashed (a thread); ``plan_intake``
   turns the folder's changes into records; Touches are remembered, the rest pass
   ``gate.admit`` (the brake; what it holds stays out of the index and is not written over
   until released or reverted). Admitted changes are recorded in the attachment map of the
   vault index's document (``attachment_recording``) -- so they reach peers through the
   index sync -- with the seen state and the versions of what they replaced, in one unit of
   work (``NotesService.write``: one commit).
3. **Outflow** (index → folder, ``attachment_outflow``): ``plan_outflow`` over what the index
   shows: blobs held are written to their paths; missing blobs are asked of the
   ``BlobFetcher`` (``attachment_wants``); moves, removals, the executable bit; each
   replaced or removed file is first kept as a version (``attachment_keeping``). After each
   step the seen state (``attachment_seen``) is what was written, so our own writes never
   come back as changes.
4. **Concurrent losers** (``attachment_losers``): a change that lost to a concurrent one
   keeps its bytes as an attachment version of kind ``concurrent`` (fetched first when this
   home lacks them): that row is the conflict record ``stet conflicts`` lists.

This class composes those parts, runs the pass and answers the other sides
(``AttachmentReplicaApi``: brake release, write-back, status).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from stet.daemon.attachments.delete_delay import DeferredDeletes
from stet.daemon.attachments.disk import write_blob
from stet.daemon.attachments.events import UNCLOSED_WRITE_S, FolderEvents
from stet.daemon.attachments.folder_view import FolderView
from stet.daemon.attachments.index_watch import IndexWatch
from stet.daemon.attachments.intake import AttachmentIntake
from stet.daemon.attachments.keeping import AttachmentKeeping
from stet.daemon.attachments.log import AttachmentLog
from stet.daemon.attachments.losers import ConcurrentLosers
from stet.daemon.attachments.outflow import AttachmentOutflow
from stet.daemon.attachments.passes import PassLoop
from stet.daemon.attachments.recording import AttachmentRecorder
from stet.daemon.attachments.seams import AttachmentGate, BlobFetcher
from stet.daemon.attachments.seen import SeenFiles
from stet.daemon.attachments.unsharing import repair_shared_inodes
from stet.daemon.attachments.wants import BlobWants
from stet.daemon.base.health import Health
from stet.daemon.folder.git_watch import GitWatch
from stet.daemon.folder.watcher import FsEvent
from stet.daemon.notes.changes import Change
from stet.daemon.notes.service import NotesService
from stet.sync.attachment_files import AttachmentFiles
from stet.sync.attachment_index import AttachmentIndex
from stet.sync.attachment_plan import IntakeAction, plan_intake
from stet.sync.attachment_scan import on_disk
from stet.sync.attachment_versions import AttachmentVersionStore
from stet.sync.blob_store import BlobStore
from stet.sync.change_kinds import ChangeKind
from stet.sync.errors import NotFound, StetError
from stet.sync.ignore_rules import IgnoreRules
from stet.sync.note_paths import resolve_inside

if TYPE_CHECKING:
    from stet.daemon.folder.writer.folders import WriterFolders

logger = logging.getLogger(__name__)

RESTORE = "restore"


class AttachmentReplica:
    def __init__(self, vault_id: str, root: Path, service: NotesService, blobs: BlobStore, *,
                 fetcher: BlobFetcher, gate: AttachmentGate, max_bytes: int, keep_bytes: int,
                 extensions: tuple[str, ...], rules: Callable[[], IgnoreRules], device_id: str,
                 rescan_s: float = 3600.0, blob_in_use: Callable[[str], bool] | None = None,
                 sweep: Callable[[], Awaitable[object]] | None = None,
                 folders: WriterFolders | None = None, quiet_s: float = UNCLOSED_WRITE_S,
                 health: Health | None = None) -> None:
        self.vault_id = vault_id
        self.root = root
        self.service = service
        self.blobs = blobs
        self._rules = rules
        # The vault's folders made by the daemon (the notes' writer's, shared): the folders
        # a blob's file needs are made through it, so their ``dir_created`` events are
        # known for echoes here and by the notes' side (which rescanned the notes for each
        # new folder of a first sync's attachments); None: a plain mkdir, every folder's
        # event a walk.
        self._folders = folders
        self.versions = AttachmentVersionStore(service.store, keep_bytes)
        self.seen = SeenFiles(AttachmentFiles(service.store))
        self.watch = IndexWatch(service)
        self.view = FolderView(root, extensions, max_bytes)
        # ``quiet_s``: how long a file no event vouches for (found by a walk) must have gone
        # unmodified before it is read (``FolderEvents.unsettled``).
        self.events = FolderEvents(root, rules, extensions, folders, self, quiet_s=quiet_s)
        self.wants = BlobWants(vault_id, fetcher)
        # ``sweep``: the home's blob store, swept of unreferenced blobs after periodic passes.
        self.loop = PassLoop(vault_id, self._pass, rescan_s=rescan_s, hurry=self.wants.all_landed,
                             after_periodic=sweep, on_failure=self._after_failure, health=health)
        self.keeping = AttachmentKeeping(self.versions, blobs, blob_in_use or self.holds_blob)
        self.log = AttachmentLog(service.store)
        self.recorder = AttachmentRecorder(service, self.watch, self.seen, self.keeping, self.log, device_id)
        self.git = GitWatch(root)  # was a change git's? (SPEC §3.16: attachment_sources)
        # Local deletions wait the delete delay in the outbound gate (``outbound``, set by
        # the runtime) before they are recorded (SPEC §5.6).
        self.deletes = DeferredDeletes(vault_id, service.delete_delay_for, self.wake)
        self.intake = AttachmentIntake(vault_id, root, blobs, service.store, max_bytes=max_bytes, gate=gate,
                                       deletes=self.deletes, git=self.git, seen=self.seen, watch=self.watch,
                                       view=self.view, keeping=self.keeping, recorder=self.recorder)
        self.outflow = AttachmentOutflow(root, blobs, service.store, extensions=extensions,
                                         device_id=device_id, watch=self.watch, seen=self.seen,
                                         view=self.view, keeping=self.keeping, wants=self.wants,
                                         held_paths=self.intake.held_paths,
                                         make_parents=self._make_parents)
        self.losers = ConcurrentLosers(service.store, blobs, device_id=device_id, watch=self.watch,
                                       keeping=self.keeping, wants=self.wants)
        self.passes = 0
        service.subscribe(self._on_change)

    @property
    def rules(self) -> Callable[[], IgnoreRules]:
        """The vault's ignore rules now (given once: the parts hold the same getter)."""
        return self._rules

    @property
    def folders(self) -> WriterFolders | None:
        return self._folders

    @property
    def index(self) -> AttachmentIndex:
        """The attachment map of the vault index's document (rebuilt with it after a
        rolled-back unit of work)."""
        return self.watch.index

    @property
    def _make_parents(self) -> Callable[[Path], None] | None:
        return self._folders.make_parents if self._folders is not None else None

    def _on_change(self, change: Change) -> None:
        if change.kind == ChangeKind.INDEX and change.device is not None and self.watch.touched():
            self.wake()  # a peer's index update: what it changed may need writing here

    # -- running -------------------------------------------------------------------------

    def start(self) -> None:
        self.wake()  # the first pass (a walk): what changed while the daemon was down
        self.loop.start()

    async def stop(self) -> None:
        self.wants.cancel()
        await self.loop.stop()

    def wake(self) -> None:
        """A pass soon, with a walk of the folder."""
        self.view.walk_next()
        self.loop.poke()

    def wake_for(self, paths: tuple[str | None, ...]) -> None:
        """A pass soon; these paths are looked at (a walk unless each holds what we wrote)."""
        self.view.looked_at(paths)
        self.loop.poke()

    def walk_next(self) -> None:
        """The next pass walks (no pass of its own: the files' events wake it)."""
        self.view.walk_next()

    def on_fs_event(self, event: FsEvent) -> None:
        """From the folder watcher (``attachment_events``)."""
        self.events.on_fs_event(event)

    def blob_arrived(self, sha256: str) -> None:
        """``BlobArrived`` for this vault: a wanted blob landed; write what waited for it."""
        if self.wants.arrived(sha256):
            self.loop.poke()  # no walk needed for it: it lands at paths we write

    async def sync_now(self) -> None:
        """One pass now (intake, then outflow), after any pass under way."""
        async with self.loop.lock:
            await self._pass()

    def _after_failure(self) -> None:
        self.seen.reload()  # memory as the store has it again
        self.view.forget()

    # -- the pass --------------------------------------------------------------------------

    async def _pass(self, walk: bool = True) -> None:
        self.passes += 1
        if self.passes == 1:
            await self._repair_shared_inodes()
            await self.intake.record_taken_at_init()  # before the folder is looked at
        times, first = self.events.times.take()
        rules = self._rules()
        started = time.monotonic()
        disk = await self.view.folder(rules, walk)
        looked = time.monotonic()
        hashes, retry = await self.intake.read(disk, self.events.unsettled(at_start=self.passes == 1))
        read = time.monotonic()
        await self.intake.take_in(disk, hashes, times, first)
        taken = time.monotonic()
        retry_out = await self.outflow.run(disk, rules)
        await self.losers.keep()
        # Where a pass's time goes (`stet daemon --verbose`): what made a burst slow to reach a peer.
        logger.debug("attachment pass %d of %s: %d files (walked: %s) in %.2f s, %d read in %.2f s, taken in "
                     "%.2f s, outflow %.2f s; again: %s/%s", self.passes, self.vault_id, len(disk), walk,
                     looked - started, len(hashes), read - looked, taken - read, time.monotonic() - taken,
                     retry, retry_out)
        retry |= retry_out
        if retry:
            self.view.forget()  # looked at again by a walk
            self.loop.retry_later(self.wake)
        else:
            self.loop.no_retry()

    async def _repair_shared_inodes(self) -> None:
        """Files an older Stet left as one inode (hard links of each other or of the store's
        blob) get one each, before the folder is read (``unsharing``)."""
        live = self.index.live()
        executable = {p: e.executable for p, s in self.seen.by_path.items()
                      if (e := live.get(p)) is not None and (e.id, e.sha256) == (s.att_id, s.sha256)}
        # A landing killed between its write and its record: on disk, in the index, not seen.
        unseen = {p: e.sha256 for p, e in live.items() if p not in self.seen.by_path}
        executable |= {p: live[p].executable for p in unseen}
        repaired = await asyncio.to_thread(repair_shared_inodes, self.root, self.blobs,
                                           dict(self.seen.by_path), executable, unseen)
        if not repaired:
            return
        with self.service.store.transaction():
            for r in repaired:
                if r.held_seen:  # what was seen, with the mode the index says: not a change
                    s = self.seen.by_path[r.path]
                    self.seen.set(r.path, replace(s, size=r.written.size, mtime_ns=r.written.mtime_ns,
                                                  ino=r.written.ino, executable=r.written.executable))
        self.view.forget()
        logger.warning("%d attachment file(s) in %s shared one inode with identical files (an older Stet "
                       "linked them; an edit of one changed the others): each has its own inode now",
                       len(repaired), self.root)

    # -- blobs -----------------------------------------------------------------------------

    def holds_blob(self, sha256: str) -> bool:
        """Whether this vault still needs the blob (a live attachment, a file, a version,
        or one being fetched)."""
        if sha256 in self.wants.wanted or any(s.sha256 == sha256 for s in self.seen.by_path.values()):
            return True
        if any(e.sha256 == sha256 for e in self.index.live().values()):
            return True
        return self.versions.holds(sha256)

    def referenced_blobs(self) -> set[str]:
        """Every blob this vault may still need: any slot of its index (a loser's too: a
        peer may fetch it to keep it), its files, its versions, what it waits for."""
        shas = {e.sha256 for e in self.index.slots()} | {s.sha256 for s in self.seen.by_path.values()}
        shas |= {v.sha256 for v in self.versions.all()}
        return shas | set(self.wants.wanted)

    # -- AttachmentReplicaApi ------------------------------------------------------------

    def counts(self, vault: str) -> dict[str, int]:
        pending = self.watch.map_changed or self.loop.pending()
        placed_files, placed_bytes = self.outflow.placed
        return {**self.outflow.counts, "skipped": len(self.view.too_large),
                "toPlace": self.outflow.to_place + int(pending),
                "placedFiles": placed_files, "placedBytes": placed_bytes}

    def deleted_waiting(self, vault: str) -> set[str]:
        return self.deletes.paths()

    def too_large(self) -> dict[str, int]:
        return dict(self.view.too_large)

    async def record_held(self, vault: str, actions: Sequence[IntakeAction]) -> None:
        """The gate released these: record them if the folder still shows them."""
        self.intake.release(actions)
        await self.sync_now()

    async def write_back(self, vault: str, path: str, sha256: str, executable: bool) -> None:
        """Put a blob's bytes at ``path`` (revert, restore) and record that like a change
        made in the folder (source ``restore``; not asked of the gate)."""
        if not self.blobs.has(sha256):
            raise NotFound(f"the bytes {sha256[:12]}… are not in this home", sha256=sha256)
        async with self.loop.lock:
            await self._pass()  # what the folder holds now is recorded (and kept) first
            full = resolve_inside(self.root, path)
            exists = await asyncio.to_thread(os.path.lexists, full)
            expect = self.seen.get(path) if exists else None
            if exists and expect is not None and path in self.intake.held_paths():
                # A held change's file (a revert: the gate checked it holds the held bytes):
                # what is there now is what may be replaced, not what was last recorded.
                now = on_disk(await asyncio.to_thread(os.lstat, full))
                expect = replace(expect, size=now.size, mtime_ns=now.mtime_ns, ino=now.ino,
                                 executable=now.executable)
            self.view.forget()  # written here, not by the outflow: the next pass walks
            st = await asyncio.to_thread(write_blob, self.blobs, self.root, path, sha256, executable, expect,
                                         make_parents=self._make_parents)
            if st is None:
                raise StetError(f"{path} changed while it was being restored; try again", code="conflict")
            self.intake.drop_path(path)
            disk = {path: st}
            seen = {path: self.seen.by_path[path]} if path in self.seen.by_path else {}
            actions = plan_intake(disk, {path: sha256}, seen, self.index.live())
            await self.recorder.record(actions, RESTORE, disk)
            await self.outflow.run(await self.view.scan(self._rules()), self._rules())
