"""What one vault's folder side keeps (SPEC §3.14, §3.15): the bytes a change replaced or
removed, as attachment versions (each replaced or removed file is kept before it goes), and
the blobs released when the versions' retention drops some -- removed from the home's store
once no vault still needs them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from stet.sync.attachment_entry import AttachmentEntry
from stet.sync.attachment_plan import SeenFile
from stet.sync.attachment_versions import CONCURRENT, AttachmentVersionStore
from stet.sync.blob_store import BlobStore

DISK = "disk"


def entry_source(entry: AttachmentEntry, device_id: str) -> str:
    """Who made an index entry, as a version's source: ``disk`` here, else ``peer:<device>``."""
    return DISK if entry.device == device_id else f"peer:{entry.device}"


class AttachmentKeeping:
    def __init__(self, versions: AttachmentVersionStore, blobs: BlobStore,
                 blob_in_use: Callable[[str], bool]) -> None:
        self.versions = versions
        self.blobs = blobs
        self.blob_in_use = blob_in_use  # any vault of the home still needs it (the store is shared)

    def keep(self, s: SeenFile, path: str, kind: str, source: str) -> set[str]:
        """Keep ``s``'s bytes as a version of ``kind`` (one ``concurrent`` version per loser's
        bytes); returns the blobs the retention released."""
        if kind == CONCURRENT and self.has_concurrent(s.att_id, s.sha256):
            return set()
        _version, released = self.versions.add(attachment_id=s.att_id, path=path, kind=kind, source=source,
                                               created_at=time.time(), sha256=s.sha256, size=s.size,
                                               executable=s.executable)
        return released

    def has_concurrent(self, att_id: str, sha256: str) -> bool:
        return self.has_version(att_id, sha256, CONCURRENT)

    def has_version(self, att_id: str, sha256: str, kind: str) -> bool:
        return any(v.kind == kind and v.sha256 == sha256 for v in self.versions.for_attachment(att_id))

    async def drop_blobs(self, shas: set[str]) -> None:
        """Remove the released blobs no vault needs any more."""
        gone = [s for s in sorted(shas) if not self.blob_in_use(s)]
        for sha in gone:
            await asyncio.to_thread(self.blobs.remove, sha)
