"""The content-addressed blob store (SPEC §3.14): dedup, atomic landing, resumable receive,
and a store that stays consistent when its writer is killed with SIGKILL mid-write."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stet.sync.blob_store import BlobError, BlobMismatch, BlobStore, check_sha


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_put_bytes_is_content_addressed_and_deduplicated(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = b"\x89PNG\r\n\x1a\n\x00\x00\x00binary with NULs\x00"
    first = store.put_bytes(data)
    assert first.sha256 == sha(data)
    assert first.size == len(data)
    assert first.added
    path = store.path_of(first.sha256)
    assert path == tmp_path / "blobs" / first.sha256[:2] / first.sha256[2:]
    assert path.read_bytes() == data
    again = store.put_bytes(data)
    assert again.sha256 == first.sha256
    assert not again.added
    assert list(store.all()) == [first.sha256]
    assert os.listdir(store.tmp_dir) == []
    # Private from the start (SPEC R4, issue 33 item 12): never a mode the home's fix changes.
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    for folder in (store.root, path.parent, store.tmp_dir, store.partial_dir):
        assert oct(folder.stat().st_mode & 0o777) == oct(0o700), folder


def test_empty_blob(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    info = store.put_bytes(b"")
    assert info.sha256 == sha(b"")
    assert info.size == 0
    assert store.has(info.sha256)
    assert store.size(info.sha256) == 0
    assert store.verify(info.sha256)


def test_put_file_streams_and_checks_expected_hash(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    src = tmp_path / "big.bin"
    data = os.urandom(3 * (1 << 20) + 17)
    src.write_bytes(data)
    info = store.put_file(src, expected=sha(data))
    assert info.sha256 == sha(data)
    assert store.verify(info.sha256)
    assert b"".join(store.read_chunks(info.sha256)) == data
    assert store.read_range(info.sha256, 1 << 20, 10) == data[1 << 20:(1 << 20) + 10]
    with pytest.raises(BlobMismatch):
        store.put_file(src, expected=sha(b"something else"))
    assert os.listdir(store.tmp_dir) == []


def test_put_refuses_over_the_limit_and_leaves_nothing(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    with pytest.raises(BlobError) as exc:
        store.put_stream([b"a" * 10, b"b" * 10], max_bytes=15)
    assert exc.value.code == "too_large"
    assert list(store.all()) == []
    assert os.listdir(store.tmp_dir) == []


def test_put_file_never_follows_a_symlink(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    (tmp_path / "secret").write_bytes(b"secret")
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        store.put_file(tmp_path / "link")


def test_bad_names_are_refused(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    for bad in ("", "../" + "a" * 61, "A" * 64, "a" * 63, "g" * 64):
        with pytest.raises(BlobError):
            check_sha(bad)
        with pytest.raises(BlobError):
            store.path_of(bad)


def test_partial_receive_resumes_and_lands_only_when_verified(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = os.urandom(2_500_000)
    h = sha(data)
    assert store.partial_size(h) == 0
    assert store.append(h, 0, data[:1_000_000], total=len(data)) == 1_000_000
    assert not store.has(h)  # a partial is never visible under its hash
    with pytest.raises(BlobError):
        store.finish(h, len(data))  # not complete
    # A "reconnect": a new store object (as after a restart) resumes from what is held.
    store = BlobStore(tmp_path / "blobs")
    have = store.partial_size(h)
    assert have == 1_000_000
    assert store.partials() == {h: have}
    with pytest.raises(BlobError):  # a hole
        store.append(h, have + 1, data[have + 1:have + 10], total=len(data))
    with pytest.raises(BlobError):  # a repeat
        store.append(h, 0, data[:10], total=len(data))
    with pytest.raises(BlobError):  # past the announced size
        store.append(h, have, data[have:] + b"x", total=len(data))
    store.append(h, have, data[have:], total=len(data))
    info = store.finish(h, len(data))
    assert info.added
    assert store.has(h)
    assert store.verify(h)
    assert store.partials() == {}
    assert store.path_of(h).read_bytes() == data


def test_corrupt_partial_is_discarded_never_landed(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = b"the real bytes" * 1000
    h = sha(data)
    store.append(h, 0, b"X" * len(data), total=len(data))
    with pytest.raises(BlobMismatch):
        store.finish(h, len(data))
    assert not store.has(h)
    assert store.partial_size(h) == 0


def test_finish_of_a_blob_already_held_drops_the_partial(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    data = b"shared content"
    h = sha(data)
    store.append(h, 0, data[:5], total=len(data))
    store.put_bytes(data)  # the same content arrived another way meanwhile
    info = store.finish(h, len(data))
    assert not info.added
    assert store.partials() == {}
    assert store.verify(h)
    with pytest.raises(BlobError):
        store.append(h, 0, data, total=len(data))


_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from stet.sync.blob_store import BlobStore

    def content(kind, n):  # 1 MiB, distinct for every (kind, n)
        return (kind + n.to_bytes(7, "big")) * (1 << 17)

    store = BlobStore(Path(sys.argv[1]))
    n = 0
    while True:
        n += 1
        # a whole-file put (two 1 MiB chunks)...
        store.put_stream(iter([content(b"P", n), content(b"Q", n)]))
        # ...and a chunked receive of another blob, 256 KiB at a time, landed when complete
        import hashlib
        data = content(b"R", n)
        h = hashlib.sha256(data).hexdigest()
        for off in range(0, len(data), 1 << 18):
            store.append(h, off, data[off:off + (1 << 18)], total=len(data))
        store.finish(h, len(data))
        if n == 2:
            print("running", flush=True)
""")


def _content(kind: bytes, n: int) -> bytes:
    return (kind + n.to_bytes(7, "big")) * (1 << 17)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("phase", ["put", "receive", "any"])
def test_kill_9_mid_write_leaves_the_store_consistent(tmp_path: Path, phase: str) -> None:
    """A writer putting blobs and receiving others chunk by chunk, killed with SIGKILL in
    the middle of a put (a temp file exists), of a receive (a partial exists) or wherever
    it is: every blob under a name holds exactly its bytes, temp files are cleaned at the
    next open, and an interrupted receive is a prefix of its blob that resumes."""
    root = tmp_path / "blobs"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(root)], stdout=subprocess.PIPE, text=True)

    def in_phase() -> bool:
        if len(list(root.glob("[0-9a-f][0-9a-f]/*"))) < 3:
            return False
        if phase == "put":
            return bool(os.listdir(root / "tmp"))
        if phase == "receive":
            return bool(os.listdir(root / "partial"))
        return True

    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "running"
        deadline = time.monotonic() + 60
        while not in_phase() and time.monotonic() < deadline:
            time.sleep(0.0005)  # poll (bounded) for the moment to kill it, and kill it at once
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    store = BlobStore(root)  # reopening cleans the interrupted temp files
    assert os.listdir(store.tmp_dir) == []
    blobs = list(store.all())
    assert len(blobs) >= 3
    for name in blobs:  # every blob under a name holds exactly the bytes it names
        assert store.verify(name), name
    received = {sha(_content(b"R", n)): _content(b"R", n) for n in range(1, 200)}
    for h, have in store.partials().items():  # the interrupted receive (if any)
        data = received[h]
        assert have <= len(data)  # all of it: killed while landing it
        assert (store.partial_dir / f"{h}.partial").read_bytes() == data[:have]
        if have < len(data):
            store.append(h, have, data[have:], total=len(data))
        assert store.finish(h, len(data)).sha256 == h
        assert store.verify(h)
    assert store.partials() == {}


def test_unreferenced_blobs_are_removed_only_when_old_enough(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    kept = store.put_bytes(b"still used").sha256
    old = store.put_bytes(b"nobody's").sha256
    fresh = store.put_bytes(b"just stored").sha256
    past = time.time() - 3600
    for name in (kept, old):
        os.utime(store.path_of(name), (past, past))
    removed = store.remove_unreferenced({kept}, older_than=600, now=time.time())
    assert removed == [old]
    assert store.has(kept)
    assert store.has(fresh)  # unreferenced, but too new to be sure: kept
    assert not store.has(old)
