"""Running one link: an authenticated websocket becomes a ``PeerSession`` with its receive
loop, its writer task (the outbox, in order), its raw and bulk senders, and its hooks into
the attachment transfers and the blob channel.

One link per device: when two exist (both sides dialed), the one initiated by the smaller
device ID survives on both sides.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from stet.daemon.peers.blobs.link_channels import LinkChannels
from stet.daemon.peers.blobs.transfer import BlobTransfers, LinkPort
from stet.daemon.peers.change_frames import ChangeFrames
from stet.daemon.peers.link import LiveLink, end, enqueue
from stet.daemon.peers.session import LinkClosed, PeerLink, PeerSession, VaultAccess, run_session
from stet.sync import attachment_protocol as ap
from stet.sync import peer_protocol as pp

logger = logging.getLogger(__name__)


class LinkRunner:
    def __init__(self, device_id: str, links: dict[str, LiveLink], last_seen: dict[str, float],
                 accesses: Callable[[], dict[str, VaultAccess]], transfers: BlobTransfers,
                 channels: LinkChannels, publish: Callable[[str, dict[str, Any]], None]) -> None:
        """``links`` / ``last_seen``: the hub's registry, kept up to date here;
        ``publish``: ``peer.connected`` / ``peer.disconnected`` to every vault's stream."""
        self.device_id = device_id
        self.links = links
        self.last_seen = last_seen
        self.accesses = accesses
        self.transfers = transfers
        self.channels = channels
        self.publish = publish

    async def run(self, device: str, initiator: bool, ws: Any, close: Any,
                  address: str | None = None) -> str:
        """Run one authenticated websocket as a link; returns why it ended. ``address``: the
        one dialed (an outbound link), where its blob channel is dialed first."""
        preferred_initiator = min(device, self.device_id) == self.device_id
        existing = self.links.get(device)
        if existing is not None and not existing.link.closed:
            if initiator == preferred_initiator:
                end(existing, "replaced by the preferred link")
                await existing.ended.wait()
            else:
                return "duplicate link"
        live = LiveLink(PeerLink(device, self._raw_sender(ws), initiator), None)  # type: ignore[arg-type]
        live.session = PeerSession(live.link, self.device_id, self.accesses())
        live.close = close
        live.frames = ChangeFrames(live.session, lambda frame: enqueue(live, frame))
        live.link.send_raw = self._enqueuer(live)
        self.links[device] = live
        writer = asyncio.create_task(self._writer(live, ws), name=f"peer-writer:{device[:7]}")
        blobs = self.transfers.link_up(LinkPort(device, lambda: live.link.vaults,
                                                lambda frame: enqueue(live, frame),
                                                self._bulk_sender(live, ws),
                                                functools.partial(self._blobs_ready, live)))
        self.channels.open(live, blobs, address)
        self.publish("peer.connected", {"device": device})
        logger.info("linked with %s (%s)", device[:7], "outbound" if initiator else "inbound")

        async def receive() -> bytes | None:
            msg = await ws.receive()
            while msg.type == aiohttp.WSMsgType.BINARY and ap.is_attachment_frame(msg.data):
                live.link.bytes_received += len(msg.data)
                await blobs.on_frame(bytes(msg.data))  # attachment frames: blob_transfer.py
                msg = await ws.receive()
            if msg.type in (aiohttp.WSMsgType.BINARY,):
                return bytes(msg.data)
            if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                return None
            if msg.type == aiohttp.WSMsgType.ERROR:
                raise LinkClosed(f"websocket error: {ws.exception()}")
            raise pp.ProtocolError(f"unexpected websocket message type {msg.type}")

        why = "cancelled"
        try:
            why = await run_session(live.session, receive)
        finally:
            live.link.closed = True
            self.transfers.link_down(blobs)
            if live.channel_in is not None:
                live.channel_in.close()
            live.outbox.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer, 5)
            with contextlib.suppress(Exception):
                await close()
            if self.links.get(device) is live:
                del self.links[device]
            self.last_seen[device] = time.time()
            live.ended.set()
            self.publish("peer.disconnected", {"device": device, "reason": why})
            logger.info("link with %s ended: %s", device[:7], why)
        return why

    def _raw_sender(self, ws: Any) -> Any:
        async def send(data: bytes) -> None:
            await ws.send_bytes(data)

        return send

    def _bulk_sender(self, live: LiveLink, ws: Any) -> Any:
        """Attachment chunks go straight to the websocket (not behind the outbox), so a
        note frame waits for at most the chunk on the wire, never a queue of them."""
        async def send(data: bytes | bytearray | memoryview) -> None:
            if live.link.closed:
                raise ConnectionError("the link is closed")
            live.link.bytes_sent += len(data)
            channel = live.channel_out
            if channel is not None:  # the peer's blob channel: off the note frames' socket
                live.channel_sent += len(data)
                await channel.send(data)
            else:
                await ws.send_bytes(data)

        return send

    async def _blobs_ready(self, live: LiveLink) -> None:
        """A link asks for blobs once its first sync is done and its blob channel is up or
        could not open: a chunk never overtakes another on two paths."""
        await live.session.synced.wait()
        await live.channel_decided.wait()

    def _enqueuer(self, live: LiveLink) -> Any:
        async def send(data: bytes) -> None:
            enqueue(live, data)

        return send

    async def _writer(self, live: LiveLink, ws: Any) -> None:
        """The link's one writer: frames in the order queued; a marker (an ``Event``) is set
        once every frame before it went to the websocket."""
        while True:
            frame = await live.outbox.get()
            if frame is None:
                return
            if isinstance(frame, asyncio.Event):  # flush_vault_links: all before it is sent
                frame.set()
                continue
            try:
                live.link.bytes_sent += len(frame)
                await ws.send_bytes(frame)
            except (ConnectionError, RuntimeError, aiohttp.ClientError) as exc:
                logger.info("send to %s failed: %s", live.link.device_id[:7], exc)
                return
