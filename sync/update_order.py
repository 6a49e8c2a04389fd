"""Applying CRDT updates that may arrive out of order, without losing any.

pycrdt 0.14 (yrs) integrates an update that starts past what a document holds of its
client (an earlier update of the same client not here yet) in a way that loses the
earlier one for good when it arrives: a Map set is gone and the state vector stays
behind (shown in tests/unit/test_attachment_index.py on a bare document; the vault index
has the same exposure). ``HeldUpdates`` holds such a one-client update back and applies
it once the updates before it have been. Updates of several clients (full states, what a
peer computed from our state vector) are applied at once: they start where the receiver is.
"""

from __future__ import annotations

from typing import Any

import pycrdt

from .errors import CrdtError
from .note_doc import apply_checked
from .state_vectors import decode_state_vector, read_varint

MAX_HELD_UPDATES = 1024
MAX_HELD_BYTES = 64 * 1024 * 1024


def starts_past(update: bytes, state_vector: bytes) -> bool:
    """Is ``update`` one client's, starting past what ``state_vector`` holds of it?"""
    try:
        clients, pos = read_varint(update, 0)
        if clients != 1:
            return False
        _structs, pos = read_varint(update, pos)
        client, pos = read_varint(update, pos)
        start, pos = read_varint(update, pos)
    except CrdtError:
        return False  # malformed: applying it reports that
    return start > decode_state_vector(state_vector).get(client, 0)


class HeldUpdates:
    """Apply updates to one document, holding back those that arrived too early."""

    def __init__(self, max_updates: int = MAX_HELD_UPDATES, max_bytes: int = MAX_HELD_BYTES) -> None:
        self.max_updates = max_updates
        self.max_bytes = max_bytes
        self._held: list[bytes] = []

    def __len__(self) -> int:
        return len(self._held)

    def apply(self, doc: pycrdt.Doc[Any], update: bytes, what: str) -> None:
        """Apply ``update`` now, or hold it until it can be; then apply whatever held
        updates it unblocked. Raises ``CrdtError`` for a bad update."""
        if starts_past(update, bytes(doc.get_state())):
            # Decoded first on a scratch document: a malformed update is refused now, as it
            # would be if applied, never held (a peer sending garbage loses its link).
            apply_checked(pycrdt.Doc(), update, what)
            self._held.append(update)
            while len(self._held) > self.max_updates or sum(map(len, self._held)) > self.max_bytes:
                self._held.pop(0)  # a peer's full state brings it again
        else:
            apply_checked(doc, update, what)
        progress = True
        while progress and self._held:
            progress = False
            for held in list(self._held):
                if not starts_past(held, bytes(doc.get_state())):
                    self._held.remove(held)
                    apply_checked(doc, held, what)
                    progress = True
