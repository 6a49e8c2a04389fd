"""A peer link's large frames go to TLS in pieces (daemon/tls_writes.py; P7): asyncio's
TLS transport keeps an OpenSSL buffer as large as the largest single write for the life
of the connection (a first sync's 4 MiB frames: ~4.3 MiB held by the serving daemon).
Real aiohttp websockets over real TLS on loopback, both directions."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from stet.daemon.device_identity import generate_identity
from stet.daemon.peer_tls import SYNC_SERVER_NAME, ServerTLS, client_context
from stet.daemon.tls_writes import PIECE, PieceWrites, split_tls_writes

FRAME = 4 * 1024 * 1024 + 123  # a first sync's batch of updates, and an odd tail


class Recording:
    """The real transport, with the size of every write it was handed recorded."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.sizes: list[int] = []

    def write(self, data: Any) -> None:
        self.sizes.append(len(data))
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def spy(ws: Any) -> Recording:
    """Record what reaches the transport, below the split (if any)."""
    writer = ws._writer  # noqa: SLF001 -- the layer under test sits right here
    inner = writer.transport
    if isinstance(inner, PieceWrites):
        recording = Recording(inner._transport)  # noqa: SLF001
        inner._transport = recording  # noqa: SLF001
    else:
        recording = Recording(inner)
        writer.transport = recording
    return recording


async def round_trip(tmp_path: Path, *, split: bool) -> tuple[list[int], list[int]]:
    """The client sends a 4 MiB frame, the server echoes its hash and a 4 MiB frame of its
    own; the sizes each side's transport was handed."""
    server_id, client_id = generate_identity(tmp_path / "s"), generate_identity(tmp_path / "c")
    tls = ServerTLS(server_id, [client_id.cert_der])
    server_sizes: list[int] = []
    reply = os.urandom(FRAME)

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        if split:
            assert split_tls_writes(ws)
        recording = spy(ws)
        got = await ws.receive_bytes()
        await ws.send_bytes(hashlib.sha256(got).digest())
        await ws.send_bytes(reply)
        server_sizes.extend(recording.sizes)
        await ws.receive()  # the client closes
        return ws

    app = web.Application(middlewares=[tls.middleware(join_paths=set())])
    app.router.add_get("/sync", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
        await site.start()
        port = runner.addresses[0][1]
        frame = os.urandom(FRAME)
        ctx = client_context(client_id, [server_id.cert_der])
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session, \
                session.ws_connect(f"wss://127.0.0.1:{port}/sync", ssl=ctx,
                                   server_hostname=SYNC_SERVER_NAME, max_msg_size=0) as ws:
            if split:
                assert split_tls_writes(ws)
                assert split_tls_writes(ws)  # twice: still one split
            recording = spy(ws)
            await ws.send_bytes(frame)
            assert await ws.receive_bytes() == hashlib.sha256(frame).digest()
            assert await ws.receive_bytes() == reply  # whole, in order
            client_sizes = list(recording.sizes)
    finally:
        await runner.cleanup()
    return client_sizes, server_sizes


async def test_frames_reach_tls_in_pieces_and_arrive_whole(tmp_path: Path) -> None:
    client_sizes, server_sizes = await round_trip(tmp_path, split=True)
    for sizes in (client_sizes, server_sizes):
        assert sizes
        assert max(sizes) <= PIECE
        assert sum(sizes) >= FRAME  # all of it went (plus the websocket headers)


async def test_without_the_split_a_frame_is_one_write(tmp_path: Path) -> None:
    """What the split is for: unsplit, the TLS transport is handed the 4 MiB at once."""
    client_sizes, server_sizes = await round_trip(tmp_path, split=False)
    assert max(client_sizes) >= FRAME
    assert max(server_sizes) >= FRAME


def test_small_writes_pass_as_they_are() -> None:
    written: list[bytes] = []

    class Sink:
        def write(self, data: Any) -> None:
            written.append(bytes(data))

        def is_closing(self) -> bool:
            return False

    pieces = PieceWrites(Sink(), piece=10)
    pieces.write(b"short")
    pieces.write(bytearray(b"0123456789abcdefghijKLM"))
    assert written == [b"short", b"0123456789", b"abcdefghij", b"KLM"]
    assert pieces.is_closing() is False  # everything else is the transport's own
