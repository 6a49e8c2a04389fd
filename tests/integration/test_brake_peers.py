"""The burst brake with a peer (SPEC §5.6): what the brake holds is not sent to the other
daemon; a revert brings the notes back on both sides without doubling any text."""

from __future__ import annotations

from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.peer_support import linked_pair, wait_same_tree
from tests.integration.versions_support import wait_held


def test_held_emptyings_stay_here_and_a_revert_restores_both_sides(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    notes = {f"n{i:02d}.md": (f"# Note {i} 😀\r\n" + f"paragraph {i} that matters\r\n" * 10).encode()
             for i in range(12)}
    a, b, va, vb = linked_pair(tmp_path, notes, daemon_factory)

    paths = list(notes)
    for path in paths:  # one after the other: the 10th trips the brake
        (va / path).write_bytes(b"")
        a.wait_content(path, "")
    held_rows = wait_held(a.home, 12)
    assert {r["kind"] for r in held_rows} == {"emptied"}
    # A change made after them reaches B; the emptyings held since the brake engaged did not.
    (va / "sentinel.md").write_bytes(b"after the burst\n")
    wait_until(lambda: (vb / "sentinel.md").exists(), what="the sentinel on B")
    for path in paths[9:]:
        assert (vb / path).read_bytes() == notes[path], path

    run_stet(a.home, "revert", "--all")
    final = wait_same_tree(va, vb, timeout=15)
    for path, data in notes.items():
        assert final[path] == data, path  # back, byte for byte, and no text doubled on B
