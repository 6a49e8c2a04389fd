"""The vault index's live count is kept as entries change (issue 11: counting every entry
on each status call made a bulk intake quadratic) and always equals a full count, with
concurrent edits merged in any order."""

from __future__ import annotations

import random

from stet.sync.vault_index import NoteEntry, VaultIndex


def _full(index: VaultIndex) -> int:
    return sum(1 for e in index.entries().values() if not e.deleted and not e.merged_into)


def test_live_count_matches_a_full_count_through_concurrent_edits() -> None:
    rng = random.Random(11)
    replicas = [VaultIndex(), VaultIndex(), VaultIndex()]
    pending: list[list[bytes]] = [[], [], []]
    for step in range(600):
        i = rng.randrange(3)
        note = f"n{rng.randrange(80)}"
        entry = NoteEntry(note, f"p{step}.md", deleted=rng.random() < 0.3, creator="d",
                          merged_into="other" if rng.random() < 0.1 else None)
        update = replicas[i].put_note(entry)
        if update is not None:
            for j in range(3):
                if j != i:
                    pending[j].append(update)
        if rng.random() < 0.3:  # deliver a random replica's backlog, shuffled
            j = rng.randrange(3)
            rng.shuffle(pending[j])
            for u in pending[j]:
                replicas[j].apply_update(u)
            pending[j].clear()
        for r in replicas:
            assert r.live_count() == _full(r)
    for j in range(3):
        for u in pending[j]:
            replicas[j].apply_update(u)
    counts = {r.live_count() for r in replicas}
    assert counts == {_full(replicas[0])}
