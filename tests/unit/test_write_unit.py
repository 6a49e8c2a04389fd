"""The unit of work of the write path (issue 11): one commit per write, and a Change
is announced (to peers, SSE, the file bridge) only after that commit -- never for a
write rolled back.

Commits are counted with SQLite's trace callback on the store's own connection: a
``COMMIT`` that follows at least one write statement, plus any write statement run
outside a transaction (SQLite commits it by itself).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stet.daemon.folder.bridge import FileBridge
from stet.daemon.notes.changes import Change
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import NoteOperations, Principal
from stet.daemon.safety.brake import Brake
from stet.daemon.safety.versions_keeper import VersionsKeeper
from stet.sync.brake import BrakePolicy
from stet.sync.note_doc import NoteDoc
from stet.sync.store import VaultStore
from stet.sync.versions import VersionPolicy

EXT = (".md",)
WRITE = re.compile(r"\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)


@dataclass
class CommitCounter:
    commits: int = 0
    writes_since_begin: int = 0
    statements: list[str] = field(default_factory=list)


@contextmanager
def counting_commits(store: VaultStore) -> Iterator[CommitCounter]:
    counter = CommitCounter()
    db = store.db

    def trace(sql: str) -> None:
        counter.statements.append(sql)
        head = sql.lstrip().upper()
        if head.startswith("BEGIN"):
            counter.writes_since_begin = 0
        elif head.startswith("COMMIT"):
            if counter.writes_since_begin:
                counter.commits += 1
            counter.writes_since_begin = 0
        elif WRITE.match(sql):
            if db.in_transaction:
                counter.writes_since_begin += 1
            else:
                counter.commits += 1  # autocommit

    db.set_trace_callback(trace)
    try:
        yield counter
    finally:
        db.set_trace_callback(None)


@dataclass
class Vault:
    root: Path
    store: VaultStore
    service: NotesService
    events: EventBus
    bridge: FileBridge
    heard: list[Change]  # what an after-commit listener (a peer hub, a live editor) heard

    def operations(self, name: str = "a1") -> NoteOperations:
        return NoteOperations(self.service, self.events, Principal("agent", name), extensions=EXT,
                              max_bytes=1 << 20)


@pytest.fixture
def vault(tmp_path: Path) -> Iterator[Vault]:
    root = tmp_path / "vault"
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    events = EventBus()
    keeper = VersionsKeeper(service, events, VersionPolicy())
    Brake(service, events, keeper, BrakePolicy())
    RecordsKeeper(service, events)
    bridge = FileBridge(root, service, extensions=EXT, max_bytes=1 << 20)
    heard: list[Change] = []  # note changes (the vault index's own aside)
    service.subscribe(lambda c: heard.append(c) if c.kind != "index" else None)
    yield Vault(root, store, service, events, bridge, heard)
    bridge.close()
    store.close()


class Boom(Exception):
    pass


def _sse(vault: Vault) -> list[str]:
    return [e.type for e in vault.events.replay("v", 0)]


def test_an_error_inside_a_unit_announces_nothing_and_keeps_nothing(vault: Vault) -> None:
    vault.service.write_text("kept.md", "kept\n", "cli")
    assert [c.path for c in vault.heard] == ["kept.md"]
    heard, sse = len(vault.heard), len(_sse(vault))
    dirty = set(vault.bridge.writer.dirty)
    inside: list[list[Change]] = []

    def failing_unit() -> None:
        with vault.service.write("cli"):
            vault.service.write_text("new.md", "new note\n", "cli")
            vault.service.apply_splices("kept.md", [], "cli")
            vault.service.write_text("kept.md", "kept\nand more\n", "cli")
            inside.append(vault.heard[heard:])
            raise Boom

    with pytest.raises(Boom):
        failing_unit()
    assert inside == [[]]  # nothing before the commit, even inside
    assert vault.heard[heard:] == []  # no Change announced: no peer frame, no file write
    assert _sse(vault)[sse:] == []  # no SSE event
    assert vault.bridge.writer.dirty == dirty
    assert vault.store.note_at("new.md") is None
    assert vault.service.read("kept.md")[1] == "kept\n"  # the cached document was forgotten
    # the unit after it works and is announced once committed
    vault.service.write_text("kept.md", "kept\nlater\n", "cli")
    assert [c.path for c in vault.heard[heard:]] == ["kept.md"]
    assert _sse(vault)[sse:] == ["note.changed"]


def test_changes_are_announced_after_the_commit_in_order(vault: Vault) -> None:
    with vault.service.write("cli") as unit:
        vault.service.write_text("a.md", "a\n", "cli")
        vault.service.write_text("b.md", "b\n", "cli")
        vault.service.move("a.md", "c.md", "cli")
        assert vault.heard == []
        assert vault.store.in_transaction
    notes = [c for c in unit.changes if c.kind != "index"]
    assert [(c.kind, c.path) for c in notes] == [("created", "a.md"), ("created", "b.md"),
                                                         ("moved", "c.md")]
    assert vault.heard == notes
    assert _sse(vault) == ["note.changed", "note.changed", "note.moved"]


def test_a_refused_agent_write_in_a_batch_drops_only_its_own_part(vault: Vault) -> None:
    """A nested unit that fails (a bad peer update in a batch) is a savepoint: the items
    before it are kept and announced after the one commit; the bad one leaves nothing."""
    vault.service.write_text("n.md", "one\n", "cli")
    note_id = vault.store.note_at("n.md").id  # type: ignore[union-attr]
    theirs = NoteDoc.from_updates([vault.service.doc(note_id).full_update()])
    good = theirs.set_text("one\ntwo\n")
    assert good is not None
    heard = len(vault.heard)
    with vault.service.write("peer:x"):
        vault.service.apply_update(note_id, good, "peer:x")

        def bad_item() -> None:
            with vault.service.write("peer:x"):
                vault.service.write_text("n.md", "one\ntwo\nthree\n", "peer:x")
                raise Boom

        with pytest.raises(Boom):
            bad_item()
    assert vault.service.read("n.md")[1] == "one\ntwo\n"
    assert [c.text_after for c in vault.heard[heard:]] == ["one\ntwo\n"]


def test_one_disk_edit_is_one_commit(vault: Vault) -> None:
    (vault.root / "d.md").write_text("first\n", encoding="utf-8")
    vault.bridge.ingest_path("d.md")
    assert vault.store.note_at("d.md") is not None
    (vault.root / "d.md").write_text("first\nsecond\n", encoding="utf-8")
    with counting_commits(vault.store) as counter:
        vault.bridge.ingest_path("d.md")
    assert vault.service.read("d.md")[1] == "first\nsecond\n"
    assert counter.commits == 1, counter.statements


def test_a_new_file_is_one_commit(vault: Vault) -> None:
    (vault.root / "e.md").write_text("new\n", encoding="utf-8")
    with counting_commits(vault.store) as counter:
        vault.bridge.ingest_path("e.md")
    assert vault.store.note_at("e.md") is not None
    assert counter.commits == 1, counter.statements


def test_one_agent_append_is_one_commit(vault: Vault) -> None:
    ops = vault.operations()
    ops.create_note("j.md", "# J\n")
    ops.append_note("j.md", "line 1\n")  # the first marks the note due for a version
    with counting_commits(vault.store) as counter:
        ops.append_note("j.md", "line 2\n", idempotencyKey="k-2")
    assert vault.service.read("j.md")[1] == "# J\nline 1\nline 2\n"
    assert counter.commits == 1, counter.statements
    with counting_commits(vault.store) as counter:
        ops.append_note("j.md", "line 3\n")
    assert counter.commits == 1, counter.statements


def test_a_large_deletion_and_its_version_are_one_commit(vault: Vault) -> None:
    vault.service.write_text("big.md", "x" * 1000 + "\n", "cli")
    with counting_commits(vault.store) as counter:
        vault.service.write_text("big.md", "x\n", "agent:a1")
    assert counter.commits == 1, counter.statements
    assert "version.created" in _sse(vault)
