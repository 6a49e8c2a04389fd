"""Long work shows how far it has got (SPEC §7, issue 7): `stet join` follows the first
sync until the folder holds every note; `stet status` reports a vault still filling up."""

from __future__ import annotations

from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.peer_support import invite, start_daemon, stored_texts, tree, wait_same_tree

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


def test_kill_9_in_the_middle_of_a_first_sync_loses_nothing(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    """R2 for remote syncs: B is killed while the notes stream in; after a restart it finishes
    the sync, every file complete, none twice, the store whole."""
    va, vb = tmp_path / "a", tmp_path / "b"
    total = 1500
    for i in range(total):
        folder = va / f"f{i % 11}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"n{i}.md").write_text(f"# note {i}\n\n" + "line é😀 of text\n" * (100 + i % 200))
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes", "--json")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    run_stet(b.home, "join", invite(a), str(vb), "--no-wait")

    def arriving() -> dict[str, int] | None:
        v = b.client.status()["vaults"]
        return v[0] if v and v[0]["notes"] > 0 else None

    seen = wait_until(arriving, timeout=60, interval=0.005, what="the first notes to arrive")
    b.kill9()
    # ~6 MB: more than one frame of updates, and files written in turns of 512.
    assert seen["notes"] < total or seen["pendingWrites"] > 0, f"the kill came after the sync: {seen}"
    b.start()
    wait_same_tree(va, vb, timeout=120)
    vault = b.client.status()["vaults"][0]
    assert vault["notes"] == total
    stored = stored_texts(b.home)
    assert len(stored) == total
    assert all(stored[p] == (va / p).read_text() for p in stored)
    assert not list(vb.rglob(".stet-*.tmp"))  # no temp file left behind once settled
