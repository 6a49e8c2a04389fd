"""A peer's winning change moved an attachment while this replica changed its bytes
concurrently; the winner's bytes are not here yet (issue 14, found last session). The file
at the old path -- this replica's losing bytes -- stays until the winner's bytes land at the
new path; then the new path is written first and the old path removed: the attachment is
never absent from the folder. Before, the old file was removed in the pass that asked for
the winner's bytes, and for the whole transfer the folder showed it at neither path.

The same for a plain rename whose bytes are not here yet: a peer's move composed with a
third device's later change of the bytes (``pathAt``/``bytesAt`` stamps).

In process, on a real folder, store and blob store (``attachment_replica_rig``); the peers'
changes go into the index as a peer's index update would, their blob kept back (no peers:
``NoPeersFetcher``) until the test puts it into the blob store."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from stet.daemon.attachments.replica import AttachmentReplica
from stet.sync.attachment_entry import AttachmentEntry, made_on, moved, path_set_at
from stet.sync.attachment_plan import Fetch, OnDisk, RemoveFile, SeenFile, WriteFile, plan_outflow
from stet.sync.hlc import Hlc
from tests.unit.attachment_replica_rig import make_replica

OLD = b"\x89PNG\x00\x00 the bytes every device had \x00" * 40
MINE = b"\x89PNG\x00\x00 this replica's concurrent change \x00\x02" * 40
THEIRS = b"\x89PNG\x00\x00 the peer's winning bytes \x00\x01" * 40


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def later(hlc: str, steps: int = 1) -> str:
    h = Hlc.unpack(hlc)
    for _ in range(steps):
        h = h.next()
    return h.pack()


def folder(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


async def _created_then_changed_here(tmp_path: Path) -> tuple[AttachmentReplica, Path, AttachmentEntry,
                                                                AttachmentEntry]:
    """The replica recorded ``img/a.png`` (OLD), then a change of it here (MINE): the
    created entry and the change."""
    r, root = make_replica(tmp_path)
    (root / "img").mkdir()
    (root / "img" / "a.png").write_bytes(OLD)
    await r.sync_now()
    created = r.index.live()["img/a.png"]
    (root / "img" / "a.png").write_bytes(MINE)
    os.utime(root / "img" / "a.png", ns=(1, 1))  # a stat the seen state cannot share
    await r.sync_now()
    mine = r.index.live()["img/a.png"]
    assert (mine.id, mine.sha256) == (created.id, sha(MINE))
    return r, root, created, mine


async def test_the_loser_stays_at_the_old_path_until_the_winners_bytes_land(tmp_path: Path) -> None:
    r, root, created, mine = await _created_then_changed_here(tmp_path)
    # A peer, never having seen MINE, moved the attachment and then changed its bytes, later
    # by the clock: its change wins path and bytes.
    moved_b = moved(created, "pics/b.png", hlc=later(mine.hlc), device="DEVICE-B")
    theirs = AttachmentEntry(created.id, "pics/b.png", sha(THEIRS), len(THEIRS), False, later(mine.hlc, 2),
                             "DEVICE-B", False, moved_b.hlc, made_on([created, moved_b], moved_b.hlc),
                             path_set_at([created, moved_b], "pics/b.png", moved_b.hlc))
    r.index.put(theirs)
    await r.sync_now()
    live = r.index.live()
    assert sorted(live) == ["pics/b.png"]
    assert live["pics/b.png"].sha256 == sha(THEIRS)
    assert not r.blobs.has(sha(THEIRS))
    # The winner's bytes are awaited: the folder still shows the attachment, at the old
    # path, with this replica's bytes; nothing (and no partial file) at the new path.
    assert folder(root) == {"img/a.png": MINE}
    await r.sync_now()  # another pass (a rescan, an event) changes nothing while they are awaited
    assert folder(root) == {"img/a.png": MINE}
    assert r.index.live()["pics/b.png"].sha256 == sha(THEIRS)  # the file kept is no new change

    r.blobs.put_bytes(THEIRS)  # the winner's bytes arrive
    await r.sync_now()
    assert folder(root) == {"pics/b.png": THEIRS}  # only the new path, the winner's bytes
    kept = {(v.kind, v.sha256) for v in r.versions.all()}
    assert ("concurrent", sha(MINE)) in kept  # the loser: the conflict record
    assert [v.kind for v in r.versions.all()].count("concurrent") == 1
    await r.sync_now()  # our own writes: nothing new recorded
    assert [(p, e.sha256) for p, e in r.index.live().items()] == [("pics/b.png", sha(THEIRS))]
    assert folder(root) == {"pics/b.png": THEIRS}
    await r.stop()


async def test_a_peers_rename_waits_for_bytes_it_composed_with(tmp_path: Path) -> None:
    """A peer moved the attachment; a third device changed its bytes concurrently, later by
    the clock: the moved path with the third's bytes, which are not here yet. This replica's
    file (the bytes it had) stays at the old path until they land."""
    r, root = make_replica(tmp_path)
    (root / "img").mkdir()
    (root / "img" / "a.png").write_bytes(OLD)
    await r.sync_now()
    created = r.index.live()["img/a.png"]
    moved_b = moved(created, "pics/b.png", hlc=later(created.hlc), device="DEVICE-B")
    changed_c = AttachmentEntry(created.id, "img/a.png", sha(THEIRS), len(THEIRS), False,
                                later(created.hlc, 2), "DEVICE-C", False, created.hlc,
                                made_on([created], created.hlc),
                                path_set_at([created], "img/a.png", created.hlc))
    r.index.put(moved_b)
    r.index.put(changed_c)
    live = r.index.live()
    assert sorted(live) == ["pics/b.png"]
    assert live["pics/b.png"].sha256 == sha(THEIRS)  # composed
    await r.sync_now()
    assert folder(root) == {"img/a.png": OLD}  # still here until the composed bytes land
    await r.sync_now()
    assert folder(root) == {"img/a.png": OLD}

    r.blobs.put_bytes(THEIRS)
    await r.sync_now()
    assert folder(root) == {"pics/b.png": THEIRS}
    assert [v.kind for v in r.versions.all() if v.kind == "concurrent"] == []  # a composition, no conflict
    await r.sync_now()
    assert [(p, e.sha256) for p, e in r.index.live().items()] == [("pics/b.png", sha(THEIRS))]
    await r.stop()


async def test_the_winners_bytes_already_here_move_in_one_pass(tmp_path: Path) -> None:
    """The winner's bytes are in the store already: one pass writes the new path and
    removes the old one, and the loser is kept."""
    r, root, created, mine = await _created_then_changed_here(tmp_path)
    r.blobs.put_bytes(THEIRS)
    moved_b = moved(created, "pics/b.png", hlc=later(mine.hlc), device="DEVICE-B")
    theirs = AttachmentEntry(created.id, "pics/b.png", sha(THEIRS), len(THEIRS), False, later(mine.hlc, 2),
                             "DEVICE-B", False, moved_b.hlc, made_on([created, moved_b], moved_b.hlc),
                             path_set_at([created, moved_b], "pics/b.png", moved_b.hlc))
    r.index.put(theirs)
    await r.sync_now()
    assert folder(root) == {"pics/b.png": THEIRS}
    assert ("concurrent", sha(MINE)) in {(v.kind, v.sha256) for v in r.versions.all()}
    await r.stop()


def test_the_plan_removes_the_old_path_only_after_writing_the_new_one() -> None:
    """``plan_outflow`` alone: while the moved attachment's bytes are missing, a Fetch and no
    removal; once they are here, the WriteFile of the new path comes before the RemoveFile of
    the old one (the replica removes nothing whose new path it failed to write)."""
    entry = AttachmentEntry("a" * 32, "pics/b.png", sha(THEIRS), len(THEIRS), False, "0" * 15 + "9",
                            "DEVICE-B")
    disk = {"img/a.png": OnDisk(len(MINE), 5, 7, False)}
    seen = {"img/a.png": SeenFile("a" * 32, sha(MINE), len(MINE), 5, 7, False, "0" * 15 + "5")}
    waiting = plan_outflow(disk, seen, {"pics/b.png": entry}, lambda _sha: False)
    assert waiting == [Fetch(sha(THEIRS), len(THEIRS), "pics/b.png")]
    landing = plan_outflow(disk, seen, {"pics/b.png": entry}, lambda _sha: True)
    assert [type(a) for a in landing] == [WriteFile, RemoveFile]
    assert (landing[0].path, landing[1].path) == ("pics/b.png", "img/a.png")
