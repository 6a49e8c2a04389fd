"""What the vault's two index documents share: a pycrdt document whose writes and
applied peer updates each come back as one update (SPEC §3; ``VaultIndex`` for notes,
``AttachmentIndex`` for attachments).

Each local write runs in one transaction and returns the update it made (None: no
change); a peer's update is applied in order -- one that arrives before the updates it
follows waits for them (``update_order.HeldUpdates``: yrs would lose it otherwise) -- and
returns what was new plus the keys the subclass's observer collected in ``_changed``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pycrdt

from .errors import CrdtError
from .note_doc import MAX_UPDATE_BYTES, join_updates, update_since
from .update_order import HeldUpdates


class IndexDoc:
    def __init__(self, doc: pycrdt.Doc[Any] | None = None, *, what: str) -> None:
        self.doc: pycrdt.Doc[Any] = doc if doc is not None else pycrdt.Doc(skip_gc=True)
        self._what = what  # "index update": how errors and held updates name it
        self._captured: list[bytes] | None = None
        self._changed: set[str] | None = None  # filled by the subclass's map observer
        self._held = HeldUpdates()
        self.doc.observe(self._on_tx)

    def _on_tx(self, event: pycrdt.TransactionEvent) -> None:
        if self._captured is not None:
            self._captured.append(event.update)

    def state_vector(self) -> bytes:
        return bytes(self.doc.get_state())

    def full_update(self) -> bytes:
        return bytes(self.doc.get_update())

    def update_since(self, sv: bytes) -> bytes:
        return update_since(self.doc, sv)

    def _write(self, fn: Callable[[], None]) -> bytes | None:
        captured: list[bytes] = []
        self._captured = captured
        try:
            with self.doc.transaction():
                fn()
        finally:
            self._captured = None
        return join_updates(captured)

    def apply_update(self, update: bytes) -> tuple[bytes | None, set[str]]:
        """Apply a peer's update; returns (what was new, the keys it changed)."""
        if len(update) > MAX_UPDATE_BYTES:
            raise CrdtError(f"{self._what} over the size cap")
        captured: list[bytes] = []
        changed: set[str] = set()
        self._captured, self._changed = captured, changed
        try:
            self._held.apply(self.doc, update, self._what)
        finally:
            self._captured, self._changed = None, None
        return join_updates(captured), changed

    @property
    def pending_updates(self) -> int:
        return len(self._held)
