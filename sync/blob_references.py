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


def index_shas(doc: pycrdt.Doc[Any]) -> frozenset[str]:
    """Every blob a slot of the attachment index in ``doc`` names."""
    slots: pycrdt.Map[Any] = doc.get(MAP_NAME, type=pycrdt.Map)
    return frozenset(v["sha256"] for v in slots.values()
                     if isinstance(v, dict) and isinstance(v.get("sha256"), str))


def index_refers_to(doc: pycrdt.Doc[Any], sha256: str) -> bool:
    """Whether any slot of the attachment index in ``doc`` names ``sha256``."""
    return sha256 in index_shas(doc)


class IndexShas:
    """``index_shas`` of one document, read again only when the document changed (its state
    vector moved): a first sync asks for every blob, and reading every slot for each request
    would cost the square of the vault's attachments."""

    def __init__(self) -> None:
        self._sv: bytes | None = None
        self._shas: frozenset[str] = frozenset()

    def refers_to(self, doc: pycrdt.Doc[Any], sha256: str) -> bool:
        sv = bytes(doc.get_state())
        if sv != self._sv:
            self._shas, self._sv = index_shas(doc), sv
        return sha256 in self._shas
