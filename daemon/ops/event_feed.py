"""A vault's events for one open stream, for every face that streams them (REST's and the
web page's SSE, ``daemon/ops/event_stream.py``; MCP's ``subscriptions/listen``,
``daemon/api/mcp_resources.py``): subscribed for as long as the stream is open, a keepalive
after ``KEEPALIVE_S`` of quiet, and ended when the caller's credential ends (revoked,
signed out: ``OpenStreams``) or the bus lets the stream go (a reader too far behind).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from stet.daemon.notes.event_bus import Event, EventBus
from stet.daemon.ops.open_streams import OpenStreams

KEEPALIVE_S = 15.0


class EventFeed:
    """The events of one vault for one stream; ``ended`` says why it ended, if it did."""

    def __init__(self, bus: EventBus, queue: asyncio.Queue[Event | None],
                 on_end: Callable[[str], None] | None) -> None:
        self.bus = bus
        self.queue = queue
        self.on_end = on_end
        self.ended: list[str] = []

    def end(self, reason: str) -> None:
        """The caller's credential ended: the stream stops (its waiter is woken)."""
        self.ended.append(reason)
        with contextlib.suppress(asyncio.QueueFull):  # a full queue wakes the waiter anyway
            self.queue.put_nowait(None)
        if self.on_end is not None:
            self.on_end(reason)

    async def events(self, keepalive: Callable[[], Awaitable[None]]) -> AsyncIterator[Event]:
        """Each event as it comes, ``keepalive()`` after each quiet ``KEEPALIVE_S``, until
        the stream ends."""
        while not self.ended:
            try:
                event = await asyncio.wait_for(self.queue.get(), timeout=KEEPALIVE_S)
            except TimeoutError:
                if not self.bus.is_subscribed(self.queue):
                    return  # the bus let this reader go
                await keepalive()
                continue
            if event is None or self.ended:
                return
            yield event


@contextlib.asynccontextmanager
async def event_feed(bus: EventBus, streams: OpenStreams, vault_id: str, holder: str, *,
                     on_end: Callable[[str], None] | None = None) -> AsyncIterator[EventFeed]:
    """Subscribed to ``vault_id``'s events and registered as ``holder``'s open stream for
    the block; ``on_end(reason)`` is called too when the credential ends."""
    feed = EventFeed(bus, bus.subscribe(vault_id), on_end)
    forget = streams.add(holder, feed.end)
    try:
        yield feed
    finally:
        forget()
        bus.unsubscribe(feed.queue)
