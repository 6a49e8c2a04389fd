"""``attachment_disk.write_blob`` copies a blob into the vault in the kernel
(``copy_file_range``) and finishes by hand wherever the kernel stops or refuses: the file at
the path is byte-identical either way, with the executable bit asked for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from stet.daemon import attachment_disk
from stet.sync.blob_store import BlobStore

DATA = bytes(range(256)) * 9000 + b"\x00tail"  # ~2.2 MiB, NULs included


def _write(tmp_path: Path, executable: bool = False) -> tuple[Path, bytes]:
    blobs = BlobStore(tmp_path / "blobs")
    info = blobs.put_bytes(DATA)
    root = tmp_path / "vault"
    root.mkdir()
    written = attachment_disk.write_blob(blobs, root, "media/x.bin", info.sha256, executable, None)
    assert written is not None
    return root / "media" / "x.bin", DATA


def test_the_kernel_copy_is_byte_identical(tmp_path: Path) -> None:
    path, data = _write(tmp_path, executable=True)
    assert path.read_bytes() == data
    assert os.stat(path).st_mode & 0o100


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


def test_without_copy_file_range_it_reads_and_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "copy_file_range")
    path, data = _write(tmp_path)
    assert path.read_bytes() == data
