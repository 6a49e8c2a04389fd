"""`stet status` and the `stet join` bar count attachments (SPEC §3.14, §7): the vault's
attachments (count, bytes), the files skipped over `max_bytes`, the transfers in progress;
the join bar covers attachment bytes and ends only when none is still arriving."""

from __future__ import annotations

from typing import Any

from stet.client.progress_display import MIB, JoinBytes, join_steps
from stet.client.status_view import Extras, render


def _status(transfers: dict[str, int]) -> dict[str, Any]:
    return {
        "running": True, "pid": 1, "apiUrl": "http://127.0.0.1:1", "home": "/h", "version": "x",
        "startedAt": 0, "deviceId": "D" * 52, "transfers": transfers,
        "vaults": [{
            "id": "v1", "name": "notes", "path": "/vault", "notes": 3, "pendingWrites": 0,
            "skipped": [], "otherFiles": 14, "indexedNotes": 3,
            "attachments": {"count": 12, "bytes": 3 * MIB + MIB // 2, "skipped": 2,
                            "tooLarge": [{"path": "big/a.iso", "size": 5 << 30},
                                         {"path": "big/b.iso", "size": 3 << 30}]},
        }],
    }


def test_status_shows_attachments_skipped_files_and_transfers() -> None:
    lines = render(_status({"files": 3, "bytes": 40 * MIB, "done": 12 * MIB}), Extras(held={"notes": 0}))
    text = "\n".join(lines)
    header = next(line for line in lines if line.startswith("VAULT"))
    row = next(line for line in lines if line.startswith("notes"))
    assert "ATTACHMENTS" in header
    assert row[header.index("ATTACHMENTS"):].startswith("12 (3.5 MB)")
    assert row[header.index("SKIPPED"):].split()[0] == "2"
    assert "skipped notes/big/a.iso: 5.0 GB, over [attachments] max_bytes" in text
    assert "Working: receiving 3 attachments from peers: 12.0 MB of 40.0 MB." in text
    assert "2 skipped" in text
    idle = "\n".join(render(_status({"files": 0, "bytes": 0, "done": 0}), Extras(held={"notes": 0})))
    assert "receiving" not in idle


def test_status_of_an_older_daemon_without_attachment_fields() -> None:
    data = _status({"files": 0, "bytes": 0, "done": 0})
    del data["transfers"]
    del data["vaults"][0]["attachments"]
    row = next(line for line in render(data, Extras(held={"notes": 0})) if line.startswith("notes"))
    assert " - " in row


def test_the_join_bar_covers_attachment_bytes() -> None:
    vault = {"notes": 10, "pendingWrites": 0, "indexedNotes": 10}
    done, total, finished = join_steps(vault, {"files": 2, "bytes": 20 * MIB, "done": 5 * MIB})
    assert (done, total, finished) == (15, 30, False)  # notes all there, attachments still arriving
    assert join_steps(vault, {"files": 0, "bytes": 0, "done": 0}) == (10, 10, True)
    half = {"notes": 4, "pendingWrites": 0, "indexedNotes": 10}
    assert join_steps(half, {"files": 1, "bytes": MIB + 1, "done": 0}) == (4, 12, False)


def test_a_join_is_not_finished_while_attachments_are_still_to_place() -> None:
    """Issue 14 edges: `stet join` said "in sync" before a single attachment was asked for
    (the index had arrived, the notes were written, nothing wanted yet)."""
    vault = {"notes": 3, "indexedNotes": 3, "pendingWrites": 0, "attachments": {"toPlace": 4}}
    assert join_steps(vault, {"files": 0, "bytes": 0, "done": 0}) == (3, 3, False)
    vault["attachments"] = {"toPlace": 0}
    assert join_steps(vault, {"files": 0, "bytes": 0, "done": 0}) == (3, 3, True)


def test_join_bytes_keep_the_whole_total_as_blobs_land() -> None:
    since = JoinBytes()
    assert since({"files": 2, "bytes": 3 * MIB, "done": MIB, "landedFiles": 5, "landedBytes": 9 * MIB}) == {
        "files": 2, "bytes": 3 * MIB, "done": MIB, "seen": 2}
    # One blob (2 MiB) landed: it left the wanted set; the total stays, done grows.
    assert since({"files": 1, "bytes": MIB, "done": MIB // 2, "landedFiles": 6, "landedBytes": 11 * MIB}) == {
        "files": 1, "bytes": 3 * MIB, "done": 2 * MIB + MIB // 2, "seen": 2}
    assert since({"files": 0, "bytes": 0, "done": 0, "landedFiles": 7, "landedBytes": 12 * MIB}) == {
        "files": 0, "bytes": 3 * MIB, "done": 3 * MIB, "seen": 2}


def test_join_bytes_count_blobs_landed_before_the_bars_first_look() -> None:
    # The folder side asks for the blobs as soon as the peer's index comes: a few MB may
    # all land before `stet join` first looks. Counted from the look, the bar showed the
    # notes only (CI, tests/integration/test_join_bar_attachments.py: 5/5, not 11/11).
    since = JoinBytes(start=(5, 9 * MIB))  # what had landed before the join was asked for
    assert since({"files": 0, "bytes": 0, "done": 0, "landedFiles": 7, "landedBytes": 12 * MIB}) == {
        "files": 0, "bytes": 3 * MIB, "done": 3 * MIB, "seen": 2}
    assert JoinBytes()({"files": 0, "bytes": 0, "done": 0, "landedFiles": 7, "landedBytes": 12 * MIB}) == {
        "files": 0, "bytes": 0, "done": 0, "seen": 0}  # (without it: nothing to show)
