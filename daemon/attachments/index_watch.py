"""The attachment index of a vault, watched (SPEC §3.14): the attachment map of the vault
index's document -- so recorded changes reach peers through the index sync -- rebuilt with
that document (after a rolled-back unit of work), and observed: which attachments' slots
changed (their concurrent losers are looked at), and whether the map changed at all since
the last outflow (a peer's index update then wakes a pass; ``stet join`` waits for it).
"""

from __future__ import annotations

from typing import Any, Protocol

import pycrdt

from stet.sync.attachment_index import MAP_NAME, AttachmentIndex
from stet.sync.vault_index import VaultIndex


class HasVaultIndex(Protocol):
    """What the watch needs of the write path (``NotesService``): the vault index."""

    @property
    def index(self) -> VaultIndex: ...


class IndexWatch:
    def __init__(self, service: HasVaultIndex) -> None:
        self.service = service
        self._index: AttachmentIndex | None = None
        self._map: pycrdt.Map[Any] | None = None  # the index map observed (kept: see ``index``)
        self._map_subscription: Any = None
        self.changed_ids: set[str] = set()  # attachments whose slots changed: check their losers
        self.check_all = True  # at start (and after the index document was rebuilt): every one
        # Whether the map changed since the last outflow (for ``stet join``: a pass will look again).
        self.map_changed = False

    @property
    def index(self) -> AttachmentIndex:
        """The attachment map of the vault index's document (rebuilt with it after a
        rolled-back unit of work)."""
        doc = self.service.index.doc
        if self._index is None or self._index.doc is not doc:
            self._index = AttachmentIndex(doc)
            # The wrapper is kept: pycrdt drops a subscription with the wrapper it was made on
            # (a temporary one went at once, and no change of the map was ever noted).
            self._map = doc.get(MAP_NAME, type=pycrdt.Map)
            self._map_subscription = self._map.observe(self._on_map)
            self.check_all = True
        return self._index

    def _on_map(self, event: Any) -> None:
        keys: dict[str, Any] = getattr(event, "keys", {})
        self.changed_ids.update(k.split("/", 1)[0] for k in keys)
        self.map_changed = True

    def touched(self) -> bool:
        """The attachments' map changed since the last outflow (or its document was
        rebuilt, unobserved). A peer's bulk of notes sends an index update per batch that
        touches only notes: each would wake a pass here -- a walk of the whole folder -- for
        nothing attachments need (issue 11, P8)."""
        index = self._index
        return self.map_changed or index is None or index.doc is not self.service.index.doc

    def take_changed(self) -> set[str] | None:
        """The attachments whose slots changed since the last call (None: every one), and
        forget them."""
        ids = None if self.check_all else set(self.changed_ids)
        self.check_all = False
        self.changed_ids.clear()
        return ids
