"""A slice of new files becomes notes together (issue 11 P8, ``daemon/folder/intake_batch.py``,
``NotesService.create_many``): one statement per table and one vault-index update for the
slice instead of ~20 SQLite calls and an index update per file, with every guard of the
one-by-one path kept -- a note an agent made meanwhile is merged, not overwritten; a file
that fails costs only itself; what peers, the log and versions hear is unchanged."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from stet.daemon.base import loop_slices
from stet.daemon.base.loop_slices import request_answered, request_arrived
from stet.daemon.folder.bridge import DRAIN_SLICE_S, PREFETCH_AHEAD, PREFETCH_BATCH, FileBridge
from stet.daemon.folder.intake_batch import BATCH_MAX
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.safety.brake import Brake
from stet.daemon.safety.versions_keeper import VersionsKeeper
from stet.sync.brake import BrakePolicy
from stet.sync.change_kinds import ChangeKind
from stet.sync.config import Config
from stet.sync.errors import StetError
from stet.sync.note_doc import NoteDoc
from stet.sync.store import VaultStore
from stet.sync.text_diff import Splice
from stet.sync.vault_index import INDEX_ID
from stet.sync.versions import VersionPolicy

EXT = (".md",)


class Vault:
    """A vault as the daemon composes it (the keepers that write in the unit, and a
    listener after the commit standing in for peers and SSE), without a loop."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "vault"
        self.root.mkdir()
        self.store = VaultStore(tmp_path / "v.db")
        self.service = NotesService("v", self.store, device_id="dev-a")
        cfg = Config()
        events = EventBus()
        self.versions = VersionsKeeper(self.service, events, VersionPolicy.from_config(cfg.versions))
        self.brake = Brake(self.service, events, self.versions, BrakePolicy.from_config(cfg.brake))
        self.records = RecordsKeeper(self.service, events)
        self.heard: list[tuple[str, str, bool]] = []  # (kind, path, committed when heard)
        self.service.subscribe(lambda c: self.heard.append((c.kind, c.path, not self.store.in_transaction)))
        self.bridge = FileBridge(self.root, self.service, extensions=EXT, max_bytes=1 << 20)

    def write_files(self, count: int, prefix: str = "n") -> list[str]:
        paths = []
        for i in range(count):
            path = f"{prefix}{i:04d}.md"
            (self.root / path).write_text(f"# note {i}\n\nbody of {prefix}{i}\n", encoding="utf-8")
            paths.append(path)
        return paths

    def take_in(self, paths: list[str]) -> None:
        for path in paths:
            self.bridge._enqueue(path)
        while self.bridge._ready:
            self.bridge.drain(None)

    def close(self) -> None:
        self.records.close()
        self.bridge.close()
        self.store.close()


class CountingConnection:
    """The store's connection, counting the calls made through it (each one is a trip
    into SQLite that lets go of the interpreter lock); ``executemany`` counts once."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.calls: list[str] = []

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        self.calls.append(sql)
        return self._db.execute(sql, *args)  # type: ignore[arg-type]

    def executemany(self, sql: str, *args: object) -> sqlite3.Cursor:
        self.calls.append(sql)
        return self._db.executemany(sql, *args)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self._db, name)


def count_calls(store: VaultStore) -> CountingConnection:
    counting = CountingConnection(store._db)
    store._db = counting  # type: ignore[assignment]
    return counting


def test_new_files_are_taken_in_with_a_few_statements_each_and_one_index_update_per_batch(
        tmp_path: Path) -> None:
    """Before, each new file was ~22 SQLite calls (its own savepoints, row, update, index
    update, log row, version mark, base, skipped) and one vault-index update, so a peer
    got 10,000 index updates for an unzip. Now: one statement per table per batch."""
    v = Vault(tmp_path)
    paths = v.write_files(200)
    index_rows = len(v.store.updates(INDEX_ID))
    seen = count_calls(v.store)
    v.take_in(paths)
    assert v.store.count_live() == 200
    per_file = len(seen.calls) / 200
    assert per_file <= 8, f"{per_file:.1f} SQLite statements per new file"
    new_index_updates = len(v.store.updates(INDEX_ID)) - index_rows
    assert new_index_updates <= -(-200 // BATCH_MAX)  # one per batch
    # The index names every note, as when they were created one by one.
    assert {e.path for e in v.service.index.entries().values()} == set(paths)
    v.close()


def test_what_listeners_hear_is_what_one_by_one_creation_told_them(tmp_path: Path) -> None:
    v = Vault(tmp_path)
    paths = v.write_files(150)
    v.take_in(paths)
    created = [(path, committed) for kind, path, committed in v.heard if kind == ChangeKind.CREATED]
    assert sorted(p for p, _ in created) == paths
    assert all(committed for _, committed in created)  # told after the commit, never inside
    assert any(kind == ChangeKind.INDEX for kind, _, _ in v.heard)
    log = v.records.log.query(limit=1000)
    assert sorted(e.path for e in log if e.kind == ChangeKind.CREATED) == paths
    assert len(v.versions.versions.due_ids()) == 150  # each new note gets its idle version
    for path in paths[:5]:  # each row records its file's base, with the CRDT snapshot
        row = v.store.note_at(path)
        assert row is not None
        assert row.disk is not None
        assert row.disk.snapshot is not None
        assert row.disk.revision == row.revision
        assert v.service.doc(row.id).text == (v.root / path).read_text(encoding="utf-8")
    v.close()


def test_a_note_an_agent_made_at_a_queued_path_is_merged_not_overwritten(tmp_path: Path) -> None:
    """The file is queued (its event settled) but not read yet when an agent creates a
    note at the same path: the file must be merged into the agent's note, not replace
    it, and the batch must not make a second note there."""
    v = Vault(tmp_path)
    paths = v.write_files(40)
    for path in paths:
        v.bridge._enqueue(path)
    v.service.write_text(paths[20], "the agent's line\n", "agent:a")
    while v.bridge._ready:
        v.bridge.drain(None)
    assert v.store.count_live() == 40
    text = v.service.read(paths[20])[1]
    assert "the agent's line" in text
    assert "body of n20" in text
    v.close()


def test_an_agent_append_after_the_batch_and_a_file_edit_merge_three_way(tmp_path: Path) -> None:
    """The base each batched note records (the genesis snapshot) lets a later file edit
    be merged against what the file held, not added as a union: an agent's append not
    written out yet and a person's edit of the file both survive, once each."""
    v = Vault(tmp_path)
    paths = v.write_files(30)
    v.take_in(paths)
    path = paths[7]
    v.service.apply_splices(path, [_append(v, path, "agent line\n")], "agent:a")
    # The person rewrites the first line of the file (not seen the agent's line).
    old = (v.root / path).read_text(encoding="utf-8")
    (v.root / path).write_text(old.replace("# note 7", "# note seven"), encoding="utf-8")
    v.bridge.ingest_path(path)
    text = v.service.read(path)[1]
    assert text.count("agent line") == 1
    assert "# note seven" in text
    assert "# note 7\n" not in text
    v.close()


def _append(v: Vault, path: str, line: str) -> Splice:
    n = len(v.service.read(path)[1])
    return Splice(n, n, line)


def test_a_failing_file_in_a_batch_leaves_the_others_taken_in(tmp_path: Path) -> None:
    """One file a guard refuses: the batch is undone and taken in one by one, so every
    other file becomes a note and only that one is left out (and not announced)."""
    v = Vault(tmp_path)
    paths = v.write_files(50)
    bad = paths[13]

    def refuse(source: str, row: object, before: str, after: str | None) -> None:
        if after is not None and "body of n13\n" in after:
            raise StetError("refused for the test")

    v.service.guards.append(refuse)
    v.take_in(paths)
    assert v.store.count_live() == 49
    assert v.store.note_at(bad) is None
    heard = {path for kind, path, _ in v.heard if kind == ChangeKind.CREATED}
    assert heard == set(paths) - {bad}
    log_paths = [e.path for e in v.records.log.query(limit=1000) if e.kind == ChangeKind.CREATED]
    assert sorted(log_paths) == sorted(set(paths) - {bad})  # logged once each, none for the bad one
    v.close()


def test_a_new_file_with_the_text_of_a_deleted_note_brings_that_note_back(tmp_path: Path) -> None:
    """Same path, same text as a note deleted here: the one-by-one path brings the old
    note back (identity and history kept); the batch must leave it to that path."""
    v = Vault(tmp_path)
    paths = v.write_files(10)
    v.take_in(paths)
    old = v.store.note_at(paths[3])
    assert old is not None
    text = (v.root / paths[3]).read_text(encoding="utf-8")
    v.service.delete(paths[3], "agent:a")
    v.bridge.flush_writes()  # its file goes
    assert not (v.root / paths[3]).exists()
    (v.root / paths[3]).write_text(text, encoding="utf-8")  # and comes back, as it was
    more = v.write_files(20, prefix="m")
    v.take_in([paths[3], *more])
    back = v.store.note_at(paths[3])
    assert back is not None
    assert back.id == old.id
    assert v.store.count_live() == 30
    v.close()


def test_two_new_files_differing_only_by_case_in_one_batch_keep_one(tmp_path: Path) -> None:
    v = Vault(tmp_path)
    (v.root / "Same.md").write_text("upper\n", encoding="utf-8")
    try:
        (v.root / "same.md").write_text("lower\n", encoding="utf-8")
    except OSError:
        return  # a case-insensitive file system: one file
    if len(list(v.root.iterdir())) < 2:
        return
    v.take_in(["Same.md", "same.md"])
    assert v.store.count_live() == 1
    assert len(v.store.skipped()) == 1
    v.close()


def test_genesis_state_is_the_genesis_update_and_its_snapshot() -> None:
    update, snapshot = NoteDoc.genesis_state("a/b.md", "hello\nworld\n")
    assert update == NoteDoc.genesis("a/b.md", "hello\nworld\n")
    doc = NoteDoc.from_updates([update])
    assert snapshot == doc.snapshot()


def test_the_batch_is_one_statement_per_table(tmp_path: Path) -> None:
    v = Vault(tmp_path)
    paths = v.write_files(BATCH_MAX)
    seen = count_calls(v.store)
    v.take_in(paths)
    assert sum(1 for s in seen.calls if s.startswith("INSERT INTO notes")) == 1
    assert sum(1 for s in seen.calls if s.startswith("INSERT INTO change_log")) == 1
    assert sum(1 for s in seen.calls if "version_due" in s) == 1
    assert sum(1 for s in seen.calls if s.startswith("COMMIT")) == 1
    v.close()


def test_a_slice_ends_in_time_for_its_batch_to_become_notes(tmp_path: Path) -> None:
    """The slice's budget includes making its waiting files notes (what that costs per
    file is learnt): a slice that only collected until its deadline and then made 64
    notes held the loop for its budget and that much more."""
    v = Vault(tmp_path)
    paths = v.write_files(40)
    for path in paths:
        v.bridge._enqueue(path)
    v.bridge._new_file_s = 10.0  # as if each new file took 10 s to make a note
    assert v.bridge.drain(1.0) == 1  # one file, then the slice ends (its batch made notes)
    assert v.store.count_live() == 1
    assert v.bridge._new_file_s < 10.0  # learnt from what it cost
    while v.bridge._ready:
        v.bridge.drain(None)
    assert v.store.count_live() == 40
    v.close()


async def test_the_read_ahead_asks_the_store_nothing(tmp_path: Path) -> None:
    """Deciding what to read ahead asked the store (and lstat) about each queued file on
    the loop: a few ms per read-ahead of 128 files. The slice compares stats anyway."""
    v = Vault(tmp_path)
    paths = v.write_files(200)
    for path in paths:
        v.bridge._enqueue(path)
    v.bridge._drain_handle.cancel()  # type: ignore[union-attr]  # driven by hand here
    v.bridge._drain_handle = None
    seen = count_calls(v.store)
    assert v.bridge._read_ahead()  # the head is not read yet: the drain waits for it
    assert seen.calls == []
    future = v.bridge._prefetching
    assert future is not None
    await future
    assert paths[0] in v.bridge._prefetched
    v.store._db = seen._db  # type: ignore[assignment]
    v.bridge._drain_handle.cancel()  # type: ignore[union-attr]
    v.bridge._drain_handle = None
    while v.bridge._ready:
        v.bridge.drain(None)
    assert v.store.count_live() == 200
    v.close()


async def test_the_reads_waiting_ahead_of_the_drain_are_bounded(tmp_path: Path) -> None:
    """The reads outran the drain: thousands of files read and waiting (their bytes held),
    and each read-ahead walked the queue past all of them on the loop (6 % of its time in
    an unzip's intake). Now no more are read while ``PREFETCH_AHEAD`` wait; a read the
    drain did not use (the file unchanged) is not kept."""
    v = Vault(tmp_path)
    paths = v.write_files(PREFETCH_AHEAD + 3 * PREFETCH_BATCH)
    for path in paths:
        v.bridge._enqueue(path)
    # Driven by hand: the cancelled handle stays, so a read's end schedules no drain.
    v.bridge._drain_handle.cancel()  # type: ignore[union-attr]
    reads = 0
    while v.bridge._read_ahead() or v.bridge._prefetching is not None:
        future = v.bridge._prefetching
        assert future is not None
        await future
        reads += 1
    assert reads == PREFETCH_AHEAD // PREFETCH_BATCH  # then the head is read and enough wait
    assert len(v.bridge._prefetched) == PREFETCH_AHEAD
    v.bridge._drain_handle = None
    v.bridge.drain(None, read_ahead_only=True)  # takes in what was read, and no more
    assert v.store.count_live() == PREFETCH_AHEAD
    assert v.bridge._prefetched == {}
    # The same files queued again (a rescan's doubt): read ahead, found unchanged, not kept.
    for path in paths[:PREFETCH_BATCH]:
        v.bridge._enqueue(path)
    v.bridge._drain_handle.cancel()  # type: ignore[union-attr]
    assert v.bridge._read_ahead()
    future = v.bridge._prefetching
    assert future is not None
    await future
    v.bridge._drain_handle = None
    v.bridge.drain(None, read_ahead_only=True)
    assert v.bridge._prefetched == {}
    while v.bridge._ready:
        v.bridge.drain(None)
    assert v.store.count_live() == len(paths)
    v.close()


async def test_a_slice_cut_for_a_request_makes_no_note_alone(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests first cut the drain's slice to one item while a request is in flight: a new
    file made a note alone (a commit, a vault-index update, a frame to each peer of its own),
    1,000-2,000 of P8's 10,000. Now a cut slice takes nothing in; the next takes them
    together."""
    monkeypatch.setattr(loop_slices, "REQUESTS_FIRST", True)
    v = Vault(tmp_path)
    paths = v.write_files(20)
    for path in paths:
        v.bridge._enqueue(path)
    v.bridge._drain_handle.cancel()  # type: ignore[union-attr]  # driven by hand here
    loop = asyncio.get_running_loop()
    commits = v.store.commits
    token = request_arrived(loop)
    assert v.bridge.drain(DRAIN_SLICE_S) == 0
    assert v.store.commits == commits
    assert v.store.count_live() == 0
    request_answered(loop, token)
    await asyncio.sleep(0)  # the next turn
    while v.bridge._ready:
        v.bridge.drain(None)
    assert v.store.count_live() == 20
    assert v.store.commits == commits + 1  # one unit for the 20, not one for the first alone
    v.close()
