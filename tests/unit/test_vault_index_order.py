"""The vault index keeps every entry whatever order a peer's updates arrive in.

yrs 0.14 (pycrdt) loses a Map entry for good when two later updates of the same writer
arrive before the one that set it: order (1, 2, 0) below dropped note n1 before
``VaultIndex.apply_update`` held early updates back (found by the attachment index work)."""

from __future__ import annotations

import itertools

import pytest

from stet.sync.errors import CrdtError
from stet.sync.vault_index import NoteEntry, VaultIndex


def _updates() -> list[bytes]:
    source = VaultIndex()
    made = [source.put_note(NoteEntry("n1", "a.md")), source.put_note(NoteEntry("n1", "b.md")),
            source.put_note(NoteEntry("n2", "c.md"))]
    return [u for u in made if u is not None]


def test_every_arrival_order_keeps_every_entry() -> None:
    updates = _updates()
    assert len(updates) == 3
    for order in itertools.permutations(range(3)):
        target = VaultIndex()
        applied: list[bytes] = []
        for i in order:
            new, _changed = target.apply_update(updates[i])
            if new is not None:
                applied.append(new)
        assert {k: e.path for k, e in target.entries().items()} == {"n1": "b.md", "n2": "c.md"}, order
        # What apply_update reports as new (what the store keeps) rebuilds the same index.
        rebuilt = VaultIndex.from_updates(applied)
        assert {k: e.path for k, e in rebuilt.entries().items()} == {"n1": "b.md", "n2": "c.md"}, order


def test_an_update_held_back_is_reported_only_once_applied() -> None:
    updates = _updates()
    target = VaultIndex()
    new, changed = target.apply_update(updates[2])  # starts past what we hold: held
    assert new is None
    assert changed == set()
    target.apply_update(updates[0])
    new, changed = target.apply_update(updates[1])  # unblocks the held one as well
    assert new is not None
    assert changed == {"n1", "n2"}


def test_a_malformed_update_is_refused_not_held() -> None:
    """Garbage shaped like one client's early update must raise (a peer sending it loses
    its link), never wait in the held list (found by test_peer_robustness's bad index update)."""
    target = VaultIndex()
    with pytest.raises(CrdtError):
        target.apply_update(b"\x01\xff\xff\xff\xff\x0f\x07garbage")
