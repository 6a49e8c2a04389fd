"""A concurrent change the winner's maker never saw, though older than its base (found by
the mixed R1 run, issue 18 item 4, seed 1805).

C creates an image (h1). A and B change it at once, both on C's bytes: A at h3, B at h4
(later by the clock). Before anyone hears of B's h4, B changes the image again (h5, made on
its own h4): B's slot now holds h5 only. Every replica then holds C's h1, A's h3 and B's h5.
Judged by ``base`` alone, A's h3 is before h5's base (h4), so it looked seen: A's bytes were
kept as ``before-overwrite``, not ``concurrent``, and were missing from ``stet conflicts``
(SPEC §3.14). An entry now carries its ancestry (``seen``: each device's latest change
before it), so h5 says it never saw A's change. Pure tests of the rule, and the folder
side's two ends of it in process (the loser's own device, and a third one)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from stet.sync.attachment_entry import AttachmentEntry, concurrent_losers, made_on, winner
from stet.sync.hlc import ZERO, Hlc
from tests.unit.attachment_replica_rig import make_replica

ID = "a" * 32


def h(n: int) -> str:
    return Hlc(1_800_000_000_000 + n).pack()


def entry(device: str, sha: str, hlc: int, base: AttachmentEntry | None) -> AttachmentEntry:
    """A change as the folder side records it: made on ``base`` (its ancestry with it)."""
    return AttachmentEntry(ID, "img/a12.png", sha * 64, 100, False, h(hlc), device, False,
                           base.hlc if base is not None else ZERO.pack(),
                           made_on([base], base.hlc) if base is not None else ())


def test_a_loser_made_on_the_same_bytes_as_the_winner_is_concurrent() -> None:
    c = entry("C", "c", 1, None)
    slots = [c, entry("A", "a", 3, c), entry("B", "b", 4, c)]
    assert winner(slots) == slots[2]
    assert concurrent_losers(slots) == [slots[1]]


def test_a_loser_the_winners_maker_never_saw_is_concurrent_though_older_than_its_base() -> None:
    c = entry("C", "c", 1, None)
    b4 = entry("B", "b", 4, c)
    a3, b5 = entry("A", "a", 3, c), entry("B", "e", 5, b4)
    assert b5.seen == (("B", h(4)), ("C", h(1)))
    slots = [c, a3, b5]
    assert winner(slots) == b5
    assert concurrent_losers(slots) == [a3]


def test_a_change_the_winner_was_made_after_is_not_a_loser() -> None:
    c = entry("C", "c", 1, None)
    a3 = entry("A", "a", 3, c)
    b5 = entry("B", "b", 5, a3)  # B changed A's bytes: it saw them
    assert concurrent_losers([c, a3, b5]) == []


def test_an_entry_without_ancestry_is_judged_by_its_base_as_before() -> None:
    old = AttachmentEntry(ID, "img/a12.png", "b" * 64, 100, False, h(5), "B", False, h(4))  # older daemons'

    a3 = entry("A", "a", 3, entry("C", "c", 1, None))
    assert concurrent_losers([a3, old]) == []
    assert AttachmentEntry.from_json(ID, "B", old.to_json()) == old
    assert "seen" not in old.to_json()  # what older daemons wrote and read


def test_ancestry_travels_and_bad_ancestry_is_refused() -> None:
    c = entry("C", "c", 1, None)
    b5 = entry("B", "b", 5, entry("B", "d", 4, c))
    assert AttachmentEntry.from_json(ID, "B", b5.to_json()) == b5
    for bad in ({"C": "soon"}, ["C", h(1)], {"": h(1)}):
        assert AttachmentEntry.from_json(ID, "B", {**b5.to_json(), "seen": bad}) is None


A_BYTES = b"\x89PNG\x00 A's change \x00\x01" * 20
C_BYTES = b"\x89PNG\x00 C's first bytes \x00" * 20
B_FIRST = b"\x89PNG\x00 B's first change \x00\x02" * 20
B_AGAIN = b"\x89PNG\x00 B's second change \x00\x03" * 20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_on_the_losers_device_its_bytes_are_kept_as_concurrent(tmp_path: Path) -> None:
    """A's replica: its file holds A's change (made on C's); B's second change arrives,
    made on B's first, which A never heard of: A's bytes are a concurrent loser."""
    r, root = make_replica(tmp_path)
    (root / "a.png").write_bytes(C_BYTES)  # as if C's file had reached A (recorded here first)
    await r.sync_now()
    first = r.index.live()["a.png"]
    (root / "a.png").write_bytes(A_BYTES)  # A's change, on those bytes
    await r.sync_now()
    mine = r.index.live()["a.png"]
    assert mine.seen == first.history()
    t = Hlc.unpack(mine.hlc)
    b_first = AttachmentEntry(mine.id, "a.png", sha(B_FIRST), len(B_FIRST), False, t.next().pack(),
                              "DEVICE-B", False, first.hlc, first.history())
    b_again = AttachmentEntry(mine.id, "a.png", sha(B_AGAIN), len(B_AGAIN), False, t.next().next().pack(),
                              "DEVICE-B", False, b_first.hlc, b_first.history())
    r.blobs.put_bytes(B_AGAIN)
    r.index.put(b_again)  # B's first change never reached A: only its slot's latest
    await r.sync_now()
    assert (root / "a.png").read_bytes() == B_AGAIN
    kinds = {v.sha256: v.kind for v in r.versions.all()}
    assert kinds[sha(A_BYTES)] == "concurrent"
    assert kinds[sha(C_BYTES)] == "before-overwrite"
    await r.stop()
