"""Every attachment file Stet writes is a file of its own (issue 37): never a hard link of
the blob store's file or of another path's. Identical bytes at several paths are separate
inodes with their own modes; an edit of one leaves the others and the store alone; a move
never leaves two names on one inode. What an older Stet left linked is repaired: the store
gets its own copy (hashed), each vault file its own inode. Real files, real links.

(Replaces ``test_blob_unshare``, which asserted the hard-link landing.)
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import os
import random
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from stet.daemon.attachments import disk as attachment_disk
from stet.daemon.attachments.unsharing import StoreUnsharing, repair_shared_inodes
from stet.sync import direct_io
from stet.sync.attachment_plan import SeenFile
from stet.sync.attachment_scan import on_disk
from stet.sync.blob_store import BlobStore

MiB = 1 << 20
TWINS = ("x/pic.png", "y/pic.png", "z/pic.png")


def _store(tmp_path: Path, size: int = MiB + 11) -> tuple[BlobStore, Path, str, bytes]:
    data = random.Random(size).randbytes(size)
    blobs = BlobStore(tmp_path / "blobs")
    root = tmp_path / "vault"
    root.mkdir()
    return blobs, root, blobs.put_bytes(data).sha256, data


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize("direct", [True, False])
def test_twins_are_separate_files_each_with_its_own_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         direct: bool) -> None:
    monkeypatch.setattr(direct_io, "enabled", direct)
    blobs, root, sha, data = _store(tmp_path)
    for path in TWINS:
        assert attachment_disk.write_blob(blobs, root, path, sha, path == "y/pic.png", None) is not None
    files = [root / p for p in TWINS] + [blobs.path_of(sha)]
    assert len({os.lstat(f).st_ino for f in files}) == 4
    assert [os.lstat(f).st_nlink for f in files] == [1, 1, 1, 1]
    assert [mode(root / p) for p in TWINS] == [0o644, 0o755, 0o644]
    assert mode(blobs.path_of(sha)) == 0o600
    with open(root / "y" / "pic.png", "ab") as f:  # printf X >> y/pic.png
        f.write(b"X")
    assert (root / "x" / "pic.png").read_bytes() == data
    assert (root / "z" / "pic.png").read_bytes() == data
    assert blobs.verify(sha)
    os.chmod(root / "x" / "pic.png", 0o755)
    assert [mode(root / p) for p in TWINS] == [0o755, 0o755, 0o644]
    assert sorted(p.name for p in (root / "x").iterdir()) == ["pic.png"]  # no temp file left


def test_a_reflink_is_tried_first_and_a_refusal_copies(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real_ioctl = fcntl.ioctl

    def refusing_ioctl(fd: int, request: int, arg: Any = 0, *rest: Any) -> Any:
        if request == attachment_disk.FICLONE:
            asked.append(request)
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")  # ext4, tmpfs
        return real_ioctl(fd, request, arg, *rest)

    monkeypatch.setattr(fcntl, "ioctl", refusing_ioctl)
    blobs, root, sha, data = _store(tmp_path)
    assert attachment_disk.write_blob(blobs, root, "a.bin", sha, False, None) is not None
    assert asked == [attachment_disk.FICLONE] or not sys.platform.startswith("linux")
    assert (root / "a.bin").read_bytes() == data
    assert os.lstat(root / "a.bin").st_ino != os.lstat(blobs.path_of(sha)).st_ino


def test_where_the_file_system_clones_the_clone_is_a_separate_file(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(b"\x00clone me" * 5000)
    with open(src, "rb") as s, open(tmp_path / "probe", "wb") as d:
        if not attachment_disk._reflink(s.fileno(), d.fileno()):
            pytest.skip("this file system has no reflinks (ext4, tmpfs): the copy is tested above")
    st = attachment_disk.clone_or_copy(src, tmp_path / "clone.bin", 0o644)
    assert st.st_ino != os.lstat(src).st_ino
    with open(tmp_path / "clone.bin", "r+b") as f:
        f.write(b"EDITED")
    assert src.read_bytes() == b"\x00clone me" * 5000


def test_a_path_changed_meanwhile_is_not_written(tmp_path: Path) -> None:
    blobs, root, sha, _data = _store(tmp_path, 5000)
    (root / "a.bin").write_bytes(b"the user's")  # expected nothing there
    assert attachment_disk.write_blob(blobs, root, "a.bin", sha, False, None) is None
    assert (root / "a.bin").read_bytes() == b"the user's"
    assert sorted(p.name for p in root.iterdir()) == ["a.bin"]


def test_a_move_never_leaves_two_names_on_one_inode(tmp_path: Path) -> None:
    blobs, root, sha, data = _store(tmp_path, 5000)
    st = attachment_disk.write_blob(blobs, root, "old/a.bin", sha, False, None)
    assert st is not None
    seen = SeenFile("att", sha, st.size, st.mtime_ns, st.ino, st.executable, "h")
    moved = attachment_disk.move_file(root, "old/a.bin", "new/a.bin", seen)
    assert moved is not None
    assert moved.ino == st.ino
    assert os.lstat(root / "new" / "a.bin").st_nlink == 1
    assert not (root / "old" / "a.bin").exists()
    # Never over a file that appeared at the new path.
    (root / "taken.bin").write_bytes(b"someone's")
    assert not attachment_disk.rename_no_replace(root / "new" / "a.bin", root / "taken.bin")
    assert (root / "taken.bin").read_bytes() == b"someone's"
    assert (root / "new" / "a.bin").read_bytes() == data


def _linked_like_an_older_stet(tmp_path: Path) -> tuple[BlobStore, Path, str, bytes, dict[str, SeenFile]]:
    """Three twins and the store's file one inode, as the hard-link landing left them."""
    blobs, root, sha, data = _store(tmp_path)
    store = blobs.path_of(sha)
    seen = {}
    for path in TWINS:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        os.link(store, root / path)
        d = on_disk(os.lstat(root / path))
        seen[path] = SeenFile("att-" + path, sha, d.size, d.mtime_ns, d.ino, d.executable, "h")
    os.chmod(store, 0o600)  # the home's privacy fix made the shared inode 0600
    assert os.lstat(store).st_nlink == 4
    return blobs, root, sha, data, seen


def test_linked_twins_get_their_own_inode_with_the_indexed_mode(tmp_path: Path) -> None:
    blobs, root, sha, data, seen = _linked_like_an_older_stet(tmp_path)
    mtime = os.lstat(root / "x" / "pic.png").st_mtime_ns
    repaired = repair_shared_inodes(root, blobs, seen, {"y/pic.png": True})
    assert sorted(r.path for r in repaired) == list(TWINS)
    files = [root / p for p in TWINS] + [blobs.path_of(sha)]
    assert len({os.lstat(f).st_ino for f in files}) == 4
    assert [os.lstat(f).st_nlink for f in files] == [1, 1, 1, 1]
    # The executable bit as the index says; the rest a new file's (the inode had the store's).
    assert [mode(root / p) for p in TWINS] == [0o644, 0o755, 0o644]
    assert all((root / p).read_bytes() == data for p in TWINS)
    assert all(os.lstat(root / p).st_mtime_ns == mtime for p in TWINS)
    assert all(r.held_seen for r in repaired)
    assert {r.path: r.written for r in repaired} == {p: on_disk(os.lstat(root / p)) for p in TWINS}
    assert blobs.verify(sha)
    assert sorted(p.name for p in (root / "x").iterdir()) == ["pic.png"]


@pytest.mark.parametrize("store_scan_first", [True, False])
def test_a_landing_killed_before_its_record_is_repaired_from_the_index(tmp_path: Path,
                                                                      store_scan_first: bool) -> None:
    """CI stop 38: a ``kill -9`` between a hard-link landing's write and its seen record left
    the file shared with its blob (0600, the store's mode) and unknown to the seen state;
    the repair looked at seen paths only, and the file kept the store's mode for good."""
    blobs, root, sha, data = _store(tmp_path)
    os.link(blobs.path_of(sha), root / "doc.pdf")
    os.chmod(root / "doc.pdf", 0o600)
    if store_scan_first:  # the home's scan gave the store its copy: the file alone on the old inode
        assert blobs.unshare(sha)
    repaired = repair_shared_inodes(root, blobs, {}, {"doc.pdf": False}, {"doc.pdf": sha})
    assert [(r.path, r.held_seen) for r in repaired] == [("doc.pdf", False)]  # the intake records it
    assert mode(root / "doc.pdf") == 0o644
    assert os.lstat(root / "doc.pdf").st_nlink == 1
    assert os.lstat(root / "doc.pdf").st_ino != os.lstat(blobs.path_of(sha)).st_ino
    assert (root / "doc.pdf").read_bytes() == data
    assert blobs.verify(sha)


def test_twins_linked_only_to_each_other_keep_their_read_write_bits(tmp_path: Path) -> None:
    blobs, root, _sha, _data = _store(tmp_path, 4000)
    (root / "a").mkdir()
    (root / "a" / "one.bin").write_bytes(b"\x00same" * 100)
    os.chmod(root / "a" / "one.bin", 0o640)
    os.link(root / "a" / "one.bin", root / "a" / "two.bin")
    digest = hashlib.sha256(b"\x00same" * 100).hexdigest()
    seen = {p: SeenFile("id" + p, digest, 500, 0, 0, False, "h") for p in ("a/one.bin", "a/two.bin")}
    repaired = repair_shared_inodes(root, blobs, seen, {})
    assert len(repaired) == 2
    assert not any(r.held_seen for r in repaired)  # the seen stat was not the file's: the intake reads it
    assert os.lstat(root / "a" / "one.bin").st_ino != os.lstat(root / "a" / "two.bin").st_ino
    assert mode(root / "a" / "one.bin") == mode(root / "a" / "two.bin") == 0o640


def test_a_persons_own_hard_link_is_left_alone(tmp_path: Path) -> None:
    blobs, root, _sha, _data = _store(tmp_path, 4000)
    (root / "mine.bin").write_bytes(b"linked by the person")
    os.link(root / "mine.bin", tmp_path / "outside.bin")  # not a file Stet wrote
    digest = hashlib.sha256(b"linked by the person").hexdigest()
    seen = {"mine.bin": SeenFile("id", digest, 20, 0, 0, False, "h")}
    assert repair_shared_inodes(root, blobs, seen, {}) == []
    assert os.lstat(root / "mine.bin").st_ino == os.lstat(tmp_path / "outside.bin").st_ino


def test_bytes_written_through_a_linked_vault_file_are_not_kept_in_the_store(tmp_path: Path) -> None:
    blobs, root, sha, data, seen = _linked_like_an_older_stet(tmp_path)
    with open(root / "z" / "pic.png", "r+b") as f:  # an editor writing in place, through the link
        f.seek(1000)
        f.write(b"EDITED")
    repaired = repair_shared_inodes(root, blobs, seen, {})
    assert len(repaired) == 3
    assert not blobs.has(sha)  # the name never holds bytes that do not hash to it
    edited = data[:1000] + b"EDITED" + data[1006:]
    assert all((root / p).read_bytes() == edited for p in TWINS)  # the person's bytes stay
    assert list(blobs.tmp_dir.iterdir()) == []


def test_the_stores_scan_at_start_copies_what_an_older_stet_left_shared(tmp_path: Path) -> None:
    blobs, root, sha, data = _store(tmp_path)
    other = blobs.put_bytes(b"\x00left shared" * 500).sha256
    os.link(blobs.path_of(sha), root / "a.bin")
    os.link(blobs.path_of(other), root / "b.bin")
    assert sorted(blobs.shared()) == sorted([sha, other])
    unsharing = StoreUnsharing(blobs)

    async def run() -> None:
        unsharing.start()
        unsharing.start()  # once per home
        await asyncio.wait_for(unsharing.wait_idle(), 30)

    asyncio.run(run())
    assert blobs.shared() == []
    assert (unsharing.done, unsharing.dropped) == (2, 0)
    for each in (sha, other):
        assert os.lstat(blobs.path_of(each)).st_nlink == 1
        assert mode(blobs.path_of(each)) == 0o600
        assert blobs.verify(each)
    assert (root / "a.bin").read_bytes() == data
    assert blobs.unshare(sha)  # alone already: nothing to do
    assert not blobs.unshare("0" * 64)  # not held at all
