"""Snapshots as store positions (``stet.sync.snapshots``) on a real SQLite store: what a
snapshot sees after edits, creations, deletions, moves, compaction, a reopen and expiry."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from stet.sync.errors import StetError
from stet.sync.note_doc import NoteDoc
from stet.sync.search_query import parse_query
from stet.sync.snapshots import SNAPSHOT_TTL_S, Snapshots
from stet.sync.store import VaultStore
from stet.sync.vault_import import genesis_row


def _new(store: VaultStore, path: str, text: str) -> str:
    row, update = genesis_row(path, text, "disk", time.time(), None)
    with store.transaction():
        store.put_note(row)
        store.append_update(row.id, update, "disk")
    return row.id


def _edit(store: VaultStore, note_id: str, text: str) -> None:
    doc = NoteDoc.from_updates(store.updates(note_id))
    update = doc.set_text(text)
    assert update is not None
    store.append_update(note_id, update, "agent:b")


def _place(store: VaultStore, note_id: str, *, path: str | None = None, deleted: bool | None = None) -> None:
    row = store.note(note_id)
    assert row is not None
    store.put_note(replace(row, path=path if path is not None else row.path,
                           deleted=deleted if deleted is not None else row.deleted))


def _texts(snaps: Snapshots, snap_id: str, now: float, page: int = 2) -> dict[str, str]:
    """Every note at the snapshot, listed ``page`` at a time."""
    snap = snaps.get(snap_id, now)
    out: dict[str, str] = {}
    after = ""
    for _ in range(100):
        notes, more = snaps.page_then(snap, after=after, limit=page, allow=lambda p: True)
        out.update({n.path: snaps.doc_then(snap, n.note_id).text for n in notes})
        if not more:
            return out
        after = notes[-1].path
    raise AssertionError("the listing never ended")


def test_a_snapshot_sees_the_vault_as_it_stood(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db", compact_after=5)
    ids = {p: _new(store, p, f"{p} v1\n") for p in ("a.md", "b.md", "c.md", "d.md")}
    gone = _new(store, "gone.md", "deleted before\n")
    _place(store, gone, deleted=True)
    snaps = Snapshots(store)
    now = time.time()
    snap = snaps.open(now)
    before = {p: f"{p} v1\n" for p in ids}
    assert _texts(snaps, snap.id, now) == before

    for i in range(12):  # a.md rewritten many times: compacted, twice over
        _edit(store, ids["a.md"], f"a.md v{i + 2}\n")
        if store.update_rows(ids["a.md"]) >= 5:
            assert store.compact(ids["a.md"])
    _place(store, ids["b.md"], deleted=True)
    _place(store, ids["c.md"], path="moved/c.md")
    _edit(store, ids["c.md"], "c.md v2\n")
    _new(store, "new.md", "created after\n")
    _place(store, gone, deleted=False)  # brought back after the snapshot: still absent then

    assert _texts(snaps, snap.id, now) == before
    then = snaps.get(snap.id, now)
    assert snaps.note_then(then, "c.md") is not None
    assert snaps.note_then(then, "moved/c.md") is None
    assert snaps.note_then(then, "new.md") is None
    assert snaps.note_then(then, "gone.md") is None
    d = snaps.note_then(then, "d.md")
    assert d is not None
    assert not d.changed

    store.close()  # across a restart: the snapshot is in the store
    reopened = VaultStore(tmp_path / "v.db", compact_after=5)
    again = Snapshots(reopened)
    assert _texts(again, snap.id, now) == before
    # Now, for comparison: what a read without the snapshot sees.
    assert NoteDoc.from_updates(reopened.updates(ids["a.md"])).text == "a.md v13\n"


def test_compaction_merges_only_between_snapshot_positions(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    note = _new(store, "a.md", "0\n")
    snaps = Snapshots(store)
    firsts = []
    for i in range(1, 10):
        _edit(store, note, f"{i}\n")
        if i in (3, 6):
            firsts.append(snaps.open(time.time()))
    assert store.update_rows(note) == 10
    assert store.compact(note)
    assert store.update_rows(note) == 3  # up to each snapshot, and after the last
    for snap, text in zip(firsts, ("3\n", "6\n"), strict=True):
        assert snaps.doc_then(snaps.get(snap.id, time.time()), note).text == text
    assert NoteDoc.from_updates(store.updates(note)).text == "9\n"
    assert not store.compact(note)  # each row alone between two positions: nothing to merge


def test_compaction_after_a_snapshot_keeps_every_later_append(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    note = _new(store, "log.md", "start\n")
    doc = NoteDoc.from_updates(store.updates(note))
    lines = ["start\n"]

    def append(line: str) -> None:
        lines.append(line)
        update = doc.set_text("".join(lines))
        assert update is not None
        store.append_update(note, update, "agent:a")

    for i in range(3):
        append(f"- before {i}\n")
    snaps = Snapshots(store)
    snap = snaps.open(time.time())
    for i in range(12):
        append(f"- after {i}\n")
        if i % 4 == 3:
            store.compact(note)
    store.close()
    reopened = VaultStore(tmp_path / "v.db")
    assert NoteDoc.from_updates(reopened.updates(note)).text == "".join(lines)
    assert Snapshots(reopened).doc_then(snap, note).text == "".join(lines[:4])


def test_a_snapshot_expires_after_its_hour_and_its_history_goes(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    note = _new(store, "a.md", "text\n")
    snaps = Snapshots(store)
    snap = snaps.open(1000.0)
    _place(store, note, path="b.md")
    assert store.db.execute("SELECT count(*) FROM note_history").fetchone()[0] == 1
    assert snaps.get(snap.id, 1000.0 + SNAPSHOT_TTL_S).id == snap.id  # an hour: still alive
    with pytest.raises(StetError) as err:
        snaps.get(snap.id, 1000.0 + SNAPSHOT_TTL_S + 1)
    assert err.value.code == "expired_snapshot"
    assert err.value.status == 410
    assert snaps.prune(1000.0 + SNAPSHOT_TTL_S + 1) == 1
    assert store.db.execute("SELECT count(*) FROM note_history").fetchone()[0] == 0
    _place(store, note, path="c.md")  # no snapshot: nothing recorded
    assert store.db.execute("SELECT count(*) FROM note_history").fetchone()[0] == 0
    with pytest.raises(StetError) as bad:
        snaps.get("not-a-snapshot", 1000.0)
    assert bad.value.code == "bad_request"


def test_snapshot_text_matching_follows_the_index_rule() -> None:
    """A snapshot's changed notes are matched by the index's own query (sync/search_query.py):
    accents folded, every word a prefix (issue 34)."""
    query = parse_query("Café rou")
    assert query.matches("The café on the route\n")
    assert not query.matches("The cafe\n")
    assert query.matches("cafeteria route\n")  # every word is a prefix now, not only the last
    assert not query.matches("a route to the bar\n")


def test_paging_a_snapshot_across_read_chunks_lists_each_note_once(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    ids = {}
    with store.transaction():
        for i in range(1100):
            ids[f"n{i:04d}.md"] = _new(store, f"n{i:04d}.md", f"note {i}\n")
    snaps = Snapshots(store)
    snap = snaps.open(time.time())
    _place(store, ids["n0000.md"], path="zz/n0000.md")
    _place(store, ids["n0700.md"], path="a-first.md")
    _place(store, ids["n0500.md"], deleted=True)
    _new(store, "n0500b.md", "created since\n")
    _edit(store, ids["n0900.md"], "changed since\n")
    for limit in (1, 299, 1000, 5000):
        listed: list[str] = []
        after = ""
        for _ in range(2000):
            notes, more = snaps.page_then(snap, after=after, limit=limit,
                                          allow=lambda p: not p.endswith("7.md"))
            listed += [n.path for n in notes]
            if not more:
                break
            after = notes[-1].path
        assert listed == sorted(p for p in ids if not p.endswith("7.md")), limit
    changed, touched = snaps.changed_then(snap)
    assert [n.path for n in changed] == ["n0000.md", "n0500.md", "n0700.md", "n0900.md"]
    assert len(touched) == 5  # and the note created since
