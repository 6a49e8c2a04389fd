"""The blob transfers between two homes' ``BlobTransfers``, over an in-memory link.

Real blob stores on temp folders, the real frames and credit; only the websocket is a
pair of queues here (the daemons' TLS links are in tests/integration/test_attachment_transfer.py).
What is checked: bytes arrive verified and ``BlobArrived`` fires; a vault that does not
refer to a blob (or a vault the link does not share) gets MISSING; a cut link resumes from
the partial with fewer bytes than the blob; bytes that do not verify are thrown away and
fetched again; credit is never overrun (the receiver would cut the link).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from stet.daemon.peers.blobs.transfer import BlobLink, BlobTransfers, LinkPort
from stet.sync import attachment_protocol as ap
from stet.sync.blob_store import BlobStore

VAULT = "v1"


class Pipe:
    """Two ends of one link; ``cut`` drops it (frames in flight are lost)."""

    def __init__(self, a: BlobTransfers, b: BlobTransfers, vaults: set[str], *, a_name: str = "a-device",
                 b_name: str = "b-device") -> None:
        self.wire_bytes = 0
        self.chunk_bytes = 0
        self.cut_now = False
        self.tasks: list[asyncio.Task[None]] = []
        self.queues: dict[str, asyncio.Queue[bytes]] = {"a": asyncio.Queue(), "b": asyncio.Queue()}
        self.ends: dict[str, BlobLink] = {}
        self.ends["a"] = a.link_up(self._port(b_name, "b", vaults))
        self.ends["b"] = b.link_up(self._port(a_name, "a", vaults))
        for side in ("a", "b"):
            self.tasks.append(asyncio.create_task(self._deliver(side)))

    def _port(self, device: str, to: str, vaults: set[str]) -> LinkPort:
        def send(frame: bytes) -> None:
            if not self.cut_now:
                self.wire_bytes += len(frame)
                self.queues[to].put_nowait(frame)

        async def send_bulk(frame: bytes) -> None:
            if self.cut_now:
                raise ConnectionError("cut")
            self.chunk_bytes += len(frame)
            send(frame)
            await asyncio.sleep(0)

        return LinkPort(device, lambda: vaults, send, send_bulk)

    async def _deliver(self, side: str) -> None:
        while True:
            frame = await self.queues[side].get()
            await self.ends[side].on_frame(frame)

    def cut(self, a: BlobTransfers, b: BlobTransfers) -> None:
        self.cut_now = True
        for t in self.tasks:
            t.cancel()
        a.link_down(self.ends["a"])
        b.link_down(self.ends["b"])


def referenced_by(shas: set[str]) -> Callable[[str, str], bool]:
    return lambda vault, sha: vault == VAULT and sha in shas


async def wait_for(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while not predicate():  # noqa: ASYNC110 - state of several tasks, under a deadline
            await asyncio.sleep(0.005)


def blob(tmp_path: Path, name: str, size: int) -> tuple[BlobStore, str]:
    store = BlobStore(tmp_path / name)
    data = os.urandom(size)
    info = store.put_bytes(data)
    return store, info.sha256


def test_a_blob_and_an_empty_one_arrive_verified(tmp_path: Path) -> None:
    async def run() -> None:
        src, sha = blob(tmp_path, "a", 5 * 1024 * 1024 + 17)
        empty = hashlib.sha256(b"").hexdigest()
        a = BlobTransfers(src, referenced_by({sha}))
        b = BlobTransfers(BlobStore(tmp_path / "b"), lambda v, s: False)
        arrived: list[tuple[str, str]] = []
        b.arrived.append(lambda vault, s: arrived.append((vault, s)))
        pipe = Pipe(a, b, {VAULT})
        b.want(VAULT, sha, src.size(sha))
        b.want(VAULT, empty, 0)
        assert b.progress()["files"] == 1
        assert b.progress()["bytes"] == src.size(sha)
        await wait_for(lambda: len(arrived) == 2)
        assert sorted(arrived) == sorted([(VAULT, sha), (VAULT, empty)])
        assert b.blobs.verify(sha)
        assert b.blobs.has(empty)
        assert b.blobs.partials() == {}
        assert b.progress()["files"] == 0
        assert b.progress()["landedBytes"] == src.size(sha)
        b.want(VAULT, sha, src.size(sha))  # already held: announced again, nothing sent
        await wait_for(lambda: len(arrived) == 3)
        pipe.cut(a, b)
        await a.stop()
        await b.stop()

    asyncio.run(run())


def test_not_referenced_or_not_shared_is_missing(tmp_path: Path) -> None:
    async def run() -> None:
        src, sha = blob(tmp_path, "a", 300_000)
        a = BlobTransfers(src, referenced_by(set()))  # held, but no attachment of the vault
        b = BlobTransfers(BlobStore(tmp_path / "b"), lambda v, s: False)
        pipe = Pipe(a, b, {VAULT})
        b.want(VAULT, sha, 300_000)
        await wait_for(lambda: any(pipe.ends["b"].key in w.missing_at for w in b.book.wanted()))
        assert not b.blobs.has(sha)
        assert b.blobs.partial_size(sha) == 0
        assert a.links["b-device"].sender.sent_bytes == 0
        # A vault this link does not share is refused the same way, whatever it names.
        other = BlobTransfers(BlobStore(tmp_path / "c"), lambda v, s: False)
        pipe2 = Pipe(a, other, {"v2"}, b_name="other")
        other.want("v2", sha, 300_000)
        await wait_for(lambda: any(pipe2.ends["b"].key in w.missing_at for w in other.book.wanted()))
        assert not other.blobs.has(sha)
        pipe.cut(a, b)
        pipe2.cut(a, other)
        for t in (a, b, other):
            await t.stop()

    asyncio.run(run())


def test_a_cut_resumes_from_the_partial(tmp_path: Path) -> None:
    async def run() -> None:
        size = 3 * ap.DEFAULT_WINDOW + 12345  # a cut leaves at most a window in flight
        src, sha = blob(tmp_path, "a", size)
        a = BlobTransfers(src, referenced_by({sha}))
        b = BlobTransfers(BlobStore(tmp_path / "b"), lambda v, s: False)
        arrived: list[str] = []
        b.arrived.append(lambda vault, s: arrived.append(s))
        pipe = Pipe(a, b, {VAULT})
        b.want(VAULT, sha, size)
        await wait_for(lambda: b.blobs.partial_size(sha) >= 1024 * 1024)
        pipe.cut(a, b)
        await wait_for(lambda: all(w.link is None for w in b.book.wanted()))
        held = b.blobs.partial_size(sha)
        assert 0 < held < size
        pipe2 = Pipe(a, b, {VAULT})
        await wait_for(lambda: arrived == [sha])
        assert b.blobs.verify(sha)
        assert pipe2.chunk_bytes < size  # only the rest went over the new link
        assert pipe2.chunk_bytes >= size - held
        pipe2.cut(a, b)
        await a.stop()
        await b.stop()

    asyncio.run(run())


def test_bytes_that_do_not_verify_are_fetched_again(tmp_path: Path) -> None:
    async def run() -> None:
        size = 2 * 1024 * 1024 + 5
        good, sha = blob(tmp_path, "good", size)
        bad = BlobStore(tmp_path / "bad")
        path = bad.path_of(sha)
        path.parent.mkdir(parents=True)
        path.write_bytes(os.urandom(size))  # the right name, other bytes (a damaged store)
        liar = BlobTransfers(bad, referenced_by({sha}))
        honest = BlobTransfers(good, referenced_by({sha}))
        b = BlobTransfers(BlobStore(tmp_path / "b"), lambda v, s: False)
        arrived: list[str] = []
        b.arrived.append(lambda vault, s: arrived.append(s))
        pipe1 = Pipe(liar, b, {VAULT})
        b.want(VAULT, sha, size)
        await wait_for(lambda: any(pipe1.ends["b"].key in w.missing_at for w in b.book.wanted()))
        assert not b.blobs.has(sha)
        assert b.blobs.partial_size(sha) == 0
        pipe2 = Pipe(honest, b, {VAULT}, a_name="honest")
        await wait_for(lambda: arrived == [sha])
        assert b.blobs.verify(sha)
        pipe1.cut(liar, b)
        pipe2.cut(honest, b)
        for t in (liar, honest, b):
            await t.stop()

    asyncio.run(run())


def test_a_sender_over_its_credit_is_refused(tmp_path: Path) -> None:
    async def run() -> None:
        b = BlobTransfers(BlobStore(tmp_path / "b"), lambda v, s: False)
        sha = hashlib.sha256(b"x").hexdigest()
        link = b.link_up(LinkPort("p", lambda: {VAULT}, lambda f: None, lambda f: asyncio.sleep(0)))
        chunk = b"\0" * ap.MAX_CHUNK
        window = ap.DEFAULT_WINDOW // ap.MAX_CHUNK
        total = (window + 2) * ap.MAX_CHUNK
        for i in range(window):  # a whole window is taken
            await link.on_frame(ap.encode_chunk(VAULT, sha, i * ap.MAX_CHUNK, total, chunk))
        over = ap.encode_chunk(VAULT, sha, window * ap.MAX_CHUNK, total, chunk)
        with pytest.raises(ap.ProtocolError):
            await link.on_frame(over)
        b.link_down(link)
        await b.stop()

    asyncio.run(run())


def test_a_flood_of_requests_is_answered_missing_not_queued(tmp_path: Path) -> None:
    async def run() -> None:
        src = BlobStore(tmp_path / "a")
        held = [src.put_bytes(f"blob {i}".encode()) for i in range(100)]
        a = BlobTransfers(src, lambda v, s: True)
        sent: list[bytes] = []
        link = a.link_up(LinkPort("p", lambda: {VAULT}, sent.append, lambda f: asyncio.sleep(3600)))
        for info in held:  # every one held and referenced: only the cap refuses
            await link.on_frame(ap.encode_request(VAULT, info.sha256, 0, info.size))
        assert len(link.sender._jobs) <= 64
        missing = [ap.decode(f) for f in sent]
        assert len(missing) >= 100 - 65
        assert all(isinstance(m, ap.BlobFrame) and m.type == ap.MISSING for m in missing)
        assert all(isinstance(m, ap.BlobFrame) and m.data == b"too many requests at once" for m in missing)
        a.link_down(link)
        await a.stop()

    asyncio.run(run())
