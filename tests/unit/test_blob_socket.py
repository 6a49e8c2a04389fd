"""The blob channel's own websocket reader (``daemon/peers/blobs/socket.py``) against a real aiohttp
server over TLS 1.3 on loopback: messages arrive whole and in order; a ping is answered, so
the server's heartbeat never cuts a busy channel; a close is answered at once; every frame
the channel does not carry ends it with a clear reason; a refused upgrade says its status.
And the hand-over to the main loop: chunks already waiting go in one wake-up (counted)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from stet.daemon.identity.device_identity import DeviceIdentity, generate_identity
from stet.daemon.peers.blobs.channel import HANDOVER_MAX, ChannelReaders, InboundChannel
from stet.daemon.peers.blobs.socket import BlobSocket, ChannelError, HandshakeRefused, split_address
from stet.daemon.peers.tls import SYNC_SERVER_NAME, ServerTLS, client_context
from stet.sync import attachment_protocol as ap

Handler = Callable[[web.WebSocketResponse], Awaitable[None]]


@pytest.fixture(scope="module")
def ids() -> dict[str, DeviceIdentity]:
    return {"a": generate_identity(), "b": generate_identity()}


@asynccontextmanager
async def serve(a: DeviceIdentity, b: DeviceIdentity, handler: Handler, *,
                status: int | None = None, autoping: bool = True) -> AsyncIterator[str]:
    tls = ServerTLS(a, [b.cert_der])

    async def route(request: web.Request) -> web.StreamResponse:
        if status is not None:
            raise web.HTTPException(status=status) if status != 409 else web.HTTPConflict()
        ws = web.WebSocketResponse(autoping=autoping)
        await ws.prepare(request)
        await handler(ws)
        return ws

    app = web.Application(middlewares=[tls.middleware(join_paths=())])
    app.router.add_get("/c", route)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
        await site.start()
        yield f"127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def dial(a: DeviceIdentity, b: DeviceIdentity, address: str) -> BlobSocket:
    return await asyncio.to_thread(BlobSocket.dial, address, "/c", client_context(b, [a.cert_der]),
                                   SYNC_SERVER_NAME, 10.0, ap.MAX_FRAME)


def test_addresses_split() -> None:
    assert split_address("127.0.0.1:7421") == ("127.0.0.1", 7421)
    assert split_address("[::1]:9") == ("::1", 9)
    with pytest.raises(ValueError, match="host:port"):
        split_address("no-port")


async def test_messages_whole_and_in_order_then_the_close_is_answered(ids: dict[str, DeviceIdentity]) -> None:
    a, b = ids["a"], ids["b"]
    sizes = [0, 1, 125, 126, 65535, 65536, ap.MAX_FRAME]
    closed: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    async def handler(ws: web.WebSocketResponse) -> None:
        for i, n in enumerate(sizes):
            await ws.send_bytes(bytes([i]) * n)
        t0 = time.monotonic()
        await ws.close()  # waits for the client's CLOSE (up to 10 s if it never came)
        closed.set_result(time.monotonic() - t0)

    async with serve(a, b, handler) as address:
        sock = await dial(a, b, address)
        try:
            got = [await asyncio.to_thread(sock.read_message) for _ in sizes]
            assert await asyncio.to_thread(sock.read_message) is None
            assert sock.peer_cert_der() == a.cert_der
        finally:
            sock.close()
        assert [len(m) for m in got if m is not None] == sizes
        assert all(m == bytes([i]) * len(m) for i, m in enumerate(got) if m is not None)
        assert await asyncio.wait_for(closed, 10) < 5  # answered, not timed out


async def test_a_ping_is_answered_with_its_payload(ids: dict[str, DeviceIdentity]) -> None:
    a, b = ids["a"], ids["b"]
    pong: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def handler(ws: web.WebSocketResponse) -> None:
        await ws.ping(b"are-you-there")
        await ws.send_bytes(b"after the ping")
        msg = await ws.receive()  # autoping off: the pong comes up to us
        pong.set_result(msg.data if msg.type == aiohttp.WSMsgType.PONG else repr(msg).encode())
        await ws.close()

    async with serve(a, b, handler, autoping=False) as address:
        sock = await dial(a, b, address)
        try:
            assert await asyncio.to_thread(sock.read_message) == b"after the ping"
            assert await asyncio.wait_for(pong, 10) == b"are-you-there"
        finally:
            sock.close()


@pytest.mark.parametrize("send", ["text", "fragmented"])
async def test_a_frame_the_channel_does_not_carry_ends_it(ids: dict[str, DeviceIdentity], send: str) -> None:
    a, b = ids["a"], ids["b"]

    async def handler(ws: web.WebSocketResponse) -> None:
        if send == "text":
            await ws.send_str("hello")
        else:  # a first fragment: FIN clear (aiohttp's writer always sets it; write the bytes)
            assert ws._writer is not None
            ws._writer.transport.write(bytes([0x02, 4]) + b"part")
        with contextlib.suppress(Exception):
            await ws.receive(timeout=10)

    async with serve(a, b, handler) as address:
        sock = await dial(a, b, address)
        try:
            with pytest.raises(ChannelError, match="opcode|fragmented"):
                await asyncio.to_thread(sock.read_message)
        finally:
            sock.close()


async def test_a_refused_upgrade_says_its_status(ids: dict[str, DeviceIdentity]) -> None:
    a, b = ids["a"], ids["b"]

    async def handler(ws: web.WebSocketResponse) -> None:
        raise AssertionError("not reached")

    async with serve(a, b, handler, status=409) as address:
        with pytest.raises(HandshakeRefused) as refused:
            await dial(a, b, address)
        assert refused.value.status == 409


async def test_shutdown_from_another_thread_ends_a_blocked_read(ids: dict[str, DeviceIdentity]) -> None:
    a, b = ids["a"], ids["b"]
    release = asyncio.Event()

    async def handler(ws: web.WebSocketResponse) -> None:
        await release.wait()

    async with serve(a, b, handler) as address:
        sock = await dial(a, b, address)
        reading = asyncio.ensure_future(asyncio.to_thread(sock.read_message))
        sock.shutdown()  # before or during the read: either way the read ends, not blocks
        with pytest.raises((ChannelError, OSError)):
            await asyncio.wait_for(reading, 10)
        sock.close()
        release.set()


class _ScriptedSocket:
    """What ``InboundChannel._receive`` reads: frames, each with 'the next is already here'."""

    def __init__(self, frames: list[bytes], waiting: list[bool]) -> None:
        self.frames = list(frames)
        self.waiting = list(waiting)

    def read_message(self) -> bytearray | None:
        return bytearray(self.frames.pop(0)) if self.frames else None

    def more_waiting(self) -> bool:
        return self.waiting.pop(0)

    def close(self) -> None:
        pass


def _chunks(n: int) -> list[bytes]:
    sha = "cd" * 32
    return [ap.encode_chunk("v1", sha, i * 10, n * 10, bytes([i]) * 10) for i in range(n)]


@pytest.mark.parametrize(("waiting", "handovers"), [
    ("all", -(-40 // HANDOVER_MAX)),  # every next frame already here: HANDOVER_MAX a wake-up
    ("none", 40),  # each frame alone: handed over at once, never held back
])
async def test_chunks_already_waiting_go_over_in_one_wake_up(waiting: str, handovers: int) -> None:
    got: list[int] = []
    cuts: list[str] = []
    channel = InboundChannel(ChannelReaders(), "D" * 56, lambda f, s: got.append(f.offset), cuts.append)
    channel._socket = _ScriptedSocket(_chunks(40), [waiting == "all"] * 40)  # type: ignore[assignment]
    takes = 0
    take = channel._take

    def counted() -> None:
        nonlocal takes
        takes += 1
        take()

    channel._take = counted  # type: ignore[method-assign]
    hand_overs = 0
    hand_over = channel._hand_over

    def counted_hand_over(frames: list[tuple[ap.BlobFrame, int]]) -> None:
        nonlocal hand_overs
        hand_overs += 1
        hand_over(frames)

    channel._hand_over = counted_hand_over  # type: ignore[method-assign]
    done = threading.Event()

    def run() -> None:
        try:
            channel._receive()
        finally:
            done.set()

    await asyncio.to_thread(run)
    for _ in range(100):  # bounded: the main loop runs what the thread queued
        if len(got) == 40 and cuts:
            break
        await asyncio.sleep(0.01)
    assert got == [i * 10 for i in range(40)]
    assert hand_overs == handovers
    assert takes <= hand_overs
    assert cuts == ["closed by the peer"]
