"""The search index's worker (daemon/notes/search_indexer.py) over a real store and index:
fed after commit, coalesced, caught up with the store at start, texts read from the
store when they did not travel with their change."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from stet.daemon.notes import search_indexer
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.sync.search_index import SearchIndex, search_db_path, stale_notes
from stet.sync.store import VaultStore


def _paths(keeper: RecordsKeeper, q: str) -> list[str]:
    return sorted(h.path for h in keeper.index.search(q, limit=500))


def test_changes_are_searchable_after_flush_and_a_rollback_indexes_nothing(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    keeper = RecordsKeeper(service, EventBus())
    service.write_text("a.md", "alpha one\n", "cli")
    for i in range(30):  # a burst of appends to one note: its latest text wins
        service.write_text("a.md", f"alpha one\nbeta{i}\n", "cli")

    def failing_unit() -> None:
        with service.write("cli"):
            service.write_text("gone.md", "ghost words\n", "cli")
            raise RuntimeError("the unit fails")

    with pytest.raises(RuntimeError):
        failing_unit()
    keeper.flush_index()
    assert _paths(keeper, "beta29") == ["a.md"]
    assert _paths(keeper, "beta3") == []  # (beta3 was replaced by later texts)
    assert _paths(keeper, "ghost") == []  # rolled back: never announced, never indexed
    service.move("a.md", "b/moved.md", "cli")
    keeper.flush_index()
    assert _paths(keeper, "alpha") == ["b/moved.md"]  # a move: path read from the store
    service.delete("b/moved.md", "cli")
    keeper.flush_index()
    assert _paths(keeper, "alpha") == []
    assert keeper.index.behind == 0
    keeper.close()
    store.close()


def test_texts_past_the_memory_bound_are_read_from_the_store(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_indexer, "MAX_PENDING_BYTES", 10)
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    keeper = RecordsKeeper(service, EventBus())
    with service.write("cli"):  # handed over together, after the one commit
        for i in range(40):
            service.write_text(f"n{i}.md", f"dingo{i} carries a long line of text\n", "cli")
    keeper.flush_index()
    assert len(_paths(keeper, "dingo")) == 40
    assert _paths(keeper, "dingo39 carries") == ["n39.md"]
    keeper.close()
    store.close()


def test_start_catches_up_an_index_behind_the_store(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    keeper = RecordsKeeper(service, EventBus())
    service.write_text("keep.md", "kept words\n", "cli")
    service.write_text("edit.md", "old words\n", "cli")
    service.write_text("drop.md", "dropped words\n", "cli")
    keeper.close()
    # What a kill -9 leaves: the store committed changes the index never heard of.
    NotesService("v", store).write_text("edit.md", "new words\n", "cli")
    NotesService("v", store).delete("drop.md", "cli")
    NotesService("v", store).write_text("fresh.md", "fresh words\n", "cli")
    index = SearchIndex(search_db_path(store.path))
    again, gone = stale_notes({r.id: (r.path, r.revision) for r in store.live_notes()}, index.indexed())
    index.close()
    assert len(again) == 2
    assert len(gone) == 1
    keeper = RecordsKeeper(NotesService("v", store), EventBus())
    keeper.start_indexing()
    keeper.flush_index()
    assert _paths(keeper, "words") == ["edit.md", "fresh.md", "keep.md"]
    assert _paths(keeper, "old") == []
    assert _paths(keeper, "new") == ["edit.md"]
    keeper.close()
    store.close()


async def test_a_search_on_the_loop_waits_for_the_worker_without_blocking(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    keeper = RecordsKeeper(service, EventBus())
    with service.write("cli"):
        for i in range(300):
            service.write_text(f"n{i}.md", f"emu{i} runs\n", "peer:B")
    assert await keeper.wait_indexed()
    assert keeper.index.behind == 0
    assert keeper.index.count() == 300
    assert await keeper.wait_indexed()  # nothing pending: at once
    keeper.close()
    store.close()


def test_put_many_indexes_new_and_replaces_known_notes(tmp_path: Path) -> None:
    index = SearchIndex(search_db_path(tmp_path / "v.db"))
    index.put("a", "a.md", "r1", "alpha old\n")
    index.put_many([("a", "moved/a.md", "r2", "alpha new\n"), ("b", "b.md", "r1", "beta\n"),
                    ("c", "c.md", "r1", "gamma\n")])
    assert index.indexed() == {"a": ("moved/a.md", "r2"), "b": ("b.md", "r1"), "c": ("c.md", "r1")}
    assert [h.path for h in index.search("alpha new")] == ["moved/a.md"]
    assert index.search("old") == []
    assert [h.path for h in index.search("gamma")] == ["c.md"]
    index.put_many([])
    assert index.count() == 3
    index.close()


def test_caught_up_after_a_burst_the_worker_releases_its_caches_once(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """P7: the worker lingers IDLE_EXIT_S after its work; caught up after a burst (here 30
    notes for the 1,000 of a first sync) it frees its connections' page caches and trims
    the heap at once, not when it ends -- and not after a small change."""
    monkeypatch.setattr(search_indexer, "RELEASE_AFTER_NOTES", 30)
    trims: list[int] = []
    monkeypatch.setattr(search_indexer, "trim_heap", lambda: trims.append(1))
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    keeper = RecordsKeeper(service, EventBus())
    with service.write("cli"):
        for i in range(40):
            service.write_text(f"n{i}.md", f"burst words {i}\n", "cli")
    keeper.flush_index()
    deadline = time.monotonic() + 30
    while keeper.index.releases < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert keeper.index.releases == 1
    assert trims == [1]
    service.write_text("n0.md", "one small change\n", "cli")  # below the threshold: no release
    keeper.flush_index()
    assert _paths(keeper, "small") == ["n0.md"]  # the released worker still indexes
    assert _paths(keeper, "burst") == sorted(f"n{i}.md" for i in range(1, 40))
    assert keeper.index.releases == 1
    assert trims == [1]
    keeper.close()
    store.close()


def test_a_hot_note_is_indexed_again_after_a_pause_or_at_once_for_a_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """P2: an agent appending to one note had the whole growing note re-tokenised every
    ~10 ms. A note indexed less than HOT_NOTE_INTERVAL_S ago now waits (its appends
    coalesce), unless a search waits for the index: read-your-writes holds."""
    monkeypatch.setattr(search_indexer, "HOT_NOTE_INTERVAL_S", 1.5)
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    keeper = RecordsKeeper(service, EventBus())
    service.write_text("log.md", "first line\n", "cli")
    keeper.flush_index()
    batches = keeper.index.batches
    for i in range(20):  # appends right after it was indexed: they wait, coalesced
        service.write_text("log.md", "first line\n" + "".join(f"entry{j}\n" for j in range(i + 1)), "cli")
    service.write_text("other.md", "a cold note\n", "cli")  # a note not indexed lately: not held
    deadline = time.monotonic() + 30
    while _paths(keeper, "cold") != ["other.md"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert keeper.index.behind > 0  # the hot note still waits ...
    assert _paths(keeper, "entry19") == []
    keeper.flush_index()  # ... until a search asks: then at once
    assert _paths(keeper, "entry19") == ["log.md"]
    assert keeper.index.behind == 0
    assert keeper.index.batches <= batches + 3  # 20 appends: not 20 batches
    service.write_text("log.md", "rewritten later\n", "cli")  # hot again: no search asks ...
    deadline = time.monotonic() + 30
    while _paths(keeper, "rewritten") != ["log.md"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _paths(keeper, "rewritten") == ["log.md"]  # ... indexed once its pause is over
    keeper.close()
    store.close()
