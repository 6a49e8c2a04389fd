"""What ``stet status`` (``GET /v1/status``) tells of attachments (SPEC §3.14, §7; the fields
are documented in docs/attachments.md):

- per vault, ``attachments``: ``{"count", "bytes", "skipped", "tooLarge": [{"path", "size"}]}``
  -- the attachments the vault holds (as its index shows them), and the files skipped for
  being over ``attachments.max_bytes``;
- for the home, ``transfers``: ``{"files", "bytes", "done", "landedFiles", "landedBytes"}`` --
  the blobs wanted from peers now, their total size and how much of it has arrived
  (``BlobFetcher.progress()``), and the blobs landed since the daemon started.
"""

from __future__ import annotations

import logging
from typing import Any

from stet.daemon.attachments.replica import AttachmentReplica
from stet.daemon.attachments.seams import BlobFetcher

logger = logging.getLogger(__name__)

TOO_LARGE_SHOWN = 100  # the first so many skipped files are named


def vault_attachments(replica: AttachmentReplica | None, vault_id: str) -> dict[str, Any]:
    if replica is None:
        return {"count": 0, "bytes": 0, "skipped": 0, "tooLarge": []}
    counts = replica.counts(vault_id)
    too_large = sorted(replica.too_large().items())
    return {
        "count": int(counts.get("attachments", 0)), "bytes": int(counts.get("bytes", 0)),
        "skipped": int(counts.get("skipped", len(too_large))),
        # Files the index shows not in place yet (+1 while a pass is due): a first sync
        # (`stet join`) is done with attachments when this is 0.
        "toPlace": int(counts.get("toPlace", 0)),
        # Of those the index shows, the files (and their bytes) in place in the folder.
        "placedFiles": int(counts.get("placedFiles", 0)), "placedBytes": int(counts.get("placedBytes", 0)),
        "tooLarge": [{"path": p, "size": size} for p, size in too_large[:TOO_LARGE_SHOWN]],
    }


def transfers(fetcher: BlobFetcher | None) -> dict[str, int]:
    if fetcher is None:
        return {"files": 0, "bytes": 0, "done": 0}
    try:
        p = fetcher.progress()
    except Exception:  # a status answer never fails for this
        logger.exception("the transfers' progress is not available")
        return {"files": 0, "bytes": 0, "done": 0}
    keys = ("files", "bytes", "done", "landedFiles", "landedBytes")  # landed*: since the daemon started
    return {k: int(p.get(k, 0)) for k in keys}
