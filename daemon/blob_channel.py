"""The blob channel (issue 14, P9 and P1 during a transfer): chunk bytes off the main loop.

Profiled on the receiver of a 1 GB transfer (bench/RESULTS.md, 02:57 run), 43 % of its
samples were the main loop's socket read path: TLS decryption and aiohttp's websocket
framing of 1 MiB CHUNK frames, on the same loop (and the same socket) as the note frames,
so a note saved meanwhile waited behind megabytes of decryption. A blob channel is a second
TLS websocket per link that carries CHUNK frames only, from the peer to the daemon that
dialed it:

- The receiving end (``InboundChannel``) is dialed and read by ``BlobThread``: one thread
  per daemon running its own asyncio loop (with its own aiohttp ``ClientSession``) for all
  the daemon's channels. CPython's ``ssl`` releases the GIL inside OpenSSL, so the
  decryption of chunk bytes runs on the other core while the main loop serves notes. Frames
  are decoded there (``attachment_protocol.decode``: pure) and handed to the main loop
  (``loop.call_soon_threadsafe``), where the link's ``BlobLink`` counts their credit and
  queues them for its disk task, as for a chunk of the main link. Nothing in this thread
  touches a store, a CRDT document or the transfers' book.
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
import concurrent.futures
import contextlib
import logging
import os
import ssl
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from stet.sync import attachment_protocol as ap
from stet.sync.device_ids import device_id_of

from .peer_tls import SYNC_SERVER_NAME, peer_cert_der
from .thread_priority import lower_blob_thread

logger = logging.getLogger(__name__)

CHANNEL_PATH = "/stet/blobs"
OPEN_TIMEOUT_S = 10.0  # per address tried
MAX_ADDRESSES = 3  # addresses tried per link
T = TypeVar("T")
_ENDS = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
Deliver = Callable[[ap.BlobFrame, int], None]  # (a CHUNK, its frame's size), on the main loop
Cut = Callable[[str], None]  # the channel ended by itself (why), on the main loop


def enabled() -> bool:
    return os.environ.get("STET_BLOB_CHANNEL", "1") != "0"


class BlobThread:
    """One thread with its own asyncio loop for every blob channel of this daemon."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, args=(loop,), name="blob-channel", daemon=True)
        self.loop = loop
        self._thread.start()

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        lower_blob_thread()  # the main loop (and a note saved meanwhile) first on a busy machine
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.loop is None or self.loop.is_closed():
            coro.close()
            raise RuntimeError("the blob thread is not running")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def session(self) -> aiohttp.ClientSession:
        """The thread's client session (made in the thread's loop; call only there)."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _close_session(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def stop(self) -> None:
        """Close every channel and end the thread (from the main loop)."""
        loop, thread = self.loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.wrap_future(self.submit(self._close_session())), 10)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 10)
        self._thread = None


class InboundChannel:
    """This daemon's receiving end of one link's blob channel (made on the main loop, run
    in the blob thread)."""

    def __init__(self, thread: BlobThread, device: str, deliver: Deliver, cut: Cut) -> None:
        self.thread = thread
        self.device = device
        self.deliver = deliver
        self.cut = cut
        self.main = asyncio.get_running_loop()
        self.closing = False
        self.address: str | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        # Chunks decoded in the blob thread, waiting for the main loop: one wake-up of the
        # main loop takes every chunk that came meanwhile (each wake-up is a write to its
        # self-pipe and a turn of the loop: per chunk they were ~5 % of the receiver's samples).
        self._pending: list[tuple[ap.BlobFrame, int]] = []
        self._lock = threading.Lock()

    async def open(self, addresses: Sequence[str], ctx: ssl.SSLContext, *, initiated: bool) -> bool:
        """Dial the peer's channel at the first address that takes it; False: none did.
        ``initiated``: whether this daemon dialed the link (names the link to the peer)."""
        path = f"{CHANNEL_PATH}?initiated={int(initiated)}"
        try:
            future = self.thread.submit(self._open(list(addresses)[:MAX_ADDRESSES], path, ctx))
            self.address = await asyncio.wrap_future(future)
        except Exception as exc:  # the thread stopped, or the dial failed: the main link carries
            logger.info("no blob channel to %s: %s", self.device[:7], exc)
            return False
        return self.address is not None

    def close(self) -> None:
        """The link ended: close the channel (from the main loop)."""
        self.closing = True
        with contextlib.suppress(RuntimeError):
            self.thread.submit(self._close())

    # -- in the blob thread -----------------------------------------------------------------

    async def _open(self, addresses: list[str], path: str, ctx: ssl.SSLContext) -> str | None:
        session = await self.thread.session()
        for address in addresses:
            ws = None
            for attempt in range(2):  # once more after a 409: the peer may not have set its link up yet
                if self.closing:
                    return None
                try:
                    ws = await asyncio.wait_for(session.ws_connect(
                        f"wss://{address}{path}", ssl=ctx, server_hostname=SYNC_SERVER_NAME,
                        max_msg_size=ap.MAX_FRAME, heartbeat=20, timeout=aiohttp.ClientWSTimeout(ws_close=5),
                    ), OPEN_TIMEOUT_S)
                    break
                except aiohttp.WSServerHandshakeError as exc:
                    logger.info("blob channel to %s via %s refused: %s", self.device[:7], address, exc.status)
                    if exc.status != 409 or attempt:
                        break
                    await asyncio.sleep(0.5)
                except (OSError, aiohttp.ClientError, TimeoutError) as exc:
                    logger.info("blob channel to %s via %s failed: %s", self.device[:7], address, exc)
                    break
            if ws is None:
                continue
            der = peer_cert_der(ws)
            if der is None or device_id_of(der) != self.device:
                logger.warning("blob channel via %s reached another device: closed", address)
                await ws.close()
                continue
            if self.closing:
                await ws.close()
                return None
            self._ws = ws
            asyncio.get_running_loop().create_task(self._receive(ws), name=f"blob-channel:{self.device[:7]}")
            return address
        return None

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        why = "closed by the peer"
        try:
            while True:  # until the channel ends
                msg = await ws.receive()
                if msg.type == aiohttp.WSMsgType.BINARY:
                    data: bytes = msg.data
                    frame = ap.decode(data)  # strict; a view into ``data``, no copy
                    if not isinstance(frame, ap.BlobFrame) or frame.type != ap.CHUNK:
                        raise ap.ProtocolError("only chunks travel on a blob channel")
                    self._hand_over(frame, len(data))
                elif msg.type in _ENDS:
                    return
                elif msg.type == aiohttp.WSMsgType.ERROR:
                    why = f"websocket error: {ws.exception()}"
                    return
                else:
                    raise ap.ProtocolError(f"unexpected websocket message type {msg.type}")
        except ap.ProtocolError as exc:
            why = str(exc)
        except asyncio.CancelledError:
            why = "stopping"
            raise
        finally:
            with contextlib.suppress(Exception):
                await ws.close()
            if not self.closing:
                with contextlib.suppress(RuntimeError):  # the main loop is gone (shutting down)
                    self.main.call_soon_threadsafe(self.cut, why)

    def _hand_over(self, frame: ap.BlobFrame, size: int) -> None:
        with self._lock:
            wake = not self._pending
            self._pending.append((frame, size))
        if wake:
            self.main.call_soon_threadsafe(self._take)

    def _take(self) -> None:
        """On the main loop: every chunk handed over since the last wake-up, in order."""
        with self._lock:
            frames, self._pending = self._pending, []
        for frame, size in frames:
            self.deliver(frame, size)

    async def _close(self) -> None:
        if self._ws is not None:
            await self._ws.close()


class OutgoingChannel:
    """The sending end of a peer's blob channel: the websocket it dialed, on the main loop."""

    def __init__(self) -> None:
        self.ws = web.WebSocketResponse(max_msg_size=64 * 1024, heartbeat=20)
        self.opened = asyncio.Event()  # set once prepared (or failed)
        self.failed = False

    async def send(self, data: bytes) -> None:
        await self.opened.wait()
        if self.failed or self.ws.closed:
            raise ConnectionError("the blob channel is closed")
        await self.ws.send_bytes(data)

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
