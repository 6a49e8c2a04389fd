"""Attachment blobs between peers (SPEC §3.14): the ``BlobFetcher`` and the receiving side.

``BlobTransfers`` is one per home. The folder side asks it for blobs (``want``); it asks one
link at a time for each (``sync/attachment_transfers.Transfers`` decides which), from what
the partial file already holds, and lands what arrives:

- A CHUNK frame is taken off the link's receive loop at once (decoded, its credit counted)
  and queued for the link's disk task, which appends it to the partial in a worker thread;
  a note frame behind it is never held up by the disk. At most one credit window of chunk
  bytes (``attachment_protocol.DEFAULT_WINDOW``) is queued per link: the sender may not
  send more, and a peer that does is cut off.
- Only a chunk that starts where the partial ends is written (bytes at one offset of one
  hash are the same whoever sends them, so a chunk of an older request still fits), and
  credit is given back for every chunk, written or not.
- The last chunk: ``BlobStore.finish`` checks size and hash in a thread and renames the
  partial to its name; then every ``BlobArrived`` callback hears of it. Bytes that do not
  verify are thrown away and asked for again (from another link first).
- A link that ends: what its disk task still holds is written, then its blobs go back to
  the queue, asked of the next link from the partial's size (a resume, never from zero).

Serving this home's blobs is ``daemon/peers/blobs/serving.py``; the frames and the credit are
``sync/attachment_protocol.py``. The peer hub routes every ``A1`` frame of a link here
(``BlobLink.on_frame``) and tells when links come and go.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from stet.daemon.attachments.seams import BlobArrived
from stet.daemon.base.thread_priority import lower_blob_thread
from stet.daemon.peers.blobs.frame_buffers import FramePool
from stet.daemon.peers.blobs.serving import BlobSender
from stet.sync import attachment_protocol as ap
from stet.sync.attachment_transfers import Transfers
from stet.sync.attachment_versions import AttachmentVersionStore
from stet.sync.blob_references import IndexShas
from stet.sync.blob_store import WRITE_BEHIND, BlobError, BlobMismatch, BlobStore, PartialHash, check_sha

logger = logging.getLogger(__name__)

EMPTY_SHA = hashlib.sha256(b"").hexdigest()
T = TypeVar("T")
RUN_CHUNKS = 16  # chunks written per trip to a worker thread, at most
WATCH_S = 5.0  # while blobs are wanted: how often unanswered asks are looked for (issue 14)
# (vault, sha256) -> whether this home may send the blob to a member of that vault
Referenced = Callable[[str, str], bool]


@dataclass
class LinkPort:
    """What the transfers need of one live link (the hub makes it)."""

    device: str
    vaults: Callable[[], set[str]]  # the vaults this link shares now
    send: Callable[[bytes], None]  # a small frame, queued in order with the note frames
    # a chunk, written when the transport takes it (a view may be of a reused buffer: the
    # transport must copy what it keeps, or keep the view; ``frame_buffers``)
    send_bulk: Callable[[bytes | bytearray | memoryview], Awaitable[None]]
    ready: Callable[[], Awaitable[object]] | None = None  # resolves once the first sync is done


@dataclass
class _Receiving:
    credit: ap.ReceiveCredit = field(default_factory=ap.ReceiveCredit)
    queue: asyncio.Queue[ap.BlobFrame | None] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None


class BlobLink:
    """One live link's attachment traffic: both directions."""

    def __init__(self, owner: BlobTransfers, port: LinkPort, key: str) -> None:
        self.owner = owner
        self.port = port
        self.key = key  # unique per link (a device may reconnect while the old link drains)
        self.up = True
        self.receiving = _Receiving()
        self.sender = BlobSender(owner.blobs, port, owner.references, owner.read_pool)
        # The blob channel reads chunks into these (``frame_buffers``); each is given back
        # once written and hashed. At most a credit window is queued, plus a hand-over.
        self.frames = FramePool(ap.MAX_FRAME, ap.DEFAULT_WINDOW // ap.MAX_CHUNK + 4)
        self._ready_task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.receiving.task = asyncio.create_task(self._disk_task(), name=f"blob-recv:{self.port.device[:7]}")
        self.sender.start()
        self._ready_task = asyncio.create_task(self._when_ready(), name=f"blob-ready:{self.port.device[:7]}")

    async def _when_ready(self) -> None:
        if self.port.ready is not None:
            await self.port.ready()
        self.owner.schedule()

    async def on_frame(self, data: bytes) -> None:
        """An ``A1`` frame from the peer (``ProtocolError`` closes the link)."""
        frame = ap.decode(data)
        if isinstance(frame, ap.CreditFrame):
            self.sender.grant(frame.amount)
        elif frame.type == ap.REQUEST:
            self.sender.request(frame)
        elif frame.type == ap.CHUNK:
            self.chunk(frame)
        else:  # MISSING
            self.receiving.queue.put_nowait(frame)  # after the chunks before it

    def chunk(self, frame: ap.BlobFrame) -> None:
        """A CHUNK from the peer, off the main link or its blob channel (``ProtocolError``:
        over its credit, the link is closed)."""
        if not self.up:
            return  # the link ended: its disk task takes nothing more
        self.receiving.credit.received(len(frame.data))
        self.receiving.queue.put_nowait(frame)

    def down(self) -> None:
        """The link ended: stop sending; write what was received, then release its blobs."""
        if not self.up:
            return
        self.up = False
        self.sender.stop()
        if self._ready_task is not None:
            self._ready_task.cancel()
        self.receiving.queue.put_nowait(None)

    async def _disk_task(self) -> None:
        owner = self.owner
        queue = self.receiving.queue
        held: ap.BlobFrame | None = None  # taken off the queue for a run it did not belong to
        try:
            while True:
                if held is not None:
                    frame: ap.BlobFrame | None
                    frame, held = held, None
                elif queue.empty():
                    frame = await self.frames.wait_or_clear(queue.get)  # idle: the buffers go
                else:
                    frame = queue.get_nowait()
                if frame is None:
                    return
                if frame.type == ap.MISSING:
                    owner.book.missing(self.key, frame.sha256)
                    logger.info("%s does not send blob %s: %s", self.port.device[:7], frame.sha256[:12],
                                bytes(frame.data).decode("utf-8", "replace"))
                    owner.schedule()
                    continue
                # The chunks of one blob that are already here go to disk in one trip to a
                # worker thread (on a loaded machine each trip costs milliseconds).
                run = [frame]
                while len(run) < RUN_CHUNKS and not queue.empty():
                    nxt = queue.get_nowait()
                    if nxt is None:
                        queue.put_nowait(None)  # the end: after this run
                        break
                    if nxt.type != ap.CHUNK or nxt.sha256 != frame.sha256:
                        held = nxt  # handled next, in order
                        break
                    run.append(nxt)
                await owner._write_chunks(self.key, run)
                written = sum(len(f.data) for f in run)
                for done in run:  # written and hashed: the buffers may take the next chunks
                    if isinstance(done.data, memoryview):
                        self.frames.give(done.data)
                del done, run, frame
                if self.up:
                    grant = self.receiving.credit.consumed(written)
                    if grant:
                        self.port.send(ap.encode_credit(grant))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("receiving blobs from %s failed", self.port.device[:7])
        finally:
            owner._link_gone(self)


def vault_references(vaults: Callable[[], Mapping[str, Any]]) -> Referenced:
    """``Referenced`` over the daemon's open vaults (``VaultRuntime``s by id): the vault's
    attachment index (in its index document) or its attachment versions name the blob."""

    indexes: dict[str, IndexShas] = {}

    def referenced(vault: str, sha256: str) -> bool:
        runtime = vaults().get(vault)
        if runtime is None:
            return False
        if indexes.setdefault(vault, IndexShas()).refers_to(runtime.service.index.doc, sha256):
            return True
        return bool(AttachmentVersionStore(runtime.store, 0).holds(sha256))

    return referenced


class BlobTransfers:
    """The home's ``BlobFetcher`` (``attachment_seams``) and the links' attachment traffic."""

    def __init__(self, blobs: BlobStore, references: Referenced, *, per_link: int = 4) -> None:
        self.blobs = blobs
        self.references = references
        self.book = Transfers(per_link=per_link)
        self.arrived: list[BlobArrived] = []
        self.idle: list[Callable[[], None]] = []  # told when no blob is arriving any more
        self.links: dict[str, BlobLink] = {}  # device -> its live link
        self._draining: set[BlobLink] = set()  # ended links still writing what they got
        self._keys = itertools.count(1)
        self.landed_files = 0
        self.landed_bytes = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._schedule_pending = False
        self._watchdog: asyncio.TimerHandle | None = None  # the next look for unanswered asks
        self._stopped = False
        self._wanted_by: dict[str, set[str]] = {}  # sha256 -> the vaults that want it
        self._hashing: dict[str, PartialHash] = {}  # sha256 -> the hash of its partial so far
        self._flushing: dict[str, asyncio.Future[None]] = {}  # sha256 -> its write-behind in flight
        self._landing: dict[str, tuple[str, int]] = {}  # sha256 -> (vault, size): all bytes in, landing
        # Own worker threads: the shared default pool is busy with other vault work (the
        # folder side's writes and fsyncs), and a receive that waits for a thread stalls the link.
        self._disk = ThreadPoolExecutor(2, "blob-disk", lower_blob_thread)
        self._land = ThreadPoolExecutor(2, "blob-land", lower_blob_thread)
        # Hashes a run of chunks while a ``_disk`` thread writes it (``append_run``).
        self._hash = ThreadPoolExecutor(2, "blob-hash", lower_blob_thread)
        self.read_pool = ThreadPoolExecutor(2, "blob-read", lower_blob_thread)

    # -- BlobFetcher ----------------------------------------------------------------------

    def want(self, vault: str, sha256: str, size: int) -> None:
        check_sha(sha256)
        if sha256 in self._landing:  # every byte is here, being verified and landed
            self._wanted_by.setdefault(sha256, set()).add(vault)
            return
        wanted = self.book.get(sha256)
        if wanted is not None:
            self._wanted_by.setdefault(sha256, set()).add(vault)  # told to each vault on arrival
            if wanted.link is None and wanted.missing_at:
                # Asked again (the folder side does, while it waits): a member that lacked it
                # may hold it now (it fetched it meanwhile: a member only some links reach).
                wanted.missing_at.clear()
                self._schedule_soon()  # once for a whole round of repeated wants
            return
        if self.blobs.has(sha256):
            asyncio.get_running_loop().call_soon(self._announce, vault, sha256)
            return
        if sha256 == EMPTY_SHA:
            self._spawn(self._land_empty(vault))
            return
        self.book.want(vault, sha256, size)
        self._wanted_by[sha256] = {vault}
        self.schedule()

    def unwant(self, vault: str, sha256: str) -> None:
        vaults = self._wanted_by.get(sha256, set())
        vaults.discard(vault)
        if not vaults and sha256 in self._landing:
            self._wanted_by.pop(sha256, None)  # lands anyway; nobody is told
            return
        if vaults or self.book.get(sha256) is None:
            return  # another vault still wants it (fetched through the first one's links)
        self._wanted_by.pop(sha256, None)
        self._hashing.pop(sha256, None)
        self._flushing.pop(sha256, None)
        self.book.drop(sha256)
        # A chunk still queued for it is ignored now (not wanted); the partial goes.
        self._spawn(self._discard_later(sha256))
        self._tell_if_idle()

    def busy(self) -> bool:
        """Whether blobs are arriving now (asked of a link, or all in and being landed)."""
        return bool(self._landing) or any(w.link is not None for w in self.book.wanted())

    def _tell_if_idle(self) -> None:
        if self.idle and not self.busy():
            for callback in list(self.idle):
                callback()

    def progress(self) -> dict[str, int]:
        p = self.book.progress()
        landing = sum(size for _vault, size in self._landing.values())
        return {"files": p["blobs"] + len(self._landing), "bytes": p["bytes"] + landing,
                "done": p["haveBytes"] + landing,
                "inFlight": p["inFlight"], "receivedBytes": p["receivedBytes"],
                "landedFiles": self.landed_files, "landedBytes": self.landed_bytes}

    # -- links -----------------------------------------------------------------------------

    def link_up(self, port: LinkPort) -> BlobLink:
        link = BlobLink(self, port, f"{port.device}#{next(self._keys)}")
        old = self.links.get(port.device)
        if old is not None:
            old.down()
        self.links[port.device] = link
        link.start()
        return link

    def link_down(self, link: BlobLink) -> None:
        if self.links.get(link.port.device) is link:
            del self.links[link.port.device]
        if link.up:
            self._draining.add(link)
            link.down()

    def _link_gone(self, link: BlobLink) -> None:
        """The link's disk task has written everything it got: its blobs may go elsewhere."""
        self._draining.discard(link)
        back = self.book.link_down(link.key)
        if back:
            logger.info("link to %s gone with %d blob(s) unfinished: they resume elsewhere or later",
                        link.port.device[:7], len(back))
        self.schedule()

    def _schedule_soon(self) -> None:
        if not self._schedule_pending:
            self._schedule_pending = True
            asyncio.get_running_loop().call_soon(self._scheduled)

    def _scheduled(self) -> None:
        self._schedule_pending = False
        self.schedule()

    def schedule(self) -> None:
        """Ask every ready link for what it should fetch now."""
        for link in list(self.links.values()):
            if not link.up:
                continue
            vaults = link.port.vaults()
            if not vaults:
                continue
            for req in self.book.next_requests(link.key, vaults, self.blobs.partial_size):
                logger.debug("asking %s for %s from %d of %d", link.port.device[:7], req.sha256[:12],
                             req.offset, req.total)
                link.port.send(ap.encode_request(req.vault, req.sha256, req.offset, req.total))
        self._watch()
        self._tell_if_idle()

    def _watch(self) -> None:
        """While blobs are wanted, look every ``WATCH_S`` for asks left unanswered (the
        link up): they are asked again (``Transfers.stalled``), so none waits for good."""
        if self._watchdog is None and not self._stopped and self.book.wanted():
            self._watchdog = asyncio.get_running_loop().call_later(WATCH_S, self._look_for_stalled)

    def _look_for_stalled(self) -> None:
        self._watchdog = None
        for sha, key in self.book.stalled():
            logger.info("no answer from %s for blob %s in %.0f s: asking again", key[:7], sha[:12],
                        self.book.stall_s)
        self.schedule()

    async def stop(self) -> None:
        self._stopped = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        for link in list(self.links.values()):
            self.link_down(link)
        for task in list(self._tasks):
            task.cancel()
        for link in list(self._draining):
            if link.receiving.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(link.receiving.task, 10)
        for pool in (self._disk, self._land, self._hash, self.read_pool):
            pool.shutdown(wait=False, cancel_futures=True)

    # -- landing ---------------------------------------------------------------------------

    async def _write_chunks(self, key: str, run: list[ap.BlobFrame]) -> None:
        """Append a run of chunks of one blob (the ones that fit where the partial ends)."""
        first = run[0]
        sha = first.sha256
        w = self.book.get(sha)
        if w is None or w.link != key or first.vault != w.vault or first.total != w.size:
            return  # not asked of this link (any more): ignore, credit is still given back
        # Keep the chunks that continue the partial (the bytes at one offset of one hash are
        # the same whoever sends them, so a chunk of an older request still fits).
        chunks: list[bytes | memoryview] = []
        end = w.have
        for f in run:
            if f.offset == end and f.total == w.size:
                chunks.append(f.data)
                end = f.end
        if not chunks:
            return
        hashing = self._hashing.get(sha)
        if hashing is None:
            hashing = self._hashing[sha] = PartialHash(sha)
        start = w.have
        try:
            end = await self._in(self._disk, functools.partial(
                self.blobs.append_run, sha, start, chunks, total=w.size, hashing=hashing,
                hash_in=self._hash))
        except (BlobError, OSError) as exc:
            # The partial is not what the book thought (it changed under us): re-ask from it.
            logger.warning("blob %s: %s; asking again", sha[:12], exc)
            self._hashing.pop(sha, None)
            self.book.restart(sha)
            self.schedule()
            return
        self.book.received(key, sha, end)
        if self.blobs.unflushed.get(sha, 0) >= WRITE_BEHIND and end != w.size:
            # Bytes written past the page cache (direct_io) leave nothing dirty to flush.
            await self._write_behind(sha)
        if end == w.size:
            # Every byte is here: the link may fetch the next blob while this one is verified
            # and landed (an fsync and a rename take tens of milliseconds on a busy disk).
            self.book.drop(sha)
            self._landing[sha] = (w.vault, w.size)
            self._spawn(self._finish(w.vault, sha, w.size, key))
            self.schedule()

    async def _write_behind(self, sha256: str) -> None:
        """Flush the partial while the next chunks are written, one flush in flight per blob:
        what is dirty stays within about two ``WRITE_BEHIND``s without the link waiting for
        each flush."""
        previous = self._flushing.get(sha256)
        if previous is not None:
            with contextlib.suppress(OSError):  # a failing disk shows at finish's own fsync
                await previous
        self._flushing[sha256] = asyncio.get_running_loop().run_in_executor(
            self._land, self.blobs.flush_partial, sha256)

    async def _finish(self, vault: str, sha256: str, total: int, key: str) -> None:
        try:
            await self._verify_and_land(vault, sha256, total, key)
        finally:
            self._tell_if_idle()

    async def _verify_and_land(self, vault: str, sha256: str, total: int, key: str) -> None:
        flushing = self._flushing.pop(sha256, None)
        if flushing is not None:
            with contextlib.suppress(OSError):
                await flushing
        hashing = self._hashing.pop(sha256, None)
        digest = hashing.hexdigest() if hashing is not None and hashing.covered == total else None
        try:
            await self._in(self._land, functools.partial(self.blobs.finish, sha256, total, digest=digest))
        except BlobError as exc:
            self._landing.pop(sha256, None)
            if sha256 not in self._wanted_by:
                return  # unwanted meanwhile
            # Bytes that do not verify were thrown away: fetch again, from another link first.
            logger.warning("blob %s from %s not landed (%s): asking again", sha256[:12], key[:7], exc)
            self.book.want(vault, sha256, total)
            if isinstance(exc, BlobMismatch):
                self.book.missing(key, sha256)
            self.schedule()
            return
        self._landing.pop(sha256, None)
        if sha256 not in self._wanted_by:
            return  # unwanted meanwhile (the blob stays: a later want finds it at once)
        self.landed_files += 1
        self.landed_bytes += total
        logger.info("blob %s landed (%d bytes)", sha256[:12], total)
        for each in sorted(self._wanted_by.pop(sha256, {vault})):
            self._announce(each, sha256)
        self.schedule()

    async def _land_empty(self, vault: str) -> None:
        await asyncio.to_thread(self.blobs.put_bytes, b"", expected=EMPTY_SHA)
        self.landed_files += 1
        self._announce(vault, EMPTY_SHA)

    async def _discard_later(self, sha256: str) -> None:
        await asyncio.sleep(0)  # after the chunk being written now, if any
        if self.book.get(sha256) is None:
            await asyncio.to_thread(self.blobs.discard, sha256)

    def _announce(self, vault: str, sha256: str) -> None:
        for callback in list(self.arrived):
            try:
                callback(vault, sha256)
            except Exception:
                logger.exception("a BlobArrived listener failed for %s", sha256[:12])

    async def _in(self, pool: ThreadPoolExecutor, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
