"""Attachment deletions wait ``[peer] delete_delay_seconds`` before peers hear of them, like
notes' (SPEC §5.6, §3.14; issue 14 edges: an attachment deletion left for peers at once),
through real paired daemons: while a deletion waits, `stet status` counts it and the peer
keeps the file; a file put back within the delay sends nothing destructive (the peer's file
is never touched); a deletion left alone reaches the peer once due."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_pairs import paired
from tests.integration.attachment_support import live, versions

FILES = {f"img/p{i}.png": b"\x89PNG\r\n\x1a\n\x00" + bytes([i]) * 3000 + b"\x00end" for i in range(3)}


def _pair(tmp_path: Path, factory: list[DaemonProcess], delay_s: float) -> tuple[DaemonProcess, Path, Path]:
    a, _b, va, vb = paired(tmp_path, FILES, factory, config=f"[peer]\ndelete_delay_seconds = {delay_s}\n")
    return a, va, vb


def _waiting(d: DaemonProcess) -> dict[str, int]:
    (vault,) = d.client.status()["vaults"]
    return dict(vault["pendingDeletes"])


def _wait_waiting(d: DaemonProcess, count: int) -> dict[str, int]:
    got: dict[str, int] = wait_until(lambda: w if (w := _waiting(d))["count"] == count else None, timeout=30,
                                     what=f"{count} deletion(s) waiting")
    return got


def _sentinel(va: Path, vb: Path, name: str) -> None:
    """A change made after the others reaches B: what went before it would have too."""
    (va / name).write_bytes(b"\x00sentinel " + name.encode())
    wait_until(lambda: (vb / name).is_file(), timeout=30, what=f"the sentinel {name} on B")


def test_a_waiting_attachment_deletion_is_shown_and_does_not_reach_the_peer(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    a, va, vb = _pair(tmp_path, daemon_factory, 300)
    (va / "img/p0.png").unlink()
    waiting = _wait_waiting(a, 1)
    assert 200 < waiting["reachPeersInSeconds"] <= 302
    assert "Waiting: 1 deletion in notes reaches peers in " in run_stet(a.home, "status").stdout.decode()
    _sentinel(va, vb, "s1.bin")
    assert (vb / "img/p0.png").read_bytes() == FILES["img/p0.png"]
    assert "img/p0.png" in live(a.home)  # not recorded yet: nothing for peers to hear
    assert not (va / "img/p0.png").exists()  # and not written back here
    # Its bytes are kept as a version at once, as a note's are.
    assert ("img/p0.png", "before-deletion") in {(v["path"], v["kind"]) for v in versions(a.home)}

    # Listed deleted, and `stet restore` puts it back while its deletion waits.
    assert run_stet(a.home, "versions", "img/p0.png", "--json").stdout.count(b'"deleted": true') == 1
    run_stet(a.home, "restore", "img/p0.png")
    assert (va / "img/p0.png").read_bytes() == FILES["img/p0.png"]
    _wait_waiting(a, 0)
    _sentinel(va, vb, "s2.bin")
    assert (vb / "img/p0.png").read_bytes() == FILES["img/p0.png"]


def test_a_file_back_within_the_delay_sends_nothing_and_a_deletion_left_alone_goes_when_due(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    delay = 8.0
    a, va, vb = _pair(tmp_path, daemon_factory, delay)
    inode_on_b = os.stat(vb / "img/p1.png").st_ino
    removed_at = time.time()
    (va / "img/p1.png").unlink()
    (va / "img/p2.png").unlink()
    _wait_waiting(a, 2)
    (va / "img/p1.png").write_bytes(FILES["img/p1.png"])  # `rm` then a copy back
    # p1's deletion no longer waits (on a loaded machine p2's may have gone meanwhile too).
    wait_until(lambda: _waiting(a)["count"] <= 1, timeout=30, what="p1's deletion dropped")

    # The one left alone reaches B once due, with its version kept on both sides.
    wait_until(lambda: not (vb / "img/p2.png").exists(), timeout=delay + 60, what="p2's deletion on B")
    assert time.time() - removed_at >= delay
    assert ("img/p2.png", "before-deletion") in {(v["path"], v["kind"]) for v in versions(a.home)}
    # Past the first one's due time: nothing was sent for it.
    wait_until(lambda: time.time() > removed_at + delay + 1, timeout=delay + 5, what="p1's delay to pass")
    _sentinel(va, vb, "s2.bin")
    assert os.stat(vb / "img/p1.png").st_ino == inode_on_b  # never removed nor rewritten on B
    assert (vb / "img/p1.png").read_bytes() == FILES["img/p1.png"]
    assert not [v for v in versions(tmp_path / "hb") if v["path"] == "img/p1.png"]
    assert "img/p1.png" in live(a.home)
    assert "img/p1.png" in live(tmp_path / "hb")
    assert _waiting(a)["count"] == 0
