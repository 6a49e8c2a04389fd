"""One open vault: its parts wired in the constructor, its tasks owned by one ``serve()``.

The daemon opens a vault with ``await VaultRuntime.open(entry, home)`` and closes it with
``await runtime.close()``; between the two the runtime runs what it started (the rescan
and checkpoint loops, the versions ticker, the folder watcher, the attachment replica,
the search indexer) and nothing else starts or stops them. The model is Syncthing's
``folder.Serve``: one place that starts everything a folder runs and, on the way out,
stops all of it in the reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from stet.daemon.attachments.brake import AttachmentBrake, AttachmentGates, start_attachment_brake
from stet.daemon.attachments.home_parts import Attachments, both
from stet.daemon.attachments.replica import AttachmentReplica
from stet.daemon.attachments.status import vault_attachments
from stet.daemon.base.activity import Activity
from stet.daemon.base.health import Backoff, Health
from stet.daemon.base.memory import (
    BurstWatch,
    SettleWhenCaughtUp,
    release_memory,
    settle,
    thaw_startup_objects,
)
from stet.daemon.folder.bridge import FileBridge, ReconcileReport
from stet.daemon.folder.other_files import OtherFilesCount, watch_other_files
from stet.daemon.folder.watcher import FolderWatcher
from stet.daemon.identity.device_cert import DeviceIdentity
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.outbound_gate import OutboundGate, gate_pending_deletes, watch_deletes
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.peers.hub import PeerHub
from stet.daemon.peers.member_names import members_cannot_hold
from stet.daemon.safety.brake import Brake
from stet.daemon.safety.versions_keeper import VersionsKeeper, start_versions
from stet.sync.config import Config
from stet.sync.home import VaultEntry
from stet.sync.home_layout import HomeLayout
from stet.sync.store import VaultStore

logger = logging.getLogger(__name__)
RESCAN_GAP_S = 1.0  # least time between two rescans asked for by events
RESCAN_WAIT_S = 60.0  # a rescan waits at most this long for the intake queue to empty
RESCAN_TASK, CHECKPOINT_TASK = "notes rescan", "store checkpoint"  # their names in ``Health``
TRIM_AFTER_COMMITS = 1000  # commits in a burst after which its heap is given back once quiet


class VaultHome(Protocol):
    """What a vault takes from the daemon around it (the ``Daemon`` is one)."""

    layout: HomeLayout
    config: Config
    events: EventBus
    gate: OutboundGate
    activity: Activity
    health: Health
    attachments: Attachments
    attachment_gates: AttachmentGates
    identity: DeviceIdentity | None
    peers: PeerHub | None


class VaultRuntime:
    """The parts of one open vault and the tasks that run them."""

    def __init__(self, entry: VaultEntry, home: VaultHome) -> None:
        """Wire the parts; nothing runs until ``open``."""
        cfg = home.config
        self.entry = entry
        self._home = home
        self.store = VaultStore(home.layout.vault_db(entry.id), synchronous=cfg.store.synchronous,
                                compact_after=cfg.store.compact_after_updates, auto_checkpoint=False)
        device_id = home.identity.device_id if home.identity is not None else ""
        service = self.service = NotesService(entry.id, self.store, device_id=device_id)
        # Versions and the brake listen first: a change is held before anyone sends it on.
        versions, brake, self._ticker = start_versions(service, home.events, cfg)
        self.versions: VersionsKeeper | None = versions  # SPEC §5: versions, restore
        self.brake: Brake | None = brake  # SPEC §5.6: the burst brake
        if home.peers is not None:
            hub = home.peers
            service.subscribe(lambda change: hub.on_change(entry.id, change))
            brake.on_unheld.append(functools.partial(hub.resend_notes, entry.id))  # released: send
        # Local deletes reach peers through the one outbound gate, once due and not held.
        gate = home.gate
        gate.open_vault(entry.id, is_held=brake.is_held,
                        publish_deletes=lambda now: service.publish_due_deletes(now, brake.is_held))
        watch_deletes(gate, entry.id, service)
        brake.on_unheld.append(lambda _notes: gate.wake())
        bridge = self.bridge = FileBridge(
            entry.path, service, extensions=cfg.notes.extensions, max_bytes=cfg.notes.max_bytes,
            settle_s=cfg.notes.settle_ms / 1000, unclosed_write_s=cfg.notes.unclosed_write_ms / 1000)
        self.records = RecordsKeeper(service, home.events)
        # A bulk is indexed once the folder's writer has written it too (issue 11 P4) and the
        # folder's intake has taken in every file waiting (P8: an unzip's new files).
        self.records.index.busy = lambda: bridge.pending_writes > 0 or bridge.intake_waiting
        self.last_reconcile: ReconcileReport | None = None
        self.reconcile_wanted = asyncio.Event()
        self.rescanning = False  # a rescan of the folder is under way
        self.settler: SettleWhenCaughtUp | None = None  # after a first sync (daemon/base/memory.py)
        self.attachment_brake: AttachmentBrake | None = start_attachment_brake(brake, cfg, entry.path)
        home.attachment_gates.add(self.attachment_brake)
        bridge.on_reconcile_needed = self.reconcile_wanted.set
        self.other_files: OtherFilesCount | None = watch_other_files(bridge)  # OTHER in `stet status`
        replica = home.attachments.open_vault(entry.id, bridge.root, service, lambda: bridge.rules,
                                              bridge.writer.folders)
        self.attachments: AttachmentReplica | None = replica  # SPEC §3.14: the folder side
        self.attachment_brake.attach(replica)
        replica.deletes.outbound = gate  # attachment deletions wait the delete delay too
        self.watcher = FolderWatcher(entry.path, both(bridge.on_fs_event, replica.on_fs_event),
                                     own_arrival=bridge.writer.arrived_as_written)
        self._serving: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, entry: VaultEntry, home: VaultHome) -> VaultRuntime:
        """A vault wired, its folder reconciled with its store, and serving."""
        runtime = cls(entry, home)
        await runtime._start()
        return runtime

    async def _start(self) -> None:
        home, entry, cfg = self._home, self.entry, self._home.config
        # Watch first, then reconcile: an edit made during the scan is not missed.
        await self.watcher.__aenter__()
        started = time.monotonic()
        try:
            progress = home.activity.progress(entry.name, "rescan")
            r = self.last_reconcile = await self.bridge.reconcile_async(progress)
        finally:
            home.activity.finish(entry.name, "rescan")
        logger.info(
            "vault %s (%s): %d notes scanned in %.2fs; %d changed, %d new, %d moved, %d deleted, %d skipped",
            entry.name, entry.path, r.scanned, time.monotonic() - started,
            r.changed, r.created, r.moved, r.deleted, len(r.skipped),
        )
        self._serving = asyncio.create_task(self.serve(), name=f"vault:{entry.name}")
        assert self.attachments is not None
        self.attachments.start()
        delay = cfg.peer.delete_delay_seconds
        self.service.set_delete_delay(cfg.brake.window_seconds if delay < 0 else delay)
        self.service.git_skips_delay = cfg.brake.trust_git  # untrusted git waits like a person
        gate_pending_deletes(home.gate, entry.id, self.service)

    def start_indexing(self) -> None:
        """Catch the search index up with the store (in its worker), then settle: a
        restarted daemon at rest held ~4 MB of its freed heap otherwise (P7)."""
        self.records.start_indexing()
        release_memory()
        self.settle_soon()

    async def serve(self) -> None:
        """The vault's loops, until cancelled (``close``): the rescans and the checkpoints,
        each restarted with backoff if it ever raises (and said so in ``Health``)."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._supervised(RESCAN_TASK, self._rescan_loop),
                              name=f"rescan:{self.entry.name}")
            tasks.create_task(self._supervised(CHECKPOINT_TASK, self._checkpoint_loop),
                              name=f"checkpoint:{self.entry.name}")

    async def _supervised(self, task: str, loop: Callable[[], Awaitable[None]]) -> None:
        backoff = Backoff()
        while True:
            try:
                await loop()
            except Exception as exc:  # the loops catch their own work's errors; this is the rest
                wait = backoff.failed()
                logger.exception("%s of %s stopped; restarted in %.0f s", task, self.entry.name, wait)
                self._home.health.failed(task, self.entry.id, exc, wait)
                await asyncio.sleep(wait)

    async def close(self) -> None:
        """Stop everything the vault runs, in the reverse order of ``open``; the writes and
        the index finish first, then the store closes."""
        home = self._home
        thaw_startup_objects()  # its objects may have been frozen at start: collectable again
        home.gate.close_vault(self.entry.id)
        if self.settler is not None:
            self.settler.cancel()
        for task in (self._serving, self._ticker):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await home.attachments.close_vault(self.entry.id)
        await self.watcher.__aexit__(None, None, None)
        await self.bridge.wait_flushed()  # a timed flush in flight first
        self.bridge.flush_writes()
        self.bridge.close()
        await self.records.wait_indexed()  # the index catches up with the loop running
        self.records.close()
        self.store.close()

    # -- the loops --------------------------------------------------------------------

    async def _checkpoint_loop(self) -> None:
        """Once a second, if anything was committed: checkpoint the store's WAL in a worker
        thread (its fsync then never lands inside a commit someone is waiting on); and
        once a burst of commits (or of memory growth) has gone quiet, give its memory back."""
        health = self._home.health
        done = -1
        watch = BurstWatch(self.store.commits, burst_commits=TRIM_AFTER_COMMITS)
        while True:
            await asyncio.sleep(1.0)
            commits = self.store.commits
            if commits == done:
                # A burst (a first sync, a large intake or rescan) is over: drop the
                # documents it loaded and give its heap back now, not at the next one.
                if watch.due(commits) and settle(self.service):
                    watch.settled(commits)
                continue
            try:
                await asyncio.to_thread(self.store.checkpoint)
                done = commits
            except Exception as exc:
                logger.exception("checkpoint of %s failed", self.entry.name)
                health.failed(CHECKPOINT_TASK, self.entry.id, exc, 1.0)  # tried again each second
            else:
                health.ok(CHECKPOINT_TASK, self.entry.id)

    async def _rescan_loop(self) -> None:
        home = self._home
        period = home.config.notes.rescan_seconds
        backoff = Backoff()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.reconcile_wanted.wait(), timeout=period or None)
            # Asked for by folder events (an unzip making folders: four full rescans of
            # 10,000 files during P8's intake, each finding nothing its events had not):
            # let the intake take in what the events said first (``until_quiet``).
            await self.bridge.until_quiet(RESCAN_WAIT_S)
            self.reconcile_wanted.clear()
            name = self.entry.name
            started = time.monotonic()
            self.rescanning = True
            try:
                progress = home.activity.progress(name, "rescan")
                r = self.last_reconcile = await self.bridge.reconcile_async(progress, wait_recent=True)
                logger.info("rescan of %s: %d files in %.2fs; %d changed, %d new, %d moved, %d deleted",
                            name, r.scanned, time.monotonic() - started, r.changed, r.created, r.moved,
                            r.deleted)
            except Exception as exc:
                wait = backoff.failed()
                logger.exception("rescan of %s failed; tried again in %.0f s", name, wait)
                home.health.failed(RESCAN_TASK, self.entry.id, exc, wait)
                asyncio.get_running_loop().call_later(wait, self.reconcile_wanted.set)
            else:
                backoff.succeeded()
                home.health.ok(RESCAN_TASK, self.entry.id)
            finally:
                self.rescanning = False
                home.activity.finish(name, "rescan")
            # Rescans asked for by a stream of folder events (a first sync or an unzip
            # making folders) run at most every so often: each runs beside the work it
            # would compare, and events take in the files meanwhile.
            await asyncio.sleep(max(RESCAN_GAP_S, 2 * (time.monotonic() - started)))

    # -- what others ask of it --------------------------------------------------------

    def caught_up(self) -> bool:
        """No file to write or read, no rescan asked for or running (a first sync's file
        events ask for one) and nothing left to index: a burst's work is over."""
        return (self.bridge.pending_writes == 0 and self.bridge.pending_reads == 0
                and not self.rescanning and not self.reconcile_wanted.is_set()
                and self.records.index.behind == 0)

    async def room_for_new_notes(self) -> None:
        """Before a slice of a peer's notes (``DiskWrites.room_for_new_notes``)."""
        await self.bridge.writer.room_for_new_notes()

    def settle_soon(self, also: Callable[[], bool] | None = None) -> None:
        """Settle once the writes and indexing a first sync caused are done (P7), and
        ``also()`` (the peer links' queued frames sent)."""
        if self.settler is None:
            self.settler = SettleWhenCaughtUp(self.service, self.caught_up)
        self.settler.request(also)

    def describe(self) -> dict[str, Any]:
        report = self.last_reconcile
        skipped = self.store.skipped()
        return {
            "id": self.entry.id,
            "name": self.entry.name,
            "path": str(self.entry.path),
            "notes": self.store.count_live(),
            "skipped": [{"path": p, "reason": r} for p, r in skipped.items()],
            "membersCannotHold": members_cannot_hold(self.service),  # names another member refuses
            "otherFiles": (self.other_files.current(report) if self.other_files is not None
                           else report.other_files if report else 0),
            "pendingWrites": self.bridge.pending_writes,
            "pendingReads": self.bridge.pending_reads,
            # Notes the vault's index lists (deletes not yet told to peers aside): a
            # first sync is done when the folder holds that many, all written.
            "indexedNotes": max(0, self.service.index.live_count() - len(self.service.pending_deletes())),
            "pendingDeletes": self._pending_deletes(),
            "attachments": vault_attachments(self.attachments, self.entry.id),  # SPEC §3.14
        }

    def _pending_deletes(self) -> dict[str, Any]:
        """Deletes that wait ``[peer] delete_delay_seconds`` before peers hear of them
        (SPEC §5.6): how many, and in how many seconds the last one goes (published when
        due by the outbound gate)."""
        brake = self.brake
        count, wait = self.service.waiting_deletes(
            time.time(), brake.is_held if brake is not None else (lambda _note_id: False))
        if self.attachments is not None:  # attachment deletions waiting too
            more, later = self.attachments.deletes.pending()
            count, wait = count + more, max(wait, later)
        return {"count": count, "reachPeersInSeconds": math.ceil(wait) + 1 if count else 0}
