"""``VaultStore.count_live`` from memory (issue 11 P8: ``GET /v1/status`` polled every
20 ms during a bulk intake counted 10,000 rows each time): the kept count is always what
the SQL count says -- after new notes in bulk, an upsert, a rollback, and a commit made by
another connection to the same database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stet.sync.note_rows import NoteRow
from stet.sync.store import VaultStore


def _row(i: int, *, deleted: bool = False) -> NoteRow:
    return NoteRow(f"id-{i}", f"n{i}.md", deleted, f"rev-{i}", 1, 1.0, 1.0, "disk", None, 1)


def _sql_count(store: VaultStore) -> int:
    return int(store.db.execute("SELECT count(*) FROM notes WHERE deleted = 0").fetchone()[0])


def test_the_kept_count_is_the_sql_count(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    assert store.count_live() == 0
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    store.insert_new_notes([_row(i) for i in range(10)] + [_row(10, deleted=True)],
                           [(f"id-{i}", b"x", "disk") for i in range(11)])
    statements.clear()
    assert store.count_live() == 10
    assert not [s for s in statements if "count(" in s]  # from memory, no count of the rows
    store.db.set_trace_callback(None)
    assert _sql_count(store) == 10
    store.put_note(_row(3, deleted=True))  # an upsert: counted again
    assert store.count_live() == 9 == _sql_count(store)
    store.put_note(_row(11))
    assert store.count_live() == 10 == _sql_count(store)


def test_a_rollback_and_another_connection_are_seen(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    store.insert_new_notes([_row(i) for i in range(5)], [])
    assert store.count_live() == 5
    inside: list[int] = []

    def undone_unit() -> None:
        with store.transaction():
            store.insert_new_notes([_row(i) for i in range(5, 8)], [])
            inside.append(store.count_live())  # as this connection sees it, uncommitted
            raise RuntimeError("undo")

    with pytest.raises(RuntimeError):
        undone_unit()
    assert inside == [8]
    assert store.count_live() == 5 == _sql_count(store)
    with store.transaction():  # a savepoint undone inside a unit that commits
        try:
            with store.transaction():
                store.insert_new_notes([_row(9)], [])
                raise RuntimeError("undo the savepoint")
        except RuntimeError:
            pass
        store.insert_new_notes([_row(10)], [])
    assert store.count_live() == 6 == _sql_count(store)
    other = sqlite3.connect(tmp_path / "v.db")
    try:
        other.execute("UPDATE notes SET deleted = 1 WHERE id = 'id-0'")
        other.commit()
    finally:
        other.close()
    assert store.count_live() == 5 == _sql_count(store)
