"""Deletes waiting for peers are shown (SPEC §5.6; issue 13: a deletion reached the peer
only after 60 s while both sides said "healthy", with nothing shown as pending)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.bridge_support import start_daemon


def _waiting(daemon: DaemonProcess) -> dict[str, int]:
    (vault,) = daemon.client.status()["vaults"]
    return dict(vault["pendingDeletes"])


def test_status_shows_deletions_waiting_for_peers(tmp_path: Path,
                                                 daemon_factory: list[DaemonProcess]) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    for i in range(3):
        (vault / f"n{i}.md").write_text(f"note {i}\n")
    daemon = start_daemon(home, vault, daemon_factory, config="[peer]\ndelete_delay_seconds = 300\n")
    assert _waiting(daemon) == {"count": 0, "reachPeersInSeconds": 0}
    assert "Waiting:" not in run_stet(home, "status").stdout.decode()

    (vault / "n0.md").unlink()
    (vault / "n1.md").unlink()
    waiting = wait_until(lambda: w if (w := _waiting(daemon))["count"] == 2 else None, timeout=20,
                         what="two deletions waiting")
    assert 200 < waiting["reachPeersInSeconds"] <= 301
    out = run_stet(home, "status").stdout.decode()
    assert "Waiting: 2 deletions in notes reach peers in " in out, out
    assert "delete_delay_seconds" in out

    (vault / "n1.md").write_text("note 1\n")  # back before peers heard of it: not waiting
    wait_until(lambda: _waiting(daemon)["count"] == 1, timeout=20, what="one deletion waiting")
    assert "Waiting: 1 deletion in notes reaches peers in " in run_stet(home, "status").stdout.decode()
