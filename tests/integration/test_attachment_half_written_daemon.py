"""A file still being written is never taken in half-written (SPEC §3.2 "settle before
reading", for attachments: SPEC §3.14), through one real daemon.

The mixed R1 run (``test_convergence_mixed.py``, seed 1804) caught the daemon taking in the
first 10 MiB of a 20 MiB attachment written in place with one ``write``: the file was not
empty when its "created" event was handled, so it was taken for a file moved in whole, and
the writer (throttled mid-write) paused long enough for a read to see a steady size. The
half was recorded, kept as a version and sent to the peers. These tests make the same
window deterministic:

- a file that appears with part of its bytes and no close (a hard link of a file still
  open for writing elsewhere: its writes and its close make no event in the vault) is not
  read while its writer may still write;
- a file whose writer, a chunk at a time, takes longer than ``UNCLOSED_WRITE_S`` (and
  whose writes make no event here) is not read until it has gone quiet.

Negatives are proven by a sentinel file recorded by a later pass (the folder side's passes
run one after another; each walks the folder), never by sleeping.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from pathlib import Path

from stet.daemon.attachments.events import UNCLOSED_WRITE_S
from tests.harness import DaemonProcess
from tests.integration.attachment_support import live, slots, versions, wait_recorded
from tests.integration.bridge_support import start_daemon

CONFIG = "[peer]\ndelete_delay_seconds = 0.5\n"
WRITER_PAUSE_S = 0.2  # the slow writer's pace: a chunk, then a pause (the scenario, not a wait)
MAX_CHUNKS = 200  # the slow writer's bound (40 s at its pace)
MTIME_TICK_S = 0.02  # the kernel stamps mtime from a clock read once a tick (HZ 100-1000)
PIECE = 16 << 10  # what the first test's writer adds at each step


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stored_shas(home: Path) -> set[str]:
    """Every sha the daemon keeps anywhere: the index's slots, the versions, the blob store."""
    shas = {e.sha256 for e in slots(home)} | {str(v["sha256"]) for v in versions(home)}
    blobs = home / "blobs"
    shas |= {p.parent.name + p.name for p in blobs.glob("??/*") if p.is_file()}
    return shas


def test_a_file_that_appears_part_written_is_not_read_until_its_writer_is_done(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    vault, home = tmp_path / "vault", tmp_path / "home"
    vault.mkdir()
    (vault / "note.md").write_text("# notes\n")
    start_daemon(home, vault, daemon_factory, config=CONFIG)
    data = random.Random(7).randbytes(4 << 20)
    half = data[:len(data) // 2]

    outside = tmp_path / "download.part"
    fd = os.open(outside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    recorded = threading.Event()
    at = len(half)

    def trickle() -> None:
        """The writer goes on, a little at a time, until the sentinel is in: the file is
        never whole, nor quiet, while the daemon looks (however long its pass takes)."""
        nonlocal at
        while not recorded.is_set() and at + PIECE < len(data):
            os.write(fd, data[at:at + PIECE])
            at += PIECE
            recorded.wait(WRITER_PAUSE_S)  # the writer's pace (the scenario)

    writer = threading.Thread(target=trickle, daemon=True)
    try:
        os.write(fd, half)
        os.link(outside, vault / "big.bin")  # the vault's "created": half the bytes, no close to come
        writer.start()
        # A later file, recorded by a pass that walks the folder after big.bin appeared.
        (vault / "sentinel.png").write_bytes(b"\x89PNG sentinel")
        try:
            wait_recorded(home, "sentinel.png", sha(b"\x89PNG sentinel"))
        finally:
            recorded.set()
            writer.join(timeout=60)
        assert not writer.is_alive()
        assert "big.bin" not in live(home), "a file its writer may still be writing was taken in"
        os.write(fd, data[at:])
        os.fsync(fd)
    finally:
        os.close(fd)
    # No close is seen in the vault: the file is read once it has been quiet for a while.
    wait_recorded(home, "big.bin", sha(data))
    kept = stored_shas(home)
    assert sha(half) not in kept
    assert not kept & {sha(data[:n]) for n in range(len(half), len(data), PIECE)}, \
        "big.bin's bytes as they stood mid-write were stored"


def test_a_writer_slower_than_the_unclosed_write_window_is_waited_for(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    """The file appears (a hard link) while its writer is still at it, a chunk at a time,
    for longer than ``UNCLOSED_WRITE_S``; no event here tells of its writes: it is read once
    it has gone quiet (its mtime), never in between."""
    vault, home = tmp_path / "vault", tmp_path / "home"
    vault.mkdir()
    (vault / "note.md").write_text("# notes\n")
    start_daemon(home, vault, daemon_factory, config=CONFIG)
    rng = random.Random(11)
    written = bytearray()
    past_window = threading.Event()  # the writer has been at it longer than the window
    stop = threading.Event()
    outside = tmp_path / "slow.part"
    chunks_past_window = int((UNCLOSED_WRITE_S + 0.5) / WRITER_PAUSE_S) + 1
    # (wall time before, after) each write: a writer thread stalled by a loaded machine for
    # the whole window leaves a prefix the rule may read (quiet long enough); no other.
    times: list[tuple[float, float]] = []

    def slow_writer() -> None:
        with open(outside, "xb", buffering=0) as f:
            for i in range(MAX_CHUNKS):
                chunk = rng.randbytes(128 << 10)
                before = time.time()
                f.write(chunk)
                times.append((before, time.time()))
                written.extend(chunk)
                if i == 0:
                    os.link(outside, vault / "slow.bin")  # appears part-written
                if i == chunks_past_window:
                    past_window.set()
                if stop.wait(WRITER_PAUSE_S):  # the writer's pace (the scenario); told to stop: done
                    break
            os.fsync(f.fileno())

    writer = threading.Thread(target=slow_writer, daemon=True)
    writer.start()
    try:
        assert past_window.wait(60), "the slow writer did not get going"
        # A walk while it still writes (its created event's window is over by now).
        (vault / "sentinel.png").write_bytes(b"\x89PNG sentinel")
        wait_recorded(home, "sentinel.png", sha(b"\x89PNG sentinel"))
        early = live(home).get("slow.bin")
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not writer.is_alive()
    whole = bytes(written)
    chunk = 128 << 10
    prefixes = {sha(whole[:n]) for n in range(chunk, len(whole), chunk)}
    # Prefix i (i+1 chunks) may have looked quiet only if the writer's next write ended at
    # least the window after write i began -- less the kernel's mtime clock, which is read
    # once a tick and so stamps a write up to a tick (4-10 ms) before time.time() said it
    # began (seen once on CI: a prefix read at the window's edge).
    gaps = [times[i + 1][1] - times[i][0] for i in range(len(times) - 1)]
    quiet = {sha(whole[:(i + 1) * chunk]) for i, gap in enumerate(gaps)
             if gap >= UNCLOSED_WRITE_S - MTIME_TICK_S}
    taken = None if early is None else next(
        (i for i in range(len(times)) if sha(whole[:(i + 1) * chunk]) == early.sha256), None)
    gap_after = gaps[taken] if taken is not None and taken < len(gaps) else None
    assert early is None or early.sha256 in quiet, (
        f"a file still being written (no event to say so) was taken in: prefix {taken} of "
        f"{len(times)} chunks, the writer's gap after it {gap_after}")
    wait_recorded(home, "slow.bin", sha(whole))
    allowed = quiet | {sha(whole)}
    partial = [v for v in versions(home) if v["path"] == "slow.bin" and v["sha256"] not in allowed]
    assert not partial, f"part-written bytes of slow.bin were kept: {partial}"
    assert not stored_shas(home) & (prefixes - quiet), "slow.bin's bytes as they stood mid-write were stored"
