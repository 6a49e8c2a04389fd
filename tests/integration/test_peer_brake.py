"""A mass deletion held by the burst brake is not sent to peers (SPEC §5.6)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.peer_support import linked_pair, tree, wait_same_tree

NOTES = {f"n{i:02}.md": f"# note {i}\n" + "populated text\n" * 5 for i in range(12)}


def _pair(tmp_path: Path, factory: list[DaemonProcess]) -> tuple[DaemonProcess, DaemonProcess, Path, Path]:
    return linked_pair(tmp_path, {name: text.encode() for name, text in NOTES.items()}, factory)


def _held(d: DaemonProcess) -> list[dict[str, object]]:
    out = run_stet(d.home, "held", "--json").stdout
    data = json.loads(out)
    return list(data["held"] if isinstance(data, dict) else data)


def _rm_all_and_wait_held(a: DaemonProcess, va: Path, vb: Path) -> None:
    for name in NOTES:
        (va / name).unlink()
    wait_until(lambda: len(_held(a)) >= 12, timeout=15, what="the brake to hold the 12 deletions")
    # A harmless change sent after the deletions: once B has it, anything sent before it
    # has arrived too. Then wait past the 0.5 s delete delay the peers were given.
    (va / "marker.md").write_text("after the rm\n")
    wait_until(lambda: (vb / "marker.md").exists(), timeout=10, what="the marker on B")
    deadline = time.monotonic() + 2.0
    wait_until(
        lambda: time.monotonic() > deadline, timeout=5, what="the delete delay to pass"
    )  # scenario pause


def test_held_deletions_are_not_sent_and_revert_restores_them(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    a, b, va, vb = _pair(tmp_path, daemon_factory)
    _rm_all_and_wait_held(a, va, vb)
    on_b = tree(vb)
    for name, text in NOTES.items():
        assert on_b.get(name) == text.encode(), f"{name} reached B while held"
    run_stet(a.home, "revert", "--all")
    final = wait_same_tree(va, vb)
    for name, text in NOTES.items():
        assert final[name] == text.encode()


def test_released_deletions_reach_peers(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    a, b, va, vb = _pair(tmp_path, daemon_factory)
    _rm_all_and_wait_held(a, va, vb)
    assert all(name in tree(vb) for name in NOTES)
    run_stet(a.home, "release", "--all")
    final = wait_same_tree(va, vb, timeout=15)
    assert not any(name in final for name in NOTES)
    assert final["marker.md"] == b"after the rm\n"


def test_held_emptyings_are_not_sent_either(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    """Emptying 12 notes (a bad script) is held like deleting them: B keeps every text."""
    a, b, va, vb = _pair(tmp_path, daemon_factory)
    for name in NOTES:
        (va / name).write_bytes(b"")
    wait_until(lambda: len(_held(a)) >= 12, timeout=15, what="the brake to hold the 12 emptyings")
    (va / "marker.md").write_text("after the emptying\n")
    wait_until(lambda: (vb / "marker.md").exists(), timeout=10, what="the marker on B")
    deadline = time.monotonic() + 2.0
    wait_until(lambda: time.monotonic() > deadline, timeout=5, what="the delay to pass")  # scenario pause
    on_b = tree(vb)
    for name, text in NOTES.items():
        assert on_b.get(name) == text.encode(), f"the emptying of {name} reached B while held"
    run_stet(a.home, "revert", "--all")
    final = wait_same_tree(va, vb)
    for name, text in NOTES.items():
        assert final[name] == text.encode()
