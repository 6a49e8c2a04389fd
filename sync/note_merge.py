"""Joining two notes that were created independently at the same path.

Two machines that each imported a copy of a folder, or each created today's daily
note offline (SPEC §3.7, §3.10), end up with two notes claiming one path. When their
first imports were identical, ``NoteDoc.genesis`` already made them one note (same id,
same CRDT items). When they differ, the note with the smaller id wins and the other's
text is added to it as pure inserts (``union_splices``): each side's text appears
once, nothing is duplicated, nothing is deleted.

The join is deterministic: its update is made by a client id derived from the winner's
state and the loser's text, so every machine that performs the same join produces the
same CRDT items, and applying both is the same as applying one.
"""

from __future__ import annotations

import hashlib

import pycrdt

from .note_doc import TEXT_NAME, NoteDoc
from .text_diff import to_byte_splices, union_splices


def winner_of(note_id_a: str, note_id_b: str) -> str:
    """Which of two notes at one path survives the join (the same answer everywhere)."""
    return min(note_id_a, note_id_b)


def join_client_id(winner_state: bytes, loser_text: str) -> int:
    digest = hashlib.sha256(b"stet-join\0" + winner_state + b"\0" + loser_text.encode()).digest()
    return int.from_bytes(digest[:4], "big") | 1


def join_update(winner: NoteDoc, loser_text: str) -> bytes | None:
    """The update that adds ``loser_text``'s missing lines to ``winner`` (None if none).

    Computed on a private copy of the winner with a deterministic client id, so the
    result depends only on the winner's CRDT state and the loser's text.
    """
    base = winner.text
    splices = union_splices(base, loser_text)
    if not splices:
        return None
    state = winner.state_vector()
    fork: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(client_id=join_client_id(state, loser_text), skip_gc=True)
    fork.apply_update(winner.full_update())
    text = fork.get(TEXT_NAME, type=pycrdt.Text)
    before = fork.get_state()
    with fork.transaction():
        for s in to_byte_splices(base, splices):
            if s.length:
                del text[s.start : s.start + s.length]
            if s.text:
                text.insert(s.start, s.text)
    return fork.get_update(before)
