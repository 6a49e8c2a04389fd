"""A peer's new note taken into an empty document (``NoteDoc.apply_update``): applied as
it is when the document then holds exactly the update (no transaction observed), else
the observed way. Either way the answer -- the part new to us, the text, the state -- is
what the observed apply gives, for updates encoded as yrs encodes a document's state
(a genesis, a note edited from two sides) and otherwise (merged from several)."""

from __future__ import annotations

import random

import pycrdt
import pytest

from stet.sync.errors import CrdtError
from stet.sync.note_doc import EMPTY_UPDATE, NoteDoc


def _observed(update: bytes) -> tuple[bytes | None, str, bytes]:
    """What the observed apply into an empty document makes of ``update``."""
    doc = NoteDoc()
    new = doc._apply(update)
    return new, doc.text, doc.state_vector()


def _updates() -> list[bytes]:
    rnd = random.Random(7)
    out = []
    for i in range(40):
        text = "".join(rnd.choice("abc déf\n🙂") for _ in range(rnd.randrange(0, 300)))
        genesis = NoteDoc.genesis(f"n{i}.md", text)
        out.append(genesis)
        a, b = NoteDoc(), NoteDoc()
        a.apply_update(genesis)
        b.apply_update(genesis)
        for k in range(4):
            a.doc.get("content", type=pycrdt.Text).insert(rnd.randrange(len(a.text) + 1), f"a{k} ")
            a._changed()
        b.doc.get("content", type=pycrdt.Text).insert(0, "from b ")
        b._changed()
        if len(a.text) > 8:
            del a.doc.get("content", type=pycrdt.Text)[2:6]
            a._changed()
        out.append(a.full_update())
        out.append(bytes(pycrdt.merge_updates(a.full_update(), b.full_update())))
    return out


@pytest.mark.parametrize("update", _updates())
def test_an_update_taken_into_an_empty_document_is_what_the_observed_apply_makes_of_it(update: bytes) -> None:
    new, text, state = _observed(update)
    doc = NoteDoc()
    got = doc.apply_update(update)
    assert doc.text == text
    assert doc.state_vector() == state
    if new == update:
        assert got == update
    else:  # (the observed way, as before: its new part)
        assert got is not None
        assert new is not None
        check = NoteDoc()
        check.apply_update(got)
        assert check.text == text


def test_a_whole_update_is_taken_without_observing_and_another_with() -> None:
    genesis = NoteDoc.genesis("a.md", "hello\n")
    doc = NoteDoc()
    observed: list[bytes] = []
    real_apply = doc._apply

    def spy(update: bytes) -> bytes | None:
        observed.append(update)
        return real_apply(update)

    doc._apply = spy  # type: ignore[method-assign]
    assert doc.apply_update(genesis) == genesis
    assert observed == []  # taken whole: no transaction observed
    assert doc.text == "hello\n"
    other = NoteDoc()
    other.apply_update(genesis)
    other.doc.get("content", type=pycrdt.Text).insert(0, "more ")
    merged = bytes(pycrdt.merge_updates(genesis, other.update_since(doc.state_vector())))
    fresh = NoteDoc()
    fresh._apply = spy  # type: ignore[method-assign]
    client = fresh.doc.client_id
    if fresh.apply_update(merged) != merged:
        assert observed == [merged]  # not whole: applied again, observed, on an empty document
    assert fresh.text == "more hello\n"
    assert fresh.doc.client_id == client  # local edits keep the document's own client


def test_an_empty_update_into_an_empty_document_is_nothing_new() -> None:
    assert NoteDoc().apply_update(EMPTY_UPDATE) is None


def test_a_bad_update_into_an_empty_document_is_a_crdt_error() -> None:
    with pytest.raises(CrdtError):
        NoteDoc().apply_update(b"\x01\x02garbage")
