"""The folder side of attachments through one real daemon (SPEC §3.14): the vault's
non-note files are scanned and recorded in the attachment index (in the vault index's
document), renames keep identity, modifications and deletions keep the old bytes as
versions, files over ``attachments.max_bytes`` are skipped, and a restart with nothing
changed records nothing."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tests.harness import DaemonProcess, wait_until
from tests.integration.attachment_support import (
    blob_path,
    live,
    seen_rows,
    slots,
    versions,
    wait_recorded,
)
from tests.integration.bridge_support import restart, start_daemon

# Deletions are recorded once the delete delay has passed (SPEC §5.6): half a second here.
CONFIG = "[attachments]\nmax_bytes = 65536\n[peer]\ndelete_delay_seconds = 0.5\n"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8 + b"\x00" * 100


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_vault(root: Path) -> None:
    (root / "img").mkdir(parents=True)
    (root / "img" / "cat.png").write_bytes(PNG)
    (root / "empty.dat").write_bytes(b"")
    (root / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "huge.bin").write_bytes(b"\x01" * 70_000)  # over max_bytes
    (root / "note.md").write_text("# a note, not an attachment\n")
    (root / ".DS_Store").write_bytes(b"ignored")


def test_attachments_are_scanned_at_start_and_taken_in_on_events(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    vault, home = tmp_path / "vault", tmp_path / "home"
    make_vault(vault)
    start_daemon(home, vault, daemon_factory, config=CONFIG)
    cat = wait_recorded(home, "img/cat.png", sha(PNG))
    empty = wait_recorded(home, "empty.dat", sha(b""))
    script = wait_recorded(home, "run.sh")
    assert (cat.size, empty.size) == (len(PNG), 0)
    assert script.executable
    assert not cat.executable
    assert not empty.executable
    shown = live(home)
    assert "huge.bin" not in shown
    assert "note.md" not in shown
    assert ".DS_Store" not in shown
    # The bytes are in the home's blob store (to serve peers and keep versions).
    assert blob_path(home, sha(PNG)).read_bytes() == PNG
    assert blob_path(home, sha(b"")).read_bytes() == b""
    assert not blob_path(home, sha(b"\x01" * 70_000)).exists()

    # A file added while running: recorded through the watcher's events.
    (vault / "docs").mkdir()
    (vault / "docs" / "paper.pdf").write_bytes(b"%PDF-1.7\x00\x01binary")
    paper = wait_recorded(home, "docs/paper.pdf", sha(b"%PDF-1.7\x00\x01binary"))
    # A folder renamed: its files move without events of their own; each keeps its identity.
    os.rename(vault / "docs", vault / "papers")
    assert wait_recorded(home, "papers/paper.pdf").id == paper.id
    assert "docs/paper.pdf" not in live(home)


def test_rename_keeps_identity_and_replaced_bytes_are_kept(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    vault, home = tmp_path / "vault", tmp_path / "home"
    make_vault(vault)
    start_daemon(home, vault, daemon_factory, config=CONFIG)
    cat = wait_recorded(home, "img/cat.png", sha(PNG))

    (vault / "pets").mkdir()
    os.rename(vault / "img" / "cat.png", vault / "pets" / "cat.png")
    moved = wait_recorded(home, "pets/cat.png")
    assert moved.id == cat.id
    assert moved.sha256 == cat.sha256
    assert "img/cat.png" not in live(home)
    assert versions(home) == []

    edited = PNG + b"\x00more"
    (vault / "pets" / "cat.png").write_bytes(edited)
    after = wait_recorded(home, "pets/cat.png", sha(edited))
    assert after.id == cat.id
    assert after.base == moved.hlc
    assert after.hlc > moved.hlc
    kept = versions(home)
    assert [(v["kind"], v["sha256"], v["path"]) for v in kept] == [
        ("before-overwrite", sha(PNG), "pets/cat.png")]

    os.unlink(vault / "pets" / "cat.png")
    wait_until(lambda: "pets/cat.png" not in live(home), timeout=30, what="the deletion recorded")
    kept = versions(home)
    assert [(v["kind"], v["sha256"]) for v in kept][-1] == ("before-deletion", sha(edited))
    assert blob_path(home, sha(edited)).read_bytes() == edited  # the version's bytes stay
    assert "pets/cat.png" not in seen_rows(home)

    # The executable bit alone is a change too.
    os.chmod(vault / "run.sh", 0o755)
    os.chmod(vault / "empty.dat", 0o755)
    wait_until(lambda: live(home)["empty.dat"].executable, timeout=30, what="the executable bit recorded")


def test_a_restart_with_nothing_changed_records_nothing(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    vault, home = tmp_path / "vault", tmp_path / "home"
    make_vault(vault)
    d = start_daemon(home, vault, daemon_factory, config=CONFIG)
    wait_recorded(home, "img/cat.png")
    wait_recorded(home, "run.sh")
    wait_recorded(home, "empty.dat")
    before = slots(home)
    d.stop()
    restart(home, daemon_factory)
    # A change made after the restart is recorded by a pass after the first one: by then
    # the first pass (over the unchanged files) has recorded whatever it was going to.
    (vault / "sentinel.bin").write_bytes(b"after the restart")
    sentinel = wait_recorded(home, "sentinel.bin")
    after = slots(home)
    assert [e for e in after if e.id != sentinel.id] == before


def test_a_burst_of_files_is_recorded_in_batches(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    """More files at once than one unit of work records (``RECORD_BATCH``): all of them
    are recorded, each with its seen state."""
    vault, home = tmp_path / "vault", tmp_path / "home"
    vault.mkdir()
    start_daemon(home, vault, daemon_factory, config=CONFIG)
    (vault / "unzipped").mkdir()
    for i in range(600):
        (vault / "unzipped" / f"img{i:03}.bin").write_bytes(b"\x00%d" % i)
    wait_until(lambda: len(live(home)) == 600, timeout=90, what="600 files recorded", interval=0.2)
    assert len(seen_rows(home)) == 600
    assert {e.sha256 for e in live(home).values()} == {sha(b"\x00%d" % i) for i in range(600)}
