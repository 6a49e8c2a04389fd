"""Hashing a partial on its way in (``PartialHash``, ``append_run``, ``finish(digest=)``):
a received blob is verified without reading it back, a resumed one hashes its prefix once,
and a digest that does not match throws the bytes away."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from stet.sync.blob_store import CHUNK, BlobMismatch, BlobStore, PartialHash


def test_hashed_on_the_way_in_and_landed(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = os.urandom(3 * CHUNK + 5)
    sha = hashlib.sha256(data).hexdigest()
    h = PartialHash(sha)
    chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]
    assert store.append_run(sha, 0, chunks[:2], total=len(data), hashing=h) == 2 * CHUNK
    assert store.append_run(sha, 2 * CHUNK, chunks[2:], total=len(data), hashing=h) == len(data)
    assert h.covered == len(data)
    assert h.hexdigest() == sha
    assert store.finish(sha, len(data), digest=h.hexdigest()).added
    assert store.verify(sha)


def test_a_resume_hashes_the_prefix_once(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = os.urandom(2 * CHUNK + 77)
    sha = hashlib.sha256(data).hexdigest()
    store.append(sha, 0, data[:CHUNK + 10], total=len(data))  # before a restart
    h = PartialHash(sha)  # a new process knows nothing of it
    have = store.partial_size(sha)
    store.append_run(sha, have, [data[have:]], total=len(data), hashing=h)
    assert h.hexdigest() == sha
    store.finish(sha, len(data), digest=h.hexdigest())
    assert store.verify(sha)


def test_a_digest_that_does_not_match_discards(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = os.urandom(CHUNK)
    sha = hashlib.sha256(data).hexdigest()
    store.append(sha, 0, data, total=len(data))
    with pytest.raises(BlobMismatch):
        store.finish(sha, len(data), digest=hashlib.sha256(b"other").hexdigest())
    assert not store.has(sha)
    assert store.partial_size(sha) == 0


def test_flush_partial_syncs_what_is_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The receiver's write-behind: the partial is fdatasync'ed; one already landed is no error."""
    from stet.sync import blob_store

    synced: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real(fd)

    monkeypatch.setattr(blob_store.os, "fdatasync", counting)
    store = BlobStore(tmp_path / "blobs")
    data = os.urandom(CHUNK + 3)
    sha = hashlib.sha256(data).hexdigest()
    store.append(sha, 0, data[:CHUNK], total=len(data))
    store.flush_partial(sha)
    assert synced == [CHUNK]
    store.append(sha, CHUNK, data[CHUNK:], total=len(data))
    store.finish(sha, len(data))
    store.flush_partial(sha)  # landed: nothing left to flush
    assert synced == [CHUNK]
