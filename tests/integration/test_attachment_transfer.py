"""Attachment blobs between real daemons over loopback TLS (SPEC §3.14, issue 14).

A big file on A reaches B byte-identical through the index sync and the blob transfer,
never appearing at its path partly written; a link cut in the middle resumes from what B
holds (the bytes on the wire after the cut are fewer than the file); a receiver killed
with SIGKILL mid-transfer keeps its store intact (the partial is a prefix of the file,
nothing at the path) and completes after a restart, again without starting over.
The 200 MB variant of the cut is marked ``slow``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stet.daemon.identity.device_identity import load_or_create_identity
from stet.sync.home import HomeLayout
from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import wait_recorded
from tests.integration.link_proxy import LinkProxies, port_from_daemon_json
from tests.integration.peer_support import PEER_TEST_CONFIG, join, linked, start_daemon

MiB = 1024 * 1024


def make_file(path: Path, size: int, seed: int) -> str:
    """``size`` pseudo-random bytes (with NULs), written 1 MiB at a time; returns the hash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    block = hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)
    with open(path, "wb") as f:
        for i in range(0, size, MiB):
            data = (i.to_bytes(8, "big") + block)[: min(MiB, size - i)]
            h.update(data)
            f.write(data)
    return h.hexdigest()


def file_sha(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def partial(home: Path, sha: str) -> Path:
    return home / "blobs" / "partial" / f"{sha}.partial"


class PathWatch:
    """Polls a path in a thread: records every size it was seen with while it existed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sizes: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for _ in range(2_000_000):  # bounded; ends on stop
            if self._stop.wait(0.002):
                return
            with contextlib.suppress(FileNotFoundError):
                self.sizes.add(os.stat(self.path).st_size)

    def stop(self) -> set[int]:
        self._stop.set()
        self._thread.join(10)
        # One last look: the caller may have seen the file land before this thread did
        # (it stopped us at once), and the set must then still hold the size it landed with.
        with contextlib.suppress(FileNotFoundError):
            self.sizes.add(os.stat(self.path).st_size)
        return self.sizes


@dataclass
class Pair:
    a: DaemonProcess
    b: DaemonProcess
    va: Path
    vb: Path
    proxies: LinkProxies
    a_id: str
    b_id: str

    def receiver_bytes(self) -> int:
        peers = self.b.client.status()["peers"]
        return sum(int(p["bytesReceived"]) for p in peers)


PairFactory = Callable[[dict[str, int]], tuple[Pair, dict[str, str]]]


@pytest.fixture
def pair_factory(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> Iterator[PairFactory]:
    """A with a vault holding ``files`` (name -> size), B joined through a cuttable proxy
    (B dials A only through it; A knows no address of B)."""
    proxies = LinkProxies()

    def make(files: dict[str, int]) -> tuple[Pair, dict[str, str]]:
        va, vb = tmp_path / "a", tmp_path / "b"
        va.mkdir()
        shas = {name: make_file(va / name, size, seed) for seed, (name, size) in enumerate(files.items())}
        (va / "note.md").write_text("# hello\n")
        ha, hb = tmp_path / "ha", tmp_path / "hb"
        a_id = load_or_create_identity(HomeLayout(ha)).device_id
        b_id = load_or_create_identity(HomeLayout(hb)).device_id
        port = proxies.add(b_id, a_id, port_from_daemon_json(HomeLayout(ha).daemon_json))
        run_stet(ha, "init", str(va), "--name", "notes")
        a = start_daemon(ha, daemon_factory)
        hb.mkdir(parents=True, exist_ok=True)
        (hb / "config.toml").write_text(PEER_TEST_CONFIG.replace(
            "[peer]\n", f'[peer]\naddresses = ["127.0.0.1:{port}"]\n'))
        b = start_daemon(hb, daemon_factory)
        for name, sha in shas.items():
            wait_recorded(ha, name, sha, timeout=120)
        out = run_stet(ha, "invite", "notes", "--address", f"127.0.0.1:{port}", "--json")
        join(b, json.loads(out.stdout)["invite"], vb)
        return Pair(a, b, va, vb, proxies, a_id, b_id), shas

    try:
        yield make
    finally:
        proxies.close()


def test_a_big_file_arrives_whole_and_never_partly(pair_factory: PairFactory) -> None:
    size = 30 * MiB
    pair, shas = pair_factory({"media/big.bin": size, "empty.bin": 0, "small.png": 70_000})
    target = pair.vb / "media" / "big.bin"
    watch = PathWatch(target)
    try:
        wait_until(lambda: target.exists() and os.stat(target).st_size == size, timeout=180,
                   what="the 30 MB file on B", interval=0.05)
    finally:
        seen = watch.stop()
    assert seen == {size}, f"the path was seen with sizes other than the whole file: {sorted(seen)[:5]}"
    assert file_sha(target) == shas["media/big.bin"]
    wait_until(lambda: (pair.vb / "empty.bin").exists() and (pair.vb / "small.png").exists(), timeout=60,
               what="the empty and the small file on B")
    assert (pair.vb / "empty.bin").read_bytes() == b""
    assert (pair.vb / "small.png").read_bytes() == (pair.va / "small.png").read_bytes()
    assert list((pair.b.home / "blobs" / "partial").iterdir()) == []
    # The note came too, and the link's byte count holds about one copy of the blobs.
    wait_until(lambda: (pair.vb / "note.md").exists(), timeout=30, what="the note on B")
    assert pair.receiver_bytes() < size + 5 * MiB


def cut_mid_transfer(pair: Pair, sha: str, size: int, at: int) -> tuple[int, int]:
    """Cut the link once B holds ``at`` bytes; returns (bytes held, proxy bytes at the cut)."""
    part = partial(pair.b.home, sha)
    wait_until(lambda: part.exists() and os.stat(part).st_size >= at, timeout=180,
               what=f"B to hold {at} bytes of the file", interval=0.002)
    pair.proxies.cut(pair.a_id, pair.b_id, 2.0)
    wait_until(lambda: not linked(pair.b, pair.a), timeout=30, what="the link to drop")
    held = os.stat(part).st_size
    assert held < size, "the transfer ended before the cut: nothing to resume"
    return held, pair.proxies.stats.bytes


def check_resumed(pair: Pair, name: str, sha: str, size: int, wire_at_cut: int) -> None:
    target = pair.vb / name
    wait_until(lambda: target.exists() and os.stat(target).st_size == size, timeout=300,
               what="the file on B after the cut", interval=0.05)
    assert file_sha(target) == sha
    after = pair.proxies.stats.bytes - wire_at_cut
    assert after < size, f"{after} bytes went over the link after the cut: the transfer started over"
    assert after > 0  # the rest did go over it (B wrote what was in flight, then asked from there)
    assert not partial(pair.b.home, sha).exists()


def test_a_cut_link_resumes_without_starting_over(pair_factory: PairFactory) -> None:
    size = 40 * MiB
    pair, shas = pair_factory({"video.bin": size})
    sha = shas["video.bin"]
    held, wire = cut_mid_transfer(pair, sha, size, 6 * MiB)
    assert not (pair.vb / "video.bin").exists()  # never a partial file at the path
    assert held > 0
    check_resumed(pair, "video.bin", sha, size, wire)


@pytest.mark.slow
def test_a_cut_in_a_200_mb_transfer_resumes(pair_factory: PairFactory) -> None:
    size = 200 * MiB
    pair, shas = pair_factory({"disk.img": size})
    sha = shas["disk.img"]
    held, wire = cut_mid_transfer(pair, sha, size, 60 * MiB)
    assert not (pair.vb / "disk.img").exists()
    assert held > 0
    check_resumed(pair, "disk.img", sha, size, wire)


def test_kill9_of_the_receiver_keeps_the_store_and_resumes(pair_factory: PairFactory) -> None:
    size = 40 * MiB
    pair, shas = pair_factory({"archive.zip": size})
    sha = shas["archive.zip"]
    part = partial(pair.b.home, sha)
    wait_until(lambda: part.exists() and os.stat(part).st_size >= 6 * MiB, timeout=180,
               what="B to hold part of the file", interval=0.002)
    pair.b.kill9()
    held = os.stat(part).st_size
    assert 0 < held < size
    # The store is intact: the partial is exactly a prefix of the file, no blob under its
    # name, nothing at the path.
    with open(part, "rb") as got, open(pair.va / "archive.zip", "rb") as want:
        for _ in range(held // MiB + 1):
            chunk = got.read(MiB)
            assert chunk == want.read(len(chunk))
    assert not (pair.b.home / "blobs" / sha[:2] / sha[2:]).exists()
    assert not (pair.vb / "archive.zip").exists()
    pair.b.start()
    target = pair.vb / "archive.zip"
    wait_until(lambda: target.exists() and os.stat(target).st_size == size, timeout=300,
               what="the file on B after the restart", interval=0.05)
    assert file_sha(target) == sha
    # The new link brought the rest, not the whole file again.
    assert pair.receiver_bytes() < size
