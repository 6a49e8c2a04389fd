"""A received attachment and B's blob store are separate files (issue 14, P9; issue 37):
through real daemons over loopback TLS, B's file at its path is a copy (or a reflink) of
B's verified blob, never a hard link of it -- two files with the same bytes, the store's
private (0600). A store file an older Stet (or a ``kill -9`` in its landing) left shared
with the vault's file is given its own copy at the next start; bytes written through the
vault's file meanwhile are never kept under the blob's name, and the user's file is
recorded as the change it is.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

from stet.sync.blob_store import BlobStore
from tests.harness import wait_until
from tests.integration.attachment_support import live, seen_rows, wait_recorded
from tests.integration.test_attachment_transfer import (  # noqa: F401 (the fixture)
    MiB,
    PairFactory,
    file_sha,
    pair_factory,
)


def store_file(home: Path, sha: str) -> Path:
    return home / "blobs" / sha[:2] / sha[2:]


def own_copy(home: Path, sha: str, target: Path) -> bool:
    """The store holds the blob in a file of its own (not the vault's)."""
    try:
        s, t = os.stat(store_file(home, sha)), os.stat(target)
    except FileNotFoundError:
        return False
    return s.st_ino != t.st_ino and s.st_nlink == 1 and t.st_nlink == 1


def every_blob_verifies(home: Path) -> bool:
    blobs = BlobStore(home / "blobs", clean=False)
    return all(blobs.verify(sha) for sha in blobs.all())


def test_a_landed_blob_and_the_store_end_as_separate_files(pair_factory: PairFactory) -> None:  # noqa: F811
    size = 12 * MiB + 5
    pair, shas = pair_factory({"media/clip.mov": size, "small.png": 70_000})
    sha = shas["media/clip.mov"]
    target = pair.vb / "media" / "clip.mov"
    wait_until(lambda: target.exists() and file_sha(target) == sha, timeout=180, what="the file on B",
               interval=0.05)
    assert own_copy(pair.b.home, sha, target)  # from the moment it appears: never a link
    assert os.stat(store_file(pair.b.home, sha)).st_mode & 0o777 == 0o600
    assert os.stat(target).st_mode & 0o777 == 0o644
    wait_until(lambda: own_copy(pair.b.home, shas["small.png"], pair.vb / "small.png"), timeout=60,
               what="the small file on B, a file of its own")
    assert every_blob_verifies(pair.b.home)
    # Editing the landed file in place no longer touches the store.
    with open(target, "r+b") as f:
        f.write(b"EDITED")
    assert BlobStore(pair.b.home / "blobs", clean=False).verify(sha)


def _crash_while_shared(pair_factory: PairFactory, edit: bool,  # noqa: F811
                        unrecorded: bool = False) -> tuple[Path, Path, str, bytes]:
    size = 6 * MiB
    pair, shas = pair_factory({"doc.pdf": size})
    sha = shas["doc.pdf"]
    target = pair.vb / "doc.pdf"
    wait_until(lambda: own_copy(pair.b.home, sha, target), timeout=180, what="the file on B")
    wait_recorded(pair.b.home, "doc.pdf", sha, timeout=60)
    pair.b.kill9()
    # The state an older Stet's hard-link landing left after a kill -9 before the store's
    # copy: one inode under both names (made by hand).
    store = store_file(pair.b.home, sha)
    os.unlink(store)
    os.link(target, store)
    if unrecorded:  # killed between the landing's write and its record (CI stop 38)
        db = sqlite3.connect(next((pair.b.home / "vaults").glob("*.db")))
        with db:
            db.execute("DELETE FROM attachment_files WHERE path = 'doc.pdf'")
        db.close()
        assert "doc.pdf" not in seen_rows(pair.b.home)
    edited = b""
    if edit:  # and a user's in-place write through the vault's file before the restart
        with open(target, "r+b") as f:
            f.seek(MiB)
            f.write(b"EDITED IN PLACE")
        edited = target.read_bytes()
    pair.b.start()
    return pair.b.home, target, sha, edited


@pytest.mark.parametrize("unrecorded", [False, True], ids=["recorded", "unrecorded"])
def test_a_kill9_before_the_stores_copy_is_completed_at_start(pair_factory: PairFactory,  # noqa: F811
                                                              unrecorded: bool) -> None:
    home, target, sha, _ = _crash_while_shared(pair_factory, edit=False, unrecorded=unrecorded)
    # The vault's file gets a new file's mode back (the shared inode had the store's: the
    # home's privacy fix at start made it 0600).
    wait_until(lambda: own_copy(home, sha, target) and os.stat(target).st_mode & 0o777 == 0o644,
               timeout=60, what="the store's own copy after the restart, the file's mode its own")
    assert file_sha(target) == sha
    assert os.stat(store_file(home, sha)).st_mode & 0o777 == 0o600
    assert every_blob_verifies(home)
    if unrecorded:  # and the intake took the file in as what the index holds, not a change
        wait_until(lambda: seen_rows(home).get("doc.pdf", ("", "", 0))[1] == sha, timeout=60,
                   what="doc.pdf in B's seen state again")
        assert live(home)["doc.pdf"].sha256 == sha


def test_bytes_written_through_the_vault_while_shared_are_not_kept(
    pair_factory: PairFactory,  # noqa: F811
) -> None:
    home, target, sha, edited = _crash_while_shared(pair_factory, edit=True)
    new_sha = hashlib.sha256(edited).hexdigest()
    # The edit is recorded as a change (its bytes in the store under their own name); the old
    # name never holds bytes that do not hash to it.
    wait_recorded(home, "doc.pdf", new_sha, timeout=120)
    wait_until(lambda: not store_file(home, sha).exists() or own_copy(home, sha, target), timeout=60,
               what="the shared store file dealt with")
    assert target.read_bytes() == edited
    assert live(home)["doc.pdf"].sha256 == new_sha
    assert every_blob_verifies(home)
