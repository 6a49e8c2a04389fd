"""The daemon's attachment parts (SPEC §3.14), one set per home: the blob store
(``<home>/blobs``, shared by every vault: content-addressed, so deduplicated), the
``BlobFetcher`` that moves blobs between peers (``NoPeersFetcher`` until the transfer
side replaces ``fetcher``), the brake's ``AttachmentGate`` (``PassGate`` until the safety
side replaces ``gate``), and one ``AttachmentReplica`` per vault.

Whoever lands a blob a replica wanted calls ``blob_arrived(vault, sha256)`` (the
``BlobArrived`` of ``attachment_seams``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from stet.daemon.attachments.replica import AttachmentReplica
from stet.daemon.attachments.seams import AttachmentGate, BlobFetcher, NoPeersFetcher, PassGate
from stet.daemon.attachments.unsharing import StoreUnsharing
from stet.daemon.base.health import Health
from stet.daemon.folder.watcher import FsEvent, Sink
from stet.daemon.folder.writer.folders import WriterFolders
from stet.daemon.notes.service import NotesService
from stet.sync.blob_store import BlobStore
from stet.sync.config import Config
from stet.sync.ignore_rules import IgnoreRules

logger = logging.getLogger(__name__)


SWEEP_AGE_S = 3600.0  # a blob no vault refers to goes once it is this old (never one just stored)


class Attachments:
    def __init__(self, home: Path, config: Config, *, sweep_age_s: float = SWEEP_AGE_S,
                 health: Health | None = None) -> None:
        self.config = config
        self.health = health if health is not None else Health()  # the passes' failures (stet status)
        self.sweep_age_s = sweep_age_s
        # Made before the home's lock is taken: tmp/ is cleaned by ``Daemon.run`` once it
        # holds the lock (another daemon may be writing there).
        self.blobs = BlobStore(home / "blobs", clean=False)
        # Store files an older Stet shared with vault files (hard links) get their own copy.
        self.unsharing = StoreUnsharing(self.blobs)
        self.fetcher: BlobFetcher = NoPeersFetcher()
        self.gate: AttachmentGate = PassGate()
        self.replicas: dict[str, AttachmentReplica] = {}

    def open_vault(self, vault_id: str, root: Path, service: NotesService,
                   rules: Callable[[], IgnoreRules],
                   folders: WriterFolders | None = None) -> AttachmentReplica:
        cfg = self.config
        replica = AttachmentReplica(
            vault_id, root, service, self.blobs, fetcher=self.fetcher, gate=self.gate,
            max_bytes=cfg.attachments.max_bytes, keep_bytes=cfg.attachments.keep_bytes,
            extensions=cfg.notes.extensions, rules=rules, device_id=service.device_id,
            rescan_s=cfg.notes.rescan_seconds, blob_in_use=self.blob_in_use, sweep=self.sweep,
            folders=folders, health=self.health,
        )
        self.unsharing.start()  # opened once the home's lock is held
        self.replicas[vault_id] = replica
        return replica

    async def close_vault(self, vault_id: str) -> None:
        replica = self.replicas.pop(vault_id, None)
        if replica is not None:
            await replica.stop()

    def blob_arrived(self, vault: str, sha256: str) -> None:
        replica = self.replicas.get(vault)
        if replica is not None:
            replica.blob_arrived(sha256)

    async def sweep(self) -> list[str]:
        """Remove the blobs no vault of this home refers to any more (a file changed while
        it was read, a crash between storing and recording), older than ``sweep_age_s``."""
        referenced: set[str] = set()
        for replica in list(self.replicas.values()):
            referenced |= replica.referenced_blobs()
        return await asyncio.to_thread(self.blobs.remove_unreferenced, referenced,
                                       older_than=self.sweep_age_s, now=time.time())

    def blob_in_use(self, sha256: str) -> bool:
        """Whether any vault of this home still needs the blob (the store is shared)."""
        return any(r.holds_blob(sha256) for r in self.replicas.values())


def both(first: Sink, second: Sink) -> Sink:
    """One watcher, two listeners: notes (the file bridge), then attachments. A change of
    a file's mode (``attrib``) only matters to attachments (their executable bit syncs)."""

    def sink(event: FsEvent) -> None:
        if event.kind != "attrib":
            first(event)
        second(event)

    return sink
