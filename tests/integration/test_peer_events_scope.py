"""Issue 12, finding 6 (peer half), through two real paired daemons: ``peer.connected`` and
``peer.disconnected`` went to every agent of every vault. Now they reach only the owner's
event stream (SPEC §6.3); an agent's stream carries the vault's note events only.
"""

from __future__ import annotations

from pathlib import Path

from tests.harness import DaemonProcess, run_stet
from tests.integration.agent_support import event_stream, make_token, owner_agent
from tests.integration.peer_support import device_id, invite, join, start_daemon, wait_linked


def test_peer_events_reach_the_owner_only(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    (va / "hello.md").write_text("hello\n")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    agent_token = make_token(a.home, "watcher", read=("**",), write=("**",))
    b = start_daemon(tmp_path / "hb", daemon_factory)
    with event_stream(a, a.client.token) as owner_events, event_stream(a, agent_token) as agent_events:
        join(b, invite(a), vb)
        wait_linked(a, b)
        b_id = device_id(b)
        owner_events.wait_for("peer.connected", timeout=30, device=b_id)
        assert b.stop() == 0
        owner_events.wait_for("peer.disconnected", timeout=30, device=b_id)
        # Something the agent does see, after the peer events: all before it has arrived.
        owner = owner_agent(a)
        owner.ok(owner.create("after.md", "after\n"))
        owner.close()
        agent_events.wait_for("note.changed", timeout=30, path="after.md")
        assert [e.type for e in agent_events.seen if e.type.startswith("peer.")] == []
