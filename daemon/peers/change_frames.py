"""Local changes to one peer link, gathered for a turn of the loop and sent as few
frames (issue 11 P8 "on the peer too", issue 18 P4: "no per-note round trips").

A bulk intake on A (10,000 new files) announces two changes per note -- the vault
index's entry and the note's first update. Sent one frame each, the receiving peer took
in 20,000 frames, each its own unit of work (a commit each) and each applying the index
separately. Gathered per turn of the loop instead, a turn's changes leave as one
INDEX_UPDATE (the index updates merged) followed by NOTE_UPDATES batches (in order, at
most ``BATCH_BYTES`` each), which the peer applies a time slice at a time, one unit per
slice. The index goes first, as in a sync session; a note's content arriving with or
after its entry is the order the peer expects (either order converges). A single change
makes the same frame as before, one turn of the loop later.

While a bulk flows (the last flush carried ``BULK_CHANGES`` or more, less than
``BULK_GATHER_S`` ago), changes gather for ``BULK_GATHER_S`` instead of one turn: an
unzip's intake makes notes ~20 a turn, which left as two small frames a turn, each a unit
of work (a commit, an index merge) on the peer; gathered, a frame holds a few turns'
notes. A change after a quiet moment leaves in the next turn, as before (a live
editor's keystroke).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stet.daemon.notes.changes import Change
    from stet.daemon.peers.session import PeerSession


BULK_CHANGES = 32  # a flush of this many changes (or more): a bulk is flowing
BULK_GATHER_S = 0.05  # ... and the next changes gather this long before they leave


class ChangeFrames:
    """Gathers one link's outgoing changes until the loop turns, then frames them."""

    def __init__(self, session: PeerSession, enqueue: Callable[[bytes], None]) -> None:
        self.session = session
        self.enqueue = enqueue
        self._pending: list[tuple[str, Change]] = []
        self._handle: asyncio.Handle | None = None
        self._bulk_at: float | None = None  # when the last flush of a bulk's size left (monotonic)

    def add(self, vault_id: str, change: Change) -> None:
        self._pending.append((vault_id, change))
        if self._handle is None:
            loop = asyncio.get_running_loop()
            if self._bulk_at is not None and time.monotonic() - self._bulk_at < BULK_GATHER_S:
                self._handle = loop.call_later(BULK_GATHER_S, self.flush)
            else:
                self._handle = loop.call_soon(self.flush)

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        pending, self._pending = self._pending, []
        if len(pending) >= BULK_CHANGES:
            self._bulk_at = time.monotonic()
        if pending:
            for frame in self.session.frames_for_changes(pending):
                self.enqueue(frame)
