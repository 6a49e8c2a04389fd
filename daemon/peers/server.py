"""The peer port: one TLS 1.3 listener (``peer_tls.ServerTLS``) with three routes --
``/stet/peer`` accepts a member's link, ``/stet/join`` a joining device's handshake, and
``/stet/blobs`` a member's blob channel for a live link.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from stet.daemon.base.slow_clients import with_header_deadline
from stet.daemon.peers.blobs import channel as blob_channel
from stet.daemon.peers.joins import AttemptsPerAddress, JoinBusy
from stet.daemon.peers.tls import PEER_TLS, ServerTLS
from stet.sync import peer_protocol as pp
from stet.sync.errors import StetError
from stet.sync.vault_index import Member

logger = logging.getLogger(__name__)

# Runs an accepted websocket as a link: (device, initiator, ws, close) -> why it ended.
RunLink = Callable[[str, bool, Any, Any], Awaitable[str]]


class Joins(Protocol):
    """The inviter's join desk (``peer_joins.JoinDesk``)."""

    async def handle(self, frame: pp.Frame) -> bytes: ...


class PeerServer:
    def __init__(self, tls: ServerTLS, members: Callable[[], dict[str, Member]], run_link: RunLink,
                 joins: Joins,
                 accept_blobs: Callable[[web.Request], Awaitable[web.StreamResponse]], *,
                 join_attempts_per_minute: int = 10) -> None:
        self.tls = tls
        self.members = members
        self.run_link = run_link
        self.joins = joins
        self.join_attempts = AttemptsPerAddress(join_attempts_per_minute)
        self._rate_warned = -60.0
        self.accept_blobs = accept_blobs
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> None:
        app = web.Application(client_max_size=pp.MAX_FRAME,
                              middlewares=[self.tls.middleware(join_paths=["/stet/join"])])
        app.router.add_get("/stet/peer", self._accept_peer)
        app.router.add_get("/stet/join", self._accept_join)
        app.router.add_get(blob_channel.CHANNEL_PATH, self.accept_blobs)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        with_header_deadline(self._runner)  # slow half-sent headers are cut off
        site = web.TCPSite(self._runner, host, port, ssl_context=self.tls.context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _accept_peer(self, request: web.Request) -> web.StreamResponse:
        info = request[PEER_TLS]
        device = info.device_id
        if info.join or device is None or device not in self.members():
            raise web.HTTPForbidden()
        ws = web.WebSocketResponse(max_msg_size=pp.MAX_FRAME, heartbeat=20)
        await ws.prepare(request)
        await self.run_link(device, False, ws, ws.close)
        return ws

    async def _accept_join(self, request: web.Request) -> web.StreamResponse:
        address = request.remote or ""
        now = time.monotonic()
        if not self.join_attempts.allow(address, now):
            if now - self._rate_warned >= 60:  # a flood writes one line a minute, not one a socket
                self._rate_warned = now
                logger.warning("refusing join sockets from %s: over [peer] join_attempts_per_minute", address)
            return web.Response(status=429, text="too many join attempts from this address: "
                                                 "try again in a minute\n")
        ws = web.WebSocketResponse(max_msg_size=1024 * 1024)
        await ws.prepare(request)
        try:
            msg = await asyncio.wait_for(ws.receive(), 30)
            if msg.type != aiohttp.WSMsgType.BINARY:
                raise pp.ProtocolError("expected a join request")
            frame = pp.decode(bytes(msg.data))
            if frame.type != pp.JOIN:
                raise pp.ProtocolError("expected a join request")
            reply = await self.joins.handle(frame)
            await ws.send_bytes(reply)
        except JoinBusy as exc:
            logger.warning("refused a join from %s: %s", address, exc)
            with contextlib.suppress(Exception):
                await ws.send_bytes(pp.encode(pp.ERROR, {"code": exc.code, "message": exc.message}))
        except (TimeoutError, pp.ProtocolError, StetError) as exc:
            logger.warning("refused a join: %s", exc)
            with contextlib.suppress(Exception):
                await ws.send_bytes(pp.encode(pp.ERROR, {"code": "join_refused", "message": "join refused"}))
        await ws.close()
        return ws
