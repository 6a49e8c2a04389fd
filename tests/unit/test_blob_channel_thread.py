"""The blob channel's receiving end in its thread, against a real TLS server on loopback:
chunks decoded off the main loop reach it in order, on the main loop's thread; anything
but a CHUNK ends the channel; a server that is another device is not taken."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from stet.daemon.identity.device_identity import DeviceIdentity, generate_identity
from stet.daemon.peers.blobs.channel import CHANNEL_PATH, ChannelReaders, InboundChannel
from stet.daemon.peers.tls import ServerTLS, client_context
from stet.sync import attachment_protocol as ap
from tests.harness import until

SHA = "ab" * 32
CHUNKS = 40
SIZE = 64 * 1024


@pytest.fixture(scope="module")
def ids() -> dict[str, DeviceIdentity]:
    return {"a": generate_identity(), "b": generate_identity(), "c": generate_identity()}


@asynccontextmanager
async def serve(identity: DeviceIdentity, trusted: list[bytes],
                frames: Callable[[], list[bytes]]) -> AsyncIterator[int]:
    """A peer port whose blob channel sends ``frames()`` and then waits for the close."""
    tls = ServerTLS(identity, trusted)

    async def channel(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        for frame in frames():
            await ws.send_bytes(frame)
        async for _msg in ws:
            pass
        return ws

    app = web.Application(middlewares=[tls.middleware(join_paths=())])
    app.router.add_get(CHANNEL_PATH, channel)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
        await site.start()
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def chunks() -> list[bytes]:
    return [ap.encode_chunk("v1", SHA, i * SIZE, CHUNKS * SIZE, bytes([i]) * SIZE) for i in range(CHUNKS)]


async def test_chunks_reach_the_main_loop_in_order_then_a_bad_frame_cuts(
        ids: dict[str, DeviceIdentity]) -> None:
    a, b = ids["a"], ids["b"]
    main_thread = threading.get_ident()
    got: list[tuple[int, int, int]] = []
    cut: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def deliver(frame: ap.BlobFrame, size: int) -> None:
        assert threading.get_ident() == main_thread
        got.append((frame.offset, frame.data[0], size))

    thread = ChannelReaders()
    thread.start()
    try:
        frames = [*chunks(), ap.encode_request("v1", SHA, 0, CHUNKS * SIZE)]  # a REQUEST: not a chunk
        async with serve(a, [b.cert_der], lambda: frames) as port:
            channel = InboundChannel(thread, a.device_id, deliver, cut.set_result)
            assert await channel.open([f"127.0.0.1:{port}"], client_context(b, [a.cert_der]), initiated=True)
            why = await asyncio.wait_for(cut, 30)
        assert "only chunks" in why
        assert [(o, d) for o, d, _s in got] == [(i * SIZE, i) for i in range(CHUNKS)]
        assert all(s > SIZE for _o, _d, s in got)  # the frame's size, header included
    finally:
        await thread.stop()


async def test_another_device_at_the_address_is_not_taken(ids: dict[str, DeviceIdentity]) -> None:
    a, b, c = ids["a"], ids["b"], ids["c"]
    thread = ChannelReaders()
    thread.start()
    try:
        # C answers at the address (B trusts it too), but the link is with A.
        async with serve(c, [b.cert_der], chunks) as port:
            channel = InboundChannel(thread, a.device_id, lambda f, s: None, lambda why: None)
            ctx = client_context(b, [a.cert_der, c.cert_der])
            assert not await channel.open([f"127.0.0.1:{port}"], ctx, initiated=True)
        # Nobody at the address: no channel either (the main link carries the chunks).
        channel = InboundChannel(thread, a.device_id, lambda f, s: None, lambda why: None)
        assert not await channel.open([f"127.0.0.1:{port}"], client_context(b, [a.cert_der]), initiated=True)
    finally:
        await thread.stop()


async def test_closing_the_channel_is_not_a_cut(ids: dict[str, DeviceIdentity]) -> None:
    a, b = ids["a"], ids["b"]
    cuts: list[str] = []
    got: list[int] = []
    thread = ChannelReaders()
    thread.start()
    try:
        async with serve(a, [b.cert_der], chunks) as port:
            channel = InboundChannel(thread, a.device_id, lambda f, s: got.append(f.offset), cuts.append)
            assert await channel.open([f"127.0.0.1:{port}"], client_context(b, [a.cert_der]), initiated=False)
            for _ in range(3000):  # bounded: until every chunk is in
                if len(got) == CHUNKS:
                    break
                await asyncio.sleep(0.01)
            assert len(got) == CHUNKS
            channel.close()  # the link ended
            # The thread's last call on the main loop takes the channel off the readers; a
            # cut would have been queued before it (call_soon_threadsafe keeps the order).
            await asyncio.to_thread(channel.join, 10.0)
            await until(lambda: channel not in thread.channels, "the channel's thread over")
        assert cuts == []
    finally:
        await thread.stop()
