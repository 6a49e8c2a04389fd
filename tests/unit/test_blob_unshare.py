"""A received blob lands at its path as a hard link of the store's file (``write_blob``
with ``link``), and ``BlobStore.unshare`` then gives the store its own copy: afterwards the
two are separate files with the same bytes, the store's read-only. Bytes written through
the vault's file before that are never kept under the blob's name. Real files, real links."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

from stet.daemon.attachments import disk as attachment_disk
from stet.sync import direct_io
from stet.sync.attachment_scan import on_disk
from stet.sync.blob_store import BlobStore

MiB = 1 << 20


def _landed(tmp_path: Path, size: int = 3 * MiB + 11,
            executable: bool = False) -> tuple[BlobStore, Path, str, bytes]:
    data = random.Random(size).randbytes(size)
    blobs = BlobStore(tmp_path / "blobs")
    sha = blobs.put_bytes(data).sha256
    root = tmp_path / "vault"
    root.mkdir()
    written = attachment_disk.write_blob(blobs, root, "pics/a.jpg", sha, executable, None, link=True)
    assert written is not None
    return blobs, root / "pics" / "a.jpg", sha, data


def test_write_blob_links_the_stores_file_without_copying(tmp_path: Path) -> None:
    blobs, path, sha, data = _landed(tmp_path, executable=True)
    assert os.stat(path).st_ino == os.stat(blobs.path_of(sha)).st_ino
    assert os.stat(path).st_nlink == 2
    assert os.stat(path).st_mode & 0o100  # the executable bit asked for
    assert path.read_bytes() == data
    assert [p.name for p in path.parent.iterdir()] == ["a.jpg"]  # no temp file left
    assert blobs.shared() == [sha]


@pytest.mark.parametrize("direct", [True, False])
def test_unshare_gives_the_store_its_own_read_only_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        direct: bool) -> None:
    monkeypatch.setattr(direct_io, "enabled", direct)
    blobs, path, sha, data = _landed(tmp_path)
    st = on_disk(os.stat(path))
    assert blobs.unshare(sha, (st.ino, st.size, st.mtime_ns))
    store = blobs.path_of(sha)
    assert os.stat(store).st_ino != os.stat(path).st_ino
    assert os.stat(store).st_nlink == os.stat(path).st_nlink == 1
    assert os.stat(store).st_mode & 0o777 == 0o444
    assert os.stat(path).st_mode & 0o777 == 0o644
    assert on_disk(os.stat(path)) == st  # the vault's file is untouched (the seen state holds)
    assert blobs.verify(sha)
    assert path.read_bytes() == data
    assert blobs.shared() == []
    assert list(blobs.tmp_dir.iterdir()) == []
    # Now a write to the vault's file leaves the store alone.
    with open(path, "r+b") as f:
        f.write(b"EDITED")
    assert blobs.verify(sha)


def test_bytes_written_through_the_vault_first_are_not_kept(tmp_path: Path) -> None:
    blobs, path, sha, data = _landed(tmp_path)
    st = on_disk(os.stat(path))
    with open(path, "r+b") as f:  # an editor writing in place before the store's copy was made
        f.seek(MiB)
        f.write(b"EDITED")
    assert not blobs.unshare(sha, (st.ino, st.size, st.mtime_ns))
    assert not blobs.has(sha)  # the name never holds bytes that do not hash to it
    assert path.read_bytes()[MiB:MiB + 6] == b"EDITED"  # the user's file is left as it is
    assert list(blobs.tmp_dir.iterdir()) == []


def test_without_the_landing_stat_the_copy_is_hashed(tmp_path: Path) -> None:
    """After a crash (``shared`` at start) there is no stat to compare: the hash decides."""
    blobs, path, sha, data = _landed(tmp_path)
    os.utime(path, ns=(1, 1))  # a stat unlike the landing's: only the hash can tell
    assert blobs.unshare(sha, None)
    assert os.stat(blobs.path_of(sha)).st_nlink == 1
    assert blobs.verify(sha)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha


def test_a_blob_no_vault_file_shares_is_left_read_only(tmp_path: Path) -> None:
    blobs, path, sha, _data = _landed(tmp_path)
    os.unlink(path)  # the vault's file was replaced or removed before the copy
    assert blobs.unshare(sha, None)
    assert os.stat(blobs.path_of(sha)).st_mode & 0o777 == 0o444
    assert blobs.verify(sha)
    assert not blobs.unshare("0" * 64, None)  # not held at all


def test_without_hard_links_it_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_link(*_args: object, **_kw: object) -> None:
        raise OSError(18, "Invalid cross-device link")  # EXDEV: the vault on another file system

    monkeypatch.setattr(os, "link", no_link)
    blobs, path, sha, data = _landed(tmp_path)
    assert os.stat(path).st_nlink == 1
    assert os.stat(path).st_ino != os.stat(blobs.path_of(sha)).st_ino
    assert path.read_bytes() == data
    assert blobs.shared() == []


def test_a_path_changed_meanwhile_is_not_written_and_the_link_is_undone(tmp_path: Path) -> None:
    data = b"\x00bytes" * 1000
    blobs = BlobStore(tmp_path / "blobs")
    sha = blobs.put_bytes(data).sha256
    root = tmp_path / "vault"
    root.mkdir()
    (root / "a.bin").write_bytes(b"the user's")  # expected nothing there
    assert attachment_disk.write_blob(blobs, root, "a.bin", sha, False, None, link=True) is None
    assert (root / "a.bin").read_bytes() == b"the user's"
    assert os.stat(blobs.path_of(sha)).st_nlink == 1
    assert sorted(p.name for p in root.iterdir()) == ["a.bin"]


async def test_unsharing_copies_what_was_landed_and_at_start_what_a_crash_left(tmp_path: Path) -> None:
    from stet.daemon.attachments.unsharing import Unsharing

    blobs, path, sha, data = _landed(tmp_path)
    other = blobs.put_bytes(b"\x00left shared by a crash" * 500).sha256
    os.link(blobs.path_of(other), tmp_path / "vault" / "crash.bin")  # as a kill -9 leaves it
    unsharing = Unsharing(blobs)
    unsharing.start()  # finds `other` (and `sha`: also still shared)
    unsharing.landed(sha, on_disk(os.stat(path)))
    await unsharing.wait_idle()
    assert blobs.shared() == []
    assert unsharing.pending() == 0
    assert unsharing.dropped == 0
    for each in (sha, other):
        assert os.stat(blobs.path_of(each)).st_nlink == 1
        assert blobs.verify(each)
    assert path.read_bytes() == data
