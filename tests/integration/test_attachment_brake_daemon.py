"""The burst brake holds attachment deletions like notes' (SPEC §3.14, §5.6), through a real
daemon on a real folder: `rm` of 12 attachments is held (the index keeps them, so peers
never hear of it), `stet held` lists them, `stet revert --all` brings them back
byte-identical with their executable bit, `stet release --all` lets the deletions be
recorded -- and reach a peer only then."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_support import live, wait_recorded
from tests.integration.bridge_support import start_daemon
from tests.integration.peer_support import invite, join, wait_linked
from tests.integration.peer_support import start_daemon as peer_daemon
from tests.integration.versions_support import held, stet_json, wait_held


def _seed(root: Path) -> dict[str, bytes]:
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
    files = {f"img/photo-{i:02d}.png": png + bytes([i]) * (500 + i) + b"\x00" for i in range(10)}
    files["docs/paper.pdf"] = b"%PDF-1.7\n\x00\x01\x02" + bytes(range(256)) * 4
    files["tools/build.sh"] = b"#!/bin/sh\necho built\n"
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    os.chmod(root / "tools/build.sh", 0o755)
    (root / "keep.md").write_text("a note that stays\n", encoding="utf-8")
    return files


Seeded = tuple[Path, Path, dict[str, bytes]]


@pytest.fixture
def recorded(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> Seeded:
    """A daemon on a vault of 12 attachments (and a note), each recorded: (home, vault, files)."""
    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    files = _seed(vault)
    start_daemon(home, vault, daemon_factory)
    for path in files:
        wait_recorded(home, path)
    return home, vault, files


def _back(root: Path, files: dict[str, bytes]) -> bool:
    return all((root / p).is_file() and (root / p).read_bytes() == d for p, d in files.items())


def test_rm_of_12_attachments_is_held_and_revert_brings_them_back(recorded: Seeded) -> None:
    home, vault, files = recorded
    subprocess.run(["rm", *[str(vault / p) for p in files]], check=True)

    rows = wait_held(home, 12)
    assert sorted(r["path"] for r in rows) == sorted(files)
    assert {(r["target"], r["kind"], r["source"], r["state"]) for r in rows} == {
        ("attachment", "deleted", "disk", "held")}
    (engaged,) = held(home)["engaged"]
    assert (engaged["source"], engaged["held"]) == ("disk", 12)
    assert set(files) <= set(live(home))  # not recorded: peers never hear of the deletions
    table = run_stet(home, "held").stdout.decode()
    assert "attachment deleted" in table
    assert "tools/build.sh" in table

    out = run_stet(home, "revert", "--all").stdout.decode()
    assert out.count("Reverted ") == 12
    assert _back(vault, files)
    assert os.stat(vault / "tools/build.sh").st_mode & stat.S_IXUSR
    assert not os.stat(vault / "docs/paper.pdf").st_mode & stat.S_IXUSR
    assert held(home) == {"held": [], "engaged": []}
    assert {r["state"] for r in stet_json(home, "held", "--all")["held"]} == {"reverted"}
    assert (vault / "keep.md").read_text(encoding="utf-8") == "a note that stays\n"
    # Still recorded with the same bytes (nothing was lost on the way).
    shown = live(home)
    assert all(p in shown for p in files)


def test_release_lets_held_attachment_deletions_be_recorded(recorded: Seeded) -> None:
    home, vault, files = recorded
    subprocess.run(["rm", *[str(vault / p) for p in files]], check=True)
    wait_held(home, 12)
    out = run_stet(home, "release", "--all").stdout.decode()
    assert "Released 12 held changes." in out
    wait_until(lambda: not (set(files) & set(live(home))), timeout=30,
               what="the released deletions recorded in the attachment index")
    assert held(home) == {"held": [], "engaged": []}
    assert not any((vault / p).exists() for p in files)  # nothing written back


def test_held_deletions_reach_the_peer_only_when_released(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    files = _seed(va)
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = peer_daemon(tmp_path / "ha", daemon_factory)
    for path in files:
        wait_recorded(a.home, path)
    b = peer_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_until(lambda: _back(vb, files), timeout=60, what="the 12 attachments on B")
    assert os.stat(vb / "tools/build.sh").st_mode & stat.S_IXUSR

    subprocess.run(["rm", *[str(va / p) for p in files]], check=True)
    wait_held(a.home, 12)
    # A later change reaches B (the sentinel): the held deletions did not.
    (va / "sentinel.bin").write_bytes(b"\x00after the rm\x00")
    wait_until(lambda: (vb / "sentinel.bin").exists(), timeout=30, what="the sentinel on B")
    assert _back(vb, files)

    run_stet(a.home, "release", "--all")
    wait_until(lambda: not any((vb / p).exists() for p in files), timeout=30,
               what="the released deletions reach B")
    assert (vb / "sentinel.bin").read_bytes() == b"\x00after the rm\x00"


def test_an_overwrite_burst_is_held_and_revert_skips_a_file_edited_since(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    """A tool rewriting every PDF (ransomware, a sync tool gone wrong): held like notes'
    large deletions; revert puts the old bytes back, except where a person saved the
    file again after the hold."""
    home, vault = tmp_path / "home", tmp_path / "vault"
    (vault / "papers").mkdir(parents=True)
    files = {f"papers/p{i:02d}.pdf": b"%PDF-1.7\n\x00" + bytes([i]) * 2000 for i in range(11)}
    for path, data in files.items():
        (vault / path).write_bytes(data)
    start_daemon(home, vault, daemon_factory)
    for path in files:
        wait_recorded(home, path)
    for path in files:
        (vault / path).write_bytes(b"\x00ENCRYPTED\x00" + path.encode())
    rows = wait_held(home, 11)
    assert {(r["target"], r["kind"]) for r in rows} == {("attachment", "overwritten")}
    recorded = live(home)
    assert all(recorded[p].size == len(d) for p, d in files.items())  # the old bytes, still
    (vault / "papers/p03.pdf").write_bytes(b"%PDF-1.7\nsaved again by a person")

    data = stet_json(home, "revert", "--all")
    assert len(data["reverted"]) == 10
    # Skipped and said so, whether the daemon saw the save first (it left held by itself)
    # or the revert found it.
    assert [s["path"] for s in data["skipped"]] == ["papers/p03.pdf"]
    assert (vault / "papers/p03.pdf").read_bytes() == b"%PDF-1.7\nsaved again by a person"
    for path, old in files.items():
        if path != "papers/p03.pdf":
            assert (vault / path).read_bytes() == old
    assert held(home) == {"held": [], "engaged": []}
