"""The protocol checked against the reference: the same stock-client script runs against
the y-websocket reference server (``@y/websocket-server``) and against Stet's endpoint,
and must pass against both (SPEC §6.13). A difference in behaviour is a bug in Stet's
side of y-protocols (sync step 1/2, updates, awareness), not in the script."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet
from tests.integration.live_support import ReferenceServer, js_clients, live_url, owner_token

SEED = "seed 😀 中文\n"


@dataclass
class Server:
    kind: str
    url: str
    room: str
    token: str | None


@pytest.fixture(params=["reference", "stet"])
def server(request: pytest.FixtureRequest, tmp_path: Path,
           daemon_factory: list[DaemonProcess]) -> Iterator[Server]:
    if request.param == "reference":
        ref = ReferenceServer()
        try:
            yield Server("reference", ref.url, "room-1", None)
        finally:
            ref.stop()
        return
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "room-1.md").write_text("", encoding="utf-8")
    home = tmp_path / "home"
    run_stet(home, "init", str(vault), "--name", "notes")
    d = DaemonProcess(home)
    daemon_factory.append(d)
    d.start()
    yield Server("stet", live_url(d), "room-1.md", owner_token(d))


def test_the_same_client_script_passes(server: Server) -> None:
    with js_clients() as js:
        for c in ("c1", "c2"):
            js.connect(c, server.url, server.room, server.token)
            assert js.wait_synced(c) == ""
        # An update from one client reaches the other, emoji and CJK intact.
        js.insert("c1", 0, SEED)
        assert js.wait_text("c2", SEED) == SEED
        # Concurrent typing at two places converges, each run of keystrokes in one piece.
        js.type_together(("c1", "left ", "seed"), ("c2", " right", "\n"))
        text = js.wait_text("c1", includes=["left seed", "中文 right\n"])
        assert js.wait_text("c2", text) == "left seed 😀 中文 right\n"
        # A late joiner gets the whole state in sync step 2.
        js.connect("c3", server.url, server.room, server.token)
        assert js.wait_synced("c3") == text
        # Awareness: set, relayed, known to a late joiner, removed when a client leaves.
        js.awareness("c1", {"user": "ann"})
        js.awareness("c2", {"user": "bob"})
        js.wait_peer_awareness("c2", "user", "ann")
        js.wait_peer_awareness("c3", "user", "ann")
        js.wait_peer_awareness("c1", "user", "bob")
        js.connect("c4", server.url, server.room, server.token)
        js.wait_synced("c4")
        js.wait_peer_awareness("c4", "user", "ann")
        js.wait_peer_awareness("c4", "user", "bob")
        js.disconnect("c1")
        js.wait_no_peer_awareness("c2", "user", "ann")
        js.wait_no_peer_awareness("c4", "user", "ann")
        # Deletion across a surrogate pair (UTF-16 units in JS).
        js.delete("c2", text.index("😀"), 2)
        assert js.wait_text("c3", "left seed  中文 right\n") == "left seed  中文 right\n"
