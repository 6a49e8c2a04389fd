"""Attachments between two and three real daemons with blob transfers (SPEC §3.14): an image with
NULs, an empty file and an executable script arrive byte-identical on every peer with the
executable bit kept; later changes on any side follow; two concurrent changes of one
attachment get the same winner on all three, the loser's bytes (fetched where missing)
kept as a ``concurrent`` version everywhere, never as a conflict-copy file."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import (
    attachments,
    live,
    seen_rows,
    versions,
    wait_recorded,
    wait_same_attachments,
)
from tests.integration.peer_support import invite, join, start_daemon, wait_linked

IMAGE = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 64 + b"\x00" * 4096
SCRIPT = b"#!/bin/sh\necho synced\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def trio(tmp_path: Path, factory: list[DaemonProcess], n: int = 3) -> list[tuple[DaemonProcess, Path]]:
    va = tmp_path / "va"
    (va / "img").mkdir(parents=True)
    (va / "img" / "photo.png").write_bytes(IMAGE)
    (va / "empty.dat").write_bytes(b"")
    (va / "bin").mkdir()
    (va / "bin" / "run.sh").write_bytes(SCRIPT)
    os.chmod(va / "bin" / "run.sh", 0o755)
    (va / "note.md").write_text("# beside the attachments\n")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", factory)
    out = [(a, va)]
    for name in "bc"[:n - 1]:
        d = start_daemon(tmp_path / f"h{name}", factory)
        join(d, invite(a), tmp_path / f"v{name}")
        wait_linked(a, d)
        out.append((d, tmp_path / f"v{name}"))
    return out


@pytest.mark.parametrize("n", [2, 3])
def test_binary_empty_and_executable_files_are_identical_on_every_member(
        tmp_path: Path, daemon_factory: list[DaemonProcess], n: int) -> None:
    members = trio(tmp_path, daemon_factory, n)
    folders = [v for _, v in members]
    va, vb, vc = folders[0], folders[1], folders[-1]
    final = wait_same_attachments(*folders)
    assert final == {"img/photo.png": (IMAGE, False), "empty.dat": (b"", False), "bin/run.sh": (SCRIPT, True)}
    assert (vc / "note.md").read_text() == "# beside the attachments\n"

    # Changes made on any side follow: a new file on B, a modification on C, a chmod on A.
    (vb / "img" / "from-b.jpg").write_bytes(b"\xff\xd8\xff\x00JFIF from B\x00")
    (vc / "img" / "photo.png").write_bytes(IMAGE[::-1])
    os.chmod(va / "empty.dat", 0o755)
    os.chmod(va / "bin" / "run.sh", 0o644)
    expected = {"img/photo.png": (IMAGE[::-1], False), "empty.dat": (b"", True),
                "bin/run.sh": (SCRIPT, False), "img/from-b.jpg": (b"\xff\xd8\xff\x00JFIF from B\x00", False)}
    wait_until(lambda: all(attachments(v) == expected for v in folders), timeout=60,
               what="every change on every folder", interval=0.05)
    # The old bytes of the modified image are a version on every member.
    for d, _ in members:
        wait_until(lambda h=d.home: any(v["sha256"] == sha(IMAGE) and v["kind"] == "before-overwrite"
                                        for v in versions(h)), timeout=30, what="the replaced image kept")


def test_concurrent_modification_same_winner_on_three_loser_fetched_and_kept(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    (a, va), (b, vb), (c, vc) = trio(tmp_path, daemon_factory)
    wait_same_attachments(va, vb, vc)
    for d, _ in ((a, va), (b, vb), (c, vc)):
        wait_until(lambda h=d.home: len(seen_rows(h)) == 3, timeout=30, what="every file seen")
    x1, x2 = b"A's edit \x00" * 100, b"B's edit \x00\x01" * 90
    assert b.stop() == 0
    (va / "img" / "photo.png").write_bytes(x1)
    wait_recorded(c.home, "img/photo.png", sha(x1))
    (vb / "img" / "photo.png").write_bytes(x2)  # without having seen A's edit; later by the clock
    b2 = start_daemon(b.home, daemon_factory)
    wait_linked(a, b2)
    wait_until(lambda: all(attachments(v).get("img/photo.png") == (x2, False) for v in (va, vc)), timeout=60,
               what="B's change everywhere")
    final = wait_same_attachments(va, vb, vc)
    assert sorted(final) == ["bin/run.sh", "empty.dat", "img/photo.png"]  # no conflict copy
    for home in (a.home, b2.home, c.home):
        assert live(home)["img/photo.png"].sha256 == sha(x2)
        # B never held A's bytes: it fetched them to keep them.
        wait_until(lambda h=home: [v["sha256"] for v in versions(h) if v["kind"] == "concurrent"]
                   == [sha(x1)], timeout=30, what="the loser kept as a concurrent version")
        assert (home / "blobs" / sha(x1)[:2] / sha(x1)[2:]).read_bytes() == x1
