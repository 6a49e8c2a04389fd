"""The peer case's merge (``sync/peer_merge.py``), on real pycrdt documents standing for
devices that edited apart and then exchange catch-ups as the peer protocol does (the
update since the other's state vector, with the sender's snapshot): both sides compute the
same repair, receiving the other's repair changes nothing, overlapping lines stay whole."""

from __future__ import annotations

import pycrdt
from hypothesis import given, settings
from hypothesis import strategies as st

from stet.sync.note_doc import NoteDoc
from stet.sync.peer_merge import common_state, decode_snapshot, encode_snapshot, merge_catch_up

NOTE = "# Limits\n\nrate_limit = 50 rpm\nStatus: draft\n"


def _device(client_id: int, genesis: bytes) -> NoteDoc:
    d = NoteDoc(pycrdt.Doc(client_id=client_id, skip_gc=True))
    d.apply_update(genesis)
    return d


def _meet(x: NoteDoc, y: NoteDoc, kx: str, ky: str) -> None:
    """One catch-up each way, each side repairing as it takes the other's in; then the
    repairs cross (a live update each)."""
    sx, tx, sy, ty = x.snapshot(), x.text, y.snapshot(), y.text
    ux, uy = x.update_since(y.state_vector()), y.update_since(x.state_vector())
    x.apply_update(uy)
    y.apply_update(ux)
    mx = merge_catch_up(x, sx, tx, sy, kx, ky)
    my = merge_catch_up(y, sy, ty, sx, ky, kx)
    if mx is not None and mx.repair is not None:
        x.apply_update(mx.repair)
    if my is not None and my.repair is not None:
        y.apply_update(my.repair)
    if mx is not None and mx.repair is not None:
        assert y.apply_update(mx.repair) is None  # the same items: nothing new
    if my is not None and my.repair is not None:
        assert x.apply_update(my.repair) is None


def test_two_devices_changing_one_word_keep_both_lines_and_make_the_same_repair() -> None:
    g = NoteDoc.genesis("cfg.md", NOTE)
    a, b = _device(11, g), _device(22, g)
    a.set_text(NOTE.replace("50", "100").replace("draft", "done"))
    b.set_text(NOTE.replace("50", "60").replace("draft", "done"))
    _meet(a, b, "A", "B")
    assert a.text == b.text == "# Limits\n\nrate_limit = 100 rpm\nrate_limit = 60 rpm\nStatus: done\n"


def test_three_devices_converge_on_three_whole_lines_and_one_identical_fix_lands_once() -> None:
    g = NoteDoc.genesis("cfg.md", NOTE)
    docs = [_device(cid, g) for cid in (11, 22, 33)]
    for d, value in zip(docs, ("100", "60", "75"), strict=True):
        d.set_text(NOTE.replace("50", value).replace("draft", "done"))
    a, b, c = docs
    _meet(a, b, "A", "B")
    _meet(a, c, "A", "C")
    _meet(b, a, "B", "A")
    _meet(c, b, "C", "B")
    assert a.text == b.text == c.text
    lines = a.text.splitlines()
    assert sorted(line for line in lines if line.startswith("rate_limit")) == [
        "rate_limit = 100 rpm", "rate_limit = 60 rpm", "rate_limit = 75 rpm"]
    assert lines.count("Status: done") == 1
    assert len(lines) == 6


def test_a_peer_that_saw_all_of_ours_needs_no_merge() -> None:
    g = NoteDoc.genesis("cfg.md", NOTE)
    a, b = _device(11, g), _device(22, g)
    b.apply_update(a.full_update())
    own, own_text = a.snapshot(), a.text
    b.set_text(NOTE.replace("50", "60"))
    a.apply_update(b.update_since(a.state_vector()))
    assert merge_catch_up(a, own, own_text, b.snapshot(), "A", "B") is None


def test_snapshots_decode_and_encode_canonically() -> None:
    d = NoteDoc.from_updates([NoteDoc.genesis("x.md", "hello world\n")])
    d.set_text("hello\n")
    ds, sv = decode_snapshot(d.snapshot())
    assert decode_snapshot(encode_snapshot(ds, sv)) == (ds, sv)
    assert decode_snapshot(common_state((ds, sv), (ds, sv))) == (ds, sv)


WORDS = st.sampled_from(["alpha", "beta", "café", "数据库", "Привет", "مرحبا", "- [ ] task", "50 rpm"])
LINES = st.lists(st.lists(WORDS, min_size=1, max_size=4).map(" ".join), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(base=LINES, edits=st.lists(st.tuples(st.integers(0, 5), WORDS), min_size=2, max_size=2))
def test_any_two_devices_converge_with_each_line_whole(base: list[str], edits: list[tuple[int, str]]) -> None:
    text = "\n".join(base) + "\n"
    g = NoteDoc.genesis("p.md", text)
    a, b = _device(11, g), _device(22, g)
    sides = []
    for d, (line, word) in zip((a, b), edits, strict=True):
        lines = text.splitlines()
        lines[line % len(lines)] = lines[line % len(lines)] + " " + word
        new = "\n".join(lines) + "\n"
        d.set_text(new)
        sides.append(new)
    _meet(a, b, "A", "B")
    assert a.text == b.text
    for side, (_, word) in zip(sides, edits, strict=True):
        # What each side added is there, its characters together (never mixed with the
        # other's), and every line it left alone is there too.
        assert word in a.text, (word, a.text)
        for line in side.splitlines():
            if line in text.splitlines():
                assert line in a.text.splitlines() or any(line in o for o in a.text.splitlines())
