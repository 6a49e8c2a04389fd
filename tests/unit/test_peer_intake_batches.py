"""A peer's intake per batch, not per note (issue 18 P4): a first sync's vault index names
every note, none of which this side holds yet; bringing them in line is one lookup per
batch of ids, and each note arrives (once, live, at its path) with its content."""

from __future__ import annotations

from pathlib import Path

from stet.daemon.notes.service import NotesService
from stet.sync.store import VaultStore

from .test_write_unit import counting_commits


def test_an_index_naming_many_new_notes_is_taken_in_with_one_lookup_per_batch(tmp_path: Path) -> None:
    sender = NotesService("v", VaultStore(tmp_path / "a.db"), device_id="A")
    n = 1200
    with sender.write("disk"):
        for i in range(n):
            sender.write_text(f"d{i % 7}/n{i}.md", f"note {i}\n", "disk")
    receiver = NotesService("v", VaultStore(tmp_path / "b.db"), device_id="B")
    with counting_commits(receiver.store) as counter:
        receiver.apply_remote_index(sender.index.full_update(), "A")
    reads = [s for s in counter.statements if s.lstrip().upper().startswith("SELECT")]
    assert len(reads) <= 3  # ceil(1200 / 500) lookups, not ~3 queries per note
    assert counter.commits == 1
    assert receiver.store.count_live() == 0  # no content yet: nothing shown, no empty files
    rows = sender.store.live_notes()
    with receiver.write():
        for row in rows:
            receiver.apply_remote_update(row.id, sender.doc(row.id).full_update(), "peer:A", "A")
    assert receiver.store.count_live() == n
    for row in rows[:: n // 10]:
        got = receiver.store.note(row.id)
        assert got is not None
        assert (got.path, got.deleted, got.revision) == (row.path, False, row.revision)
        assert receiver.doc(row.id).text == sender.doc(row.id).text
    # content first, index later (the other order): held, then shown by the index
    late = NotesService("v", VaultStore(tmp_path / "c.db"), device_id="C")
    first = rows[0]
    late.apply_remote_update(first.id, sender.doc(first.id).full_update(), "peer:A", "A")
    assert late.store.note_at(first.path) is None
    late.apply_remote_index(sender.index.full_update(), "A")
    shown = late.store.note_at(first.path)
    assert shown is not None
    assert shown.id == first.id
    assert late.store.count_live() == 1
    for s in (sender, receiver, late):
        s.store.close()


def test_a_slice_shares_one_unit_and_a_bad_item_keeps_the_ones_before_it(tmp_path: Path) -> None:
    sender = NotesService("v", VaultStore(tmp_path / "a.db"), device_id="A")
    for i in range(4):
        sender.write_text(f"n{i}.md", f"note {i}\n", "disk")
    rows = sorted(sender.store.live_notes(), key=lambda r: r.path)
    receiver = NotesService("v", VaultStore(tmp_path / "b.db"), device_id="B")
    receiver.apply_remote_index(sender.index.full_update(), "A")
    heard: list[str] = []
    receiver.subscribe(lambda c: heard.append(c.note_id))
    items = [(r.id, sender.doc(r.id).full_update(), "peer:A", "A") for r in rows]
    with counting_commits(receiver.store) as counter:
        done, failed = receiver.apply_remote_slice(items[:2], 0, lambda: False)
    assert (done, failed) == (2, None)
    assert counter.commits == 1
    savepoints = [s for s in counter.statements if s.lstrip().upper().startswith("SAVEPOINT")]
    assert len(savepoints) <= 1  # the slice's unit, not one per note
    bad = (rows[2].id, b"\x01\x02 not an update", "peer:A", "A")
    done, failed = receiver.apply_remote_slice([items[3], bad, items[2]], 0, lambda: False)
    assert done == 1
    assert failed is not None
    assert receiver.store.note(rows[3].id) is not None  # before the bad one: kept
    assert receiver.store.note(rows[2].id) is None  # the bad one (and what follows): not applied
    assert set(heard) == {rows[0].id, rows[1].id, rows[3].id}  # nothing of the bad one announced
    done, failed = receiver.apply_remote_slice([items[2]], 0, lambda: False)
    assert (done, failed) == (1, None)
    assert receiver.store.count_live() == 4
    for s in (sender, receiver):
        s.store.close()
