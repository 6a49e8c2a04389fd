"""Peer TLS over real loopback sockets: aiohttp websockets, TLS 1.3, pinned certificates."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from stet.daemon.identity.device_identity import DeviceIdentity, generate_identity
from stet.daemon.peers.tls import (
    JOIN_SERVER_NAME,
    PEER_TLS,
    SYNC_SERVER_NAME,
    PeerTLSInfo,
    ServerTLS,
    client_context,
    join_client_context,
    peer_cert_der,
    peer_device_id,
    server_context,
)
from stet.sync.device_ids import cert_matches_device_id, device_id_of

TIMEOUT = aiohttp.ClientTimeout(total=10)


@dataclass
class Server:
    tls: ServerTLS
    port: int
    seen: list[tuple[str, PeerTLSInfo, str | None, bytes | None]] = field(default_factory=list)

    def url(self, path: str = "/sync") -> str:
        return f"wss://127.0.0.1:{self.port}{path}"


@asynccontextmanager
async def serve(identity: DeviceIdentity, trusted: list[bytes]) -> AsyncIterator[Server]:
    tls = ServerTLS(identity, trusted)
    server = Server(tls, 0)

    async def ws_handler(request: web.Request) -> web.WebSocketResponse:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        server.seen.append((request.path, request[PEER_TLS], ssl_object.version() if ssl_object else None,
                            peer_cert_der(request)))
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            await ws.send_str(f"{request.path}:{msg.data}")
        return ws

    app = web.Application(middlewares=[tls.middleware(join_paths={"/join"})])
    app.router.add_get("/sync", ws_handler)
    app.router.add_get("/join", ws_handler)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
        await site.start()
        server.port = runner.addresses[0][1]
        yield server
    finally:
        await runner.cleanup()


async def exchange(url: str, ctx: ssl.SSLContext, server_hostname: str | None = SYNC_SERVER_NAME,
                   ) -> tuple[str, bytes | None, str | None]:
    """One websocket round trip: the reply, the server's certificate and the TLS version."""
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.ws_connect(
        url, ssl=ctx, server_hostname=server_hostname
    ) as ws:
        await ws.send_str("ping")
        reply = await ws.receive_str()
        ssl_object = ws.get_extra_info("ssl_object")
        return reply, peer_cert_der(ws), ssl_object.version()


@pytest.fixture
def ids(tmp_path: Path) -> dict[str, DeviceIdentity]:
    return {name: generate_identity(tmp_path) for name in ("server", "alice", "bob")}


async def test_paired_client_and_server_see_each_others_device_ids(ids: dict[str, DeviceIdentity]) -> None:
    srv, alice = ids["server"], ids["alice"]
    async with serve(srv, [alice.cert_der]) as server:
        reply, server_cert, version = await exchange(server.url(), client_context(alice, [srv.cert_der]))
        assert reply == "/sync:ping"
        assert server_cert is not None
        assert cert_matches_device_id(server_cert, srv.device_id)
        assert version == "TLSv1.3"
        [(path, info, server_version, client_cert)] = server.seen
        assert (path, info.join) == ("/sync", False)
        assert (info.device_id, info.cert_der) == (alice.device_id, alice.cert_der)
        assert client_cert == alice.cert_der
        assert device_id_of(client_cert) == alice.device_id
        assert server_version == "TLSv1.3"
        # No SNI at all (an IP address is never sent as SNI) takes the mutual path too.
        ctx = client_context(alice, [srv.cert_der])
        reply, _, _ = await exchange(server.url(), ctx, server_hostname=None)
        assert reply == "/sync:ping"
        assert len(server.seen) == 2


async def test_several_trusted_peers_at_once(ids: dict[str, DeviceIdentity], tmp_path: Path) -> None:
    srv, alice, bob = ids["server"], ids["alice"], ids["bob"]
    others = [generate_identity(tmp_path) for _ in range(3)]
    trusted = [o.cert_der for o in others[:2]] + [alice.cert_der, bob.cert_der]
    async with serve(srv, trusted) as server:
        for peer in (alice, bob):
            # The client trusts several servers too; only the right one matches.
            ctx = client_context(peer, [others[2].cert_der, srv.cert_der, others[0].cert_der])
            assert (await exchange(server.url(), ctx))[0] == "/sync:ping"
        with pytest.raises(aiohttp.ClientError):
            await exchange(server.url(), client_context(others[2], [srv.cert_der]))
        assert [info.device_id for _, info, _, _ in server.seen] == [alice.device_id, bob.device_id]


async def test_unpaired_client_cannot_exchange_and_no_handler_runs(ids: dict[str, DeviceIdentity]) -> None:
    srv, alice, bob = ids["server"], ids["alice"], ids["bob"]
    async with serve(srv, [alice.cert_der]) as server:
        # An untrusted certificate: in TLS 1.3 the client learns it at its first read.
        with pytest.raises(aiohttp.ClientError):
            await exchange(server.url(), client_context(bob, [srv.cert_der]))
        # No certificate at all on the sync path: TLS lets it through (see peer_tls), the gate does not.
        with pytest.raises(aiohttp.ClientError):
            await exchange(server.url(), join_client_context(), server_hostname=SYNC_SERVER_NAME)
        with pytest.raises(aiohttp.ClientError):
            await exchange(server.url(), join_client_context(), server_hostname=None)
        assert server.seen == []


async def test_client_refuses_a_server_it_has_not_paired_with(ids: dict[str, DeviceIdentity]) -> None:
    srv, alice, bob = ids["server"], ids["alice"], ids["bob"]
    async with serve(srv, [alice.cert_der]) as server:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await exchange(server.url(), client_context(alice, [bob.cert_der]))
        assert server.seen == []


async def test_update_trusted_removes_and_adds_peers_for_new_connections(
    ids: dict[str, DeviceIdentity],
) -> None:
    srv, alice, bob = ids["server"], ids["alice"], ids["bob"]
    async with serve(srv, [alice.cert_der]) as server:
        assert (await exchange(server.url(), client_context(alice, [srv.cert_der])))[0] == "/sync:ping"
        server.tls.update_trusted([bob.cert_der])
        with pytest.raises(aiohttp.ClientError):
            await exchange(server.url(), client_context(alice, [srv.cert_der]))
        assert (await exchange(server.url(), client_context(bob, [srv.cert_der])))[0] == "/sync:ping"
        assert [info.device_id for _, info, _, _ in server.seen] == [alice.device_id, bob.device_id]
        assert server.tls.is_trusted(bob.cert_der)
        assert not server.tls.is_trusted(alice.cert_der)


async def test_join_path_needs_no_client_certificate_and_shows_the_server_certificate(
    ids: dict[str, DeviceIdentity],
) -> None:
    srv, alice, bob = ids["server"], ids["alice"], ids["bob"]
    async with serve(srv, [alice.cert_der]) as server:
        reply, server_cert, version = await exchange(
            server.url("/join"), join_client_context(bob), server_hostname=JOIN_SERVER_NAME
        )
        assert reply == "/join:ping"
        assert version == "TLSv1.3"
        assert server_cert is not None
        assert cert_matches_device_id(server_cert, srv.device_id)
        [(path, info, _, client_cert)] = server.seen
        assert (path, client_cert) == ("/join", None)
        assert info == PeerTLSInfo(join=True, cert_der=None, device_id=None)
        # The join path reaches the join routes only...
        with pytest.raises(aiohttp.ClientError):
            await exchange(server.url("/sync"), join_client_context(), server_hostname=JOIN_SERVER_NAME)
        # ...and rejects a client certificate it cannot verify (a joiner presents none).
        with pytest.raises(aiohttp.ClientError):
            await exchange(server.url("/join"), client_context(bob, [srv.cert_der]),
                           server_hostname=JOIN_SERVER_NAME)
        # A paired peer presenting its certificate on the join path is refused as well.
        with pytest.raises(aiohttp.ClientError):
            await exchange(server.url("/join"), client_context(alice, [srv.cert_der]),
                           server_hostname=JOIN_SERVER_NAME)
        assert len(server.seen) == 1


async def test_only_tls_1_3_is_spoken(ids: dict[str, DeviceIdentity]) -> None:
    srv, alice = ids["server"], ids["alice"]
    for ctx in (server_context(srv, [alice.cert_der]), client_context(alice, [srv.cert_der]),
                join_client_context()):
        assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    async with serve(srv, [alice.cert_der]) as server:
        assert server.tls.context.minimum_version == ssl.TLSVersion.TLSv1_3
        assert server.tls.context.num_tickets == 0  # no session resumption past a removal
        old = client_context(alice, [srv.cert_der])
        old.minimum_version = ssl.TLSVersion.TLSv1_2
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(aiohttp.ClientConnectorError):
            await exchange(server.url(), old)
        assert server.seen == []


async def test_plain_mutual_server_context_requires_a_trusted_certificate(
    ids: dict[str, DeviceIdentity],
) -> None:
    srv, alice, bob = ids["server"], ids["alice"], ids["bob"]
    app = web.Application()
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(peer_device_id(request))
        return web.Response(text="ok")

    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context(srv, [alice.cert_der]))
        await site.start()
        url = f"https://127.0.0.1:{runner.addresses[0][1]}/"
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            async with session.get(url, ssl=client_context(alice, [srv.cert_der])) as resp:
                assert await resp.text() == "ok"
            for ctx in (client_context(bob, [srv.cert_der]), join_client_context()):
                with pytest.raises(aiohttp.ClientError):
                    async with session.get(url, ssl=ctx) as resp:
                        await resp.read()
        assert seen == [alice.device_id]
    finally:
        await runner.cleanup()


def test_peer_cert_der_handles_what_has_no_certificate() -> None:
    assert peer_cert_der(None) is None
    assert peer_cert_der(object()) is None
    assert peer_device_id(None) is None
