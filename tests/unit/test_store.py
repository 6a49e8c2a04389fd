from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from stet.sync.errors import StoreError
from stet.sync.note_doc import NoteDoc
from stet.sync.store import VaultStore
from stet.sync.store_schema import SCHEMA_VERSION
from stet.sync.vault_import import genesis_row


def _new(store: VaultStore, path: str, text: str) -> str:
    row, update = genesis_row(path, text, "disk", time.time(), None)
    with store.transaction():
        store.put_note(row)
        store.append_update(row.id, update, "disk")
    return row.id


def test_updates_load_in_write_order_even_if_the_clock_steps_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = VaultStore(tmp_path / "v.db")
    note_id = _new(store, "a.md", "start\n")
    doc = NoteDoc.from_updates(store.updates(note_id))
    clock = [2_000_000_000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    for i in range(20):
        clock[0] -= 3600  # the wall clock jumps back an hour before every write
        update = doc.set_text(doc.text + f"line {i}\n")
        assert update is not None
        store.append_update(note_id, update, "disk")
    store.close()
    reopened = VaultStore(tmp_path / "v.db")
    assert NoteDoc.from_updates(reopened.updates(note_id)).text == doc.text


def test_compaction_keeps_text_and_crdt_history(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    note_id = _new(store, "a.md", "hello world\n")
    doc = NoteDoc.from_updates(store.updates(note_id))
    peer = NoteDoc.from_updates(store.updates(note_id))  # a peer that saw only the first state
    for i in range(30):
        update = doc.set_text(doc.text.replace("world", f"world{i}") if i % 2 else doc.text + "x")
        assert update is not None
        store.append_update(note_id, update, "disk")
    assert store.update_rows(note_id) == 31
    assert store.compact(note_id)
    assert store.update_rows(note_id) == 1
    reloaded = NoteDoc.from_updates(store.updates(note_id))
    assert reloaded.text == doc.text
    assert reloaded.state_vector() == doc.state_vector()
    # A peer that is behind can still catch up from the compacted state.
    peer.apply_update(reloaded.update_since(peer.state_vector()))
    assert peer.text == doc.text


def test_a_store_from_a_newer_stet_is_refused_not_emptied(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    store = VaultStore(path)
    note_id = _new(store, "a.md", "precious\n")
    store.close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer Stet"):
        VaultStore(path)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    db.commit()
    db.close()
    assert NoteDoc.from_updates(VaultStore(path).updates(note_id)).text == "precious\n"


def test_wal_mode_and_reopen(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    mode = store._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    _new(store, "a.md", "x")
    assert store.integrity_check() == "ok"
    assert store.count_live() == 1


def test_live_path_is_unique_but_deleted_rows_may_share_it(tmp_path: Path) -> None:
    from dataclasses import replace

    store = VaultStore(tmp_path / "v.db")
    first = _new(store, "a.md", "one")
    row = store.note(first)
    assert row is not None
    store.put_note(replace(row, deleted=True))
    second = _new(store, "a.md", "two")
    assert store.note_at("a.md").id == second  # type: ignore[union-attr]
    with pytest.raises(sqlite3.IntegrityError):
        _new(store, "a.md", "three")


def test_listing_with_prefix_and_cursor(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    for i in range(7):
        _new(store, f"p/{i}.md", str(i))
    _new(store, "q.md", "q")
    page1 = store.live_notes(prefix="p/", limit=3)
    page2 = store.live_notes(prefix="p/", after=page1[-1].path, limit=3)
    page3 = store.live_notes(prefix="p/", after=page2[-1].path, limit=3)
    assert [r.path for r in page1 + page2 + page3] == [f"p/{i}.md" for i in range(7)]


def test_a_store_checkpointed_from_another_thread_keeps_its_wal_bounded(tmp_path: Path) -> None:
    """The daemon turns the WAL's auto-checkpoint off and checkpoints from a worker thread."""
    import threading

    store = VaultStore(tmp_path / "v.db", auto_checkpoint=False)
    wal = tmp_path / "v.db-wal"
    sizes = []
    for round_ in range(5):
        for i in range(300):
            with store.transaction():
                store.append_update(f"n{i % 7}", bytes([round_, i % 256]) * 200, "agent:a")
        worker = threading.Thread(target=store.checkpoint)
        worker.start()
        worker.join(timeout=30)
        sizes.append(wal.stat().st_size)
    assert store.commits >= 1500  # (and the migration at open)
    assert sizes[-1] <= sizes[0] * 2  # the WAL is reused after each checkpoint, not grown
    assert len(store.updates("n0")) == 1500 // 7 + 1
    store.close()
