"""One CRDT transaction and one note row write per group of appends to a note
(daemon/notes/append_batch.py, P2), on a real store and the real write path in-process: each
append still answers with the revision the note has after it, every such revision can be
rebuilt (``baseRevision``), the change log stays attributed, refusals and failures stay
alone, and peers hear the whole group."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pycrdt
import pytest

from stet.daemon.notes.changes import Change
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.group_commit import GroupCommit
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import OWNER, NoteOperations, Principal
from stet.sync.change_log import ChangeLog
from stet.sync.note_doc import NoteDoc
from stet.sync.snapshot_clock import advanced, after_insertions, client_clock, utf16_length
from stet.sync.store import VaultStore


def _ops(service: NotesService, events: EventBus, principal: Principal) -> NoteOperations:
    return NoteOperations(service, events, principal, extensions=(".md",), max_bytes=1_000_000)


@pytest.fixture
def rig(tmp_path: Path) -> tuple[NotesService, EventBus]:
    service = NotesService("v1", VaultStore(tmp_path / "v.db"))
    events = EventBus()
    RecordsKeeper(service, events)
    _ops(service, events, OWNER).create_note("log.md", "# log\n")
    return service, events


def run_group(group: GroupCommit, calls: list[Any]) -> list[Any]:
    async def main() -> list[Any]:
        return await asyncio.gather(*(group.run(call) for call in calls), return_exceptions=True)

    return asyncio.run(main())


def note_id(service: NotesService) -> str:
    row = service.store.note_at("log.md")
    assert row is not None
    return row.id


def test_eight_appends_in_one_group_are_one_crdt_transaction_each_with_its_own_revision(
        rig: tuple[NotesService, EventBus]) -> None:
    service, events = rig
    ops = _ops(service, events, Principal("agent", "a1"))
    nid = note_id(service)
    doc = service.doc(nid)
    transactions: list[bytes] = []
    sub = doc.doc.observe(lambda event: transactions.append(event.update))
    updates_before = service.store.update_rows(nid)
    changes: list[Change] = []
    service.subscribe(changes.append)
    lines = [f"line {i} é😀\n" for i in range(8)]
    answers = run_group(GroupCommit(service), [
        lambda line=line, i=i: ops.append_note("log.md", line, idempotencyKey=f"k{i}")
        for i, line in enumerate(lines)])
    doc.doc.unobserve(sub)
    assert all(isinstance(a, dict) for a in answers), answers
    assert len(transactions) == 1  # one CRDT transaction for the eight
    assert service.store.update_rows(nid) - updates_before == 1  # one update row, one note row
    text = "# log\n"
    for line, answer in zip(lines, answers, strict=True):
        text += line
        assert answer["revision"] == hashlib.sha256(text.encode()).hexdigest()  # the state after it
    assert _ops(service, events, OWNER).read_note("log.md")["content"] == text
    # One change per append (the log and the events see each), the last carrying the whole update.
    assert [c.revision_after for c in changes] == [a["revision"] for a in answers]
    assert changes[0].revision_before == hashlib.sha256(b"# log\n").hexdigest()
    assert all(c.update is not None for c in changes)
    peer = NoteDoc.from_updates(service.store.updates(nid))
    assert peer.text == text
    # what was acknowledged is what a fresh load of the store holds
    assert NotesService("v1", service.store).doc(nid).text == text


def test_every_revision_answered_in_a_group_is_rebuildable_as_a_base(
        rig: tuple[NotesService, EventBus]) -> None:
    service, events = rig
    ops = _ops(service, events, Principal("agent", "a1"))
    nid = note_id(service)
    lines = [f"entry {i} {'😀' * i}\n" for i in range(6)]
    answers = run_group(GroupCommit(service), [
        lambda line=line: ops.append_note("log.md", line) for line in lines])
    text = "# log\n"
    for line, answer in zip(lines, answers, strict=True):
        text += line
        snapshot = service.revisions.lookup(nid, answer["revision"], service.clock())
        if answer is answers[-1]:
            assert snapshot is None  # the current revision: nothing to rebuild
            continue
        assert snapshot is not None
        assert service.doc(nid).fork_at(snapshot, answer["revision"]).text == text
    # a rewrite made at the third append's revision keeps what came after it
    base = answers[2]["revision"]
    prefix = "# log\n" + "".join(lines[:3])
    result = ops.update_note("log.md", prefix.replace("entry 0", "ENTRY 0"), baseRevision=base)
    assert result["changed"] is True
    now = _ops(service, events, OWNER).read_note("log.md")["content"]
    assert now == text.replace("entry 0", "ENTRY 0")


def test_the_change_log_stays_attributed_when_agents_share_a_group(
        rig: tuple[NotesService, EventBus]) -> None:
    service, events = rig
    a1 = _ops(service, events, Principal("agent", "a1"))
    a2 = _ops(service, events, Principal("agent", "a2"))
    nid = note_id(service)
    peer = NoteDoc.from_updates([service.doc(nid).full_update()])  # a peer in sync before the group
    heard: list[Change] = []
    service.subscribe(heard.append)
    calls = [lambda: a1.append_note("log.md", "one\n"), lambda: a1.append_note("log.md", "two\n"),
             lambda: a2.append_note("log.md", "three\n"), lambda: a1.append_note("log.md", "four 😀\n")]
    answers = run_group(GroupCommit(service), calls)
    assert all(isinstance(a, dict) for a in answers)
    # What peers hear: one update per append, in order; what is new to the peer in each is
    # exactly that append's text, so it attributes each to its own agent too.
    assert [c.source for c in heard] == ["agent:a1", "agent:a1", "agent:a2", "agent:a1"]
    for change, new_text in zip(heard, ["one\n", "two\n", "three\n", "four 😀\n"], strict=True):
        before = peer.text
        assert change.update is not None
        assert peer.apply_update(change.update) is not None
        assert peer.text == before + new_text
        assert peer.revision == change.revision_after
    entries = [e for e in reversed(ChangeLog(service.store).query(path="log.md")) if e.kind == "changed"]
    # The log: one entry per append, each with the revisions its answer named.
    assert [e.source for e in entries] == ["agent:a1", "agent:a1", "agent:a2", "agent:a1"]
    assert [e.revision_after for e in entries] == [a["revision"] for a in answers]
    assert [e.revision_before for e in entries[1:]] == [a["revision"] for a in answers[:-1]]
    assert [e.inserted for e in entries] == [4, 4, 6, 7]
    row = service.store.note_at("log.md")
    assert row is not None
    assert row.updated_by == "agent:a1"


def test_an_invalid_or_failing_append_in_the_group_is_refused_alone(
        rig: tuple[NotesService, EventBus], monkeypatch: pytest.MonkeyPatch) -> None:
    service, events = rig
    ops = _ops(service, events, Principal("agent", "a1"))
    from stet.sync import idempotency

    save = idempotency.IdempotencyKeys.save

    def failing_save(self: Any, token: str, key: str, *args: Any) -> None:
        if key == "bad":  # after its text was queued: its savepoint must drop it
            raise OSError("simulated failure while saving the key")
        save(self, token, key, *args)

    monkeypatch.setattr(idempotency.IdempotencyKeys, "save", failing_save)
    answers = run_group(GroupCommit(service), [
        lambda: ops.append_note("log.md", "a\n", idempotencyKey="ka"),
        lambda: ops.append_note("log.md", "doomed\n", idempotencyKey="bad"),
        lambda: ops.append_note("log.md", "x" * 2_000_000, idempotencyKey="big"),
        lambda: ops.append_note("log.md", "b\n", idempotencyKey="kb"),
        lambda: ops.append_note("log.md", "a\n", idempotencyKey="ka"),  # a retry in the same group
        lambda: ops.append_note("log.md", "other\n", idempotencyKey="ka"),  # a key reused
    ])
    assert isinstance(answers[1], OSError)
    assert getattr(answers[2], "code", None) == "too_large"
    assert getattr(answers[5], "code", None) == "idempotency_key_reused"
    assert answers[4]["replayed"] is True
    assert answers[4]["revision"] == answers[0]["revision"]
    text = "# log\na\nb\n"
    assert _ops(service, events, OWNER).read_note("log.md")["content"] == text
    assert answers[3]["revision"] == hashlib.sha256(text.encode()).hexdigest()
    service.forget(note_id(service))
    assert _ops(service, events, OWNER).read_note("log.md")["content"] == text  # the store holds it


def test_a_group_creating_a_note_and_appending_to_two_notes(rig: tuple[NotesService, EventBus]) -> None:
    service, events = rig
    ops = _ops(service, events, Principal("agent", "a1"))
    answers = run_group(GroupCommit(service), [
        lambda: ops.append_note("new.md", "first\n"), lambda: ops.append_note("log.md", "x\n"),
        lambda: ops.append_note("new.md", "second\n"), lambda: ops.append_note("log.md", "y\n")])
    assert [a["created"] for a in answers] == [True, False, False, False]
    owner = _ops(service, events, OWNER)
    assert owner.read_note("new.md")["content"] == "first\nsecond\n"
    assert owner.read_note("log.md")["content"] == "# log\nx\ny\n"
    assert owner.read_note("new.md")["revision"] == answers[2]["revision"]


def test_a_snapshot_advanced_by_the_inserted_length_is_the_state_after_it() -> None:
    doc: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(skip_gc=True)
    text = doc.get("t", type=pycrdt.Text)
    text.insert(0, "abc")
    del text[0:1]  # a delete set to carry over
    before = bytes(pycrdt.Snapshot.from_doc(doc).encode())
    assert client_clock(before, doc.client_id) == 3
    pieces = ["é", "😀x", "plain"]
    with doc.transaction():
        text.insert(len(str(text)), "".join(pieces))
    assert bytes(pycrdt.Snapshot.from_doc(doc).encode()) == advanced(
        before, doc.client_id, 3 + sum(utf16_length(p) for p in pieces))
    series = after_insertions(before, doc.client_id, [utf16_length(p) for p in pieces])
    assert series[-1] == bytes(pycrdt.Snapshot.from_doc(doc).encode())
    clock, expect = 3, "bc"
    for piece in pieces:
        clock += utf16_length(piece)
        expect += piece
        past = pycrdt.Doc.from_snapshot(pycrdt.Snapshot.decode(advanced(before, doc.client_id, clock)), doc)
        assert str(past.get("t", type=pycrdt.Text)) == expect
        assert series.pop(0) == advanced(before, doc.client_id, clock)
    with pytest.raises(ValueError, match="truncated"):
        client_clock(before[:-1], doc.client_id)


def test_appends_arriving_a_loop_turn_apart_still_share_a_group(rig: tuple[NotesService, EventBus]) -> None:
    """The clients a group answered come back a little apart: the group waits a loop turn
    more while appends keep joining (bounded), so they share one commit."""
    service, events = rig
    ops = _ops(service, events, Principal("agent", "a1"))
    group = GroupCommit(service)

    async def main() -> list[Any]:
        first = [asyncio.ensure_future(group.run(lambda i=i: ops.append_note("log.md", f"a{i}\n")))
                 for i in range(3)]
        await asyncio.sleep(0)  # the first three are in; the next three come a turn later
        later = [asyncio.ensure_future(group.run(lambda i=i: ops.append_note("log.md", f"b{i}\n")))
                 for i in range(3)]
        return await asyncio.gather(*first, *later)

    before = service.store.commits
    answers = asyncio.run(main())
    assert group.groups == 1
    assert service.store.commits - before == 1
    text = _ops(service, events, OWNER).read_note("log.md")["content"]
    assert text == "# log\na0\na1\na2\nb0\nb1\nb2\n"
    assert answers[-1]["revision"] == hashlib.sha256(text.encode()).hexdigest()


def test_a_lone_appender_is_never_kept_waiting_for_company(rig: tuple[NotesService, EventBus]) -> None:
    service, events = rig
    ops = _ops(service, events, Principal("agent", "a1"))
    group = GroupCommit(service)
    for i in range(5):  # one at a time, each waiting for its answer (the 1-client case)
        answer = run_group(group, [lambda i=i: ops.append_note("log.md", f"alone {i}\n")])[0]
        assert isinstance(answer, dict)
    assert group.groups == 5
    assert group.waited == 0


def test_the_cuts_of_one_insertion_read_once_are_those_of_state_at() -> None:
    from stet.sync.snapshot_clock import cut_at
    from stet.sync.snapshot_state import insertion_prefixes, state_at
    from stet.sync.text_diff import Splice

    note = NoteDoc()
    note.set_text("# head é\n")
    old = note.text
    client = note.doc.client_id
    start = client_clock(note.snapshot(), client)
    pieces = ["one\n", "two 😀\n", "three é\n", "four\n"]
    update = note.apply_splices(old, [Splice(len(old), len(old), "".join(pieces))])
    assert update is not None
    clocks, clock = [], start
    for piece in pieces:
        clock += utf16_length(piece)
        clocks.append(clock)
    cuts = clocks[:-1] + [start + 1, start]  # each run's end, inside a piece, before it all
    assert insertion_prefixes(update, client, cuts) == [state_at(update, cut_at(client, c)) for c in cuts]
