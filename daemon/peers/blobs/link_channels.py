"""A link's blob channel (daemon/peers/blobs/channel.py), both ends: dialing the peer's for the
chunks it sends us, and accepting the peer's on ``/stet/blobs`` for the chunks we send it.

Either end that stops while its link is up ends the link (chunks lost with it would hold
credit for good); the next link resumes from the partial.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from stet.daemon.identity.device_cert import DeviceIdentity
from stet.daemon.peers.blobs import channel as blob_channel
from stet.daemon.peers.link import LiveLink, end
from stet.daemon.peers.tls import PEER_TLS, client_context
from stet.sync import attachment_protocol as ap
from stet.sync.vault_index import Member

logger = logging.getLogger(__name__)


class LinkChannels:
    def __init__(self, identity: DeviceIdentity, readers: blob_channel.ChannelReaders,
                 links: Mapping[str, LiveLink], members: Callable[[], dict[str, Member]],
                 trusted_certs: Callable[[], list[bytes]],
                 known_addresses: Callable[[str], list[str]]) -> None:
        """``links``: the hub's registry; ``known_addresses``: a device's learned addresses."""
        self.identity = identity
        self.readers = readers  # a thread per blob channel, off the main loop
        self.links = links
        self.members = members
        self.trusted_certs = trusted_certs
        self.known_addresses = known_addresses
        self._tasks: set[asyncio.Task[None]] = set()

    def open(self, live: LiveLink, blobs: Any, address: str | None) -> None:
        """Dial the peer's blob channel for this link (the dialed address first);
        ``live.channel_decided`` is set once it is up or could not open."""
        device = live.link.device_id
        addresses = [address] if address else []
        addresses += [a for a in self.known_addresses(device) if a not in addresses]
        if not addresses or not blob_channel.enabled():
            live.channel_decided.set()
            return

        def deliver(frame: ap.BlobFrame, size: int) -> None:
            if live.link.closed:
                return
            live.link.bytes_received += size
            live.channel_received += size
            try:
                blobs.chunk(frame)
            except ap.ProtocolError as exc:
                end(live, f"blob channel: {exc}")

        def cut(why: str) -> None:
            if not live.link.closed:
                logger.info("blob channel from %s ended (%s): ending its link", device[:7], why)
                end(live, f"blob channel ended: {why}")

        async def opening() -> None:
            try:
                channel = blob_channel.InboundChannel(self.readers, device, deliver, cut, blobs.frames)
                live.channel_in = channel
                ctx = client_context(self.identity, self.trusted_certs())
                if await channel.open(addresses, ctx, initiated=live.link.initiator):
                    logger.info("blob channel from %s via %s", device[:7], channel.address)
                else:
                    live.channel_in = None
                if live.link.closed:
                    channel.close()
            finally:
                live.channel_decided.set()

        task = asyncio.create_task(opening(), name=f"blob-channel-open:{device[:7]}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def accept(self, request: web.Request) -> web.StreamResponse:
        """A member with a live link dials its blob channel: its chunks from here go there."""
        info = request[PEER_TLS]
        device = info.device_id
        if info.join or device is None or device not in self.members():
            raise web.HTTPForbidden()
        live = self.links.get(device)
        # The channel belongs to the link the dialer initiated (or not): never to another
        # link with the same device (two dialed at once, one of them ending).
        initiated = request.query.get("initiated") == "1"
        if live is None or live.link.closed or live.link.initiator == initiated or not blob_channel.enabled():
            raise web.HTTPConflict(text="no such live link with this device")
        channel = blob_channel.OutgoingChannel()
        live.channel_out = channel
        why = "could not be opened"  # a sender waiting for it stopped: the link goes too
        try:
            why = await channel.serve(request, live.ended)
        finally:
            if live.channel_out is channel:
                live.channel_out = None
            if not live.link.closed:
                logger.info("blob channel to %s ended (%s): ending its link", device[:7], why)
                end(live, f"blob channel ended: {why}")
        return channel.ws
