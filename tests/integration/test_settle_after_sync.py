"""After a first sync the receiving daemon settles (daemon/base/memory.py; issue 18, P7): it
drops the documents the sync loaded and trims its heap -- through two real daemons paired
over loopback TLS; afterwards every note still reads back whole and takes appends."""

from __future__ import annotations

from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until

from .agent_support import owner_agent
from .peer_support import invite, join, start_daemon, wait_linked, wait_same_tree

NOTES = 300  # more than the document cache holds (256)


def test_the_receiving_peer_settles_after_a_first_sync(tmp_path: Path,
                                                      daemon_factory: list[DaemonProcess]) -> None:
    vault_a, vault_b = tmp_path / "a", tmp_path / "b"
    vault_a.mkdir()
    for i in range(NOTES):
        (vault_a / f"n{i:03d}.md").write_text(f"# note {i}\n" + "a line of text\n" * 30)
    run_stet(tmp_path / "home-a", "init", str(vault_a), "--name", "notes", "--json")
    a = start_daemon(tmp_path / "home-a", daemon_factory)
    b = start_daemon(tmp_path / "home-b", daemon_factory)
    join(b, invite(a), vault_b)
    wait_same_tree(vault_a, vault_b, timeout=120)
    wait_linked(a, b, timeout=60)
    log = tmp_path / "home-b" / "logs" / "daemon.log"

    def settled() -> int:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if "settled after a burst" in ln]
        return max((int(ln.split("settled after a burst: ")[1].split()[0]) for ln in lines), default=-1)

    dropped = wait_until(lambda: settled() if settled() > 0 else None, timeout=60,
                         what="B to settle after the first sync")
    assert dropped > 0
    owner = owner_agent(b)
    try:
        for i in (0, NOTES // 2, NOTES - 1):
            expected = f"# note {i}\n" + "a line of text\n" * 30
            assert owner.ok(owner.read(f"n{i:03d}.md"))["content"] == expected
        owner.ok(owner.append("n000.md", "after the settle\n", idempotencyKey="settle-1"))
    finally:
        owner.close()
    wait_until(lambda: (vault_a / "n000.md").read_text().endswith("after the settle\n"), timeout=60,
               what="the append made on B after its settle to reach A's disk")
    wait_same_tree(vault_a, vault_b, timeout=60)
