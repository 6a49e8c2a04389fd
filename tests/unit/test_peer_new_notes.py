"""A peer's new notes taken in the way ``stet init`` imports files (issue 18 P4): a note
this side has never held, at a free path, is built once, written with the slice's other
new notes in two ``executemany`` statements and announced after the commit; a note that
exists here, or was created here meanwhile (an agent, a file) at the same path, still
goes the careful way (reconcile, merge, path clash), with the same outcome as before."""

from __future__ import annotations

from pathlib import Path

from stet.daemon.notes.changes import Change
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.remote_changes import NEW_NOTES_BATCH
from stet.daemon.notes.service import NotesService
from stet.sync.change_kinds import ChangeKind
from stet.sync.store import VaultStore

from .test_write_unit import counting_commits

Item = tuple[str, bytes, str, str]


def _sender(tmp_path: Path, n: int) -> NotesService:
    sender = NotesService("v", VaultStore(tmp_path / "a.db"), device_id="A")
    with sender.write("disk"):
        for i in range(n):
            sender.write_text(f"d{i % 5}/n{i}.md", f"note {i}\n" + "line\n" * (i % 9), "disk")
    return sender


def _items(sender: NotesService) -> list[Item]:
    rows = sorted(sender.store.live_notes(), key=lambda r: r.id)
    return [(r.id, sender.doc(r.id).full_update(), "peer:A", "A") for r in rows]


def _receiver(tmp_path: Path, name: str, sender: NotesService) -> NotesService:
    receiver = NotesService("v", VaultStore(tmp_path / f"{name}.db"), device_id="B")
    receiver.apply_remote_index(sender.index.full_update(), "A")
    return receiver


def _state(service: NotesService) -> list[tuple[str, str, bool, str, str]]:
    rows = service.store.db.execute("SELECT id FROM notes ORDER BY id").fetchall()
    out = []
    for (note_id,) in rows:
        row = service.store.note(note_id)
        assert row is not None
        out.append((row.id, row.path, row.deleted, row.revision, service.text_of(row.id)))
    return out


def _careful(receiver: NotesService, items: list[Item]) -> None:
    for item in items:  # one unit per note, the careful path only
        receiver.apply_remote_update(*item)


def test_new_notes_are_one_commit_and_about_one_statement_each(tmp_path: Path) -> None:
    sender = _sender(tmp_path, 300)
    items = _items(sender)
    receiver = _receiver(tmp_path, "b", sender)
    records = RecordsKeeper(receiver, EventBus())  # the change log, written in the unit
    heard: list[Change] = []

    def listener(change: Change) -> None:
        assert not receiver.store.in_transaction  # told after the commit
        heard.append(change)

    receiver.subscribe(listener)
    with counting_commits(receiver.store) as counter:
        done, failed = receiver.apply_remote_slice(items, 0, lambda: False)
    assert (done, failed) == (len(items), None)
    assert counter.commits == 1
    # Before: 4 reads per note (its row, its updates, its update count, its path) and an
    # upsert of its row; now two reads per batch of 64, and rows inserted, not upserted.
    reads = [s for s in counter.statements if s.lstrip().upper().startswith("SELECT")]
    assert len(reads) <= 2 * -(-len(items) // 64), len(reads)
    assert not [s for s in counter.statements if "ON CONFLICT" in s.upper()]
    assert [c.kind for c in heard] == [ChangeKind.CREATED] * len(items)
    assert {c.note_id for c in heard} == {item[0] for item in items}
    assert all(c.update for c in heard)  # the whole state, for the other peers
    # The same store as the careful path makes, note for note.
    careful = _receiver(tmp_path, "c", sender)
    _careful(careful, items)
    assert _state(receiver) == _state(careful)
    for row in sender.store.live_notes():
        got = receiver.store.note(row.id)
        assert got is not None
        assert (got.path, got.deleted, got.revision, got.size) == (row.path, False, row.revision, row.size)
    assert len(receiver.store.updates(items[0][0])) == 1
    # A reopened store holds them (committed), and the log has one entry per note.
    path = receiver.store.path
    records.close()
    receiver.store.close()
    again = VaultStore(path)
    assert again.count_live() == len(items)
    logged = again.db.execute("SELECT count(*) FROM change_log WHERE kind = 'created'").fetchone()[0]
    assert logged == len(items)
    again.close()
    careful.store.close()
    sender.store.close()


def test_a_note_held_here_goes_the_careful_way_and_keeps_the_local_edit(tmp_path: Path) -> None:
    sender = _sender(tmp_path, 20)
    items = _items(sender)
    receiver = _receiver(tmp_path, "b", sender)
    done, _ = receiver.apply_remote_slice(items[:10], 0, lambda: False)
    assert done == 10
    known = items[3]
    row = receiver.store.note(known[0])
    assert row is not None
    receiver.write_text(row.path, receiver.text_of(row.id) + "edited on B\n", "agent:x")
    # The sender edits the same note; its update arrives in a slice with new notes around it.
    sender_row = sender.store.note(known[0])
    assert sender_row is not None
    sender.write_text(sender_row.path, "from A\n" + sender.text_of(known[0]), "disk")
    edited = (known[0], sender.doc(known[0]).full_update(), "peer:A", "A")
    slice_ = [items[10], items[11], edited, items[12]]
    done, failed = receiver.apply_remote_slice(slice_, 0, lambda: False)
    assert (done, failed) == (4, None)
    text = receiver.text_of(known[0])
    assert "edited on B\n" in text  # merged, not replaced
    assert text.startswith("from A\n")
    assert receiver.store.count_live() == 13
    for s in (sender, receiver):
        s.store.close()


def test_a_note_created_here_meanwhile_at_its_path_is_a_path_clash_not_an_overwrite(tmp_path: Path) -> None:
    sender = _sender(tmp_path, 12)
    items = _items(sender)
    target = sender.store.note(items[5][0])
    assert target is not None
    results = []
    for name, fast in (("b", True), ("c", False)):
        receiver = _receiver(tmp_path, name, sender)
        # An agent on B creates a note at the same path before the peer's note arrives.
        mine = receiver.write_text(target.path, "written by an agent on B\n", "agent:x").note
        assert mine.id != target.id
        if fast:
            done, failed = receiver.apply_remote_slice(items, 0, lambda: False)
            assert (done, failed) == (len(items), None)
        else:
            _careful(receiver, items)
        at_path = receiver.store.note_at(target.path)
        assert at_path is not None
        texts = receiver.text_of(at_path.id)
        results.append((_state(receiver), texts))
        # Neither text is lost: the note at the path holds both (the clash's join), or the
        # loser stays hidden with its text (joined by the device that created it).
        hidden = receiver.text_of(mine.id if at_path.id != mine.id else target.id)
        both = texts + hidden
        assert "written by an agent on B" in both
        assert sender.text_of(target.id) in both
        assert receiver.store.count_live() == len(items)
        receiver.store.close()
    assert results[0] == results[1]  # the same outcome as the careful path
    sender.store.close()


def test_a_note_named_twice_in_a_slice_and_a_deleted_entry_take_the_careful_way(tmp_path: Path) -> None:
    sender = _sender(tmp_path, 8)
    items = _items(sender)
    first = items[2]
    row = sender.store.note(first[0])
    assert row is not None
    sender.write_text(row.path, sender.text_of(first[0]) + "more\n", "disk")
    second = (first[0], sender.doc(first[0]).full_update(), "peer:A", "A")
    gone = items[6]
    gone_row = sender.store.note(gone[0])
    assert gone_row is not None
    sender.delete(gone_row.path, "disk")
    sender.publish_due_deletes(sender.clock() + 10, lambda _n: False)
    receiver = _receiver(tmp_path, "b", sender)
    slice_ = [*items[:3], second, *items[3:]]
    done, failed = receiver.apply_remote_slice(slice_, 0, lambda: False)
    assert (done, failed) == (len(slice_), None)
    assert receiver.text_of(first[0]) == sender.text_of(first[0])
    gone_here = receiver.store.note(gone[0])
    assert gone_here is None or gone_here.deleted  # its entry says deleted: never shown
    assert receiver.store.count_live() == len(items) - 1
    for s in (sender, receiver):
        s.store.close()


def test_a_bad_update_among_new_notes_keeps_those_before_it_announcing_nothing_of_it(tmp_path: Path) -> None:
    sender = _sender(tmp_path, 10)
    items = _items(sender)
    receiver = _receiver(tmp_path, "b", sender)
    heard: list[str] = []
    receiver.subscribe(lambda c: heard.append(c.note_id))
    bad = (items[4][0], b"\x01\x02 not an update", "peer:A", "A")
    slice_ = [*items[:4], bad, *items[5:]]
    done, failed = receiver.apply_remote_slice(slice_, 0, lambda: False)
    assert done == 4
    assert failed is not None
    assert receiver.store.count_live() == 4
    assert set(heard) == {item[0] for item in items[:4]}
    assert receiver.store.note(items[4][0]) is None
    assert receiver.store.updates(items[4][0]) == []
    # The rest arrives again (the next session's exchange): taken in.
    done, failed = receiver.apply_remote_slice(items[4:], 0, lambda: False)
    assert (done, failed) == (len(items) - 4, None)
    assert _state(receiver) == _state(_careful_copy(tmp_path, sender, items))
    for s in (sender, receiver):
        s.store.close()


def _careful_copy(tmp_path: Path, sender: NotesService, items: list[Item]) -> NotesService:
    careful = _receiver(tmp_path, "careful", sender)
    _careful(careful, items)
    return careful


def test_a_slice_cut_short_looks_up_the_one_note_it_takes(tmp_path: Path) -> None:
    """A slice already over when it starts (cut for a request waiting: requests first)
    takes one note; it looked up the 64 notes' rows and entries of a whole batch for it
    (P8 on the receiving peer, with an agent polling: most slices were cut so)."""
    sender = _sender(tmp_path, 100)
    items = _items(sender)
    receiver = _receiver(tmp_path, "b", sender)
    looked: list[int] = []
    held = receiver.store.held_notes

    def counting(note_ids):  # type: ignore[no-untyped-def]
        looked.append(len(note_ids))
        return held(note_ids)

    receiver.store.held_notes = counting  # type: ignore[method-assign]
    i = 0
    for _slice in range(5):  # five slices cut short: one note each
        i, failed = receiver.apply_remote_slice(items, i, lambda: True)
        assert failed is None
    assert i == 5
    assert looked == [1, 1, 1, 1, 1]
    i, failed = receiver.apply_remote_slice(items, i, lambda: False)  # a whole slice: batches
    assert (i, failed) == (len(items), None)
    assert max(looked[5:]) == NEW_NOTES_BATCH
    assert receiver.store.count_live() == len(items)
