"""A pass woken only by blobs landing does not walk the folder (P9, issue 14): while 200
blobs landed, each pass walked the whole folder again, on the receiver's cores the
transfer needs. The last walk's files, with what the replica wrote since, stand for the
folder -- unless an event names a path it did not write: a user's edit or a stranger's
file is still noticed (a walk), never overwritten unread.

In process, on a real folder, store and blob store (as ``test_attachment_last_landing``);
the watcher's events are handed to the replica as the watcher would."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stet.daemon.attachments import folder_view as attachment_folder_view
from stet.daemon.attachments.replica import AttachmentReplica
from stet.daemon.folder.watcher import FsEvent
from stet.sync.attachment_entry import AttachmentEntry, attachment_id
from stet.sync.hlc import Hlc

from .test_attachment_last_landing import replica

MINE = b"\x89PNG\x00 the bytes here \x00" * 40
PEERS = [b"\x89PNG\x00 a peer's bytes %d \x00\x01" % i * 40 for i in range(3)]
USERS = b"\x89PNG\x00 the user's own edit \x00" * 40


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def until(what: Callable[[], bool]) -> None:
    async with asyncio.timeout(20):
        while not what():  # noqa: ASYNC110 - the folder and the index, under a deadline
            await asyncio.sleep(0.01)


def counting_walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From here on, ``[n]``: how many times a pass walked the folder."""
    walks = [0]
    real = attachment_folder_view.scan_attachments

    def counting(*args: Any, **kwargs: Any) -> Any:
        walks[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(attachment_folder_view, "scan_attachments", counting)
    return walks


def holds(path: Path, data: bytes) -> bool:
    return path.exists() and path.read_bytes() == data


async def replica_waiting(tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> tuple[AttachmentReplica, list[int]]:
    """A replica whose index shows three files of a peer's, their blobs not here yet; the
    count of folder walks from here on."""
    r, root = replica(tmp_path)
    (root / "a.png").write_bytes(MINE)
    await r.sync_now()
    hlc = Hlc.unpack(r.index.live()["a.png"].hlc).next()
    for i, data in enumerate(PEERS):
        path = f"new{i}.png"
        r.index.put(AttachmentEntry(attachment_id(path), path, sha(data), len(data), False, hlc.pack(),
                                    "DEVICE-B"))
        hlc = hlc.next()
    await r.sync_now()
    assert all(r.holds_blob(sha(d)) for d in PEERS)
    walks = counting_walks(monkeypatch)
    r.start()
    await until(lambda: walks[0] == 1)  # the first pass walks: what changed while down
    return r, walks


async def land(r: AttachmentReplica, i: int) -> None:
    """Blob ``i`` arrives; once at its path, the watcher's echo of that write comes."""
    r.blobs.put_bytes(PEERS[i])
    r.blob_arrived(sha(PEERS[i]))
    await until(lambda: holds(r.root / f"new{i}.png", PEERS[i]))
    r.on_fs_event(FsEvent("created", ".stet-0123456789ab.tmp"))  # ignored: our temp file
    r.on_fs_event(FsEvent("moved", ".stet-0123456789ab.tmp", f"new{i}.png"))
    r.on_fs_event(FsEvent("attrib", f"new{i}.png"))  # the store's own copy made: a link fewer


async def test_blobs_landing_and_the_echo_of_our_writes_walk_nothing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    r, walks = await replica_waiting(tmp_path, monkeypatch)
    passes = r.passes
    for i in range(3):
        await land(r, i)
    await until(lambda: r.passes >= passes + 3 and not r.loop.woken.is_set() and not r.loop.lock.locked())
    assert walks[0] == 1  # one walk, at start: none for the landings nor their echoes
    assert r.counts("v1")["toPlace"] == 0
    assert holds(r.root / "a.png", MINE)
    await r.stop()


async def test_a_users_edit_and_a_strangers_file_while_blobs_land_are_noticed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r, walks = await replica_waiting(tmp_path, monkeypatch)
    await land(r, 0)
    # The user edits the file just written, and drops a file of their own in, while the
    # next blob is on its way: each event names a path the replica did not leave so.
    (r.root / "new0.png").write_bytes(USERS)
    r.on_fs_event(FsEvent("modified", "new0.png"))
    r.on_fs_event(FsEvent("closed", "new0.png"))
    (r.root / "theirs.png").write_bytes(MINE + b"theirs")
    r.on_fs_event(FsEvent("created", "theirs.png"))
    r.on_fs_event(FsEvent("closed", "theirs.png"))
    await land(r, 1)

    def recorded() -> bool:
        live = r.index.live()
        return ("theirs.png" in live and live["new0.png"].sha256 == sha(USERS)
                and live["new0.png"].device == "DEVICE-A")

    await until(recorded)
    assert walks[0] >= 2  # the events about others' changes made a pass walk
    assert holds(r.root / "new0.png", USERS)  # never overwritten
    await land(r, 2)
    await until(lambda: r.counts("v1")["toPlace"] == 0)
    assert holds(r.root / "new0.png", USERS)
    assert holds(r.root / "theirs.png", MINE + b"theirs")
    await r.stop()


async def test_a_file_we_wrote_then_removed_by_the_user_is_recorded_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r, walks = await replica_waiting(tmp_path, monkeypatch)
    await land(r, 0)
    (r.root / "new0.png").unlink()
    r.on_fs_event(FsEvent("deleted", "new0.png"))
    await land(r, 1)
    await until(lambda: "new0.png" not in r.index.live() or "new0.png" in r.deleted_waiting("v1"))
    assert walks[0] >= 2
    await r.stop()
