"""Serving this home's blobs to one peer (SPEC §3.14): REQUEST in, CHUNKs out, under credit.

A request is served only when the link shares the vault it names and that vault refers to
the blob (its attachment index or its versions: ``sync/blob_references``), and the store
holds it at the announced size; otherwise the answer is MISSING with the reason, and the
peer asks someone else. Nothing is served across vaults by hash alone.

One task per link sends the requests in turn, from the offset asked (a resume sends only
the rest): the chunks (≤ 1 MiB each) are read a few at a time in a worker thread from a
file kept open for the request, the next few while these go out, so a blob is never whole
in memory and the link does not wait for the disk between batches. A chunk goes only
while the link's credit (``SendCredit``) lasts; the peer's CREDIT frames give more.
Chunks are written straight to the websocket (``send_bulk``), which waits while the
transport is full, so at most about one chunk sits ahead of a note frame on the wire. A
second request for the same blob replaces the first (the peer resumed from elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, BinaryIO

from stet.daemon.peers.blobs.frame_buffers import FramePool
from stet.sync import attachment_protocol as ap
from stet.sync.blob_store import BlobStore

if TYPE_CHECKING:
    from stet.daemon.peers.blobs.transfer import LinkPort, Referenced

logger = logging.getLogger(__name__)
READ_CHUNKS = 4  # chunks read per trip to a worker thread
MAX_QUEUED = 64  # requests waiting per link; more are answered MISSING


class BlobSender:
    def __init__(self, blobs: BlobStore, port: LinkPort, references: Referenced,
                 pool: Executor | None = None) -> None:
        self.blobs = blobs
        self.pool = pool  # worker threads for reading (None: the loop's default pool)
        self.port = port
        self.references = references
        self.credit = ap.SendCredit()
        self._more = asyncio.Event()  # credit was granted, or a request came
        self._jobs: deque[ap.BlobFrame] = deque()
        self._current: ap.BlobFrame | None = None
        self._prepared: tuple[ap.BlobFrame, asyncio.Future[Opened]] | None = None  # the next one, opened
        self._task: asyncio.Task[None] | None = None
        self.sent_bytes = 0
        # Frames read into reused buffers (``frame_buffers``): at most the 3 batches in
        # memory at once, given back as each is sent.
        self.frames = FramePool(ap.MAX_FRAME, 3 * READ_CHUNKS)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"blob-send:{self.port.device[:7]}")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._jobs.clear()
        if self._prepared is not None:
            self._prepared[1].add_done_callback(_close_opened)
            self._prepared = None

    def grant(self, amount: int) -> None:
        self.credit.grant(amount)
        self._more.set()

    def request(self, frame: ap.BlobFrame) -> None:
        reason = self._refusal(frame)
        if reason is not None:
            logger.info("not sending blob %s to %s: %s", frame.sha256[:12], self.port.device[:7], reason)
            self.port.send(ap.encode_missing(frame.vault, frame.sha256, reason, frame.offset, frame.total))
            return
        for job in list(self._jobs):
            if job.sha256 == frame.sha256:
                self._jobs.remove(job)
        if len(self._jobs) >= MAX_QUEUED:  # a peer asks for a few at a time; this one floods
            self.port.send(ap.encode_missing(frame.vault, frame.sha256, "too many requests at once",
                                             frame.offset, frame.total))
            return
        self._jobs.append(frame)
        self._more.set()

    def _refusal(self, frame: ap.BlobFrame) -> str | None:
        if frame.vault not in self.port.vaults():
            return "not a vault this link shares"
        if not self.references(frame.vault, frame.sha256):
            return "not an attachment of that vault"
        try:
            size = self.blobs.size(frame.sha256)
        except FileNotFoundError:
            return "not held here"
        if size != frame.total:
            return f"held with {size} bytes, not {frame.total}"
        return None

    async def _run(self) -> None:
        while True:
            while not self._jobs:
                self._more.clear()
                await self.frames.wait_or_clear(self._more.wait)  # idle: the buffers go
            job = self._jobs.popleft()
            self._current = job
            try:
                await self._send(job)
            except (ConnectionError, RuntimeError) as exc:
                logger.info("sending blobs to %s stopped: %s", self.port.device[:7], exc)
                return
            except OSError as exc:
                logger.warning("reading blob %s failed: %s", job.sha256[:12], exc)
                self.port.send(ap.encode_missing(job.vault, job.sha256, "cannot be read here",
                                                 job.offset, job.total))
            finally:
                self._current = None

    def _superseded(self, job: ap.BlobFrame) -> bool:
        return any(j.sha256 == job.sha256 for j in self._jobs)

    async def _send(self, job: ap.BlobFrame) -> None:
        loop = asyncio.get_running_loop()
        ranges = ap.chunk_ranges(job.total, job.offset)
        batches = [ranges[i:i + READ_CHUNKS] for i in range(0, len(ranges), READ_CHUNKS)]
        opened = self._take_prepared(job)
        if opened is None:
            opened = loop.run_in_executor(self.pool, _open_and_read, self.blobs, job,
                                          batches[0] if batches else [], self.frames)
        try:
            # Shielded: a stop (the link ended) must not cancel the open under way or
            # queued in its thread -- its file would never be closed. It is closed once open.
            f, first = await asyncio.shield(opened)
        except asyncio.CancelledError:
            opened.add_done_callback(_close_opened)
            raise
        # Several chunks per trip to a worker thread (each trip costs milliseconds on a loaded
        # machine), and the next batch is read while this one goes out (the link never waits
        # for the disk between batches; during the last one, the next blob's file is opened
        # and its first batch read): at most 3 x READ_CHUNKS MiB in memory.
        ahead: asyncio.Future[list[Frame]] | None = None
        try:
            for i, batch in enumerate(batches):
                if i == 0:
                    frames = first
                else:
                    assert ahead is not None
                    frames = await ahead
                if i + 1 < len(batches):
                    ahead = loop.run_in_executor(self.pool, _read_frames, f, job, batches[i + 1], self.frames)
                else:
                    ahead = None
                    self._prepare_next()
                for (_offset, length), frame in zip(batch, frames, strict=True):
                    # Let the note frames queued meanwhile go first: a write the transport
                    # takes at once does not yield, and without this a batch read ahead
                    # (MiBs) went into the socket in one turn of the loop ahead of them.
                    await asyncio.sleep(0)
                    while not self.credit.can_send(length):
                        self._more.clear()
                        await self._more.wait()
                    if self._superseded(job):
                        return
                    self.credit.spend(length)
                    self.sent_bytes += length
                    if isinstance(frame, memoryview):
                        # A view of its own for the transport: one it keeps (to send later)
                        # keeps the buffer from reuse, which ``give`` then sees.
                        await self.port.send_bulk(memoryview(frame))
                        self.frames.give(frame)
                    else:
                        await self.port.send_bulk(frame)
        finally:
            if ahead is not None:  # the file stays open until the read under way is done
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await asyncio.shield(ahead)
            # Shielded too: cancelled, the close still runs (queued behind other reads, it
            # had not started: the file stayed open until the garbage collector found it).
            with contextlib.suppress(OSError):
                await asyncio.shield(loop.run_in_executor(self.pool, f.close))

    def _prepare_next(self) -> None:
        """Open the next request's blob and read its first batch now, in a worker thread."""
        if self._prepared is not None or not self._jobs:
            return
        nxt = self._jobs[0]
        ranges = ap.chunk_ranges(nxt.total, nxt.offset)
        self._prepared = (nxt, asyncio.get_running_loop().run_in_executor(
            self.pool, _open_and_read, self.blobs, nxt, ranges[:READ_CHUNKS], self.frames))

    def _take_prepared(self, job: ap.BlobFrame) -> asyncio.Future[Opened] | None:
        """The prepared opening of ``job``; one prepared for another (since replaced) is closed."""
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            return None
        if prepared[0] is job:
            return prepared[1]
        prepared[1].add_done_callback(_close_opened)
        return None


Frame = bytearray | memoryview
Opened = tuple[BinaryIO, list[Frame]]


def _close_opened(done: asyncio.Future[Opened]) -> None:
    if not done.cancelled() and done.exception() is None:
        with contextlib.suppress(OSError):
            done.result()[0].close()


def _open_and_read(blobs: BlobStore, job: ap.BlobFrame, batch: list[tuple[int, int]],
                   frames: FramePool) -> Opened:
    """The request's blob opened at its offset, with its first batch of CHUNK frames read."""
    f = blobs.open(job.sha256)
    try:
        f.seek(job.offset)
        return f, _read_frames(f, job, batch, frames)
    except BaseException:
        f.close()
        raise


def _read_frames(f: BinaryIO, job: ap.BlobFrame, batch: list[tuple[int, int]],
                 frames: FramePool) -> list[Frame]:
    """The CHUNK frames of ``batch`` (offset, length), read in order from ``f`` straight
    into each frame (no second copy of the bytes to frame them), in buffers of ``frames``."""
    readinto: Callable[[memoryview], int] = f.readinto  # type: ignore[attr-defined]
    return [ap.read_chunk_into(job.vault, job.sha256, offset, job.total, length, readinto, frames.take)
            for offset, length in batch]
