"""One live link's state: its session, its outbox of frames, its blob channel's two ends.

The registry of these is ``PeerHub.links`` (one per device); running one is
``peer_links.LinkRunner``. ``enqueue`` and ``end`` are what every part of the hub does to
a link: queue a frame behind the others (a link that cannot keep up is ended, its peer
resyncs) and end it (the writer stops, the websocket closes).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from stet.daemon.peers.blobs import channel as blob_channel
from stet.daemon.peers.change_frames import ChangeFrames
from stet.daemon.peers.session import PeerLink, PeerSession

logger = logging.getLogger(__name__)

OUTBOX_LIMIT = 10_000


@dataclass
class LiveLink:
    link: PeerLink
    session: PeerSession
    outbox: asyncio.Queue[bytes | asyncio.Event | None] = field(default_factory=asyncio.Queue)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    close: Any = None  # coroutine function closing the websocket
    frames: ChangeFrames | None = None  # local changes, gathered per turn of the loop
    # The blob channel (daemon/peers/blobs/channel.py): chunks from the peer / chunks to it.
    channel_in: blob_channel.InboundChannel | None = None
    channel_out: blob_channel.OutgoingChannel | None = None
    channel_decided: asyncio.Event = field(default_factory=asyncio.Event)
    channel_received: int = 0
    channel_sent: int = 0


def end(live: LiveLink, why: str) -> None:
    """End the link: its writer stops after what is queued, its websocket closes."""
    live.link.closed = True
    live.outbox.put_nowait(None)
    if live.close is not None:
        asyncio.get_running_loop().create_task(live.close())


def enqueue(live: LiveLink, frame: bytes) -> None:
    """Queue a frame for the link's writer; a link this far behind is ended (it resyncs)."""
    if live.outbox.qsize() >= OUTBOX_LIMIT:
        logger.warning("link to %s cannot keep up: resyncing it", live.link.device_id[:7])
        end(live, "outbox full")
        return
    live.outbox.put_nowait(frame)
