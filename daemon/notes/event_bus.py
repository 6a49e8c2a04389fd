"""Vault events for the SSE stream (SPEC §6.9): a bounded replay buffer plus live queues.

Event ids grow across restarts (they start from the clock in microseconds), so a
client resuming with ``Last-Event-ID`` gets everything still in the buffer after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

from stet.daemon.notes.event_history import EventHistory

EVENT_TYPES = (
    "note.changed", "note.moved", "note.deleted", "version.created", "conflict.refused",
    "brake.held", "brake.released", "peer.connected", "peer.disconnected",
    "conflict.promoted",  # a refused write applied by a person (SPEC §6.4)
    "note.merged",  # overlapping edits kept whole, one after the other (docs/recovering.md)
    "health.changed",  # a supervised task failed or works again (daemon/base/health.py)
)


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    vault_id: str
    type: str
    data: dict[str, Any]


class EventBus:
    def __init__(self, capacity: int = 10_000, queue_size: int = 10_000) -> None:
        # (id, vault, type, data as compact JSON): a first sync fills the buffer with
        # 10,000 events, which as dicts held ~9 MB, as JSON text ~4.4 MB, sealed in
        # compressed blocks well under 1 MB (event_history.py).
        self._buffer = EventHistory(capacity)
        self._next_id = int(time.time() * 1_000_000)
        self._queues: dict[asyncio.Queue[Event | None], str] = {}
        self.queue_size = queue_size

    def publish(self, vault_id: str, type_: str, data: dict[str, Any]) -> Event:
        assert type_ in EVENT_TYPES, type_
        self._next_id += 1
        event = Event(self._next_id, vault_id, type_, data)
        self._buffer.append((event.id, vault_id, type_, json.dumps(data, separators=(",", ":"))))
        for queue, vid in list(self._queues.items()):
            if vid != vault_id:
                continue
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                # A reader that cannot keep up is cut off (its stream ends when it drains
                # the queue); it resumes with Last-Event-ID.
                self._queues.pop(queue, None)
        return event

    @property
    def latest_id(self) -> int:
        """The id of the last event published (a stream starting now waits for the next)."""
        return self._next_id

    def replay(self, vault_id: str, after: int) -> list[Event]:
        return [Event(id_, vid, type_, json.loads(data))
                for id_, vid, type_, data in self._buffer.after(vault_id, after)]

    def subscribe(self, vault_id: str) -> asyncio.Queue[Event | None]:
        queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=self.queue_size)
        self._queues[queue] = vault_id
        return queue

    def is_subscribed(self, queue: asyncio.Queue[Event | None]) -> bool:
        return queue in self._queues

    def unsubscribe(self, queue: asyncio.Queue[Event | None]) -> None:
        self._queues.pop(queue, None)

    def close_all(self) -> None:
        for queue in list(self._queues):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)
        self._queues.clear()
