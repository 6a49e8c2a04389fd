"""A first sync's updates leave in frames of at most ``BATCH_BYTES`` (plus one note's
update; daemon/peers/session.py): each frame is encrypted whole into a TLS buffer that keeps
its largest size while the link is up (P7: 4 MiB frames left the serving daemon ~4.3 MiB
larger until the link was re-made). Every note goes, once."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from stet.daemon.notes.service import NotesService
from stet.daemon.peers import session as peer_sync
from stet.daemon.peers.session import PeerLink, PeerSession, VaultAccess
from stet.sync import peer_protocol as pp
from stet.sync.store import VaultStore


def test_a_first_sync_is_served_in_frames_of_at_most_a_mebibyte(tmp_path: Path) -> None:
    assert peer_sync.BATCH_BYTES <= 1024 * 1024
    a = NotesService("v", VaultStore(tmp_path / "a.db"), device_id="A")
    texts = {f"n{i}.md": os.urandom(6_000).hex() + "\n" for i in range(400)}  # ~4.8 MB of updates
    with a.write("disk"):
        for path, text in texts.items():
            a.write_text(path, text, "disk")
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    session = PeerSession(PeerLink("B", send, initiator=False, vaults={"v"}), "A",
                          {"v": VaultAccess("v", a, lambda device: True)})
    empty = pp.encode(pp.NOTE_SVS, {"vault": "v", "notes": []})  # B holds nothing yet
    asyncio.run(session.handle(empty))
    frames = [pp.decode(f) for f in sent]
    updates = [f for f in frames if f.type == pp.NOTE_UPDATES]
    assert frames[-1].type == pp.SYNCED
    assert len(updates) >= 4  # not one 4 MiB frame
    largest_update = max(len(item.update) for f in updates for item in pp.decode_updates(f).items)
    for frame, raw in zip(frames, sent, strict=True):
        if frame.type == pp.NOTE_UPDATES:
            assert len(raw) <= peer_sync.BATCH_BYTES + largest_update + 64 * 1024  # + header, ids
    got = [item.note_id for f in updates for item in pp.decode_updates(f).items]
    assert sorted(got) == sorted(row.id for row in a.store.live_notes())  # every note, once
    a.store.close()
