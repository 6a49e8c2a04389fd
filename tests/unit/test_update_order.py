"""sync/update_order.py: updates of one client applied in any order are all kept (pycrdt
alone loses some), for any document -- shown here on the vault index's document, which
has the same exposure as the attachment index."""

from __future__ import annotations

import itertools

import pycrdt
from hypothesis import given, settings
from hypothesis import strategies as st

from stet.sync.update_order import HeldUpdates, starts_past
from stet.sync.vault_index import NoteEntry, VaultIndex


def test_every_order_of_vault_index_updates_is_kept() -> None:
    source = VaultIndex()
    updates = [u for u in (source.put_note(NoteEntry("n1", "a.md")), source.put_note(NoteEntry("n1", "b.md")),
                           source.put_note(NoteEntry("n2", "c.md"))) if u is not None]
    for order in itertools.permutations(updates):
        target = VaultIndex()
        held = HeldUpdates()
        for u in order:
            held.apply(target.doc, u, "index update")
        assert {k: e.path for k, e in target.entries().items()} == {"n1": "b.md", "n2": "c.md"}, order
        assert len(held) == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.sampled_from("abcd"), st.integers(0, 9)), min_size=1,
                max_size=12), st.randoms(use_true_random=False))
def test_two_writers_any_interleaving_converges(writes: list[tuple[int, str, int]], rnd: object) -> None:
    docs = [pycrdt.Doc(), pycrdt.Doc()]
    maps = [d.get("m", type=pycrdt.Map) for d in docs]
    sent: list[bytes] = []
    for d in docs:
        d.observe(lambda e: sent.append(e.update))
    for who, key, value in writes:
        maps[who][f"{who}/{key}"] = value  # each writer its own keys, as the indexes do
    expected = {**dict(maps[0]), **dict(maps[1])}
    order = sent[:]
    rnd.shuffle(order)  # type: ignore[attr-defined]
    target = pycrdt.Doc()
    tmap = target.get("m", type=pycrdt.Map)
    held = HeldUpdates()
    for u in order:
        held.apply(target, u, "update")
    assert dict(tmap) == expected
    assert len(held) == 0


def test_starts_past_reads_only_one_client_updates() -> None:
    d = pycrdt.Doc()
    m = d.get("m", type=pycrdt.Map)
    ups: list[bytes] = []
    d.observe(lambda e: ups.append(e.update))
    m["a"] = 1
    m["b"] = 2
    empty = bytes(pycrdt.Doc().get_state())
    assert not starts_past(ups[0], empty)
    assert starts_past(ups[1], empty)
    assert not starts_past(bytes(d.get_update()), empty)  # a full state: applied at once
    assert not starts_past(b"\xff", empty)  # malformed: left to apply (which reports it)


def test_the_held_back_queue_is_bounded() -> None:
    d = pycrdt.Doc()
    m = d.get("m", type=pycrdt.Map)
    ups: list[bytes] = []
    d.observe(lambda e: ups.append(e.update))
    for i in range(10):
        m[str(i)] = i
    held = HeldUpdates(max_updates=3)
    target = pycrdt.Doc()
    for u in ups[1:]:
        held.apply(target, u, "update")
    assert len(held) == 3  # the oldest dropped; a full state would bring them again
    held.apply(target, bytes(d.get_update()), "update")
    assert dict(target.get("m", type=pycrdt.Map)) == dict(m)
    assert len(held) == 0
