"""Live editing across paired daemons (SPEC §6.13 with §4): a stock Yjs client's keystrokes
on A reach B's disk byte for byte, and a change made on B (on disk, or by a client of B's)
reaches the client on A, through the write path and the peer link."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, wait_until
from tests.integration.live_support import JsClients, js_clients, live_url, owner_token
from tests.integration.peer_support import linked_pair, wait_same_tree


@pytest.fixture
def js() -> Iterator[JsClients]:
    with js_clients() as clients:
        yield clients


def test_a_live_client_and_a_paired_peer(tmp_path: Path, daemon_factory: list[DaemonProcess],
                                         js: JsClients) -> None:
    a, b, va, vb = linked_pair(tmp_path, {"shared.md": "# Shared 😀\n".encode()}, daemon_factory)

    js.connect("on_a", live_url(a), "shared.md", owner_token(a))
    js.wait_synced("on_a")
    js.type("on_a", -1, "typed on A: 中文 🇫🇷\n")
    expected = "# Shared 😀\ntyped on A: 中文 🇫🇷\n".encode()
    wait_until(lambda: (vb / "shared.md").read_bytes() == expected, timeout=30,
               what="A's client's keystrokes on B's disk")

    with (vb / "shared.md").open("ab") as f:  # a person edits the file on B
        f.write(b"edited on B's disk\n")
    js.wait_text("on_a", "# Shared 😀\ntyped on A: 中文 🇫🇷\nedited on B's disk\n", timeout=30)

    # A client on each side, typing at once: both sides converge, files equal the text.
    js.connect("on_b", live_url(b), "shared.md", owner_token(b))
    js.wait_synced("on_b")
    js.type_together(("on_a", "[A] ", "typed"), ("on_b", "[B] ", "edited"))
    text = js.wait_text("on_a", includes=["[A] typed on A", "[B] edited on B"], timeout=30)
    js.wait_text("on_b", text, timeout=30)
    for folder in (va, vb):  # both files catch up with the clients' text
        wait_until(lambda f=folder: (f / "shared.md").read_bytes() == text.encode(), timeout=30,
                   what=f"{folder.name}/shared.md to hold the clients' text")
    assert wait_same_tree(va, vb, timeout=30)["shared.md"] == text.encode()
