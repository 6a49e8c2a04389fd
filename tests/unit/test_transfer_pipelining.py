"""Several blobs at once on one link, the sender's read-ahead, and the transfers telling
when no blob is arriving (P9, issue 14). (The store's copies of landed blobs that waited
while blobs arrived are gone with the hard-link landing, issue 37.)

Real blob stores on temp folders and the real frames and credit; the link is the in-memory
pipe of ``test_blob_transfer`` (the daemons' TLS links are in the integration tests).
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from stet.daemon.peers.blobs import serving as blob_serving
from stet.daemon.peers.blobs.frame_buffers import FramePool
from stet.daemon.peers.blobs.serving import BlobSender
from stet.daemon.peers.blobs.transfer import BlobTransfers, LinkPort
from stet.sync import attachment_protocol as ap
from stet.sync.blob_store import BlobStore

from .test_blob_transfer import VAULT, Pipe, referenced_by, wait_for

MiB = 1 << 20


def test_several_blobs_in_flight_one_fails_its_hash_only_it_is_asked_again(tmp_path: Path) -> None:
    async def run() -> None:
        rng = random.Random(14)
        datas = [rng.randbytes(2 * MiB + i) for i in range(4)]
        good = BlobStore(tmp_path / "good")
        shas = [good.put_bytes(d).sha256 for d in datas]
        damaged = BlobStore(tmp_path / "damaged")  # holds all four; the third one's bytes are wrong
        for sha, data in zip(shas, datas, strict=True):
            path = damaged.path_of(sha)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data if sha != shas[2] else rng.randbytes(len(data)))
        sender = BlobTransfers(damaged, referenced_by(set(shas)))
        honest = BlobTransfers(good, referenced_by(set(shas)))
        b = BlobTransfers(BlobStore(tmp_path / "b"), lambda v, s: False)
        arrived: list[str] = []
        b.arrived.append(lambda vault, s: arrived.append(s))
        asked: list[str] = []
        pipe1 = Pipe(sender, b, {VAULT})
        real_send = pipe1.ends["b"].port.send

        def counting(frame: bytes) -> None:
            decoded = ap.decode(frame)
            if not isinstance(decoded, ap.CreditFrame) and decoded.type == ap.REQUEST:
                asked.append(decoded.sha256)
            real_send(frame)

        pipe1.ends["b"].port.send = counting
        for sha, data in zip(shas, datas, strict=True):
            b.want(VAULT, sha, len(data))
        assert b.progress()["inFlight"] == 4  # all four asked at once, on the one link
        await wait_for(lambda: sorted(arrived) == sorted(shas[:2] + shas[3:]))
        await wait_for(lambda: any(pipe1.ends["b"].key in w.missing_at for w in b.book.wanted()))
        assert sorted(asked) == sorted(shas)  # each asked once: the good ones were not asked again
        assert [w.sha256 for w in b.book.wanted()] == [shas[2]]
        assert not b.blobs.has(shas[2])
        pipe2 = Pipe(honest, b, {VAULT}, a_name="honest")
        await wait_for(lambda: shas[2] in arrived)
        assert honest.links["b-device"].sender.sent_bytes == len(datas[2])  # only the bad one again
        for sha in shas:
            assert b.blobs.verify(sha)
        pipe1.cut(sender, b)
        pipe2.cut(honest, b)
        for t in (sender, honest, b):
            await t.stop()

    asyncio.run(run())


def test_the_next_batch_is_read_while_one_goes_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> None:
        blobs = BlobStore(tmp_path / "a")
        data = os.urandom(3 * blob_serving.READ_CHUNKS * MiB + 5)  # three batches and a bit
        sha = blobs.put_bytes(data).sha256
        reads: list[int] = []
        real = blob_serving._read_frames

        def counted(f: object, job: ap.BlobFrame, batch: list[tuple[int, int]],
                    frames: FramePool) -> list[bytearray | memoryview]:
            reads.append(batch[0][0])
            return real(f, job, batch, frames)  # type: ignore[arg-type]

        monkeypatch.setattr(blob_serving, "_read_frames", counted)
        release = asyncio.Event()
        sent: list[bytes] = []

        async def send_bulk(frame: bytes | bytearray) -> None:
            await release.wait()  # the transport is full: the first chunk does not go yet
            sent.append(bytes(frame))

        port = LinkPort("peer", lambda: {VAULT}, lambda frame: None, send_bulk)
        sender = BlobSender(blobs, port, referenced_by({sha}))
        sender.start()
        sender.request(ap.decode(ap.encode_request(VAULT, sha, 0, len(data))))  # type: ignore[arg-type]
        await wait_for(lambda: len(reads) == 2)
        assert sent == []  # the second batch was read before the first chunk went out
        await asyncio.sleep(0.05)
        assert len(reads) == 2  # one batch ahead, not more (memory stays bounded)
        release.set()
        sender.grant(len(data))  # the initial credit is less than the blob
        await wait_for(lambda: sum(len(ap.decode(f).data) for f in sent) == len(data))  # type: ignore[union-attr]
        got = b"".join(bytes(ap.decode(f).data) for f in sent)  # type: ignore[union-attr]
        assert got == data
        sender.stop()

    asyncio.run(run())


def test_the_transfers_tell_when_no_blob_is_arriving(tmp_path: Path) -> None:
    async def run() -> None:
        src = BlobStore(tmp_path / "a")
        sha = src.put_bytes(os.urandom(3 * MiB)).sha256
        a = BlobTransfers(src, referenced_by({sha}))
        b = BlobTransfers(BlobStore(tmp_path / "b"), lambda v, s: False)
        told: list[bool] = []
        b.idle.append(lambda: told.append(b.busy()))
        arrived: list[str] = []
        b.arrived.append(lambda vault, s: arrived.append(s))
        assert not b.busy()
        pipe = Pipe(a, b, {VAULT})
        b.want(VAULT, sha, src.size(sha))
        assert b.busy()
        await wait_for(lambda: arrived == [sha])
        await wait_for(lambda: bool(told))
        assert not b.busy()
        assert told[-1] is False  # told only once nothing arrives
        pipe.cut(a, b)
        await a.stop()
        await b.stop()

    asyncio.run(run())


def test_the_next_blob_is_opened_and_read_while_the_last_batch_goes_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> None:
        blobs = BlobStore(tmp_path / "a")
        datas = [os.urandom(MiB + i) for i in range(3)]
        shas = [blobs.put_bytes(d).sha256 for d in datas]
        reads: list[str] = []
        real = blob_serving._read_frames

        def counted(f: object, job: ap.BlobFrame, batch: list[tuple[int, int]],
                    frames: FramePool) -> list[bytearray | memoryview]:
            reads.append(job.sha256)
            return real(f, job, batch, frames)  # type: ignore[arg-type]

        monkeypatch.setattr(blob_serving, "_read_frames", counted)
        release = asyncio.Event()
        sent: list[ap.BlobFrame] = []

        async def send_bulk(frame: bytes | bytearray) -> None:
            await release.wait()
            decoded = ap.decode(bytes(frame))
            assert not isinstance(decoded, ap.CreditFrame)
            sent.append(decoded)

        port = LinkPort("peer", lambda: {VAULT}, lambda frame: None, send_bulk)
        sender = BlobSender(blobs, port, referenced_by(set(shas)))
        sender.start()
        for sha, data in zip(shas, datas, strict=True):
            sender.request(ap.decode(ap.encode_request(VAULT, sha, 0, len(data))))  # type: ignore[arg-type]
        await wait_for(lambda: len(reads) == 2)
        assert reads == shas[:2]  # the second blob read before the first one's chunks went out
        assert sent == []
        # A request for the prepared blob again (a resume from elsewhere): that opening is
        # dropped and the blob sent once, from the new offset.
        sender.request(ap.decode(ap.encode_request(VAULT, shas[1], 5, len(datas[1]))))  # type: ignore[arg-type]
        release.set()
        for sha, data in zip(shas, datas, strict=True):
            start = 5 if sha == shas[1] else 0
            await wait_for(lambda sha=sha, data=data, start=start: sum(
                len(f.data) for f in sent if f.sha256 == sha) == len(data) - start)
        for sha, data in zip(shas, datas, strict=True):
            start = 5 if sha == shas[1] else 0
            assert b"".join(bytes(f.data) for f in sent if f.sha256 == sha) == data[start:]
        sender.stop()

    asyncio.run(run())


def test_a_note_frame_queued_while_chunks_go_out_is_sent_before_the_next_chunk(tmp_path: Path) -> None:
    async def run() -> None:
        blobs = BlobStore(tmp_path / "a")
        data = os.urandom(blob_serving.READ_CHUNKS * MiB)  # one batch, read ahead in one trip
        sha = blobs.put_bytes(data).sha256
        wire: list[str] = []
        outbox: asyncio.Queue[bytes] = asyncio.Queue()

        async def writer() -> None:  # the link's note writer (peer_hub._writer): one frame at a time
            while True:
                await outbox.get()
                wire.append("note")

        async def send_bulk(frame: bytes | bytearray) -> None:
            wire.append("chunk")  # the transport took it at once: no pause, no yield
            if wire.count("chunk") == 1:
                outbox.put_nowait(b"S1 a note's update")  # a note saved meanwhile

        writing = asyncio.create_task(writer())
        port = LinkPort("peer", lambda: {VAULT}, outbox.put_nowait, send_bulk)
        sender = BlobSender(blobs, port, referenced_by({sha}))
        sender.start()
        sender.request(ap.decode(ap.encode_request(VAULT, sha, 0, len(data))))  # type: ignore[arg-type]
        await wait_for(lambda: wire.count("chunk") == blob_serving.READ_CHUNKS and "note" in wire)
        assert wire[:2] == ["chunk", "note"]  # not behind the rest of the batch
        sender.stop()
        writing.cancel()

    asyncio.run(run())
