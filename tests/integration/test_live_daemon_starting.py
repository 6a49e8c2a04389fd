"""A live client that reaches the daemon while it is still opening its vaults (found by the
mixed R1 run, issue 18 item 4, seed 5).

The API answers from the start (status shows the progress of a long first scan), before
the vaults are open. A live socket that came in then was closed 4404 ("no vault named"),
and a stock y-websocket 3 client takes every 4400-4499 close as final: it never connected
again, and what its user typed after the daemon's restart never reached the note. Now
such a socket is closed 4503 ("try again"), which a stock client retries.

Through a real daemon on a fixed API port (as a user's daemon runs), restarted with a
vault big enough that opening it takes a while; a raw websocket dials the port until it
answers, so it lands in that window; a stock client (Node y-websocket) connected before
the restart must sync again and carry what was typed while the daemon was down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from stet.client.daemon_link import read_owner_token
from tests.harness import DaemonProcess, run_stet
from tests.integration.live_support import JsClients, free_port, js_clients

NOTES = 4000  # enough that opening the vault takes a while on restart


@pytest.fixture
def js() -> Iterator[JsClients]:
    with js_clients() as clients:
        yield clients


async def _first_close(url: str, deadline_s: float) -> tuple[int | None, str]:
    """Dial until the port answers; what the first socket was told."""
    deadline = time.monotonic() + deadline_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=10)) as ws:
                    msg = await ws.receive(timeout=30)
                    if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                        return ws.close_code, str(msg.extra or "")
                    return None, f"a {msg.type.name} message: the vault was already open"
            except (aiohttp.ClientConnectionError, OSError):
                continue  # not listening yet: dial again at once (a dial costs its own time)
    raise AssertionError(f"the daemon's API did not answer within {deadline_s}s")


async def test_a_live_socket_during_startup_is_told_to_try_again_and_a_stock_client_resyncs(
        tmp_path: Path, daemon_factory: list[DaemonProcess], js: JsClients) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    (vault / "bulk").mkdir(parents=True)
    for i in range(NOTES):
        (vault / "bulk" / f"n{i:05d}.md").write_text(f"note {i}\n")
    (vault / "a.md").write_text("hello\n")
    run_stet(home, "init", str(vault), "--name", "notes", "--json", timeout=300)
    port = free_port()
    d = DaemonProcess(home, extra_args=("--api-port", str(port)))
    daemon_factory.append(d)
    d.start(timeout=120)
    token = read_owner_token(d.layout)
    assert token is not None
    js.connect("c1", f"ws://127.0.0.1:{port}/v1/vaults/notes/yjs", "a.md", token)
    assert js.wait_synced("c1", timeout=60) == "hello\n"

    d.kill9()
    js.type("c1", -1, "typed while the daemon was down\n")  # the stock client keeps it
    again = DaemonProcess(home, extra_args=("--api-port", str(port)))
    daemon_factory.append(again)
    starting = threading.Thread(target=again.start, kwargs={"timeout": 120})
    starting.start()
    try:
        url = f"ws://127.0.0.1:{port}/v1/vaults/notes/yjs/a.md?token={token}"
        code, reason = await _first_close(url, 120)
    finally:
        starting.join(180)
    assert code is not None, reason
    assert not 4400 <= code < 4500, (code, reason)  # final for a stock client
    assert code == 4503, (code, reason)
    assert "starting" in reason

    want = "hello\ntyped while the daemon was down\n"
    assert js.wait_text("c1", want, timeout=60) == want
    js.wait_synced("c1", timeout=60)
    assert again.content("a.md") == want
