"""Which blobs a vault refers to (SPEC §3.14): what a peer may be sent from this home.

A member of one vault must never fetch a blob by hash that only another vault holds, so a
peer's REQUEST is served only when the vault it names refers to the blob: a slot of the
vault's attachment index (any device's slot, a concurrent loser's included: its bytes
become a ``concurrent`` version on the peer) or a kept version of one of its attachments.
"""

from __future__ import annotations

from typing import Any

import pycrdt

from .attachment_index import MAP_NAME


def index_refers_to(doc: pycrdt.Doc[Any], sha256: str) -> bool:
    """Whether any slot of the attachment index in ``doc`` names ``sha256``."""
    slots: pycrdt.Map[Any] = doc.get(MAP_NAME, type=pycrdt.Map)
    return any(isinstance(value, dict) and value.get("sha256") == sha256 for value in slots.values())
