"""An attachment still being written is not taken in until it is closed (found by the mixed
R1 run, issue 18 item 4, seed 3: a 20 MB image rewritten in place was recorded at 0 bytes
-- truncated, not yet written -- and that empty file reached the other members).

Seed 1804 (CI, 2026-12-02): a 20 MiB file created with one ``write`` was taken in at its
first 10 MiB -- the file was not empty when its "created" event was handled, so it passed
for a file moved in whole, and the throttled writer paused long enough for a steady read.

SPEC §3.2: a file is read once it has settled (its close-write, or a while without one);
a half-written read never becomes a change. In process on a real folder, store and blob
store, the watcher's events handed to the replica as the folder watcher would."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from stet.daemon.attachments.events import UNCLOSED_WRITE_S
from stet.daemon.folder.watcher import FsEvent
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


async def test_a_created_file_that_already_holds_bytes_waits_for_its_close(tmp_path: Path) -> None:
    """The "created" event handled after the first write began: part of the bytes are there,
    the write's own event not yet (it comes once the write returns)."""
    r, root = make_replica(tmp_path)
    with open(root / "new.bin", "xb") as f:  # noqa: ASYNC230 -- one long write under way
        f.write(NEW[:4000])
        f.flush()
        r.on_fs_event(FsEvent("created", "new.bin"))
        await r.sync_now()
        assert "new.bin" not in r.index.live()  # not the first 4,000 bytes as an attachment
        f.write(NEW[4000:])
    r.on_fs_event(FsEvent("modified", "new.bin"))
    r.on_fs_event(FsEvent("closed", "new.bin"))
    await r.sync_now()
    assert r.index.live()["new.bin"].sha256 == sha(NEW)
    assert sha(NEW[:4000]) not in {v.sha256 for v in r.versions.all()}
    assert not r.blobs.has(sha(NEW[:4000]))
    await r.stop()


def _age(path: Path, seconds: float) -> None:
    at = time.time() - seconds
    os.utime(path, (at, at))


async def test_a_file_a_walk_finds_is_read_once_it_has_gone_unmodified_a_while(tmp_path: Path) -> None:
    """No event vouches for a file found by a walk while running (after an overflow; a
    hard link's writes): modified just now, its writer may still be at it; read once quiet
    for ``quiet_s``. (The first pass, at start, reads what it finds, as the notes' does.)"""
    r, root = make_replica(tmp_path, quiet_s=UNCLOSED_WRITE_S)
    (root / "at-start.bin").write_bytes(OLD + b"start")
    await r.sync_now()  # the first pass
    assert r.index.live()["at-start.bin"].sha256 == sha(OLD + b"start")
    (root / "fresh.bin").write_bytes(NEW)
    (root / "old.bin").write_bytes(OLD)
    _age(root / "old.bin", 3600)
    (root / "future.bin").write_bytes(OLD + b"future")
    _age(root / "future.bin", -3600)  # an archive's dates, a clock set back: no sign of a writer
    await r.sync_now()
    shown = r.index.live()
    assert "fresh.bin" not in shown
    assert shown["old.bin"].sha256 == sha(OLD)
    assert shown["future.bin"].sha256 == sha(OLD + b"future")
    _age(root / "fresh.bin", UNCLOSED_WRITE_S + 1)  # quiet since
    await r.sync_now()
    assert r.index.live()["fresh.bin"].sha256 == sha(NEW)
    await r.stop()


async def test_a_close_or_a_rename_into_place_settles_a_file_at_once(tmp_path: Path) -> None:
    r, root = make_replica(tmp_path, quiet_s=UNCLOSED_WRITE_S)
    await r.sync_now()  # the first pass, at start (an empty folder)
    (root / "closed.bin").write_bytes(NEW)
    r.on_fs_event(FsEvent("created", "closed.bin"))
    r.on_fs_event(FsEvent("modified", "closed.bin"))
    r.on_fs_event(FsEvent("closed", "closed.bin"))
    (root / "saved.tmp.bin").write_bytes(OLD)
    os.rename(root / "saved.tmp.bin", root / "saved.bin")  # an app's save: written, then renamed
    r.on_fs_event(FsEvent("moved", "saved.tmp.bin", "saved.bin"))
    await r.sync_now()
    shown = r.index.live()
    assert shown["closed.bin"].sha256 == sha(NEW)
    assert shown["saved.bin"].sha256 == sha(OLD)
    # After an overflow (events lost), a close seen before vouches for nothing.
    (root / "closed.bin").write_bytes(NEW + b"again")
    r.on_fs_event(FsEvent("overflow"))
    await r.sync_now()
    assert r.index.live()["closed.bin"].sha256 == sha(NEW)
    await r.stop()


async def test_a_file_moved_into_a_new_folder_keeps_its_attachment(tmp_path: Path) -> None:
    """A rename into a folder made just before shows as the file's deletion and a "created"
    at the new path (inotify's watch on the new folder came after the rename), with no close
    to come: its bytes are those of the file that vanished, so it is a move at once -- not a
    deletion (after the delete delay) and, once settled, a new attachment."""
    r, root = make_replica(tmp_path, quiet_s=UNCLOSED_WRITE_S)
    await r.sync_now()
    (root / "cat.png").write_bytes(NEW)
    r.on_fs_event(FsEvent("closed", "cat.png"))
    await r.sync_now()
    before = r.index.live()["cat.png"]
    (root / "pets").mkdir()
    os.rename(root / "cat.png", root / "pets" / "cat.png")
    r.on_fs_event(FsEvent("deleted", "cat.png"))
    r.on_fs_event(FsEvent("created", "pets/cat.png"))
    await r.sync_now()
    shown = r.index.live()
    assert "cat.png" not in shown
    assert shown["pets/cat.png"].id == before.id
    assert r.versions.all() == []  # a move: nothing deleted, nothing kept
    await r.stop()


async def test_a_file_written_to_after_the_walk_looked_is_not_read_mid_write(tmp_path: Path) -> None:
    """CI (stop 37, the slow hard-link writer): the quiet rule was judged on the walk's stat;
    a writer that went on after the walk looked (through a hard link: no event here) had a
    file whose bytes were taken in mid-write, its mtime by then long past in the stale stat.
    The rule is judged again on the stat the file is read by."""
    r, root = make_replica(tmp_path, quiet_s=UNCLOSED_WRITE_S)
    await r.sync_now()  # the first pass, at start
    (root / "grow.bin").write_bytes(OLD)
    _age(root / "grow.bin", 3600)  # quiet as the walk sees it
    walk = r.view.folder

    async def walk_then_the_writer_goes_on(*args: object, **kwargs: object) -> dict[str, object]:
        disk = await walk(*args, **kwargs)  # type: ignore[arg-type]
        grow = root / "grow.bin"  # after the walk's stat, before the read
        grow.write_bytes(grow.read_bytes() + NEW)  # noqa: ASYNC240 (a test's small file)
        return disk  # type: ignore[return-value]

    r.view.folder = walk_then_the_writer_goes_on  # type: ignore[method-assign]
    await r.sync_now()
    assert "grow.bin" not in r.index.live(), "read on the walk's stale stat, mid-write"
    assert not r.blobs.has(sha(OLD + NEW))
    r.view.folder = walk  # type: ignore[method-assign]
    _age(root / "grow.bin", UNCLOSED_WRITE_S + 1)  # the writer is done: quiet since
    await r.sync_now()
    assert r.index.live()["grow.bin"].sha256 == sha(OLD + NEW)
    await r.stop()
