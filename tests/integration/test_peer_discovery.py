"""mDNS discovery between real daemons, on the loopback interface only (SPEC §4.4)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import DaemonProcess, run_stet
from tests.integration.peer_support import invite, join, peer_port, wait_linked, wait_same_tree

LOOPBACK_MDNS = '[peer]\nmdns_interfaces = ["127.0.0.1"]\n'


def _start(home: Path, factory: list[DaemonProcess]) -> DaemonProcess:
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(LOOPBACK_MDNS)
    d = DaemonProcess(home, mdns=True)
    factory.append(d)
    return d.start()


def test_a_peer_that_moved_to_a_new_port_is_found_again_by_mdns(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    (va / "n.md").write_text("hello\n")
    (tmp_path / "ha").mkdir()
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = _start(tmp_path / "ha", daemon_factory)
    b = _start(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    old_port = peer_port(a)
    assert a.stop() == 0
    # A comes back on another port: B's remembered address is stale; only the mDNS
    # announcement (device ID + port, on 127.0.0.1) can bring them together again.
    a2 = _start(tmp_path / "ha", daemon_factory)
    assert peer_port(a2) != old_port
    wait_linked(a2, b, timeout=30)
    (va / "after.md").write_text("found again\n")
    assert wait_same_tree(va, vb)["after.md"] == b"found again\n"


def test_the_announcement_carries_only_the_device_id_and_port(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    import asyncio

    from stet.daemon.peers.discovery import PeerDiscovery

    va = tmp_path / "secret-vault-name"
    va.mkdir()
    (va / "secret-note-name.md").write_text("secret text\n")
    (tmp_path / "ha").mkdir()
    run_stet(tmp_path / "ha", "init", str(va), "--name", "secret-vault-name")
    a = _start(tmp_path / "ha", daemon_factory)
    seen: dict[str, tuple[str, int]] = {}

    async def listen() -> None:
        found = asyncio.Event()

        def on_found(device: str, host: str, port: int) -> None:
            seen[device] = (host, port)
            found.set()

        from stet.daemon.identity.device_identity import generate_identity

        me = generate_identity().device_id
        async with PeerDiscovery(me, 1, on_found, ["127.0.0.1"]) as disc:
            await asyncio.wait_for(found.wait(), 20)
            infos = list(getattr(disc, "peers", {}).values())
        seen["_infos"] = infos  # type: ignore[assignment]

    asyncio.run(listen())
    import json

    device = json.loads(a.layout.daemon_json.read_text())["device_id"]
    assert device in seen
    assert seen[device][1] == peer_port(a)
    blob = repr(seen)
    assert "secret" not in blob
