"""A ``baseRevision`` rewrite whose base cannot be rebuilt is refused ``revision_unknown``
and recorded in ``stet conflicts`` (nothing silently lost), on a real store and the real
write path in-process. The way R5 hit it (pycrdt's ``from_snapshot`` panic) is handled by
``fork_at`` now (tests/unit/test_fork_at_snapshot.py); what remains is a remembered state
that does not give the revision's text back, or one that cannot be decoded at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import OWNER, NoteOperations
from stet.sync.errors import StetError
from stet.sync.store import VaultStore


@pytest.fixture
def ops(tmp_path: Path) -> NoteOperations:
    service = NotesService("v1", VaultStore(tmp_path / "v.db"))
    events = EventBus()
    records = RecordsKeeper(service, events)
    return NoteOperations(service, events, OWNER, extensions=(".md",), max_bytes=1_000_000,
                          search=records.index)


@pytest.mark.parametrize("spoil", ["a later state", "undecodable"])
def test_a_base_that_cannot_be_rebuilt_is_refused_and_recorded(ops: NoteOperations, spoil: str) -> None:
    ops.create_note("a.md", "one\n")
    base = ops.read_note("a.md")["revision"]
    ops.append_note("a.md", "two\n")
    row = ops.store.note_at("a.md")
    assert row is not None
    state = ops.service.doc(row.id).snapshot() if spoil == "a later state" else b"\xff\xff\xff"
    with ops.store.transaction():  # the remembered state behind ``base`` spoiled
        ops.store.db.execute("UPDATE revision_states SET snapshot = ? WHERE note_id = ? AND revision = ?",
                             (state, row.id, base))
    with pytest.raises(StetError) as refused:
        ops.update_note("a.md", "one, rewritten\n", baseRevision=base)
    assert refused.value.code == "revision_unknown"
    assert ops.read_note("a.md")["content"] == "one\ntwo\n"
    listed = ops.list_conflicts()["conflicts"]
    assert [(c["code"], c["path"], c["attempted"]["content"]) for c in listed] == [
        ("revision_unknown", "a.md", "one, rewritten\n")]


def test_a_base_older_than_the_memory_is_refused_and_not_recorded(ops: NoteOperations) -> None:
    ops.create_note("a.md", "one\n")
    with pytest.raises(StetError) as refused:
        ops.update_note("a.md", "x\n", baseRevision="0" * 64)
    assert refused.value.code == "revision_unknown"
    assert ops.list_conflicts()["conflicts"] == []


def test_a_stale_base_is_rewritten_as_a_concurrent_edit(ops: NoteOperations) -> None:
    ops.create_note("a.md", "one\n")
    base = ops.read_note("a.md")["revision"]
    ops.append_note("a.md", "two\n")
    ops.update_note("a.md", "one, rewritten\n", baseRevision=base)
    assert ops.read_note("a.md")["content"] == "one, rewritten\ntwo\n"
