"""`stet doctor` and `stet status` against real daemons: a healthy home passes every check;
the status table shows held changes, agent tokens' last use and peers with last seen."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.bridge_support import start_daemon as start_vault_daemon
from tests.integration.peer_support import invite, join, start_daemon, wait_linked
from tests.integration.versions_support import agent_client, wait_held


def _lines(text: str) -> dict[str, str]:
    """Doctor's lines by check name (the word(s) after the symbol, before two spaces)."""
    out = {}
    for line in text.splitlines()[:-1]:
        name, _, rest = line[2:].partition("  ")
        out[name.strip()] = line
    return out


def test_doctor_passes_on_a_healthy_home_and_fails_without_the_daemon(daemon: DaemonProcess) -> None:
    proc = run_stet(daemon.home, "doctor", "--json")
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["daemon"]["status"] == "ok"
    assert "our daemon's" in by_name["API port"]["detail"]
    assert "our daemon's" in by_name["peer port"]["detail"]
    assert by_name["keyring"]["status"] == "warn"  # the tests use the 0600 file fallback
    assert "owner.token" in by_name["keyring"]["detail"]
    assert by_name["vault notes"]["status"] == "ok"
    assert by_name["store notes"]["status"] == "ok"
    assert by_name["store home"]["status"] == "ok"
    assert {c["status"] for c in report["checks"]} <= {"ok", "warn", "skip"}

    text = run_stet(daemon.home, "doctor").stdout.decode()
    assert text.splitlines()[-1].startswith("All checks passed (")  # keyring (and home mode) warnings
    assert _lines(text)["daemon"].startswith("✓")

    assert daemon.stop() == 0
    stopped = run_stet(daemon.home, "doctor", check=False)
    assert stopped.returncode == 1
    line = _lines(stopped.stdout.decode())["daemon"]
    assert line.startswith("✗")
    assert "Fix: `stet start`" in line
    assert "Traceback" not in stopped.stderr.decode()


def test_status_shows_held_changes_and_agent_tokens(tmp_path: Path,
                                                    daemon_factory: list[DaemonProcess]) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    notes = [vault / f"n{i:02d}.md" for i in range(12)]
    for n in notes:
        n.write_text(f"note {n.name}\n")
    daemon = start_vault_daemon(home, vault, daemon_factory)
    agent = agent_client(daemon, "researcher", {"read": ["**"], "append": [], "write": ["agents/**"]})
    agent.read_note("notes", "n00.md")
    run_stet(home, "token", "create", "idle-bot", "--read", "**")
    subprocess.run(["rm", *map(str, notes)], check=True)
    wait_held(home, 12)

    text = run_stet(home, "status").stdout.decode()
    lines = text.splitlines()
    assert lines[1].startswith("Sync: needs attention: 12 changes held by the burst brake (`stet held`)")
    assert "brake engaged for disk" in lines[1]
    header = next(i for i, x in enumerate(lines) if x.startswith("VAULT"))
    assert lines[header].split() == ["VAULT", "NOTES", "ATTACHMENTS", "PENDING", "HELD", "SKIPPED", "OTHER",
                                     "PATH"]
    assert lines[header + 1].split()[:8] == ["notes", "0", "0", "(0", "B)", "0", "12", "0"]
    tokens = {x.split()[0]: x for x in lines if x.startswith(("researcher", "idle-bot"))}
    assert tokens["researcher"].endswith(("now", "s ago"))
    assert tokens["idle-bot"].endswith("never")
    assert "write agents/**" in tokens["researcher"]
    assert json.loads(run_stet(home, "status", "--json").stdout)["vaults"][0]["notes"] == 0

    assert daemon.stop() == 0
    offline = run_stet(home, "status").stdout.decode().splitlines()
    assert offline[0].startswith("Daemon: not running")
    row = offline[offline.index(next(x for x in offline if x.startswith("VAULT"))) + 1]
    assert row.split()[:7] == ["notes", "0", "-", "0", "12", "0", "-"]  # read from the store


def test_status_shows_peers_connected_then_last_seen(tmp_path: Path,
                                                     daemon_factory: list[DaemonProcess]) -> None:
    va = tmp_path / "a"
    va.mkdir()
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), tmp_path / "b")
    wait_linked(a, b)
    b_id = json.loads(b.layout.daemon_json.read_text())["device_id"]

    def peer_row() -> str | None:
        lines = run_stet(a.home, "status").stdout.decode().splitlines()
        return next((x for x in lines if x.startswith(b_id[:7])), None)

    row = peer_row()
    assert row is not None
    assert row.split()[-2:] == ["connected", "now"]
    assert b.stop() == 0
    gone = wait_until(lambda: (r := peer_row()) and "not connected" in r and r, what="B to show as gone")
    assert gone.endswith(("now", "s ago"))
    assert "no peer connected" in run_stet(a.home, "status").stdout.decode().splitlines()[1]
