"""``attachment_disk.write_blob`` copies a blob into the vault past the page cache
(``direct_io.copy_direct``) where the file system allows, else in the kernel
(``copy_file_range``), and finishes by hand wherever the kernel stops or refuses: the file
at the path is byte-identical every way, with the executable bit asked for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from stet.daemon.attachments import disk as attachment_disk
from stet.sync import direct_io
from stet.sync.blob_store import BlobStore

DATA = bytes(range(256)) * 9000 + b"\x00tail"  # ~2.2 MiB, NULs included


@pytest.fixture
def no_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel copy's paths: as where the file system refuses ``O_DIRECT``."""
    monkeypatch.setattr(direct_io, "enabled", False)


def _write(tmp_path: Path, executable: bool = False) -> tuple[Path, bytes]:
    blobs = BlobStore(tmp_path / "blobs")
    info = blobs.put_bytes(DATA)
    root = tmp_path / "vault"
    root.mkdir()
    written = attachment_disk.write_blob(blobs, root, "media/x.bin", info.sha256, executable, None)
    assert written is not None
    return root / "media" / "x.bin", DATA


def test_the_direct_copy_is_byte_identical_and_skips_the_kernel_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = tmp_path / "probe"
    probe.write_bytes(b"x")
    fd = direct_io.open_direct(probe, os.O_RDONLY)
    if fd is None:
        pytest.skip("this file system refuses O_DIRECT (the kernel copy is tested below)")
    os.close(fd)

    def refuse(*_args: Any) -> int:
        raise AssertionError("copy_file_range used although direct I/O works here")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    path, data = _write(tmp_path, executable=True)
    assert path.read_bytes() == data
    assert os.stat(path).st_mode & 0o100


@pytest.mark.usefixtures("no_direct")
def test_the_kernel_copy_is_byte_identical(tmp_path: Path) -> None:
    path, data = _write(tmp_path, executable=True)
    assert path.read_bytes() == data
    assert os.stat(path).st_mode & 0o100


@pytest.mark.usefixtures("no_direct")
@pytest.mark.parametrize("stop_after", [0, 1 << 20])
def test_a_kernel_copy_that_stops_or_fails_is_finished_by_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_after: int
) -> None:
    real = os.copy_file_range
    calls = {"n": 0}

    def flaky(src: int, dst: int, count: int, offset_src: Any = None, offset_dst: Any = None) -> int:
        calls["n"] += 1
        if offset_src is not None and offset_src >= stop_after:
            raise OSError(18, "Invalid cross-device link")  # EXDEV, as across file systems
        return real(src, dst, min(count, stop_after - (offset_src or 0)), offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", flaky)
    path, data = _write(tmp_path)
    assert calls["n"] >= 1
    assert path.read_bytes() == data


@pytest.mark.usefixtures("no_direct")
def test_without_copy_file_range_it_reads_and_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "copy_file_range")
    path, data = _write(tmp_path)
    assert path.read_bytes() == data
