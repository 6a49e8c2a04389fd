"""The SSE replay buffer in compressed blocks (daemon/notes/event_history.py; issue 18, P7):
replays give exactly what the plain buffer gave -- every kept event of the vault after
the id, in order, data unchanged -- keep at least the last ``capacity`` events, and hold
a first sync's 10,000 events in far less memory than their JSON text."""

from __future__ import annotations

import json
import random

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.event_history import BLOCK, EventHistory


def test_replays_match_what_was_published_across_blocks_and_vaults() -> None:
    bus = EventBus(capacity=10_000)
    published: list[tuple[int, str, dict[str, object]]] = []
    tricky = ["plain", "é ü 漢字 🎉", "line\nbreak", "unit\x1fsep", "quote \" and \\ backslash", ""]
    for i in range(3 * BLOCK + 17):
        vault = "v1" if i % 3 else "v2"
        data: dict[str, object] = {"path": f"n/{i}.md", "text": tricky[i % len(tricky)], "n": i}
        event = bus.publish(vault, "note.changed", data)
        published.append((event.id, vault, data))
    for vault in ("v1", "v2"):
        mine = [(i, d) for i, v, d in published if v == vault]
        for cut in (0, mine[0][0], mine[BLOCK // 3][0], mine[-2][0], mine[-1][0]):
            got = [(e.id, e.data) for e in bus.replay(vault, cut)]
            assert got == [(i, d) for i, d in mine if i > cut]
            assert all(e.vault_id == vault and e.type == "note.changed" for e in bus.replay(vault, cut))
    assert bus.replay("v3", 0) == []


def test_at_least_the_last_capacity_events_are_kept_and_old_blocks_go() -> None:
    history = EventHistory(capacity=1000)
    for i in range(1, 5001):
        history.append((i, "v", "note.changed", json.dumps({"n": i})))
        assert len(history) >= min(i, 1000)
        assert len(history) <= 1000 + BLOCK - 1
    kept = [row[0] for row in history.after("v", 0)]
    assert kept == list(range(5001 - len(kept), 5001))  # the newest, oldest first, none missing
    assert len(kept) >= 1000


def test_a_first_syncs_events_are_held_compressed() -> None:
    rng = random.Random(1)
    history = EventHistory(capacity=10_000)
    text_bytes = 0
    for i in range(10_000):
        event = {"path": f"notes/folder{i % 50}/note-{i:05d}.md", "revision": f"{rng.getrandbits(256):064x}",
                 "source": "peer:ABCDEFG-HIJKLMN", "kind": "created", "size": rng.randint(1000, 50000)}
        data = json.dumps(event, separators=(",", ":"))
        text_bytes += len(data)
        history.append((i + 1, "vault-id", "note.changed", data))
    assert len(history) == 10_000
    assert history.packed_bytes() < text_bytes / 2  # a random revision per event limits it
