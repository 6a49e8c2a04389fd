"""Chunk frames in reused buffers (``daemon/peers/blobs/frame_buffers.py``, issue 14 P9).

The pool itself: a buffer given back with no view left is handed out again; one that anyone
still holds a view of is never reused, so bytes kept to be sent later (or still queued to be
written) stay what they were. Then both ends of a transfer: the sender reads a 40 MiB blob
into at most its three batches' buffers, and a transport that keeps every frame it is given
still holds the right bytes at the end; the receiver's disk task gives each chunk's buffer
back once written, and the buffers go once the link is idle; the blob channel lays each
chunk's bytes on a page boundary (after its first frame told the header's length), so the
disk task writes them direct from the buffer.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from stet.daemon.peers.blobs import frame_buffers
from stet.daemon.peers.blobs.channel import ChannelReaders, InboundChannel
from stet.daemon.peers.blobs.frame_buffers import FramePool
from stet.daemon.peers.blobs.serving import READ_CHUNKS, BlobSender
from stet.daemon.peers.blobs.transfer import BlobTransfers, LinkPort
from stet.sync import attachment_protocol as ap
from stet.sync import direct_io
from stet.sync.blob_store import BlobStore

from .test_blob_transfer import VAULT, referenced_by, wait_for

MiB = 1 << 20


def test_a_buffer_given_back_is_handed_out_again() -> None:
    pool = FramePool(1000, keep=2)
    view = pool.take(600)
    buf = view.obj
    assert len(view) == 600
    assert pool.give(view)
    again = pool.take(1000)
    assert again.obj is buf
    assert (pool.made, pool.reused) == (1, 1)


@pytest.mark.parametrize("holder", ["slice", "view of the view"])
def test_a_buffer_someone_still_views_is_not_reused(holder: str) -> None:
    pool = FramePool(1000, keep=2)
    view = pool.take(1000)
    view[:] = b"k" * 1000
    kept = view[10:20] if holder == "slice" else memoryview(view)
    assert not pool.give(view)
    for _ in range(3):
        other = pool.take(1000)
        assert other.obj is not kept.obj
        other[:] = b"x" * 1000
        pool.give(other)
    assert bytes(kept[:10]) == b"k" * 10


@pytest.mark.parametrize("lead", [0, 80, 4095])
def test_the_byte_after_the_lead_is_page_aligned(lead: int) -> None:
    """A CHUNK's bytes (behind a header of ``lead`` bytes) start on a page boundary, so the
    disk task writes them direct from the buffer (``direct_io``)."""
    pool = FramePool(MiB + 4096, keep=2)
    pool.lead = lead
    for _ in range(3):  # new and reused buffers alike
        view = pool.take(MiB + lead)
        assert len(view) == MiB + lead
        assert (direct_io.address(view[lead:]) or 1) % direct_io.ALIGN == 0
        assert pool.give(view)


def test_at_most_keep_are_kept_and_clear_drops_them() -> None:
    pool = FramePool(100, keep=2)
    views = [pool.take(100) for _ in range(3)]
    assert [pool.give(v) for v in views] == [True, True, False]
    assert pool.kept() == 2
    pool.clear()
    assert pool.kept() == 0
    big = pool.take(101)  # over the size: a buffer of its own, never kept
    assert len(big) == 101
    assert not pool.give(big)


def _sender(tmp_path: Path, size: int, keep_frames: bool) -> tuple[BlobSender, bytes, list[memoryview]]:
    blobs = BlobStore(tmp_path / "a")
    data = os.urandom(size)
    sha = blobs.put_bytes(data).sha256
    kept: list[memoryview] = []

    async def send_bulk(frame: bytes | bytearray | memoryview) -> None:
        assert isinstance(frame, memoryview)
        if keep_frames:  # a transport that keeps the frame to send it later
            kept.append(frame)
        await asyncio.sleep(0)

    port = LinkPort("peer", lambda: {VAULT}, lambda frame: None, send_bulk)
    sender = BlobSender(blobs, port, referenced_by({sha}))
    sender.grant(size)
    sender.request(ap.BlobFrame(ap.REQUEST, VAULT, sha, 0, size))
    return sender, data, kept


async def test_the_sender_reads_a_blob_into_its_few_buffers(tmp_path: Path) -> None:
    size = 40 * MiB
    sender, _data, _kept = _sender(tmp_path, size, keep_frames=False)
    sender.start()
    await wait_for(lambda: sender.sent_bytes == size)
    assert sender.frames.made <= 3 * READ_CHUNKS  # 40 frames, read into the batches' buffers
    assert sender.frames.reused >= 40 - 3 * READ_CHUNKS
    sender.stop()


async def test_frames_a_transport_keeps_are_never_overwritten(tmp_path: Path) -> None:
    size = 20 * MiB + 3
    sender, data, kept = _sender(tmp_path, size, keep_frames=True)
    sender.start()
    await wait_for(lambda: sender.sent_bytes == size)
    sender.stop()
    got = bytearray()
    for frame in kept:
        decoded = ap.decode(frame)
        assert isinstance(decoded, ap.BlobFrame)
        assert decoded.offset == len(got)
        got += decoded.data
    assert got == data


async def test_the_receiver_gives_each_chunk_back_once_written_then_lets_them_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frame_buffers, "IDLE_S", 0.05)
    source = BlobStore(tmp_path / "a")
    size = 24 * MiB + 5
    data = os.urandom(size)
    sha = source.put_bytes(data).sha256
    granted = 0

    def send(frame: bytes) -> None:
        nonlocal granted
        decoded = ap.decode(frame)
        if isinstance(decoded, ap.CreditFrame):
            granted += decoded.amount

    async def send_bulk(frame: bytes | bytearray | memoryview) -> None:
        raise AssertionError("the receiver sends no chunks")

    b = BlobTransfers(BlobStore(tmp_path / "b"), lambda v, s: False)
    arrived: list[str] = []
    b.arrived.append(lambda vault, s: arrived.append(s))
    link = b.link_up(LinkPort("a-device", lambda: {VAULT}, send, send_bulk))
    b.want(VAULT, sha, size)
    sent = 0
    for offset, length in ap.chunk_ranges(size, 0):
        # Within the credit, as the blob channel delivers them: each chunk read into one of
        # the link's buffers and decoded in place.
        await wait_for(lambda: sent + length <= ap.DEFAULT_WINDOW + granted)  # noqa: B023 -- awaited here
        encoded = ap.encode_chunk(VAULT, sha, offset, size, data[offset:offset + length])
        view = link.frames.take(len(encoded))
        view[:] = encoded
        frame = ap.decode(view)
        del view
        assert isinstance(frame, ap.BlobFrame)
        link.chunk(frame)
        del frame
        sent += length
    await wait_for(lambda: arrived == [sha])
    assert b.blobs.verify(sha)
    assert link.frames.reused > 0  # chunks after the first ones came in buffers given back
    assert link.frames.made < len(ap.chunk_ranges(size, 0))
    await wait_for(lambda: link.frames.kept() == 0)  # idle: the buffers are let go
    await b.stop()


class _PooledSocket:
    """What ``InboundChannel._receive`` reads, each message into the buffer it is given
    (``BlobSocket.buffer``, set from the channel's pool when it dials)."""

    def __init__(self, messages: list[bytes], pool: FramePool) -> None:
        self.messages = list(messages)
        self.buffer = pool.take

    def read_message(self) -> memoryview | None:
        if not self.messages:
            return None
        message = self.messages.pop(0)
        view = self.buffer(len(message))
        view[:] = message
        return view

    def more_waiting(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def test_the_blob_channel_reads_chunks_page_aligned_after_the_first() -> None:
    pool = FramePool(ap.MAX_FRAME, keep=8)
    sha = "ab" * 32
    total = 6 * MiB
    messages = [ap.encode_chunk("a-vault-id", sha, i * MiB, total, bytes([i]) * MiB) for i in range(6)]
    got: list[ap.BlobFrame] = []
    channel = InboundChannel(ChannelReaders(), "D" * 56, lambda f, s: got.append(f), lambda why: None, pool)
    channel._socket = _PooledSocket(messages, pool)  # type: ignore[assignment]
    await asyncio.to_thread(channel._receive)
    await wait_for(lambda: len(got) == 6)
    assert [bytes(f.data[:1]) for f in got] == [bytes([i]) for i in range(6)]
    # The first frame tells the header's length; every later chunk's bytes sit on a page.
    assert all(isinstance(f.data, memoryview) and (direct_io.address(f.data) or 1) % direct_io.ALIGN == 0
               for f in got[1:])
