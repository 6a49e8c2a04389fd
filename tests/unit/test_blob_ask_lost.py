"""An ask for a blob that is never answered while its link stays up is asked again (issue
14, found by the mixed R1 run: a winner's bytes asked of a member once, never answered for
3 minutes, so one daemon never wrote the winning file). Before, the ask stayed "in flight"
on that link for as long as the link lived, and nothing asked again: the folder side's
repeated wants only reach blobs no link is fetching.

The pure bookkeeping (``sync/attachment_transfers``) on a fake clock, and two homes'
``BlobTransfers`` over the in-memory link of ``test_blob_transfer.py`` with the first ask
lost on the way (real blob stores, real frames and credit)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stet.daemon.peers.blobs import transfer as blob_transfer
from stet.daemon.peers.blobs.transfer import BlobTransfers
from stet.sync import attachment_protocol as ap
from stet.sync.attachment_transfers import Transfers
from stet.sync.blob_store import BlobStore
from tests.unit.test_blob_transfer import VAULT, Pipe, blob, referenced_by, wait_for

SHA1, SHA2 = "1" * 64, "2" * 64


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_unanswered_ask_is_taken_back_and_asked_of_another_link_first() -> None:
    clock = Clock()
    t = Transfers(per_link=2, stall_s=15, clock=clock)
    t.want(VAULT, SHA1, 10)
    assert [r.sha256 for r in t.next_requests("L1", [VAULT], lambda s: 0)] == [SHA1]
    clock.now += 14
    assert t.stalled() == []
    clock.now += 2
    assert t.stalled() == [(SHA1, "L1")]  # nothing came back: taken back
    assert t.get(SHA1) is not None
    assert t.get(SHA1).link is None  # type: ignore[union-attr]
    assert t.next_requests("L1", [VAULT], lambda s: 0) == []  # passed over for a while
    assert [r.sha256 for r in t.next_requests("L2", [VAULT], lambda s: 0)] == [SHA1]
    assert t.received("L1", SHA1, 5) is False  # a late answer of the first ask is ignored
    assert t.received("L2", SHA1, 5) is True


def test_the_only_link_is_asked_again_after_a_while() -> None:
    clock = Clock()
    t = Transfers(per_link=2, stall_s=15, clock=clock)
    t.want(VAULT, SHA1, 10)
    t.next_requests("L1", [VAULT], lambda s: 0)
    clock.now += 16
    assert t.stalled() == [(SHA1, "L1")]
    clock.now += 16
    assert [r.sha256 for r in t.next_requests("L1", [VAULT], lambda s: 0)] == [SHA1]


def test_a_link_busy_sending_another_blob_is_not_stalled() -> None:
    """Its later asks wait in its queue: as long as chunks come, none is taken back."""
    clock = Clock()
    t = Transfers(per_link=2, stall_s=15, clock=clock)
    t.want(VAULT, SHA1, 1000)
    t.want(VAULT, SHA2, 10)
    assert len(t.next_requests("L1", [VAULT], lambda s: 0)) == 2
    for end in range(100, 1000, 100):
        clock.now += 10
        assert t.received("L1", SHA1, end)
        assert t.stalled() == []
    clock.now += 16
    assert sorted(t.stalled()) == [(SHA1, "L1"), (SHA2, "L1")]


def test_a_missing_answer_or_a_link_down_is_no_stall() -> None:
    clock = Clock()
    t = Transfers(per_link=2, stall_s=15, clock=clock)
    t.want(VAULT, SHA1, 10)
    t.next_requests("L1", [VAULT], lambda s: 0)
    t.missing("L1", SHA1)
    clock.now += 100
    assert t.stalled() == []
    assert [r.sha256 for r in t.next_requests("L2", [VAULT], lambda s: 0)] == [SHA1]
    assert t.link_down("L2") == [SHA1]
    clock.now += 100
    assert t.stalled() == []


def test_a_lost_ask_is_asked_again_and_the_blob_arrives(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blob_transfer, "WATCH_S", 0.05)

    async def run() -> None:
        src, sha = blob(tmp_path, "a", 2 * ap.DEFAULT_WINDOW + 99)
        a = BlobTransfers(src, referenced_by({sha}))
        b = BlobTransfers(BlobStore(tmp_path / "b"), lambda v, s: False)
        b.book.stall_s = 0.3
        arrived: list[str] = []
        b.arrived.append(lambda vault, s: arrived.append(s))
        pipe = Pipe(a, b, {VAULT})
        port = pipe.ends["b"].port
        send = port.send
        lost: list[bytes] = []

        def lose_the_first_ask(frame: bytes) -> None:
            if not lost and ap.decode(frame).type == ap.REQUEST:
                lost.append(frame)  # lost on the way; the link stays up
                return
            send(frame)

        port.send = lose_the_first_ask
        b.want(VAULT, sha, src.size(sha))
        await wait_for(lambda: arrived == [sha])
        assert lost
        assert b.blobs.verify(sha)
        pipe.cut(a, b)
        await a.stop()
        await b.stop()

    asyncio.run(run())
