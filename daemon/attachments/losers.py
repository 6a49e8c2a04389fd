"""Concurrent losers (SPEC §3.14, §3.15): a change that lost to a concurrent one keeps its
bytes as an attachment version of kind ``concurrent`` (fetched first when this home lacks
them): that row is the conflict record ``stet conflicts`` lists. Only the attachments whose
slots changed since the last look are looked at (every one at start).
"""

from __future__ import annotations

import logging

from stet.daemon.attachments.index_watch import IndexWatch
from stet.daemon.attachments.keeping import AttachmentKeeping, entry_source
from stet.daemon.attachments.wants import BlobWants
from stet.sync.attachment_entry import AttachmentEntry, concurrent_losers
from stet.sync.attachment_plan import SeenFile
from stet.sync.attachment_versions import CONCURRENT
from stet.sync.blob_store import BlobStore
from stet.sync.store import VaultStore

logger = logging.getLogger(__name__)


class ConcurrentLosers:
    def __init__(self, store: VaultStore, blobs: BlobStore, *, device_id: str, watch: IndexWatch,
                 keeping: AttachmentKeeping, wants: BlobWants) -> None:
        self.store = store
        self.blobs = blobs
        self.device_id = device_id
        self.watch = watch
        self.keeping = keeping
        self.wants = wants

    async def keep(self) -> None:
        """Keep the bytes of changes that lost to a concurrent one as ``concurrent``
        versions (the conflict record); fetch them first when this home lacks them."""
        index = self.watch.index
        ids = self.watch.take_changed()
        if ids is not None and not ids:
            return
        groups: dict[str, list[AttachmentEntry]] = {}
        for e in index.slots():
            if ids is None or e.id in ids:
                groups.setdefault(e.id, []).append(e)
        released: set[str] = set()
        self.wants.losers = {k: v for k, v in self.wants.losers.items() if k[0] not in groups}
        with self.store.transaction():
            for att_id, slots in sorted(groups.items()):
                for loser in concurrent_losers(slots):
                    if self.keeping.has_concurrent(att_id, loser.sha256):
                        continue
                    if not self.blobs.has(loser.sha256):
                        self.wants.losers[(att_id, loser.sha256)] = loser.size
                        self.watch.changed_ids.add(att_id)  # looked at again once it arrives
                        continue
                    logger.info("attachment %s: the concurrent change of %s lost; kept as a version",
                                loser.path, loser.device[:7])
                    s = SeenFile(att_id, loser.sha256, loser.size, 0, 0, loser.executable, loser.hlc)
                    source = entry_source(loser, self.device_id)
                    released |= self.keeping.keep(s, loser.path, CONCURRENT, source)
        self.wants.refresh()
        await self.keeping.drop_blobs(released)
