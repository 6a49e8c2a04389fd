"""A peer's intake per batch, not per note (issue 18 P4): a first sync's vault index names
every note, none of which this side holds yet; bringing them in line is one lookup per
batch of ids, and each note arrives (once, live, at its path) with its content."""

from __future__ import annotations

from pathlib import Path

from stet.daemon.notes_service import NotesService
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
