from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stet.sync.errors import CrdtError
from stet.sync.note_doc import NoteDoc, genesis_note_id

SAMPLES = ["", "a", "😀", "世界", "e\u0301", "\r\n", "\ufeff", "👩‍👩‍👧", "x\n", "tail"]
texts = st.lists(st.sampled_from(SAMPLES) | st.text(max_size=8), max_size=30).map("".join)


@settings(max_examples=150, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6))
def test_set_text_reaches_every_target_exactly(seq: list[str]) -> None:
    doc = NoteDoc()
    replica = NoteDoc()
    for target in seq:
        update = doc.set_text(target)
        assert doc.text == target
        if update is not None:
            replica.apply_update(update)
        assert replica.text == target


def test_set_text_is_a_minimal_diff_not_a_rewrite() -> None:
    base = "".join(f"line {i} 😀 世界\n" for i in range(500))
    doc = NoteDoc()
    doc.set_text(base)
    other = NoteDoc.from_updates([doc.full_update()])
    # A concurrent edit elsewhere in the note...
    other.set_text(base.replace("line 499", "line 499 (edited elsewhere)"))
    # ...and a one-word local change: both survive the merge.
    update = doc.set_text(base.replace("line 3 ", "LINE 3 "))
    assert update is not None
    assert len(update) < 200
    doc.apply_update(other.update_since(doc.state_vector()))
    assert "LINE 3 " in doc.text
    assert "(edited elsewhere)" in doc.text


def test_genesis_is_deterministic() -> None:
    assert NoteDoc.genesis("a.md", "x😀") == NoteDoc.genesis("a.md", "x😀")
    assert NoteDoc.genesis("a.md", "x") != NoteDoc.genesis("b.md", "x")
    assert genesis_note_id("a.md", "x") == genesis_note_id("a.md", "x")
    assert genesis_note_id("a.md", "x") != genesis_note_id("a.md", "y")


@pytest.mark.parametrize(
    "garbage", [b"", b"\x00", b"\xff" * 64, b"\x01\x01\xff\xff\xff\xff\x0f", bytes(range(256))]
)
def test_garbage_updates_raise_crdt_error_not_panic(garbage: bytes) -> None:
    doc = NoteDoc()
    doc.set_text("intact")
    with contextlib.suppress(CrdtError):
        doc.apply_update(garbage)
    assert doc.text == "intact"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_updates_never_escape_as_panics(data: bytes) -> None:
    doc = NoteDoc()
    doc.set_text("intact text")
    with contextlib.suppress(CrdtError):
        doc.apply_update(data)
    # Whatever happened, the doc is still usable.
    doc.set_text(doc.text + "!")
    assert doc.text.endswith("!")


def _three_edits_by_one_writer() -> tuple[bytes, bytes, bytes, NoteDoc]:
    base = NoteDoc()
    base.set_text("hello world\n")
    writer = NoteDoc.from_updates([base.full_update()])
    first = writer.set_text("hello world\nEND\n")
    assert first is not None
    second = writer.set_text("START hello world\nEND\n")  # does not depend on the first
    assert second is not None
    return base.full_update(), first, second, writer


def test_an_update_that_overtook_the_one_before_it_is_never_shown_unaccounted() -> None:
    """pycrdt 0.14 shows an item whose client has a clock gap before it, while its state
    vector and transaction update leave it out: the note would differ from its store."""
    full, first, second, writer = _three_edits_by_one_writer()
    doc = NoteDoc.from_updates([full])
    stored = [full]
    for update in (second, first):  # out of order
        new = doc.apply_update(update)
        if new is not None:
            stored.append(new)
        # What the note shows is always what its stored updates rebuild.
        assert NoteDoc.from_updates(stored).text == doc.text
    assert doc.apply_update(second) is not None  # sent again after the one before it
    assert doc.text == writer.text == "START hello world\nEND\n"


def test_a_damaged_clock_cannot_make_a_note_differ_from_its_store() -> None:
    full, first, _second, _writer = _three_edits_by_one_writer()
    doc = NoteDoc.from_updates([full])
    for clock in (5, 64):  # the writer's first item, claimed at a later clock
        assert doc.apply_update(_with_clock(first, clock)) is None
        assert doc.text == "hello world\n"


def test_a_new_notes_whole_state_is_applied_without_a_second_document(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer's new note (its whole state into an empty document) is taken in as it is:
    no check document rebuilt for it (a second pycrdt document per note of a first sync);
    a damaged one still is checked, and shows nothing unaccounted."""
    checks: list[bytes] = []
    keep = NoteDoc._keep_accounted

    def counting(self: NoteDoc, before: bytes, new: bytes | None) -> None:
        checks.append(before)
        keep(self, before, new)

    monkeypatch.setattr(NoteDoc, "_keep_accounted", counting)
    whole = NoteDoc.genesis("a/b.md", "hello world\n" * 40)
    doc = NoteDoc()
    assert doc.apply_update(whole) == whole
    assert doc.text == "hello world\n" * 40
    assert checks == []
    _full, first, _second, _writer = _three_edits_by_one_writer()
    damaged = NoteDoc()
    damaged.apply_update(_with_clock(first, 5))  # a clock gap before its only item
    assert len(checks) == 1
    assert damaged.text == NoteDoc.from_updates([damaged.full_update()]).text


def _with_clock(update: bytes, clock: int) -> bytes:
    """``update`` (one client, first item at clock 0) with that item claimed at ``clock``."""
    pos = 2
    while update[pos] & 0x80:  # the client id, a varint
        pos += 1
    assert update[pos + 1] == 0
    return update[: pos + 1] + bytes([clock]) + update[pos + 2 :]


def test_a_large_note_appended_to_many_times_replays_and_merges_the_same() -> None:
    """Past RELOAD_AFTER_EDITS edits of a large note the in-memory document starts again
    under a new client id (so appends stay cheap): nothing of that may show outside."""
    from stet.sync import note_doc
    from stet.sync.state_vectors import decode_state_vector
    from stet.sync.text_diff import Splice

    doc = NoteDoc()
    stored = [doc.set_text("x" * note_doc.RELOAD_MIN_BYTES + "\n")]
    peer = NoteDoc.from_updates(stored)
    for i in range(note_doc.RELOAD_AFTER_EDITS * 2 + 10):
        old = doc.text
        update = doc.apply_splices(old, [Splice(len(old), len(old), f"line {i} é😀\n")])
        assert update is not None
        stored.append(update)
        assert doc.text == old + f"line {i} é😀\n"  # the cached text follows every edit
        if i % 50 == 0:  # ... and so do the cached revision and size (appends hash only the new part)
            rebuilt = NoteDoc.from_updates(stored).text
            assert rebuilt == doc.text
            assert doc.revision == note_doc.text_revision(rebuilt)
            assert doc.byte_size == len(rebuilt.encode("utf-8"))
    assert len(decode_state_vector(doc.state_vector())) >= 3  # two reloads: two new client ids
    assert NoteDoc.from_updates(stored).text == doc.text
    # A peer's concurrent edit made on the old state merges the same on both sides.
    peer_update = peer.set_text("PEER\n" + peer.text)
    assert peer_update is not None
    here_update = doc.apply_update(peer_update)
    assert here_update is not None
    for update in stored[1:]:
        peer.apply_update(update)
    assert peer.text == doc.text
    assert doc.text.startswith("PEER\nxxx")


def test_a_small_note_keeps_its_client_id_however_often_it_is_edited() -> None:
    from stet.sync import note_doc
    from stet.sync.state_vectors import decode_state_vector

    doc = NoteDoc()
    for i in range(note_doc.RELOAD_AFTER_EDITS + 5):
        doc.set_text(doc.text + f"{i}\n")
    assert len(decode_state_vector(doc.state_vector())) == 1
