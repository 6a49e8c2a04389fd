"""A file renamed here while a peer's newer bytes for it are still on their way (found by
the mixed R1 run, issue 18 item 4, seed 1804): the rename is recorded as a move of the
attachment, the peer's change stays the winner, and the file gets those bytes once they
arrive. Before, the move recorded the file as already holding the peer's bytes (the index
entry's hash, not the file's), so they were never written: the folder kept the old bytes
for good while every other member had the new ones.

In process, on a real folder, store and blob store (as ``test_attachment_replica.py``);
the peer's change is put into the index as a peer's index update would, its blob kept
back until the move is recorded."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from stet.sync.attachment_entry import AttachmentEntry
from stet.sync.hlc import Hlc
from tests.unit.attachment_replica_rig import make_replica

OLD = b"\x89PNG\x00\x00 the bytes both had \x00" * 40
NEW = b"\x89PNG\x00\x00 the peer's newer bytes \x00\x01" * 40


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_a_rename_before_the_peers_newer_bytes_arrive_still_gets_them(tmp_path: Path) -> None:
    r, root = make_replica(tmp_path)
    (root / "img").mkdir()
    (root / "img" / "a.png").write_bytes(OLD)
    await r.sync_now()
    mine = r.index.live()["img/a.png"]
    assert mine.sha256 == sha(OLD)

    # A peer changed it (made on our change: its base), later by the clock; the blob is not here yet.
    later = Hlc.unpack(mine.hlc).next().next().pack()
    theirs = AttachmentEntry(mine.id, "img/a.png", sha(NEW), len(NEW), False, later, "DEVICE-B", False,
                             mine.hlc)
    r.index.put(theirs)
    await r.sync_now()
    assert (root / "img" / "a.png").read_bytes() == OLD  # nothing to write it with yet

    os.rename(root / "img" / "a.png", root / "img" / "b.png")  # a person renames the file meanwhile
    await r.sync_now()
    live = r.index.live()
    assert sorted(live) == ["img/b.png"]  # a move: one attachment, at the new path
    assert (live["img/b.png"].id, live["img/b.png"].sha256) == (mine.id, sha(NEW))  # the peer's change stands

    r.blobs.put_bytes(NEW)  # the blob arrives
    await r.sync_now()
    assert (root / "img" / "b.png").read_bytes() == NEW
    assert sorted(p.name for p in (root / "img").iterdir()) == ["b.png"]
    assert [(v.kind, v.sha256) for v in r.versions.all()] == [("before-overwrite", sha(OLD))]
    await r.sync_now()  # our own write: nothing new recorded
    assert r.index.live()["img/b.png"].sha256 == sha(NEW)
    await r.stop()
