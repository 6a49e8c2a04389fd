"""The store contract (issue 11; automerge-repo's ``storage-adapter-tests`` pattern): what
any store of a vault must do, as one suite every store passes.

A store is handed in by a factory (``STORES``): today ``VaultStore`` as the daemon opens
it (WAL, ``synchronous=NORMAL``, checkpoints by its owner) and as ``[store] synchronous =
"FULL"`` with eager compaction. A new store (another engine, a seam for fault injection)
joins the list and must pass the same tests:

- updates appended to a note load back, in the order written, only that note's, and
  after a reopen;
- a read snapshot and compaction: a note compacted to fewer rows holds the same state,
  and a snapshot opened before later writes still reads the note as it was;
- a transaction commits once however deeply nested, and only then runs what was queued
  for after the commit; a rollback leaves nothing (no update, no row, no callback), and a
  nested one undoes only its own part;
- crash safety: a process killed with SIGKILL keeps every write whose commit returned,
  and nothing of the transaction it was inside.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from stet.sync.note_doc import NoteDoc
from stet.sync.note_rows import NoteRow
from stet.sync.snapshots import Snapshots
from stet.sync.store import VaultStore
from stet.sync.vault_import import genesis_row

StoreFactory = Callable[[Path], VaultStore]

STORES: dict[str, tuple[StoreFactory, str]] = {
    # name: (open a store at a path, the same as Python source for a child process)
    "daemon": (lambda p: VaultStore(p, auto_checkpoint=False),
               "VaultStore(path, auto_checkpoint=False)"),
    "full-sync": (lambda p: VaultStore(p, synchronous="FULL", compact_after=3),
                  "VaultStore(path, synchronous='FULL', compact_after=3)"),
}


@pytest.fixture(params=sorted(STORES))
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_store(store_kind: str, tmp_path: Path) -> Iterator[Callable[[], VaultStore]]:
    opened: list[VaultStore] = []
    factory = STORES[store_kind][0]

    def open_() -> VaultStore:
        store = factory(tmp_path / "vault.db")
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def _note(store: VaultStore, path: str, text: str) -> tuple[NoteRow, NoteDoc]:
    row, update = genesis_row(path, text, "cli", 1.0, None)
    doc = NoteDoc()
    doc.apply_update(update)
    with store.transaction():
        store.put_note(row)
        store.append_update(row.id, update, "cli")
    return row, doc


def _edits(doc: NoteDoc, n: int) -> list[bytes]:
    out = []
    for i in range(n):
        update = doc.set_text(doc.text + f"line {i}\n")
        assert update is not None
        out.append(update)
    return out


# -- updates ---------------------------------------------------------------------------


def test_appended_updates_load_back_in_order_per_note_and_after_a_reopen(
    open_store: Callable[[], VaultStore],
) -> None:
    store = open_store()
    a, doc_a = _note(store, "a.md", "a\n")
    b, doc_b = _note(store, "b.md", "b\n")
    ups_a = _edits(doc_a, 4)
    ups_b = _edits(doc_b, 2)
    seqs = []
    for u in ups_a[:2] + ups_b[:1] + ups_a[2:] + ups_b[1:]:
        seqs.append(store.append_update(a.id if u in ups_a else b.id, u, "cli"))
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)  # sequence numbers: increasing, never reused
    assert store.updates(a.id)[1:] == ups_a
    assert store.updates(b.id)[1:] == ups_b
    assert store.updates("no-such-note") == []
    store.close()
    again = open_store()
    assert NoteDoc.from_updates(again.updates(a.id)).text == doc_a.text
    assert NoteDoc.from_updates(again.updates(b.id)).text == doc_b.text
    row = again.note(a.id)
    assert row is not None
    assert row.path == "a.md"
    assert again.integrity_check() == "ok"


def test_compaction_keeps_the_state_and_a_snapshot_reads_the_note_as_it_was(
    open_store: Callable[[], VaultStore],
) -> None:
    store = open_store()
    row, doc = _note(store, "a.md", "first\n")
    for u in _edits(doc, 5):
        store.append_update(row.id, u, "cli")
    snapshots = Snapshots(store)
    snap = snapshots.open(100.0)
    text_then = doc.text
    for u in _edits(doc, 5):
        store.append_update(row.id, u, "cli")
    assert store.compact(row.id)
    assert store.update_rows(row.id) < 11
    assert NoteDoc.from_updates(store.updates(row.id)).text == doc.text  # same state, fewer rows
    assert snapshots.doc_then(snap, row.id).text == text_then  # the snapshot still reads it then
    # The compacted rows still carry the history a peer that is behind needs.
    behind = NoteDoc.from_updates(store.updates(row.id)[:1])
    behind.apply_update(NoteDoc.from_updates(store.updates(row.id)).full_update())
    assert behind.text == doc.text


# -- transactions ----------------------------------------------------------------------


def test_a_transaction_commits_once_however_nested_then_runs_its_outbox(
    open_store: Callable[[], VaultStore],
) -> None:
    store = open_store()
    row, doc = _note(store, "a.md", "a\n")
    commits = store.commits
    told: list[str] = []
    ups = _edits(doc, 3)
    with store.transaction():
        store.append_update(row.id, ups[0], "cli")
        store.after_commit(lambda: told.append("outer"))
        with store.transaction():
            store.append_update(row.id, ups[1], "cli")
            store.after_commit(lambda: told.append("inner"))
            with store.transaction():
                store.append_update(row.id, ups[2], "cli")
                store.put_note(replace(row, revision="r2"))
        assert told == []  # nothing is announced before the commit
        assert store.commits == commits
    assert store.commits == commits + 1
    assert told == ["outer", "inner"]  # once, in order
    assert store.updates(row.id)[1:] == ups
    assert store.after_commit(lambda: told.append("now")) is None
    assert told[-1] == "now"  # outside a transaction: at once


def test_a_rollback_leaves_nothing_and_a_nested_one_only_its_part(
    open_store: Callable[[], VaultStore],
) -> None:
    store = open_store()
    row, doc = _note(store, "a.md", "a\n")
    before = store.updates(row.id)
    commits = store.commits
    told: list[str] = []
    undone: list[str] = []
    ups = _edits(doc, 3)
    new_row, new_update = genesis_row("b.md", "b\n", "cli", 1.0, None)

    def fails() -> None:
        with store.transaction():
            store.append_update(row.id, ups[0], "cli")
            store.put_note(new_row)
            store.append_update(new_row.id, new_update, "cli")
            store.after_commit(lambda: told.append("never"))
            store.on_rollback(lambda: undone.append("outer"))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fails()
    assert store.commits == commits
    assert store.updates(row.id) == before
    assert store.note(new_row.id) is None
    assert store.updates(new_row.id) == []
    assert told == []
    assert undone == ["outer"]

    def inner_fails() -> None:
        with store.transaction():
            store.append_update(row.id, ups[2], "cli")
            store.after_commit(lambda: told.append("dropped"))
            store.on_rollback(lambda: undone.append("inner"))
            raise ValueError("inner")

    with store.transaction():
        store.append_update(row.id, ups[1], "cli")
        store.after_commit(lambda: told.append("kept"))
        with pytest.raises(ValueError, match="inner"):
            inner_fails()
    assert store.updates(row.id) == [*before, ups[1]]
    assert told == ["kept"]
    assert undone == ["outer", "inner"]
    assert store.commits == commits + 1


# -- crash safety ------------------------------------------------------------------------

_CHILD = """
import sys, time
from pathlib import Path
from stet.sync.note_doc import NoteDoc
from stet.sync.store import VaultStore
from stet.sync.vault_import import genesis_row

path = Path(sys.argv[1])
store = {opener}
row, update = genesis_row("a.md", "start\\n", "cli", 1.0, None)
doc = NoteDoc()
doc.apply_update(update)
with store.transaction():
    store.put_note(row)
    store.append_update(row.id, update, "cli")
print("note", row.id, flush=True)
for i in range({n}):
    u = doc.set_text(doc.text + f"line {{i}}\\n")
    with store.transaction():
        store.append_update(row.id, u, "cli")
    print("committed", i, flush=True)  # acknowledged: the commit returned
u = doc.set_text(doc.text + "never acknowledged\\n")
with store.transaction():
    store.append_update(row.id, u, "cli")
    print("inside", flush=True)
    time.sleep(600)
"""


def test_a_kill_9_keeps_every_acknowledged_commit_and_nothing_of_an_open_one(
    store_kind: str, tmp_path: Path,
) -> None:
    n = 30
    script = textwrap.dedent(_CHILD).format(opener=STORES[store_kind][1], n=n)
    lines: list[str] = []
    with subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "vault.db")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            for line in child.stdout:
                lines.append(line.strip())
                if line.startswith("inside"):
                    break
            os.kill(child.pid, signal.SIGKILL)
        finally:
            if child.poll() is None:
                child.kill()
            _out, err = child.communicate(timeout=60)
    assert lines[-1:] == ["inside"], (lines, err)
    note_id = lines[0].split()[1]
    acknowledged = [ln for ln in lines if ln.startswith("committed")]
    assert len(acknowledged) == n
    store = STORES[store_kind][0](tmp_path / "vault.db")
    try:
        assert store.integrity_check() == "ok"
        text = NoteDoc.from_updates(store.updates(note_id)).text
        assert text == "start\n" + "".join(f"line {i}\n" for i in range(n))
        assert "never acknowledged" not in text
    finally:
        store.close()
