"""A run of received chunks is hashed in a thread of its own while it is written
(``BlobStore.append_run(hash_in=)``, P9 issue 14): the write waits on the disk and the hash
on a core, so a run takes the longer of the two, not their sum.

What is checked: the bytes are in the partial before the hash of the same run is done
(the write does not wait for it); the digest is the blob's; a write that fails leaves the
hash covering nothing (it is read again from the file), never bytes the file lacks.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stet.sync.blob_store import CHUNK, BlobError, BlobStore, PartialHash


def test_the_run_is_written_while_its_hash_is_still_going(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = os.urandom(3 * CHUNK)
    sha = hashlib.sha256(data).hexdigest()
    chunks = [memoryview(data)[i:i + CHUNK] for i in range(0, len(data), CHUNK)]
    hashing = PartialHash(sha)
    release = threading.Event()
    real_feed = hashing.feed
    hash_calls: list[int] = []

    def held_feed(*args: object) -> None:
        hash_calls.append(threading.get_ident())
        assert release.wait(30)
        real_feed(*args)  # type: ignore[arg-type]

    hashing.feed = held_feed  # type: ignore[method-assign]
    with ThreadPoolExecutor(1) as hash_in, ThreadPoolExecutor(1) as writer:
        done = writer.submit(store.append_run, sha, 0, chunks, total=len(data), hashing=hashing,
                             hash_in=hash_in)
        deadline = time.monotonic() + 30
        while store.partial_size(sha) < len(data):  # the write finished with the hash held
            assert time.monotonic() < deadline, "the write waited for the hash"
            time.sleep(0.001)
        assert not done.done()  # append_run returns only once the run is hashed too
        release.set()
        assert done.result(30) == len(data)
    assert len(hash_calls) == 1
    assert hashing.covered == len(data)
    assert hashing.hexdigest() == sha
    store.finish(sha, len(data), digest=hashing.hexdigest())
    assert store.verify(sha)


def test_a_failed_write_leaves_the_hash_covering_nothing(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = os.urandom(2 * CHUNK)
    sha = hashlib.sha256(data).hexdigest()
    hashing = PartialHash(sha)
    with ThreadPoolExecutor(1) as hash_in:
        store.append_run(sha, 0, [data[:CHUNK]], total=len(data), hashing=hashing, hash_in=hash_in)
        assert hashing.covered == CHUNK
        with pytest.raises(BlobError):  # a hole: refused, and the hash had taken these bytes
            store.append_run(sha, CHUNK + 5, [data[CHUNK + 5:]], total=len(data), hashing=hashing,
                             hash_in=hash_in)
        assert hashing.covered == 0  # forgotten: the next run reads the prefix from the file
        end = store.append_run(sha, CHUNK, [data[CHUNK:]], total=len(data), hashing=hashing, hash_in=hash_in)
    assert end == len(data)
    assert hashing.covered == len(data)
    assert hashing.hexdigest() == sha
