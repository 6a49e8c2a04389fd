"""Folder events that cannot hide an attachment walk nothing (P9, issue 14): in a first
sync the folders made for the blobs' files, the notes' writer's temp folder (made and
removed at each of its batches) and the ignore rules loaded again unchanged at each notes
rescan each made the next pass walk the whole folder -- 5 walks of 20 passes in the bench.
A stranger's folder still makes the next pass walk.

In process, on a real folder, store and blob store (as ``test_attachment_landing_no_walk``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stet.daemon.attachments.replica import AttachmentReplica
from stet.daemon.folder.watcher import FsEvent
from stet.daemon.folder.writer.folders import WriterFolders
from stet.sync.attachment_entry import AttachmentEntry, attachment_id
from stet.sync.hlc import Hlc

from .test_attachment_landing_no_walk import MINE, PEERS, counting_walks, holds, sha, until
from .test_attachment_last_landing import replica

PATHS = [f"photos/{i:02d}/IMG_{i}.png" for i in range(len(PEERS))]


async def waiting_in_new_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, rules_again: bool = False
                                 ) -> tuple[AttachmentReplica, WriterFolders, list[int]]:
    """A replica sharing the vault's ``WriterFolders`` whose index shows a peer's files in
    folders not made yet, their blobs not here; the count of walks from here on.
    ``rules_again``: the ignore rules are a new object each time (as after each notes rescan)."""
    r, root = replica(tmp_path, folders=True, rules_again=rules_again)
    folders = r.folders
    assert folders is not None
    (root / "a.png").write_bytes(MINE)
    await r.sync_now()
    hlc = Hlc.unpack(r.index.live()["a.png"].hlc).next()
    for path, data in zip(PATHS, PEERS, strict=True):
        r.index.put(AttachmentEntry(attachment_id(path), path, sha(data), len(data), False, hlc.pack(),
                                    "DEVICE-B"))
        hlc = hlc.next()
    await r.sync_now()
    walks = counting_walks(monkeypatch)
    r.start()
    await until(lambda: walks[0] == 1)  # the first pass walks
    return r, folders, walks


async def land(r: AttachmentReplica, i: int) -> None:
    """Blob ``i`` arrives; once at its path, the watcher's events: its folders made, the
    echo of the write."""
    r.blobs.put_bytes(PEERS[i])
    r.blob_arrived(sha(PEERS[i]))
    await until(lambda: holds(r.root / PATHS[i], PEERS[i]))
    folder = PATHS[i].rpartition("/")[0]
    r.on_fs_event(FsEvent("dir_created", "photos"))  # (the first one made it; inotify's and watchdog's)
    r.on_fs_event(FsEvent("dir_created", folder))
    r.on_fs_event(FsEvent("moved", f"{folder}/.stet-0123456789ab.tmp", PATHS[i]))


async def settled(r: AttachmentReplica, passes: int) -> None:
    await until(lambda: r.passes >= passes and not r.loop.woken.is_set() and not r.loop.lock.locked())


async def test_folders_made_for_landing_blobs_walk_nothing(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    r, folders, walks = await waiting_in_new_folders(tmp_path, monkeypatch)
    passes = r.passes
    for i in range(len(PEERS)):
        await land(r, i)
    await settled(r, passes + len(PEERS))
    assert walks[0] == 1  # the start's walk only
    # Made through the shared folders: the notes' side knows them for its own too (no rescan).
    assert folders.created_dir("photos")
    assert folders.created_dir("photos/00")
    assert r.counts("v1")["toPlace"] == 0
    await r.stop()


async def test_the_temp_folder_and_rules_loaded_again_walk_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The rules are a new object each time, as after each notes rescan.
    r, _folders, walks = await waiting_in_new_folders(tmp_path, monkeypatch, rules_again=True)
    passes = r.passes
    for i in range(len(PEERS)):
        r.on_fs_event(FsEvent("dir_created", ".stet-tmp"))  # the notes' writer's batch
        r.on_fs_event(FsEvent("dir_deleted", ".stet-tmp"))
        await land(r, i)
    await settled(r, passes + len(PEERS))
    assert walks[0] == 1
    await r.stop()


async def test_a_strangers_folder_makes_the_next_pass_walk(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    r, _folders, walks = await waiting_in_new_folders(tmp_path, monkeypatch)
    await land(r, 0)
    (r.root / "theirs").mkdir()
    (r.root / "theirs" / "x.png").write_bytes(MINE + b"x")  # (its own event left out: the walk finds it)
    r.on_fs_event(FsEvent("dir_created", "theirs"))
    await land(r, 1)
    await until(lambda: "theirs/x.png" in r.index.live())
    assert walks[0] >= 2
    await land(r, 2)
    await until(lambda: r.counts("v1")["toPlace"] == 0)
    await r.stop()
