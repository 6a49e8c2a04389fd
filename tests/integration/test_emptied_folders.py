"""Folders Stet emptied on a peer are removed (issue 14 edges; the rule in
docs/attachments.md), through two real daemons: a folder whose notes and attachments were
all deleted on A, and a folder renamed on A, leave no empty folder behind on B; a folder B's
user made empty stays, a folder still holding an ignored file stays, the vault root stays."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.harness import DaemonProcess, wait_until
from tests.integration.attachment_pairs import paired

FILES = {
    "trip/day1.png": b"\x89PNG\r\n\x1a\n\x00day one",
    "trip/deep/day2.pdf": b"%PDF-1.7\x00day two",
    "old-name/sub/plan.png": b"\x89PNG\r\n\x1a\n\x00plan",
    "keepme/photo.png": b"\x89PNG\r\n\x1a\n\x00keep",
    "last.png": b"\x89PNG\r\n\x1a\n\x00the last file at the root",
}
NOTES = {"trip/notes.md": "# the trip\n", "old-name/sub/plan.md": "# the plan\n", "notes-only/n.md": "# n\n"}


def _folders(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_dir() and not p.name.startswith(".stet")}


def test_folders_a_peers_change_emptied_are_removed_and_no_others(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    files = FILES | {p: t.encode() for p, t in NOTES.items()}
    _a, _b, va, vb = paired(tmp_path, files, daemon_factory)
    (vb / "made-empty-on-b").mkdir()  # B's user made it, empty: never Stet's to remove
    (vb / "keepme" / ".DS_Store").write_bytes(b"ignored, stays on B")
    before = _folders(vb)

    shutil.rmtree(va / "trip")  # notes and attachments, nested
    os.rename(va / "old-name", va / "new-name")  # a folder renamed: its files move
    (va / "keepme" / "photo.png").unlink()
    (va / "notes-only" / "n.md").unlink()
    (va / "last.png").unlink()

    gone = {"trip", "trip/deep", "old-name", "old-name/sub", "notes-only"}
    wait_until(lambda: not (gone & _folders(vb)), timeout=60, what="the emptied folders gone on B")
    wait_until(lambda: (vb / "new-name/sub/plan.png").is_file() and (vb / "new-name/sub/plan.md").is_file()
               and not (vb / "keepme/photo.png").exists() and not (vb / "last.png").exists(),
               timeout=60, what="every change on B")
    assert _folders(vb) == (before - gone) | {"new-name", "new-name/sub"}
    assert (vb / "made-empty-on-b").is_dir()
    assert (vb / "keepme" / ".DS_Store").read_bytes() == b"ignored, stays on B"
    assert vb.is_dir()
