"""``sync/direct_io``: bytes written (and copied) past the page cache land exactly as given,
whatever the offsets and lengths (unaligned heads and tails go through the page cache),
and where ``O_DIRECT`` is refused -- at open or at the first write -- the same bytes go the
ordinary way. Real files in the test's temp folder; where that file system refuses
``O_DIRECT`` (tmpfs) the direct-path assertions are skipped, the bytes still checked."""

from __future__ import annotations

import errno
import hashlib
import os
import random
from pathlib import Path

import pytest

from stet.sync import direct_io
from stet.sync.blob_store import BlobStore, PartialHash

MiB = 1 << 20


def _direct_here(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.write_bytes(b"x")
    fd = direct_io.open_direct(probe, os.O_RDONLY)
    if fd is None:
        return False
    os.close(fd)
    return True


def _write_stream(path: Path, offset: int, pieces: list[bytes]) -> direct_io.DirectWriter:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        direct = direct_io.open_direct(path, os.O_WRONLY)
        try:
            writer = direct_io.DirectWriter(fd, direct, offset)
            for p in pieces:
                writer.write(p)
            writer.close()
            return writer
        finally:
            if direct is not None:
                os.close(direct)
    finally:
        os.close(fd)


@pytest.mark.parametrize(("offset", "sizes"), [
    (0, [MiB] * 9),  # aligned, crossing the buffer twice
    (0, [MiB] * 3 + [12345]),  # an unaligned tail (the end of a blob)
    (4096 * 3 + 17, [1000, 5000, 3 * MiB + 1]),  # an unaligned head (a resume from an odd size)
    (0, [1, 4095, 4096, 7, direct_io.BUFFER + 3]),
    (0, [100]),  # smaller than a block
])
def test_any_stream_lands_byte_for_byte(tmp_path: Path, offset: int, sizes: list[int]) -> None:
    rng = random.Random(f"{offset}-{sizes}")
    head = rng.randbytes(offset)
    pieces = [rng.randbytes(n) for n in sizes]
    path = tmp_path / "f.bin"
    path.write_bytes(head)
    writer = _write_stream(path, offset, pieces)
    assert path.read_bytes() == head + b"".join(pieces)
    assert writer.offset == offset + sum(sizes)
    if _direct_here(tmp_path) and sum(sizes) >= 2 * direct_io.ALIGN:
        assert writer.direct_bytes > 0
        assert writer.direct_bytes % direct_io.ALIGN == 0


def test_turned_off_it_writes_the_same_bytes_the_ordinary_way(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct_io, "enabled", False)
    data = random.Random(1).randbytes(3 * MiB + 5)
    path = tmp_path / "f.bin"
    writer = _write_stream(path, 0, [data])
    assert path.read_bytes() == data
    assert writer.direct_bytes == 0


def test_a_direct_write_refused_falls_back_without_losing_a_byte(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if not _direct_here(tmp_path):
        pytest.skip("no O_DIRECT on this file system: nothing to refuse")
    real = os.pwrite
    direct_fds: set[int] = set()
    real_open = direct_io.open_direct

    def opening(path: Path | str, flags: int) -> int | None:
        fd = real_open(path, flags)
        if fd is not None:
            direct_fds.add(fd)
        return fd

    def pwrite(fd: int, data: object, offset: int) -> int:
        if fd in direct_fds:
            raise OSError(errno.EINVAL, "Invalid argument")  # as a file system with other rules
        return real(fd, data, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(direct_io, "open_direct", opening)
    monkeypatch.setattr(os, "pwrite", pwrite)
    data = random.Random(2).randbytes(6 * MiB + 99)
    path = tmp_path / "f.bin"
    writer = _write_stream(path, 0, [data[:MiB], data[MiB:]])
    assert path.read_bytes() == data
    assert writer.direct_bytes == 0


@pytest.mark.parametrize("size", [0, 1, 4096, 5 * MiB + 3, direct_io.BUFFER, 2 * direct_io.BUFFER])
def test_copy_direct_copies_every_byte(tmp_path: Path, size: int) -> None:
    data = random.Random(size).randbytes(size)
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    src.write_bytes(data)
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        copied = direct_io.copy_direct(src, fd, dst)
    finally:
        os.close(fd)
    if copied is None:
        assert not _direct_here(tmp_path)
        return
    assert copied == size
    assert dst.read_bytes() == data


def test_copy_direct_turned_off_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct_io, "enabled", False)
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    src.write_bytes(b"x" * 10000)
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        assert direct_io.copy_direct(src, fd, dst) is None
    finally:
        os.close(fd)
    assert dst.read_bytes() == b""


@pytest.mark.parametrize("direct", [True, False])
def test_a_partial_received_in_runs_and_resumed_at_an_odd_size_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    monkeypatch.setattr(direct_io, "enabled", direct)
    data = random.Random(3).randbytes(7 * MiB + 4321)
    sha = hashlib.sha256(data).hexdigest()
    blobs = BlobStore(tmp_path / "blobs")
    hashing = PartialHash(sha)
    end = blobs.append_run(sha, 0, [data[:MiB], data[MiB:2 * MiB]], total=len(data), hashing=hashing)
    assert end == 2 * MiB
    odd = 2 * MiB + 777  # a sender with other chunk sizes
    end = blobs.append_run(sha, end, [data[2 * MiB:odd]], total=len(data), hashing=hashing)
    # A restart: a new hash catches up from the file, then the rest.
    hashing = PartialHash(sha)
    end = blobs.append_run(sha, end, [data[odd:odd + MiB], data[odd + MiB:]], total=len(data),
                           hashing=hashing)
    assert end == len(data) == blobs.partial_size(sha)
    info = blobs.finish(sha, len(data), digest=hashing.hexdigest())
    assert info.added
    with blobs.open(sha) as f:
        assert f.read() == data
    assert (blobs.direct_bytes > 0) == (direct and _direct_here(tmp_path))


def test_a_run_that_does_not_continue_the_partial_is_refused(tmp_path: Path) -> None:
    data = random.Random(4).randbytes(2 * MiB)
    sha = hashlib.sha256(data).hexdigest()
    blobs = BlobStore(tmp_path / "blobs")
    blobs.append_run(sha, 0, [data[:MiB]], total=len(data), hashing=PartialHash(sha))
    with pytest.raises(Exception, match="resume from"):
        blobs.append_run(sha, 0, [data[:MiB]], total=len(data), hashing=PartialHash(sha))
    with pytest.raises(Exception, match="past the announced size"):
        blobs.append_run(sha, MiB, [data[MiB:] + b"x"], total=len(data), hashing=PartialHash(sha))
    assert blobs.partial_size(sha) == MiB


@pytest.mark.parametrize("aligned", [True, False])
def test_a_piece_at_an_aligned_address_is_written_from_where_it_is(tmp_path: Path, aligned: bool) -> None:
    """Bytes already page-aligned in memory (a received chunk in a buffer laid out for it)
    go to the disk at once, not gathered in the writer's buffer first; others are gathered
    (and written at its close). Either way the file holds them byte for byte."""
    if not _direct_here(tmp_path):
        pytest.skip("no O_DIRECT on this file system")
    room = bytearray(2 * MiB)
    at = direct_io.address(memoryview(room))
    assert at is not None
    start = -at % direct_io.ALIGN + (0 if aligned else 8)
    view = memoryview(room)[start:start + 64 * 1024 + 100]
    data = random.Random(7).randbytes(len(view))
    view[:] = data
    path = tmp_path / "partial"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    direct = direct_io.open_direct(path, os.O_WRONLY)
    assert direct is not None
    try:
        writer = direct_io.DirectWriter(fd, direct, 0)
        writer.write(view)
        assert writer.direct_bytes == (64 * 1024 if aligned else 0)  # before the close
        writer.close()
        assert writer.direct_bytes == 64 * 1024
    finally:
        os.close(direct)
        os.close(fd)
    assert path.read_bytes() == data
    assert direct_io.address(memoryview(data)) is None  # read-only bytes: never in place
