"""The blob channel between real daemons (issue 14, P1 and P9 during a transfer): a second
TLS websocket per link, read in the receiver's blob thread, carries the chunk frames.

B dials A only through a cuttable proxy (A knows no address of B), so B dials A's blob
channel through it too; blobs from B to A have no channel (A has no address to dial) and go
on the main link. Each connection the proxy forwards is seen on its own
(``LinkProxies.connections``): the main link's and the channel's can be cut apart.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path

import aiohttp
import pytest

from stet.daemon.identity.device_identity import load_or_create_identity
from stet.daemon.peers.blobs.channel import CHANNEL_PATH
from stet.daemon.peers.tls import SYNC_SERVER_NAME, client_context
from stet.sync.home import HomeLayout
from tests.harness import DaemonProcess, wait_until
from tests.integration.link_proxy import Connection
from tests.integration.peer_support import linked
from tests.integration.test_attachment_transfer import (  # noqa: F401 (pair_factory: a fixture)
    MiB,
    Pair,
    PairFactory,
    check_resumed,
    file_sha,
    make_file,
    pair_factory,
    partial,
)


def peer_entry(d: DaemonProcess, other: str) -> dict[str, int]:
    for p in d.client.status()["peers"]:
        if p["device"] == other:
            return p  # type: ignore[no-any-return]
    return {}


def channel_of(pair: Pair) -> Connection:
    """B's blob channel through the proxy: the open connection that carried the most bytes."""
    conns = [c for c in pair.proxies.connections(pair.a_id, pair.b_id) if c.open]
    assert len(conns) >= 2, "expected the main link and the blob channel through the proxy"
    return max(conns, key=lambda c: c.bytes)


def test_the_channel_carries_a_blob_and_closes_with_its_link(pair_factory: PairFactory) -> None:  # noqa: F811
    size = 24 * MiB
    pair, shas = pair_factory({"movie.bin": size})
    target = pair.vb / "movie.bin"
    wait_until(lambda: target.exists() and os.stat(target).st_size == size, timeout=180,
               what="the file on B", interval=0.05)
    assert file_sha(target) == shas["movie.bin"]
    on_b = peer_entry(pair.b, pair.a_id)
    on_a = peer_entry(pair.a, pair.b_id)
    # The chunks came on the channel, not on the main link.
    assert on_b["channelBytesReceived"] >= size
    assert on_b["bytesReceived"] - on_b["channelBytesReceived"] < size // 4
    assert on_a["channelBytesSent"] >= size
    # The main link ends (its connection alone is cut): the channel closes with it.
    channel = channel_of(pair)
    main = [c for c in pair.proxies.connections(pair.a_id, pair.b_id) if c.open and c is not channel]
    assert main, "the main link's connection"
    for conn in main:
        pair.proxies.abort(conn)
    wait_until(lambda: not channel.open, timeout=30, what="the blob channel to close with its link")
    wait_until(lambda: linked(pair.a, pair.b) and linked(pair.b, pair.a), timeout=60, what="linked again")


def test_a_cut_of_the_channel_resumes_from_the_partial(pair_factory: PairFactory) -> None:  # noqa: F811
    size = 40 * MiB
    pair, shas = pair_factory({"video.bin": size})
    sha = shas["video.bin"]
    part = partial(pair.b.home, sha)
    wait_until(lambda: part.exists() and os.stat(part).st_size >= 6 * MiB, timeout=180,
               what="B to hold 6 MiB of the file", interval=0.002)
    channel = channel_of(pair)
    wire = pair.proxies.stats.bytes
    pair.proxies.abort(channel)  # the channel alone: its link ends with it, then comes back
    wait_until(lambda: not channel.open, timeout=30, what="the channel cut")
    held = os.stat(part).st_size if part.exists() else size
    assert held < size, "the transfer ended before the cut: nothing to resume"
    assert not (pair.vb / "video.bin").exists()  # never a partial file at the path
    check_resumed(pair, "video.bin", sha, size, wire)


def test_without_a_channel_the_main_link_carries_the_blob(pair_factory: PairFactory) -> None:  # noqa: F811
    pair, _shas = pair_factory({"small.png": 70_000})
    wait_until(lambda: (pair.vb / "small.png").exists(), timeout=120, what="the first file on B")
    size = 12 * MiB
    sha = make_file(pair.vb / "from_b.bin", size, 7)  # A has no address of B: no channel to dial
    target = pair.va / "from_b.bin"
    wait_until(lambda: target.exists() and os.stat(target).st_size == size, timeout=180,
               what="B's file on A", interval=0.05)
    assert file_sha(target) == sha
    on_a = peer_entry(pair.a, pair.b_id)
    assert on_a["channelBytesReceived"] == 0
    assert on_a["bytesReceived"] >= size


def _dial_channel(port: int, ctx: ssl.SSLContext, initiated: int) -> str:
    """Try to open a blob channel at A's peer port; returns how it went."""
    async def go() -> str:
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(
                        f"wss://127.0.0.1:{port}{CHANNEL_PATH}?initiated={initiated}", ssl=ctx,
                        server_hostname=SYNC_SERVER_NAME, timeout=aiohttp.ClientWSTimeout(ws_close=5)):
                    return "opened"
            except aiohttp.WSServerHandshakeError as exc:
                return f"refused {exc.status}"
            except (aiohttp.ClientError, OSError) as exc:
                return f"failed {type(exc).__name__}"

    return asyncio.run(asyncio.wait_for(go(), 60))


def test_a_stranger_or_the_wrong_link_cannot_open_a_channel(pair_factory: PairFactory,  # noqa: F811
                                                            tmp_path: Path) -> None:
    pair, _shas = pair_factory({"small.png": 70_000})
    wait_until(lambda: (pair.vb / "small.png").exists(), timeout=120, what="the file on B")
    port = int(pair.a.client.status()["peerPort"])
    a_cert = load_or_create_identity(HomeLayout(pair.a.home)).cert_der
    # A device that is no member of the vault: its certificate is not trusted.
    stranger = load_or_create_identity(HomeLayout(tmp_path / "stranger"))
    outcome = _dial_channel(port, client_context(stranger, [a_cert]), 1)
    assert outcome.startswith("failed") or outcome == "refused 403", outcome
    # B itself, for a link it does not have (B initiated its link to A: initiated=0 names
    # one A initiated): refused.
    b_identity = load_or_create_identity(HomeLayout(pair.b.home))
    assert _dial_channel(port, client_context(b_identity, [a_cert]), 0) == "refused 409"
    # The link is still up and fine.
    assert linked(pair.a, pair.b)
    assert linked(pair.b, pair.a)


@pytest.mark.parametrize("flag", ["0"])
def test_turned_off_chunks_go_on_the_main_link(pair_factory: PairFactory, flag: str,  # noqa: F811
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STET_BLOB_CHANNEL", flag)  # the daemons inherit it
    size = 12 * MiB
    pair, shas = pair_factory({"clip.bin": size})
    target = pair.vb / "clip.bin"
    wait_until(lambda: target.exists() and os.stat(target).st_size == size, timeout=180,
               what="the file on B", interval=0.05)
    assert file_sha(target) == shas["clip.bin"]
    on_b = peer_entry(pair.b, pair.a_id)
    assert on_b["channelBytesReceived"] == 0
    assert on_b["bytesReceived"] >= size
