"""The folder side's intake of attachments (folder → index, SPEC §3.14): the files whose stat
differs from what was seen are copied into the blob store while hashed (a thread);
``plan_intake`` turns the folder's changes into records; Touches are remembered, the rest
pass ``gate.admit`` (the brake; what it holds stays out of the index and is not written over
until released or reverted), per source (``git`` or ``disk``, SPEC §3.16); admitted local
deletions wait the delete delay first (``DeferredDeletes``, SPEC §5.6). What may be recorded
now is recorded (``AttachmentRecorder``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from stet.daemon.attachments.delete_delay import DeferredDeletes
from stet.daemon.attachments.events import Unsettled
from stet.daemon.attachments.folder_view import FolderView
from stet.daemon.attachments.index_watch import IndexWatch
from stet.daemon.attachments.keeping import DISK, AttachmentKeeping
from stet.daemon.attachments.recording import AttachmentRecorder
from stet.daemon.attachments.seams import AttachmentGate
from stet.daemon.attachments.seen import SeenFiles
from stet.daemon.attachments.sources import by_source, sources_of
from stet.daemon.folder.git_watch import GitWatch
from stet.sync.attachment_files import TAKEN_AT_INIT
from stet.sync.attachment_plan import (
    IntakeAction,
    OnDisk,
    RecordChange,
    RecordDelete,
    RecordMove,
    Touch,
    needs_hash,
    plan_intake,
)
from stet.sync.attachment_scan import ingest, sha_of_file
from stet.sync.attachment_versions import BEFORE_DELETION
from stet.sync.blob_store import BlobInfo, BlobStore
from stet.sync.hlc import ZERO
from stet.sync.store import VaultStore

logger = logging.getLogger(__name__)

READS_PER_TRIP = 64  # files read (hashed into the blob store) per worker-thread trip


class AttachmentIntake:
    def __init__(self, vault_id: str, root: Path, blobs: BlobStore, store: VaultStore, *, max_bytes: int,
                 gate: AttachmentGate, deletes: DeferredDeletes, git: GitWatch, seen: SeenFiles,
                 watch: IndexWatch, view: FolderView, keeping: AttachmentKeeping,
                 recorder: AttachmentRecorder) -> None:
        self.vault_id = vault_id
        self.root = root
        self.blobs = blobs
        self.store = store
        self.max_bytes = max_bytes
        self.gate = gate
        self.deletes = deletes
        self.git = git
        self.seen = seen
        self.watch = watch
        self.view = view
        self.keeping = keeping
        self.recorder = recorder
        self.held: set[IntakeAction] = set()  # given to the gate, not admitted (yet)
        self._released: set[IntakeAction] = set()  # released by the gate: recorded as they are
        self._unreadable: set[str] = set()  # logged once each

    async def read(self, disk: dict[str, OnDisk],
                   unsettled: Unsettled) -> tuple[dict[str, str], bool]:
        """Hash (into the blob store) the files whose stat differs from what was seen;
        ``disk`` gets their stat as read. ``unsettled``: whether a file may still be being
        written (``FolderEvents.unsettled``): not read yet. Returns the hashes, and whether
        a file must be looked at again (still being written, changed while read)."""
        too_large = self.view.too_large
        for path, size in too_large.items():
            s = self.seen.get(path)
            if s is not None:
                # Synced before, over the limit now: left alone -- not taken in (nor recorded
                # as deleted), never written over -- until it is back under the limit.
                disk[path] = OnDisk(size, -1, -1, s.executable)
        retry = False
        hashes: dict[str, str] = {}
        vanished: dict[int, set[str]] = {}  # size -> shas of files seen that are gone from their path
        for p, s in self.seen.by_path.items():
            if p not in disk:
                vanished.setdefault(s.size, set()).add(s.sha256)
        to_read: list[str] = []
        for path in needs_hash(disk, self.seen.by_path):
            if path in too_large:
                continue
            if unsettled(path, disk[path]):
                moved = await self._moved_here(path, vanished.get(disk[path].size, set()))
                if moved is None:
                    retry = True  # read once closed (its event wakes a pass) or once it is late
                else:
                    hashes[path], disk[path] = moved
                continue
            to_read.append(path)
        # Several files per worker-thread trip: a trip per file waited for the loop each
        # time (a checkout of 1,300 attachments beside 1,800 notes: 5 ms a file).
        for i in range(0, len(to_read), READS_PER_TRIP):
            chunk = to_read[i:i + READS_PER_TRIP]
            outcomes = await asyncio.to_thread(self._ingest_all, chunk, unsettled)
            for path, got in zip(chunk, outcomes, strict=True):
                if isinstance(got, OSError):
                    if path not in self._unreadable:
                        self._unreadable.add(path)
                        logger.warning("attachment %s cannot be read: %s", path, got)
                    continue  # left out until an event or the periodic pass
                if got is None:
                    retry = True  # changed while read (or gone): the next pass looks again
                    continue
                info, stat_now = got
                disk[path] = stat_now
                self.view.forget()  # this stat was not the walk's: the next pass walks
                hashes[path] = info.sha256
        return hashes, retry

    def _ingest_all(self, paths: list[str],
                    unsettled: Unsettled) -> list[tuple[BlobInfo, OnDisk] | None | OSError]:
        """Blocking (a worker thread): ``ingest`` of each path, or the error it met."""
        out: list[tuple[BlobInfo, OnDisk] | None | OSError] = []
        for path in paths:
            try:
                out.append(ingest(self.blobs, self.root, path, self.max_bytes,
                                  functools.partial(unsettled, path)))
            except OSError as exc:
                out.append(exc)
        return out

    async def _moved_here(self, path: str, shas: set[str]) -> tuple[str, OnDisk] | None:
        """A file that may still be being written, read only to tell whether it is a file
        that moved here: its bytes those of a file gone from where it was seen (a rename
        into a new folder shows as a deletion and a "created", with no close to come).
        Those bytes are someone's whole write, already stored: taken in as they are, so the
        move keeps its attachment (not a deletion, the delete delay later, and a new file)."""
        shas = {s for s in shas if self.blobs.has(s)}
        if not shas:
            return None
        try:
            got = await asyncio.to_thread(sha_of_file, self.root, path, self.max_bytes)
        except OSError:
            return None
        if got is None or got[0] not in shas:
            return None
        self.view.forget()  # this stat was not the walk's: the next pass walks
        return got

    async def record_taken_at_init(self) -> int:
        """The files `stet init` took in (``TAKEN_AT_INIT`` seen rows: their bytes stored,
        no index entry yet) are recorded as created, as they were then -- before the pass
        looks at the folder, so one deleted or changed since is a deletion or a change
        (the brake, the delete delay and versions apply), never a file nobody knew of."""
        rows = {p: s for p, s in self.seen.by_path.items() if s.hlc == TAKEN_AT_INIT}
        if not rows:
            return 0
        live = self.watch.index.live()
        actions: list[IntakeAction] = []
        disk: dict[str, OnDisk] = {}
        for path, s in sorted(rows.items()):
            del self.seen.by_path[path]  # the recorder writes its row anew, with the change's HLC
            here = live.get(path)
            actions.append(RecordChange(path, s.sha256, s.size, s.executable, here.id if here else None,
                                        here.hlc if here else ZERO.pack()))
            disk[path] = OnDisk(s.size, s.mtime_ns, s.ino, s.executable)
        await self.recorder.record(actions, DISK, disk)
        logger.info("%d attachment(s) taken in by `stet init` recorded in %s", len(actions), self.vault_id)
        return len(actions)

    async def take_in(self, disk: dict[str, OnDisk], hashes: dict[str, str], times: dict[str, float],
                      first: float | None) -> None:
        """Plan the folder's changes, ask the gate, and record what may be recorded now."""
        actions = plan_intake(disk, hashes, self.seen.by_path, self.watch.index.live())
        self.held &= set(actions)  # held changes the folder no longer shows are moot
        self.deletes.planned(actions)  # waiting deletions whose file is back are dropped
        touches = [a for a in actions if isinstance(a, Touch)]
        changes = [a for a in actions if not isinstance(a, Touch) and a not in self.held]
        due = self.deletes.take_due()  # deletions that waited the delay: recorded now
        released = [a for a in changes if a in self._released]
        to_gate = [a for a in changes
                   if a not in self._released and a not in due and not self.deletes.waiting(a)]
        self._released.clear()
        sources = (await asyncio.to_thread(sources_of, self.git, to_gate, times, first, time.time())
                   if to_gate else [])
        admitted: dict[str, list[IntakeAction]] = {}
        for source, group in by_source(to_gate, sources).items():
            admitted[source] = self.gate.admit(self.vault_id, group, source)
            self.held.update(a for a in group if a not in admitted[source])
            record_now = self.deletes.defer(admitted[source], source)  # deletions wait (SPEC §5.6)
            await self._keep_deleted([a for a in admitted[source] if a not in record_now], source)
            admitted[source] = record_now
        for a in changes:
            if a in due and a not in released:
                admitted.setdefault(due[a], []).append(a)
        await self.recorder.record([*touches, *released, *admitted.pop(DISK, [])], DISK, disk)
        for source, group in admitted.items():
            await self.recorder.record(group, source, disk)  # git's (SPEC §3.16)

    async def _keep_deleted(self, waiting: Sequence[IntakeAction], source: str) -> None:
        """Deletions that wait the delete delay keep their ``before-deletion`` version now
        (``stet versions`` shows it at once, as for notes); recorded later without another."""
        released: set[str] = set()
        with self.store.transaction():
            for a in waiting:
                if isinstance(a, RecordDelete) and not self.keeping.has_version(a.seen.att_id, a.seen.sha256,
                                                                                BEFORE_DELETION):
                    released |= self.keeping.keep(a.seen, a.path, BEFORE_DELETION, source)
        await self.keeping.drop_blobs(released)

    def held_paths(self) -> set[str]:
        """The paths of held changes and of deletions waiting the delay: not written over."""
        paths: set[str] = set()
        for a in self.held:
            if isinstance(a, RecordMove):
                paths.update((a.old_path, a.new_path))
            elif isinstance(a, RecordChange | RecordDelete | Touch):
                paths.add(a.path)
        return paths | self.deletes.paths()

    def release(self, actions: Sequence[IntakeAction]) -> None:
        """The gate released these: recorded by the next pass if the folder still shows them."""
        self.held.difference_update(actions)
        self.deletes.release(actions)
        self._released.update(actions)

    def drop_path(self, path: str) -> None:
        """Something was written back at ``path`` (revert, restore): its holds are moot."""
        self.held = {a for a in self.held if path not in _paths_of(a)}
        self.deletes.drop_path(path)


def _paths_of(a: IntakeAction) -> tuple[str, ...]:
    if isinstance(a, RecordMove):
        return (a.old_path, a.new_path)
    return (a.path,)

