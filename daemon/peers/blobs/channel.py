"""The blob channel (issue 14, P9 and P1 during a transfer): chunk bytes off the main loop.

Why: on one link, TLS decryption and websocket framing of 1 MiB CHUNK frames ran on the
main loop, on the same socket as the note frames, so a note saved during a transfer waited
behind megabytes of decryption (the profile: bench/history/rounds.md, 02:57 run). A blob channel is a second
TLS websocket per link that carries CHUNK frames only, from the peer to the daemon that
dialed it:

- The receiving end (``InboundChannel``) is dialed and read by a thread of its own, on a
  blocking TLS socket (``daemon/peers/blobs/socket.py``: a minimal websocket client).
  CPython's ``ssl`` releases the GIL inside OpenSSL, so the decryption of chunk bytes runs
  on the other core while the main loop serves notes, and ``recv_into`` decrypts straight
  into each frame's buffer. Frames are decoded there (``attachment_protocol.decode``: pure)
  and handed to the main loop (``loop.call_soon_threadsafe``) -- several in one wake-up
  while the next is already waiting (``HANDOVER_MAX``) -- where the link's ``BlobLink``
  counts their credit and queues them for its disk task, as for a chunk of the main link.
  Nothing in this thread touches a store, a CRDT document or the transfers' book.
  (Until issue 14's round 3 the reader was one asyncio loop with aiohttp's client for all
  channels: asyncio's SSL protocol and aiohttp's reader copied each MiB several times and
  every chunk woke the main loop; bench/history/rounds.md has the profile.)
- It is authenticated exactly like the main link: mutual TLS 1.3 with the members'
  pinned certificates (the hub's ``client_context``), the server's certificate must be the
  same device as the link's (else the channel is closed and the next address tried); the
  accepting end (``link_channels.LinkChannels.accept``) takes it only from a member with a live link.
- The sending end (``OutgoingChannel``) is the accepted websocket, on the main loop: the
  link's ``send_bulk`` writes chunks there instead of the main link (server-to-client frames
  are not masked). Only CHUNK frames travel on it; REQUEST, CREDIT and MISSING stay on the
  main link.
- A link asks for blobs only once its channel is up or has failed to open (no address, a
  refusal): a chunk never overtakes another on two paths. If no channel opens, chunks go on
  the main link as before.
- The channel closes when its link ends; a channel that ends while its link is up ends the
  link too (chunks lost with it would hold credit for good): the next link resumes from the
  partial, as after any cut.

``STET_BLOB_CHANNEL=0`` turns the channel off (chunks on the main link; for comparisons).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Sequence

import aiohttp
from aiohttp import web

from stet.daemon.base.thread_priority import lower_blob_thread
from stet.daemon.peers.blobs.frame_buffers import FramePool
from stet.daemon.peers.blobs.socket import BlobSocket, ChannelError, HandshakeRefused
from stet.daemon.peers.tls import SYNC_SERVER_NAME
from stet.sync import attachment_protocol as ap
from stet.sync.device_ids import device_id_of

logger = logging.getLogger(__name__)

CHANNEL_PATH = "/stet/blobs"
OPEN_TIMEOUT_S = 10.0  # per address tried
MAX_ADDRESSES = 3  # addresses tried per link
HANDOVER_MAX = 4  # chunks handed to the main loop at most per wake-up (a quarter of the credit window)
_ENDS = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
Deliver = Callable[[ap.BlobFrame, int], None]  # (a CHUNK, its frame's size), on the main loop
Cut = Callable[[str], None]  # the channel ended by itself (why), on the main loop


def enabled() -> bool:
    return os.environ.get("STET_BLOB_CHANNEL", "1") != "0"


class ChannelReaders:
    """This daemon's receiving ends of blob channels: one thread each (``InboundChannel``)."""

    def __init__(self) -> None:
        self.channels: set[InboundChannel] = set()
        self.running = False

    def start(self) -> None:
        self.running = True

    async def stop(self) -> None:
        """Close every channel and wait for its thread (from the main loop)."""
        self.running = False
        channels = list(self.channels)
        for channel in channels:
            channel.close()
        for channel in channels:
            await asyncio.to_thread(channel.join, 10)


class InboundChannel:
    """This daemon's receiving end of one link's blob channel (made on the main loop; dialed
    and read in a thread of its own, on a blocking TLS socket: ``daemon/peers/blobs/socket.py``)."""

    def __init__(self, readers: ChannelReaders, device: str, deliver: Deliver, cut: Cut,
                 frames: FramePool | None = None) -> None:
        self.readers = readers
        self.device = device
        self.deliver = deliver
        self.cut = cut
        self.frames = frames  # where each frame is read into (the link's reused buffers)
        self.main = asyncio.get_running_loop()
        self.closing = False
        self.address: str | None = None
        self._socket: BlobSocket | None = None
        self._thread: threading.Thread | None = None
        # Chunks decoded in the channel's thread, waiting for the main loop: one wake-up of
        # the main loop takes every chunk that came meanwhile (a wake-up per chunk was a
        # quarter of the channel thread's time: the write to the loop's self-pipe).
        self._pending: list[tuple[ap.BlobFrame, int]] = []
        self._lock = threading.Lock()

    async def open(self, addresses: Sequence[str], ctx: ssl.SSLContext, *, initiated: bool) -> bool:
        """Dial the peer's channel at the first address that takes it; False: none did.
        ``initiated``: whether this daemon dialed the link (names the link to the peer)."""
        if not self.readers.running:
            return False
        path = f"{CHANNEL_PATH}?initiated={int(initiated)}"
        opened: asyncio.Future[str | None] = self.main.create_future()
        self._thread = threading.Thread(
            target=self._run, args=(list(addresses)[:MAX_ADDRESSES], path, ctx, opened),
            name="blob-channel", daemon=True)
        self.readers.channels.add(self)
        self._thread.start()
        try:
            self.address = await opened
        except Exception as exc:  # noqa: BLE001 -- the main link carries the chunks then
            logger.info("no blob channel to %s: %s", self.device[:7], exc)
            return False
        return self.address is not None

    def close(self) -> None:
        """The link ended: close the channel (from the main loop)."""
        self.closing = True
        sock = self._socket
        if sock is not None:
            sock.shutdown()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -- in the channel's thread ------------------------------------------------------------

    def _run(self, addresses: list[str], path: str, ctx: ssl.SSLContext,
             opened: asyncio.Future[str | None]) -> None:
        lower_blob_thread()  # the main loop (and a note saved meanwhile) first on a busy machine
        try:
            try:
                address = self._dial(addresses, path, ctx)
            except BaseException as exc:
                self._on_main(_resolve, opened, None, exc)
                raise
            self._on_main(_resolve, opened, address, None)
            if address is not None:
                self._receive()
        finally:
            self._on_main(self.readers.channels.discard, self)

    def _dial(self, addresses: list[str], path: str, ctx: ssl.SSLContext) -> str | None:
        for address in addresses:
            sock = None
            for attempt in range(2):  # once more after a 409: the peer may not have set its link up yet
                if self.closing:
                    return None
                try:
                    sock = BlobSocket.dial(address, path, ctx, SYNC_SERVER_NAME, OPEN_TIMEOUT_S, ap.MAX_FRAME)
                    break
                except HandshakeRefused as exc:
                    logger.info("blob channel to %s via %s refused: %s", self.device[:7], address, exc.status)
                    if exc.status != 409 or attempt:
                        break
                    time.sleep(0.5)  # noqa: ASYNC251 -- this thread's own wait, not the loop's
                except (OSError, ValueError, ChannelError) as exc:  # ssl.SSLError is an OSError
                    logger.info("blob channel to %s via %s failed: %s", self.device[:7], address, exc)
                    break
            if sock is None:
                continue
            der = sock.peer_cert_der()
            if der is None or device_id_of(der) != self.device:
                logger.warning("blob channel via %s reached another device: closed", address)
                sock.close()
                continue
            if self.frames is not None:
                sock.buffer = self.frames.take
            self._socket = sock
            if self.closing:  # closed meanwhile: close() found no socket to shut down
                sock.close()
                self._socket = None
                return None
            return address
        return None

    def _receive(self) -> None:
        sock = self._socket
        assert sock is not None
        why = "closed by the peer"
        batch: list[tuple[ap.BlobFrame, int]] = []
        try:
            while True:  # until the channel ends
                data = sock.read_message()
                if data is None:
                    return
                frame = ap.decode(data)  # strict; a view into ``data``, no copy
                if not isinstance(frame, ap.BlobFrame) or frame.type != ap.CHUNK:
                    raise ap.ProtocolError("only chunks travel on a blob channel")
                batch.append((frame, len(data)))
                if self.frames is not None:  # the next ones' bytes page-aligned (``frame_buffers``)
                    self.frames.lead = len(data) - len(frame.data)
                del data  # the chunk's own view holds its buffer, till the disk task gives it back
                # Hand over now unless the next frame is already here (then it goes too).
                if len(batch) >= HANDOVER_MAX or not sock.more_waiting():
                    self._hand_over(batch)
                    batch = []
        except (ap.ProtocolError, ChannelError, OSError) as exc:
            why = str(exc) or type(exc).__name__
        except Exception as exc:  # a bug here must still end the link, not hold its credit
            logger.exception("blob channel from %s failed", self.device[:7])
            why = f"failed: {exc!r}"
        finally:
            if batch:
                self._hand_over(batch)  # the chunks before the end are good ones
            sock.close()
            self._socket = None
            if not self.closing:
                self._on_main(self.cut, why)

    def _on_main(self, fn: Callable[..., object], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # the main loop is gone (shutting down)
            self.main.call_soon_threadsafe(fn, *args)

    def _hand_over(self, frames: list[tuple[ap.BlobFrame, int]]) -> None:
        with self._lock:
            wake = not self._pending
            self._pending.extend(frames)
        if wake:
            self._on_main(self._take)

    def _take(self) -> None:
        """On the main loop: every chunk handed over since the last wake-up, in order."""
        with self._lock:
            frames, self._pending = self._pending, []
        for frame, size in frames:
            self.deliver(frame, size)


def _resolve(future: asyncio.Future[str | None], result: str | None, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
    else:
        future.set_result(result)


class OutgoingChannel:
    """The sending end of a peer's blob channel: the websocket it dialed, on the main loop."""

    def __init__(self) -> None:
        self.ws = web.WebSocketResponse(max_msg_size=64 * 1024, heartbeat=20)
        self.opened = asyncio.Event()  # set once prepared (or failed)
        self.failed = False

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        await self.opened.wait()
        if self.failed or self.ws.closed:
            raise ConnectionError("the blob channel is closed")
        await self.ws.send_bytes(data)  # type: ignore[arg-type]  # aiohttp takes any bytes-like

    async def serve(self, request: web.Request, link_ended: asyncio.Event) -> str:
        """Take the channel and hold it until it or the link ends; returns why it ended."""
        try:
            await self.ws.prepare(request)
        except Exception:
            self.failed = True
            raise
        finally:
            self.opened.set()
        ended = asyncio.ensure_future(link_ended.wait())
        reading = asyncio.ensure_future(self._read())
        try:
            await asyncio.wait((ended, reading), return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            self.failed = True
            with contextlib.suppress(Exception):
                await self.ws.close()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading
        if link_ended.is_set() or reading.cancelled() or reading.exception() is not None:
            return "the link ended"
        return reading.result()

    async def _read(self) -> str:
        """Nothing but a close is expected from the receiver."""
        msg = await self.ws.receive()
        if msg.type in _ENDS:
            return "closed by the peer"
        if msg.type == aiohttp.WSMsgType.ERROR:
            return f"websocket error: {self.ws.exception()}"
        return f"unexpected message on a blob channel: {msg.type}"
