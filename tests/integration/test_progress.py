"""Long work shows how far it has got (SPEC §7, issue 7): `stet join` follows the first
sync until the folder holds every note; `stet status` reports a vault still filling up."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import DaemonProcess, run_stet
from tests.integration.peer_support import invite, start_daemon, tree

NOTES = 300


def test_join_returns_once_the_first_sync_is_on_disk(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    for i in range(NOTES):
        folder = va / f"f{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"n{i}.md").write_text(f"# note {i}\n\n" + "text é😀\n" * (i % 40))
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes", "--json")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    out = run_stet(b.home, "join", invite(a), str(vb), timeout=120)
    # No waiting here: the command itself waited for the first sync.
    assert "is in sync" in out.stdout.decode(), out.stdout.decode()
    assert tree(vb) == tree(va)
    vault = b.client.status()["vaults"][0]
    assert vault["indexedNotes"] == NOTES
    assert vault["notes"] == NOTES
    assert vault["pendingWrites"] == 0
    text = run_stet(b.home, "status").stdout.decode()
    assert "Working:" not in text  # in step: nothing shown as ongoing
    assert json.loads(run_stet(b.home, "status", "--json").stdout)["activity"] == []


def test_join_no_wait_returns_at_once(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    (va / "one.md").write_text("one\n")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes", "--json")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    out = run_stet(b.home, "join", invite(a), str(vb), "--no-wait")
    assert "syncing" in out.stdout.decode()
    assert "is in sync" not in out.stdout.decode()
