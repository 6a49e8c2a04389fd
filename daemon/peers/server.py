"""The peer port: one TLS 1.3 listener (``peer_tls.ServerTLS``) with three routes --
``/stet/peer`` accepts a member's link, ``/stet/join`` a joining device's handshake, and
``/stet/blobs`` a member's blob channel for a live link.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
from aiohttp import web

from stet.daemon.base.slow_clients import with_header_deadline
from stet.daemon.peers.blobs import channel as blob_channel
from stet.daemon.peers.tls import PEER_TLS, ServerTLS
from stet.sync import peer_protocol as pp
from stet.sync.errors import StetError
from stet.sync.vault_index import Member

if TYPE_CHECKING:
    from stet.daemon.peers.invite_crypto import KeyWork

logger = logging.getLogger(__name__)

# Runs an accepted websocket as a link: (device, initiator, ws, close) -> why it ended.
RunLink = Callable[[str, bool, Any, Any], Awaitable[str]]


class Joins(Protocol):
    """The inviter's join desk (``peer_joins.JoinDesk``)."""

    def prepare(self) -> KeyWork | None: ...

    async def handle(self, frame: pp.Frame, work: KeyWork | None = None) -> bytes: ...


class PeerServer:
    def __init__(self, tls: ServerTLS, members: Callable[[], dict[str, Member]], run_link: RunLink,
                 joins: Joins,
                 accept_blobs: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> None:
        self.tls = tls
        self.members = members
        self.run_link = run_link
        self.joins = joins
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
        ws = web.WebSocketResponse(max_msg_size=1024 * 1024)
        await ws.prepare(request)
        work = self.joins.prepare()  # the proof's checker loads while the request is on its way
        try:
            msg = await asyncio.wait_for(ws.receive(), 30)
            if msg.type != aiohttp.WSMsgType.BINARY:
                raise pp.ProtocolError("expected a join request")
            frame = pp.decode(bytes(msg.data))
            if frame.type != pp.JOIN:
                raise pp.ProtocolError("expected a join request")
            reply = await self.joins.handle(frame, work)
            await ws.send_bytes(reply)
        except (TimeoutError, pp.ProtocolError, StetError) as exc:
            logger.warning("refused a join: %s", exc)
            with contextlib.suppress(Exception):
                await ws.send_bytes(pp.encode(pp.ERROR, {"code": "join_refused", "message": "join refused"}))
        finally:
            if work is not None:
                await work.close()
        await ws.close()
        return ws
