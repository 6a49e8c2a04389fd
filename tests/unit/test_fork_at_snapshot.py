"""``NoteDoc.fork_at`` after concurrent rewrites (found by R5, tests/integration/test_eight_agents.py).

Two replicas of a note; each step one of them inserts a line (sent to the other, or kept
back for a later state-vector exchange), takes a snapshot, or rewrites the note from a
fork at one of its recent snapshots and merges it back (what a ``baseRevision`` rewrite
does in ``NotesService.rewrite_at``). Every fork must rebuild exactly the text the
snapshot was taken at. After some of these merges pycrdt's ``Doc.from_snapshot`` panics
(src/doc.rs:48, ``UnexpectedValue``); ``fork_at`` then cuts the full update at the snapshot
itself (``sync/snapshot_state.py``). Before that, it raised ``CrdtError`` and the daemon
refused such a rewrite ``bad_request``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pycrdt
import pytest

from stet.sync.note_doc import NoteDoc, text_revision
from stet.sync.snapshot_state import state_at


def line_inserted(text: str, line: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True)
    at = rng.randrange(1, len(lines) + 1)
    return "".join(lines[:at]) + line + "".join(lines[at:])


def cut_text(doc: NoteDoc, snap: bytes) -> str:
    return NoteDoc.from_updates([state_at(doc.full_update(), snap)]).text


# Seeds whose runs meet pycrdt's panic early (3 times within ~100 steps, in 6 runs of 6 with
# pycrdt 0.14; the runs are not fully fixed by the seed: each document draws its client id).
# Seeds 1-3 met it first after up to 1,477 steps, ~9 s a seed, and not in every run.
SEEDS = [8, 22, 25]
MAX_STEPS = 2000  # bounded
ENOUGH = (3, 300)  # a run stops once it met the panic this many times and took this many steps


@pytest.mark.parametrize("seed", SEEDS)
def test_a_fork_at_any_recent_snapshot_rebuilds_that_text(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    cuts = [0]  # forks pycrdt could not rebuild (its panic): cut from the full update instead
    real_cut = NoteDoc._state_at

    def counting_cut(doc: NoteDoc, snapshot: bytes) -> bytes:
        cuts[0] += 1
        return real_cut(doc, snapshot)

    monkeypatch.setattr(NoteDoc, "_state_at", counting_cut)
    rng = random.Random(seed)
    a = NoteDoc()
    a.apply_update(NoteDoc.genesis("shared.md", "# Shared\n\nintro line\n"))
    b = NoteDoc()
    b.apply_update(a.full_update())
    snaps: list[tuple[NoteDoc, bytes, str]] = []
    for step in range(MAX_STEPS):
        if cuts[0] >= ENOUGH[0] and step >= ENOUGH[1]:
            break
        doc, other = (a, b) if rng.random() < 0.5 else (b, a)
        r = rng.random()
        if r < 0.3:
            snaps.append((doc, doc.snapshot(), doc.text))
        elif r < 0.6:
            update = doc.set_text(line_inserted(doc.text, f"<m{step}>\n", rng))
            if update is not None and rng.random() < 0.7:
                other.apply_update(update)
        elif r < 0.8 and snaps:
            src, snap, text = rng.choice(snaps[-10:])
            fork = src.fork_at(snap)
            assert fork.text == text
            assert cut_text(src, snap) == text  # the way round the panic, on every snapshot
            update = fork.set_text(line_inserted(text, f"<b{step}>\n", rng))
            if update is not None:
                src.apply_update(update)
                other.apply_update(update)
        else:
            other.apply_update(doc.update_since(other.state_vector()))
    assert a.text.count("<") >= 1


def test_a_cut_splits_multibyte_text_at_its_utf16_clock() -> None:
    doc = NoteDoc()
    doc.set_text("h\u00e9llo \U0001F600 world\n")
    snap = doc.snapshot()
    doc.set_text("h\u00e9llo \U0001F600 there, world\nmore\n")  # inserted inside the first item
    doc.set_text("\U0001F600 there\nmore\n")
    assert cut_text(doc, snap) == "h\u00e9llo \U0001F600 world\n"
    fork = doc.fork_at(snap)
    update = fork.set_text("h\u00e9llo \U0001F600 world\nfrom the fork\n")
    assert update is not None
    doc.apply_update(update)
    assert doc.text == "\U0001F600 there\nmore\nfrom the fork\n"


def test_a_cut_keeps_the_snapshots_deletions_only() -> None:
    doc = NoteDoc()
    doc.set_text("one\ntwo\nthree\n")
    doc.set_text("one\nthree\n")
    snap = doc.snapshot()
    doc.set_text("three\nfour\n")
    assert cut_text(doc, snap) == "one\nthree\n"
    assert cut_text(doc, NoteDoc().snapshot()) == ""


DATA = Path(__file__).parent / "data"


def test_a_snapshot_pycrdt_rebuilds_as_another_text_is_cut_instead() -> None:
    """Found by R5 (seed 9, on this branch): ``shared.md`` on A after concurrent
    ``baseRevision`` rewrites, and the state remembered for one of its revisions. pycrdt
    0.14's ``Doc.from_snapshot`` rebuilds it without a panic but as another text (so the
    rewrite would be refused ``revision_unknown``); ``fork_at`` told the revision cuts the
    update instead and gets it."""
    note = NoteDoc.from_updates([(DATA / "r5_seed9_shared.update").read_bytes()])
    snap = (DATA / "r5_seed9_shared.snapshot").read_bytes()
    revision = "9c589dfdcbd7d3ec9da1b1beafe7289aa0ce053012296e79a5efc740ca760124"
    past = pycrdt.Doc.from_snapshot(pycrdt.Snapshot.decode(snap), note.doc)
    # The input still takes the path under test (a newer pycrdt may rebuild it right).
    assert text_revision(str(past.get("content", type=pycrdt.Text))) != revision
    assert text_revision(cut_text(note, snap)) == revision
    assert note.fork_at(snap, revision).revision == revision
