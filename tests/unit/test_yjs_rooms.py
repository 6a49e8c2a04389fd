"""Send queues of live clients (``daemon/live/rooms.py``): bounded, a slow client dropped.

A real asyncio loop with an in-memory socket whose sends block until the test lets them
go: the queue must stop at its bound and the client be closed with ``SLOW``, instead of
buffering without end; a client that keeps up gets every message in order.
"""

from __future__ import annotations

import asyncio

from stet.daemon.live.rooms import GOING_AWAY, SLOW, Connection, LiveHub
from stet.sync.config import LiveConfig
from stet.sync.permissions import Scopes


class GatedSocket:
    """The part of ``web.WebSocketResponse`` a connection uses; sends wait for ``gate``."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.sent: list[bytes] = []
        self.closed: tuple[int, bytes] | None = None
        self.closed_event = asyncio.Event()
        self.sending = asyncio.Condition()

    async def send_bytes(self, data: bytes) -> None:
        await self.gate.wait()
        self.sent.append(data)
        async with self.sending:
            self.sending.notify_all()

    async def wait_sent(self, n: int) -> None:
        async with self.sending:
            await self.sending.wait_for(lambda: len(self.sent) >= n)

    async def close(self, *, code: int, message: bytes = b"") -> bool:
        self.closed = (code, message)
        self.closed_event.set()
        return True


def _conn(ws: GatedSocket, limits: LiveConfig) -> Connection:
    return Connection(ws, "agent:t", "agent:t", Scopes.everything(), limits,  # type: ignore[arg-type]
                      still_valid=lambda: True)


async def test_a_client_that_falls_behind_is_dropped_not_buffered() -> None:
    limits = LiveConfig(max_queued_messages=100, max_queued_bytes=10_000)
    ws = GatedSocket()
    conn = _conn(ws, limits)
    conn.start()
    for i in range(1000):
        conn.send(b"x" * 50 + i.to_bytes(4, "big"))
        assert len(conn._queue) <= limits.max_queued_messages
        assert conn._queued_bytes <= limits.max_queued_bytes
    assert conn.closing
    ws.gate.set()
    await asyncio.wait_for(ws.closed_event.wait(), 30)
    assert ws.closed is not None
    assert ws.closed[0] == SLOW
    assert len(ws.sent) <= 1  # at most the one in flight when it fell behind
    await conn.stop()


async def test_a_client_that_keeps_up_gets_everything_in_order() -> None:
    ws = GatedSocket()
    ws.gate.set()
    conn = _conn(ws, LiveConfig(max_queued_messages=10))
    conn.start()
    for i in range(200):
        conn.send(i.to_bytes(2, "big"))
        if i % 5 == 0:
            await asyncio.sleep(0)  # let the sender run, as the event loop would
    conn.close(GOING_AWAY, "done")
    await asyncio.wait_for(ws.closed_event.wait(), 30)
    assert ws.sent == [i.to_bytes(2, "big") for i in range(200)]
    assert ws.closed == (GOING_AWAY, b"done")


async def test_the_hub_closes_every_client_when_the_daemon_stops() -> None:
    hub = LiveHub(LiveConfig())

    class Notes:  # the adapter's identity is all a room keeps
        vault_id = "v"

    sockets = [GatedSocket() for _ in range(3)]
    for ws in sockets:
        ws.gate.set()
        conn = _conn(ws, hub.limits)
        hub.join(Notes(), "note", conn)  # type: ignore[arg-type]
        conn.start()
    await hub.close_all()
    assert [ws.closed[0] if ws.closed else None for ws in sockets] == [GOING_AWAY] * 3
    assert hub.closed


async def test_rooms_are_dropped_when_their_last_client_leaves_and_awareness_is_cleared() -> None:
    from stet.sync.yjs_protocol import AwarenessEntry, decode_awareness, parse

    hub = LiveHub(LiveConfig())

    class Notes:
        vault_id = "v"

    a_ws, b_ws = GatedSocket(), GatedSocket()
    a_ws.gate.set()
    b_ws.gate.set()
    a, b = _conn(a_ws, hub.limits), _conn(b_ws, hub.limits)
    room = hub.join(Notes(), "note", a)  # type: ignore[arg-type]
    assert hub.join(Notes(), "note", b) is room  # type: ignore[arg-type]
    a.start()
    b.start()
    room.relay_awareness(a, [AwarenessEntry(11, 1, '{"user":"ann"}')])
    hub.leave(a)
    assert hub.connection_count() == 1
    await asyncio.wait_for(b_ws.wait_sent(2), 30)
    told = [decode_awareness(parse(m).payload) for m in b_ws.sent]
    assert told == [[AwarenessEntry(11, 1, '{"user":"ann"}')], [AwarenessEntry(11, 2, "null")]]
    hub.leave(b)
    assert hub.rooms == {}
    await hub.close_all()
