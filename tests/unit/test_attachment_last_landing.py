"""Once every blob the folder side waits for has landed, the next pass is not spaced out
(P9, issue 14): passes are spaced by at least twice the last one's duration during a burst,
and the last file of a transfer waited that long after its blob was verified.

In process, on a real folder, store and blob store (as ``test_attachment_move_before_fetch``);
a peer's change is put into the index as a peer's index update would, its blob held back
until the test lets it "arrive"."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

from stet.daemon.attachments.replica import AttachmentReplica
from stet.daemon.attachments.seams import NoPeersFetcher, PassGate
from stet.daemon.folder.writer.folders import WriterFolders
from stet.daemon.notes.service import NotesService
from stet.sync.attachment_entry import AttachmentEntry, attachment_id
from stet.sync.blob_store import BlobStore
from stet.sync.hlc import Hlc
from stet.sync.ignore_rules import IgnoreRules
from stet.sync.store import VaultStore

OLD = b"\x89PNG\x00 the bytes here \x00" * 40
NEW = [b"\x89PNG\x00 a peer's bytes %d \x00\x01" % i * 40 for i in range(2)]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def holds(path: Path, data: bytes) -> bool:
    return path.exists() and path.read_bytes() == data


async def wait_for_bytes(path: Path, data: bytes) -> None:
    async with asyncio.timeout(20):  # far less than the spacing the replica was given
        while not holds(path, data):  # noqa: ASYNC110 - a file, under a deadline
            await asyncio.sleep(0.01)


def replica(tmp_path: Path, *, folders: bool = False,
            rules_again: bool = False) -> tuple[AttachmentReplica, Path]:
    """A replica of a new vault folder with no peers (its blobs put in by the test).
    ``folders``: it shares a ``WriterFolders`` of the vault (``r.folders``); ``rules_again``:
    its ignore rules are loaded again (a new object) each time they are asked for, as after
    each notes rescan."""
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    service = NotesService("v1", VaultStore(tmp_path / "vault.db"), device_id="DEVICE-A")
    rules = IgnoreRules.load(root)
    r = AttachmentReplica("v1", root, service, BlobStore(tmp_path / "blobs"), fetcher=NoPeersFetcher(),
                          gate=PassGate(), max_bytes=1 << 20, keep_bytes=1 << 20,
                          extensions=(".md",),
                          rules=(lambda: IgnoreRules.load(root)) if rules_again else (lambda: rules),
                          device_id="DEVICE-A", folders=WriterFolders(root) if folders else None, quiet_s=0.0)
    return r, root


async def test_the_last_awaited_blob_goes_to_its_path_without_the_pass_spacing(tmp_path: Path) -> None:
    r, root = replica(tmp_path)
    (root / "a.png").write_bytes(OLD)
    await r.sync_now()
    mine = r.index.live()["a.png"]
    hlc = Hlc.unpack(mine.hlc).next().next()
    for i, data in enumerate(NEW):  # a peer's two new files; their blobs are not here yet
        path = f"new{i}.png"
        r.index.put(AttachmentEntry(attachment_id(path), path, sha(data), len(data), False, hlc.pack(),
                                    "DEVICE-B"))
        hlc = hlc.next()
    await r.sync_now()
    assert not (root / "new0.png").exists()
    assert r.holds_blob(sha(NEW[0]))  # both waited for
    assert r.holds_blob(sha(NEW[1]))

    r.loop.last_pass_s = 300.0  # a long pass before, just ended: the next ones are spaced 600 s apart
    r.loop.last_pass_end = time.monotonic()
    r.start()
    r.blobs.put_bytes(NEW[0])
    r.blob_arrived(sha(NEW[0]))  # one of two: the spacing holds (written with the next pass)
    r.blobs.put_bytes(NEW[1])
    r.blob_arrived(sha(NEW[1]))  # the last one: a pass now
    await wait_for_bytes(root / "new1.png", NEW[1])
    await wait_for_bytes(root / "new0.png", NEW[0])
    assert (root / "a.png").read_bytes() == OLD
    await r.stop()
