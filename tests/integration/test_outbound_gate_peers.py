"""What peers may not hear yet goes through one outbound gate (issue 11), on real paired
daemons: a local delete reaches the peer once ``[peer] delete_delay_seconds`` has passed,
never before; an emptying the brake held reaches it when a person releases it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.peer_support import linked_pair, wait_same_tree

DELAY_S = 2.0
NOTES = {f"n{i:02}.md": f"# note {i}\n" + "populated text\n" * 5 for i in range(12)}


def _pair(tmp_path: Path, factory: list[DaemonProcess]) -> tuple[DaemonProcess, Path, Path]:
    a, _b, va, vb = linked_pair(tmp_path, {name: text.encode() for name, text in NOTES.items()}, factory,
                                config=f"[peer]\ndelete_delay_seconds = {DELAY_S}\n")
    return a, va, vb


def test_a_delete_reaches_the_peer_when_its_delay_has_passed_not_before(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    a, va, vb = _pair(tmp_path, daemon_factory)
    removed_at = time.time()
    (va / "n00.md").unlink()
    # Sent after the delete: once B has it, the delete would have arrived too had it gone.
    (va / "marker.md").write_text("after the rm\n")
    wait_until(lambda: (vb / "marker.md").exists(), timeout=15, what="the marker on B")
    if time.time() < removed_at + DELAY_S:  # (a loaded machine may be slower than the delay)
        assert (vb / "n00.md").exists(), "the delete reached B before its delay"
    wait_until(lambda: not (vb / "n00.md").exists(), timeout=30, what="the delete on B")
    assert time.time() >= removed_at + DELAY_S  # not before its time
    status = a.client.status()
    pending = [v["pendingDeletes"] for v in status["vaults"]]
    assert pending == [{"count": 0, "reachPeersInSeconds": 0}]


def test_a_held_emptying_reaches_the_peer_when_released(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    a, va, vb = _pair(tmp_path, daemon_factory)
    for name in NOTES:
        (va / name).write_bytes(b"")
    wait_until(lambda: _held_count(a) >= 12, timeout=20, what="the brake to hold the 12 emptyings")
    (va / "marker.md").write_text("after the emptying\n")
    wait_until(lambda: (vb / "marker.md").exists(), timeout=15, what="the marker on B")
    # Past the delay: a held change stays at the gate however long it has waited.
    deadline = time.monotonic() + DELAY_S + 0.5
    wait_until(lambda: time.monotonic() > deadline, timeout=10, what="the delay to pass")  # scenario pause
    assert all((vb / name).read_text() == text for name, text in NOTES.items())
    run_stet(a.home, "release", "--all")
    final = wait_same_tree(va, vb, timeout=30)
    assert all(final[name] == b"" for name in NOTES)


def _held_count(d: DaemonProcess) -> int:
    data = json.loads(run_stet(d.home, "held", "--json").stdout)
    return len(data["held"] if isinstance(data, dict) else data)
