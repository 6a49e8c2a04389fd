"""Taking in a file whose bytes the blob store already holds (a twin, a file a checkout
brings back) writes nothing: no temp file, no fsync, the stored blob untouched; new bytes
land as before, small files from memory, large ones streamed. Real files."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path
from typing import Any

import pytest

from stet.sync.attachment_scan import HASH_FIRST_BYTES, ingest
from stet.sync.blob_store import BlobInfo, BlobStore


def test_known_bytes_are_not_written_again_and_new_ones_land(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    root = tmp_path / "vault"
    (root / "日本語").mkdir(parents=True)
    small = random.Random(1).randbytes(5000)
    large = random.Random(2).randbytes(HASH_FIRST_BYTES + 4097)
    known = blobs.put_bytes(small)
    stored = os.stat(blobs.path_of(known.sha256))
    (root / "日本語" / "図.png").write_bytes(small)
    (root / "new.png").write_bytes(small[::-1])
    (root / "big.bin").write_bytes(large)
    writes: list[int] = []
    original = BlobStore.put_stream

    def counting(self: BlobStore, *args: Any, **kwargs: Any) -> BlobInfo:
        writes.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BlobStore, "put_stream", counting)
    got = ingest(blobs, root, "日本語/図.png", 10 << 20)
    assert got is not None
    assert (got[0].sha256, got[0].size, got[0].added) == (known.sha256, 5000, False)
    assert writes == []  # nothing written for bytes the store holds
    after = os.stat(blobs.path_of(known.sha256))
    assert (after.st_ino, after.st_mtime_ns) == (stored.st_ino, stored.st_mtime_ns)
    fresh = ingest(blobs, root, "new.png", 10 << 20)
    assert fresh is not None
    assert fresh[0].added
    assert blobs.path_of(fresh[0].sha256).read_bytes() == small[::-1]
    streamed = ingest(blobs, root, "big.bin", 10 << 20)
    assert streamed is not None
    assert streamed[0].sha256 == hashlib.sha256(large).hexdigest()
    assert blobs.path_of(streamed[0].sha256).read_bytes() == large
    assert ingest(blobs, root, "big.bin", HASH_FIRST_BYTES) is None  # over the limit: not taken in
    assert len(writes) == 2
