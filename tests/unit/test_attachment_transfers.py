"""Transfer bookkeeping: one link per blob at a time, bounded per link, MISSING sends the
blob elsewhere, a dropped link's blobs resume from the partial, progress adds up."""

from __future__ import annotations

import hashlib

from stet.sync.attachment_transfers import Request, Transfers


def sha(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def test_each_blob_goes_to_one_link_at_a_time_and_links_are_bounded() -> None:
    t = Transfers(per_link=2)
    for i in range(5):
        t.want("v", sha(i), 100)
    a = t.next_requests("A", ["v"], lambda h: 0)
    b = t.next_requests("B", ["v"], lambda h: 0)
    assert [r.sha256 for r in a] == [sha(0), sha(1)]
    assert [r.sha256 for r in b] == [sha(2), sha(3)]
    assert t.next_requests("A", ["v"], lambda h: 0) == []  # A is full
    assert t.next_requests("C", ["other"], lambda h: 0) == []  # C is not in the vault
    assert t.progress()["inFlight"] == 4


def test_missing_goes_elsewhere_and_a_reconnect_may_try_again() -> None:
    t = Transfers()
    t.want("v", sha(1), 10)
    assert t.next_requests("A", ["v"], lambda h: 0) == [Request("v", sha(1), 0, 10)]
    t.missing("A", sha(1))
    assert t.next_requests("A", ["v"], lambda h: 0) == []
    assert [r.sha256 for r in t.next_requests("B", ["v"], lambda h: 0)] == [sha(1)]
    t.missing("B", sha(1))
    t.link_down("A")
    assert [r.sha256 for r in t.next_requests("A", ["v"], lambda h: 0)] == [sha(1)]


def test_a_dropped_link_resumes_from_the_partial_not_from_zero() -> None:
    t = Transfers()
    t.want("v", sha(1), 1000)
    t.next_requests("A", ["v"], lambda h: 0)
    assert t.received("A", sha(1), 400)
    assert not t.received("B", sha(1), 500)  # not asked of B: ignored
    assert t.link_down("A") == [sha(1)]
    (req,) = t.next_requests("B", ["v"], lambda h: 400)
    assert req.offset == 400
    t.received("B", sha(1), 1000)
    assert t.progress() == {"blobs": 1, "bytes": 1000, "haveBytes": 1000, "inFlight": 1,
                            "receivedBytes": 1000}
    assert t.drop(sha(1)) == "B"
    assert t.progress()["blobs"] == 0
    assert t.drop(sha(1)) is None
