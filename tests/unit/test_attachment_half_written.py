"""An attachment still being written is not taken in until it is closed (found by the mixed
R1 run, issue 18 item 4, seed 3: a 20 MB image rewritten in place was recorded at 0 bytes
-- truncated, not yet written -- and that empty file reached the other members).

SPEC §3.2: a file is read once it has settled (its close-write, or a while without one);
a half-written read never becomes a change. In process on a real folder, store and blob
store, the watcher's events handed to the replica as the folder watcher would."""

from __future__ import annotations

import hashlib
from pathlib import Path

from stet.daemon.folder_watcher import FsEvent
from tests.unit.attachment_replica_rig import make_replica

OLD = b"\x89PNG\x00 before \x00" * 500
NEW = b"\x89PNG\x00 after, written in two goes \x00\x01" * 500


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_a_file_open_for_writing_is_taken_in_once_closed(tmp_path: Path) -> None:
    r, root = make_replica(tmp_path)
    (root / "big.png").write_bytes(OLD)
    await r.sync_now()
    assert r.index.live()["big.png"].sha256 == sha(OLD)

    with open(root / "big.png", "r+b") as f:  # noqa: ASYNC230 -- rewritten in place: truncated, then written
        f.truncate()
        f.flush()
        r.on_fs_event(FsEvent("modified", "big.png"))
        await r.sync_now()  # empty for now, and still open: not a change
        assert r.index.live()["big.png"].sha256 == sha(OLD)
        f.write(NEW[:1000])
        f.flush()
        r.on_fs_event(FsEvent("modified", "big.png"))
        await r.sync_now()  # half written
        assert r.index.live()["big.png"].sha256 == sha(OLD)
        f.write(NEW[1000:])
    r.on_fs_event(FsEvent("closed", "big.png"))
    await r.sync_now()
    assert r.index.live()["big.png"].sha256 == sha(NEW)
    # nothing partial kept or recorded
    assert [(v.kind, v.sha256) for v in r.versions.all()] == [("before-overwrite", sha(OLD))]
    await r.stop()


async def test_a_new_file_created_empty_is_taken_in_once_written_and_closed(tmp_path: Path) -> None:
    """(seed 10: a 20 MB file created with one write was taken in at 0 bytes: the write's
    own event comes only after the write.)"""
    r, root = make_replica(tmp_path)
    with open(root / "new.bin", "xb") as f:  # noqa: ASYNC230 -- created, its bytes not written yet
        r.on_fs_event(FsEvent("created", "new.bin"))
        await r.sync_now()
        assert "new.bin" not in r.index.live()  # not an empty attachment
        f.write(NEW)
    r.on_fs_event(FsEvent("modified", "new.bin"))
    r.on_fs_event(FsEvent("closed", "new.bin"))
    await r.sync_now()
    assert r.index.live()["new.bin"].sha256 == sha(NEW)
    assert r.versions.all() == []
    await r.stop()
