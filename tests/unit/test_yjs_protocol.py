"""The y-websocket wire format (``stet.sync.yjs_protocol``), checked against pycrdt's own
encoders and Yjs' documented layout; anything malformed is a ``ProtocolError``."""

from __future__ import annotations

import pycrdt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stet.sync.yjs_protocol import (
    KEEPALIVE,
    MSG_AWARENESS,
    MSG_QUERY_AWARENESS,
    MSG_SYNC,
    SYNC_STEP1,
    SYNC_STEP2,
    SYNC_UPDATE,
    AwarenessEntry,
    AwarenessStates,
    ProtocolError,
    decode_awareness,
    encode_awareness,
    foreign_history,
    parse,
    sync_step1,
    sync_step2,
    sync_update,
)


def _doc(text: str) -> pycrdt.Doc[pycrdt.Text]:
    doc: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc()
    doc.get("content", type=pycrdt.Text).insert(0, text)
    return doc


def test_sync_messages_match_pycrdt_and_round_trip() -> None:
    doc = _doc("😀 中文" * 50)  # an update over 127 bytes: a two-byte length
    assert sync_step1(doc.get_state()) == pycrdt.create_sync_message(doc)
    assert parse(pycrdt.create_sync_message(doc)) == parse(sync_step1(doc.get_state()))
    m = parse(sync_step1(doc.get_state()))
    assert (m.kind, m.sync_type, m.payload) == (MSG_SYNC, SYNC_STEP1, doc.get_state())
    update = doc.get_update()
    assert parse(sync_step2(update)).payload == update
    assert parse(sync_step2(update)).sync_type == SYNC_STEP2
    assert parse(sync_update(update)).sync_type == SYNC_UPDATE
    # pycrdt's own handler answers our step 1 with a step 2 we read back.
    other = _doc("")
    reply = pycrdt.handle_sync_message(sync_step1(other.get_state())[1:], doc)
    assert reply is not None
    other.apply_update(parse(reply).payload)
    assert str(other.get("content", type=pycrdt.Text)) == "😀 中文" * 50


def test_awareness_states_are_utf8_counted_and_round_trip() -> None:
    entries = [AwarenessEntry(1, 3, '{"user":"Zoë 中文 😀"}'), AwarenessEntry(2**40, 0, "null")]
    data = encode_awareness(entries)
    assert decode_awareness(data) == entries
    m = parse(pycrdt.create_awareness_message(data))
    assert (m.kind, m.payload) == (MSG_AWARENESS, data)
    assert parse(b"\x03").kind == MSG_QUERY_AWARENESS
    assert decode_awareness(parse(KEEPALIVE).payload) == []


@pytest.mark.parametrize("junk", [b"", b"\x00", b"\x00\x01", b"\x00\x01\x05ab", b"\x00\x07\x00", b"\x09",
                                  b"\xff" * 12, b"\x01", b"\x01\x05\x01\x01\x01\x03{]x"])
def test_malformed_messages_are_protocol_errors(junk: bytes) -> None:
    def read() -> None:
        m = parse(junk)
        if m.kind == MSG_AWARENESS:
            decode_awareness(m.payload)

    with pytest.raises(ProtocolError):
        read()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_parse_or_are_refused_cleanly(data: bytes) -> None:
    try:
        m = parse(data)
        if m.kind == MSG_AWARENESS:
            decode_awareness(m.payload)
    except ProtocolError:
        pass


def test_awareness_states_follow_the_clock_rules() -> None:
    states = AwarenessStates()
    assert states.apply([AwarenessEntry(7, 2, '{"a":1}')]) == [AwarenessEntry(7, 2, '{"a":1}')]
    assert states.apply([AwarenessEntry(7, 1, '{"a":0}')]) == []  # older: ignored
    assert states.apply([AwarenessEntry(7, 2, '{"a":2}')]) == []  # same clock, not a removal
    assert states.apply([AwarenessEntry(8, 0, '{"b":1}')]) != []
    full = states.full()
    assert full is not None
    assert decode_awareness(full) == [AwarenessEntry(7, 2, '{"a":1}'), AwarenessEntry(8, 0, '{"b":1}')]
    gone = states.remove({7, 99})
    assert gone is not None
    assert decode_awareness(gone) == [AwarenessEntry(7, 3, "null")]  # a newer clock: others drop it
    assert len(states) == 1
    removal = AwarenessEntry(8, 0, "null")  # the same clock, but a removal: taken
    assert states.apply([removal]) == [removal]
    assert states.full() is None


def test_a_document_with_no_writer_in_common_is_foreign() -> None:
    note = _doc("the note")
    synced: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc()
    synced.apply_update(note.get_update())
    synced.get("content", type=pycrdt.Text).insert(0, "more ")
    assert not foreign_history(synced.get_state(), note.get_state())  # shares the note's writer
    assert not foreign_history(pycrdt.Doc().get_state(), note.get_state())  # a fresh client
    assert not foreign_history(_doc("x").get_state(), pycrdt.Doc().get_state())  # an empty note
    assert foreign_history(_doc("the note").get_state(), note.get_state())  # typed before syncing
    with pytest.raises(ProtocolError):
        foreign_history(b"\x05\x01", note.get_state())
