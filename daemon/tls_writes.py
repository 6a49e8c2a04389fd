"""A peer link's large frames handed to TLS in pieces (P7).

asyncio's TLS transport encrypts each ``write`` whole into an OpenSSL memory BIO before
it goes to the socket, and that BIO keeps its largest size for the life of the
connection: a first sync's 4 MiB frames left the serving daemon holding ~4.3 MiB of
native memory (one mmapped block, ``mallinfo2().hblkhd``) while the link stayed up --
A's extra ~4 MB after serving B's first sync (bench/RESULTS.md, P7). Written in pieces of
``PIECE`` bytes the BIO never grows past one piece; the bytes on the wire are the same
(the TLS records are 16 KiB at most either way).
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

PIECE = 256 * 1024  # bytes handed to the TLS transport at a time (asyncio reads 256 KiB too)


class PieceWrites:
    """Stands in for a transport: ``write`` hands large data over in pieces; everything
    else is the transport's own."""

    def __init__(self, transport: Any, piece: int = PIECE) -> None:
        self._transport = transport
        self._piece = piece

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) <= self._piece:
            self._transport.write(data)
            return
        view = memoryview(data).cast("B")
        for start in range(0, len(view), self._piece):
            self._transport.write(view[start:start + self._piece])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def split_tls_writes(ws: Any, piece: int = PIECE) -> bool:
    """Make an aiohttp websocket (either side) hand its frames to the TLS transport in
    pieces. False (and nothing changed) where its writer or transport is not found."""
    writer = getattr(ws, "_writer", None)  # aiohttp's WebSocketWriter (both sides)
    transport = getattr(writer, "transport", None)
    if writer is None or transport is None:
        logger.debug("no websocket writer to split writes for")
        return False
    if isinstance(transport, PieceWrites):
        return True
    if transport.get_extra_info("sslcontext") is None:  # not TLS: nothing kept per write
        return False
    writer.transport = PieceWrites(transport, piece)
    return True
