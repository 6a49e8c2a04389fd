"""What peers may not hear yet, and when they may: the pure timing rule of the outbound gate.

Per note of a vault, an ordered queue of items, each with the time before which it may not
go (``due``, wall clock). An item added behind others of the same note waits behind them
(``due=None``: as long as the one before it), so a note's changes reach peers in order.
``release(now, is_held)`` takes, note by note, the items at the front of each queue that are
due, unless the note is held (the burst brake): a held note's items stay until it is let
go and ``release`` is asked again. ``next_due`` is when the next item becomes due, the
only time a caller needs to look again (no polling). No clock, no loop, no I/O here:
``daemon/notes/outbound_gate.py`` drives it with ``loop.call_at``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class OutboundWaits(Generic[K, T]):
    """Items waiting per key (a ``(vault, note)``), each until its due time."""

    def __init__(self) -> None:
        self._queues: dict[K, deque[tuple[float, T]]] = {}
        # One entry per key that is not held: (its front item's due, seq, key). An entry
        # whose key was dropped or moved on since is stale and skipped.
        self._heap: list[tuple[float, int, K]] = []
        self._front: dict[K, float] = {}  # the due of each key's live heap entry
        self._seq = 0
        self._held: set[K] = set()  # keys found held when due: looked at again on release

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def __contains__(self, key: object) -> bool:
        return key in self._queues

    def waiting_keys(self) -> list[K]:
        return list(self._queues)

    def add(self, key: K, item: T, due: float | None) -> float:
        """Queue ``item`` for ``key`` until ``due`` (None: behind the key's last item, or
        at once if none waits). Returns the due time it got."""
        queue = self._queues.get(key)
        last = queue[-1][0] if queue else None
        if due is None:
            due = last if last is not None else float("-inf")
        elif last is not None:
            due = max(due, last)  # never before the one it waits behind
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append((due, item))
        if len(queue) == 1 and key not in self._held:
            self._schedule(key, due)
        return due

    def _schedule(self, key: K, due: float) -> None:
        self._seq += 1
        self._front[key] = due
        heapq.heappush(self._heap, (due, self._seq, key))

    def drop(self, key: K) -> list[tuple[float, T]]:
        """Forget what waits for ``key``; returns it, with the due times."""
        queue = self._queues.pop(key, None)
        self._held.discard(key)
        self._front.pop(key, None)
        return list(queue) if queue is not None else []

    def release(self, now: float, is_held: Callable[[K], bool]) -> list[tuple[K, T]]:
        """Take every item due by ``now`` whose key is not held, in order per key."""
        keys: list[K] = []
        while self._heap and self._heap[0][0] <= now:
            due, _seq, key = heapq.heappop(self._heap)
            if self._front.get(key) == due:
                del self._front[key]
                keys.append(key)
        keys += [k for k in self._held if k not in keys]  # held before: maybe let go since
        self._held.clear()
        out: list[tuple[K, T]] = []
        for key in keys:
            queue = self._queues.get(key)
            if not queue:
                continue
            if queue[0][0] <= now and is_held(key):
                self._held.add(key)
                continue
            while queue and queue[0][0] <= now:
                out.append((key, queue.popleft()[1]))
            if queue:
                if key not in self._front:
                    self._schedule(key, queue[0][0])
            else:
                del self._queues[key]
        return out

    def next_due(self) -> float | None:
        """When the next item becomes due (None: nothing waits, or only held notes)."""
        while self._heap:
            due, _seq, key = self._heap[0]
            if self._front.get(key) == due:
                return due
            heapq.heappop(self._heap)  # stale
        return None
