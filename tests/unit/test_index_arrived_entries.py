"""A peer's index update's entries are read once without a map lookup (``VaultIndex``
keeps the event's new values until read: P8 on the receiving peer, where each new note's
``entry`` lookup cost as much as applying its content), and what ``entry`` answers is
always what the map holds, through concurrent edits, local writes and deletions."""

from __future__ import annotations

import random
from typing import Any

from stet.sync import vault_index
from stet.sync.vault_index import NoteEntry, VaultIndex


def _in_map(index: VaultIndex, note_id: str) -> NoteEntry | None:
    return NoteEntry.from_json(note_id, index._notes.get(note_id))


def test_entries_from_a_peers_update_are_read_without_a_lookup() -> None:
    sender, receiver = VaultIndex(), VaultIndex()
    sender.put_notes([NoteEntry(f"n{i}", f"f/{i}.md", creator="A") for i in range(300)])
    receiver.apply_update(sender.full_update())
    looked: list[Any] = []
    real_get = receiver._notes.get

    class Counting:
        def get(self, key: str) -> Any:
            looked.append(key)
            return real_get(key)

    receiver._notes = Counting()  # type: ignore[assignment]
    for i in range(300):
        assert receiver.entry(f"n{i}") == NoteEntry(f"n{i}", f"f/{i}.md", creator="A")
    assert looked == []
    assert receiver.entry("n7") is not None  # read again: from the map this time
    assert looked == ["n7"]


def test_what_arrived_is_capped() -> None:
    sender, receiver = VaultIndex(), VaultIndex()
    cap = 50
    old = vault_index.MAX_ARRIVED_ENTRIES
    vault_index.MAX_ARRIVED_ENTRIES = cap
    try:
        sender.put_notes([NoteEntry(f"n{i}", f"{i}.md") for i in range(cap * 3)])
        receiver.apply_update(sender.full_update())
        assert len(receiver._arrived) == cap
        assert all(receiver.entry(f"n{i}") == NoteEntry(f"n{i}", f"{i}.md") for i in range(cap * 3))
        assert receiver._arrived == {}
    finally:
        vault_index.MAX_ARRIVED_ENTRIES = old


def test_entry_always_answers_what_the_map_holds() -> None:
    rng = random.Random(5)
    replicas = [VaultIndex(), VaultIndex(), VaultIndex()]
    pending: list[list[bytes]] = [[], [], []]
    for step in range(800):
        i = rng.randrange(3)
        note = f"n{rng.randrange(40)}"
        entry = NoteEntry(note, f"p{step}.md", deleted=rng.random() < 0.3, creator="d")
        update = replicas[i].put_note(entry)
        if update is not None:
            for j in range(3):
                if j != i:
                    pending[j].append(update)
        if rng.random() < 0.3:  # a random replica's backlog, shuffled
            j = rng.randrange(3)
            rng.shuffle(pending[j])
            for u in pending[j]:
                replicas[j].apply_update(u)
            pending[j].clear()
        r = replicas[rng.randrange(3)]
        probe = f"n{rng.randrange(40)}"
        assert r.entry(probe) == _in_map(r, probe)
    for j in range(3):
        for u in pending[j]:
            replicas[j].apply_update(u)
    for r in replicas:
        for k in range(40):
            assert r.entry(f"n{k}") == _in_map(r, f"n{k}")


def test_deleted_or_merged_entries_are_not_kept() -> None:
    """A deleted note's entry may never be read here (nothing of it held): not kept."""
    sender, receiver = VaultIndex(), VaultIndex()
    sender.put_notes([NoteEntry("live", "a.md"), NoteEntry("gone", "b.md", deleted=True),
                      NoteEntry("joined", "c.md", merged_into="live")])
    receiver.apply_update(sender.full_update())
    assert set(receiver._arrived) == {"live"}
    assert receiver.entry("gone") == NoteEntry("gone", "b.md", deleted=True)
