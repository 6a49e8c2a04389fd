"""The work bounds of reads under a snapshot, on a real store and the real write path
(``NotesService`` + ``NoteOperations`` in-process): a listing rebuilds a bounded number
of changed notes per page and continues by cursor; a search refuses to scan too many."""

from __future__ import annotations

from pathlib import Path

import pytest

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops import snapshot_reads
from stet.daemon.ops.notes import OWNER, NoteOperations
from stet.sync.errors import StetError
from stet.sync.store import VaultStore


@pytest.fixture
def ops(tmp_path: Path) -> NoteOperations:
    service = NotesService("v1", VaultStore(tmp_path / "v.db"))
    events = EventBus()
    records = RecordsKeeper(service, events)  # the change log and the search index
    return NoteOperations(service, events, OWNER, extensions=(".md",), max_bytes=1_000_000,
                          search=records.index)


def test_a_listing_under_a_snapshot_pages_its_rebuilds(ops: NoteOperations,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [f"n{i}.md" for i in range(5)]
    old = {p: ops.create_note(p, f"old {p}\n")["revision"] for p in paths}
    snap = ops.open_snapshot()["snapshot"]
    for p in paths:
        ops.update_note(p, f"new {p}\n")
    monkeypatch.setattr(snapshot_reads, "REBUILD_PER_PAGE", 2)
    seen: dict[str, str] = {}
    cursor = ""
    pages = 0
    while True:
        page = ops.list_notes(limit=100, cursor=cursor, snapshot=snap)
        pages += 1
        assert len(page["notes"]) <= 2
        seen.update({n["path"]: n["revision"] for n in page["notes"]})
        if page["nextCursor"] is None:
            break
        cursor = page["nextCursor"]
        assert pages < 10
    assert seen == old
    assert pages == 3


def test_a_search_under_a_snapshot_refuses_an_unbounded_scan(ops: NoteOperations,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        ops.create_note(f"n{i}.md", f"alpha {i}\n")
    snap = ops.open_snapshot()["snapshot"]
    assert len(ops.search_notes("alpha", snapshot=snap)["results"]) == 3  # from the index
    for i in range(3):
        ops.update_note(f"n{i}.md", f"beta {i}\n")
    assert len(ops.search_notes("alpha", snapshot=snap)["results"]) == 3  # scanned then-texts
    assert ops.search_notes("beta", snapshot=snap)["results"] == []
    monkeypatch.setattr(snapshot_reads, "SCAN_LIMIT", 2)
    with pytest.raises(StetError) as err:
        ops.search_notes("alpha", snapshot=snap)
    assert err.value.code == "too_large"


def test_the_cache_of_texts_then_stays_within_its_bytes(ops: NoteOperations,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    texts = {f"n{i}.md": f"old text {i} " * 10 + "\n" for i in range(6)}
    for path, text in texts.items():
        ops.create_note(path, text)
    snap = ops.open_snapshot()["snapshot"]
    for path in texts:
        ops.update_note(path, "new\n")
    monkeypatch.setattr(snapshot_reads, "_THEN", type(snapshot_reads._THEN)())
    monkeypatch.setattr(snapshot_reads, "_then_bytes", [0])
    monkeypatch.setattr(snapshot_reads, "THEN_CACHE_BYTES", 300)
    for _ in range(2):
        for path, text in texts.items():
            assert ops.read_note(path, snapshot=snap)["content"] == text
            assert snapshot_reads._then_bytes[0] <= 300
    assert 0 < len(snapshot_reads._THEN) < len(texts)
    assert snapshot_reads._then_bytes[0] == sum(size for _, _, size in snapshot_reads._THEN.values())
