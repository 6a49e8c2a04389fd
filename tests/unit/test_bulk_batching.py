"""Bulk work in batches (issue 11 P8, issue 18 P4): what a bulk intake or a first sync
does once per batch, not once per note.

- The search index takes a batch of notes inside one transaction without a SAVEPOINT
  per note: FTS5 writes its pending terms out as a segment at every SAVEPOINT and
  RELEASE, which made a segment per note (P8's profile: RELEASE 18 % of A's loop).
"""

from __future__ import annotations

from pathlib import Path

from stet.daemon.event_bus import EventBus
from stet.daemon.notes_service import NotesService
from stet.daemon.records_keeper import RecordsKeeper
from stet.sync.search_index import SearchIndex
from stet.sync.store import VaultStore

from .test_write_unit import counting_commits


def test_a_batch_of_notes_is_indexed_without_a_savepoint_per_note(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    keeper = RecordsKeeper(service, EventBus())
    n = 300
    for i in range(n):
        service.write_text(f"n{i}.md", f"word{i} common\n", "peer:B")
    with counting_commits(store) as counter:
        keeper.flush_index()
    savepoints = [s for s in counter.statements if s.lstrip().upper().startswith(("SAVEPOINT", "RELEASE"))]
    assert savepoints == []
    assert counter.commits == 1  # the whole batch: one commit
    assert keeper.index.count() == n
    assert [h.path for h in keeper.index.search("word299")] == ["n299.md"]
    assert len(keeper.index.search("common", limit=1000)) == n
    store.close()


def test_a_put_alone_is_one_commit_and_a_failed_batch_indexes_nothing(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    index = SearchIndex(store)
    a = service.write_text("a.md", "alpha\n", "cli").note
    b = service.write_text("b.md", "beta\n", "cli").note
    with counting_commits(store) as counter:
        index.put(a.id, a.path, "alpha\n")
    assert counter.commits == 1
    try:
        with store.transaction():
            index.put(b.id, b.path, "beta\n")
            raise RuntimeError("the batch fails")
    except RuntimeError:
        pass
    assert [h.path for h in index.search("alpha")] == ["a.md"]
    assert index.search("beta") == []  # rolled back with its batch
    index.remove(a.id)
    assert index.search("alpha") == []
    store.close()
