"""TLS 1.3 for the peer port: mutual certificates pinned to paired peers, plus a join path.

Peers authenticate each other by certificate: the paired peers' (self-signed)
certificates are the only trust anchors (``cadata``), and a fingerprint check of
``getpeercert(binary_form=True)`` against the same set backs that up. Python's ssl cannot
accept an *unknown* self-signed certificate, so a device that is not paired yet joins
through its own path on the same port: a client that sends SNI ``join.stet`` gets the join
context, which asks for no certificate; the pairing protocol then proves the invite secret
and the caller checks the server's fingerprint against the invite's device ID.

One thing OpenSSL does not let SNI switch: the *verify mode*. ``SSL_set_SSL_CTX`` (what
``sslobj.context = ...`` calls) swaps the certificate and the trust store but keeps the
verify mode the connection was accepted with, so one port cannot be "CERT_REQUIRED" for
sync and "CERT_NONE" for join at the TLS layer. The listening context (``ServerTLS.context``)
is therefore ``CERT_OPTIONAL`` with no trust anchors of its own, and every connection is
switched by SNI: a certificate that is presented must chain to the switched context's
anchors (the paired peers; none on the join path) or the handshake fails, and a connection
that presents none passes TLS but is refused by ``ServerTLS.middleware`` before any handler
runs unless it came in on the join path. Clients on the join path must present no
certificate (``join_client_context`` loads none).

Session resumption is off on the server (``num_tickets = 0``): a resumed session skips the
certificate check, so a device removed after its first handshake could otherwise come back.
``update_trusted`` affects new connections only: the caller closes live links of a removed
device.

In TLS 1.3 a client whose certificate is rejected learns it only at its first read: treat
a link as unauthenticated until the application-level hello.
"""

from __future__ import annotations

import hmac
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from stet.daemon.identity.device_cert import DeviceIdentity, load_identity_into
from stet.sync.device_ids import device_id_of, fingerprint

logger = logging.getLogger(__name__)

JOIN_SERVER_NAME = "join.stet"
SYNC_SERVER_NAME = "sync.stet"


@dataclass(frozen=True, slots=True)
class PeerTLSInfo:
    """What TLS established about one connection (set on each request by the middleware)."""

    join: bool  # came in on the join path: no certificate, nothing authenticated yet
    cert_der: bytes | None  # the peer's certificate (None on the join path)
    device_id: str | None


PEER_TLS = web.RequestKey("peer_tls_info", PeerTLSInfo)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _tls13(purpose: int) -> ssl.SSLContext:
    ctx = ssl.SSLContext(purpose)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    return ctx


def _trust(ctx: ssl.SSLContext, certs_der: Iterable[bytes]) -> None:
    der = b"".join(certs_der)
    if der:
        ctx.load_verify_locations(cadata=der)


def _server(identity: DeviceIdentity, verify_mode: ssl.VerifyMode) -> ssl.SSLContext:
    ctx = _tls13(ssl.PROTOCOL_TLS_SERVER)
    ctx.num_tickets = 0  # no resumption: it would skip the check of a since-removed peer
    load_identity_into(ctx, identity)
    ctx.verify_mode = verify_mode
    return ctx


def server_context(identity: DeviceIdentity, trusted_certs_der: Iterable[bytes]) -> ssl.SSLContext:
    """Mutual TLS only (no join path): a client must present one of ``trusted_certs_der``."""
    ctx = _server(identity, ssl.CERT_REQUIRED)
    _trust(ctx, trusted_certs_der)
    return ctx


class ServerTLS:
    """The peer port's TLS: mutual TLS for paired peers and, on SNI ``join.stet``, the join path.

    Serve with ``ssl_context=server_tls.context`` and ``middlewares=[server_tls.middleware(...)]``.
    """

    def __init__(self, identity: DeviceIdentity, trusted_certs_der: Iterable[bytes] = ()) -> None:
        self._identity = identity
        self._join = _server(identity, ssl.CERT_NONE)
        self._mutual = server_context(identity, ())
        self._trusted: frozenset[bytes] = frozenset()
        # The listening context: its verify mode is the one every connection keeps (see the
        # module doc); it trusts nothing itself, so a connection the SNI callback did not
        # switch cannot authenticate.
        self.context = _server(identity, ssl.CERT_OPTIONAL)
        self.context.sni_callback = self._on_sni
        self.update_trusted(trusted_certs_der)

    def update_trusted(self, certs_der: Iterable[bytes]) -> None:
        """Trust exactly these peers' certificates from the next handshake on."""
        certs = list(dict.fromkeys(certs_der))
        mutual = server_context(self._identity, certs)
        self._mutual, self._trusted = mutual, frozenset(fingerprint(c) for c in certs)

    def is_trusted(self, cert_der: bytes) -> bool:
        digest = fingerprint(cert_der)
        return any(hmac.compare_digest(digest, t) for t in self._trusted)

    def _on_sni(self, ssl_object: Any, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        ssl_object.context = self._join if server_name == JOIN_SERVER_NAME else self._mutual

    def classify(self, ssl_object: Any) -> PeerTLSInfo | None:
        """What a connection may do: join, be a trusted peer, or nothing (``None``)."""
        if ssl_object is None or ssl_object.version() != "TLSv1.3":
            return None
        if ssl_object.context is self._join:
            return PeerTLSInfo(join=True, cert_der=None, device_id=None)
        cert_der = ssl_object.getpeercert(binary_form=True)
        if cert_der is None or not self.is_trusted(cert_der):
            return None
        return PeerTLSInfo(join=False, cert_der=cert_der, device_id=device_id_of(cert_der))

    def middleware(self, *, join_paths: Iterable[str]) -> Middleware:
        """An aiohttp middleware that drops a connection TLS did not authenticate.

        A trusted peer reaches every route; a join-path connection only ``join_paths``;
        anything else (no certificate, or one removed since the handshake) is aborted
        before a handler runs. Handlers read ``request[PEER_TLS]``.
        """
        allowed = frozenset(join_paths)

        @web.middleware
        async def peer_tls_gate(request: web.Request, handler: Handler) -> web.StreamResponse:
            transport = request.transport
            info = self.classify(None if transport is None else transport.get_extra_info("ssl_object"))
            if info is None or (info.join and request.path not in allowed):
                logger.info("refused a peer connection from %s: %s", request.remote,
                            "join path, route not allowed" if info else "no trusted certificate")
                if transport is not None:
                    transport.abort()
                raise web.HTTPForbidden()
            request[PEER_TLS] = info
            return await handler(request)

        return peer_tls_gate


def client_context(identity: DeviceIdentity, trusted_certs_der: Iterable[bytes]) -> ssl.SSLContext:
    """Connect to a paired peer: present our certificate, accept only ``trusted_certs_der``.

    Use ``server_hostname=SYNC_SERVER_NAME`` (the name is a routing label, not checked).
    """
    ctx = _tls13(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    _trust(ctx, trusted_certs_der)
    load_identity_into(ctx, identity)
    return ctx


def join_client_context(identity: DeviceIdentity | None = None) -> ssl.SSLContext:
    """Connect to the join path (``server_hostname=JOIN_SERVER_NAME``) of an inviter.

    The server's certificate is not verified here: check it yourself (``peer_cert_der``)
    against the invite's device ID before sending anything. No client certificate is
    presented (the join path would reject one), so ``identity`` is unused; the pairing
    protocol carries and proves the joiner's certificate.
    """
    del identity
    ctx = _tls13(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def peer_cert_der(source: Any) -> bytes | None:
    """The peer's DER certificate of a connection, or ``None``.

    ``source``: an ``ssl.SSLObject``/``SSLSocket``, an asyncio transport, an aiohttp
    ``web.Request``, a server or client websocket (``get_extra_info``), or a client response
    while it holds its connection (aiohttp releases it once the body is read: prefer the
    websocket, or a connector trace).
    """
    for _ in range(6):  # unwrap response -> connection -> transport -> ssl object; bounded
        if source is None:
            return None
        if hasattr(source, "getpeercert"):
            cert: bytes | None = source.getpeercert(binary_form=True)
            return cert
        if hasattr(source, "get_extra_info"):
            source = source.get_extra_info("ssl_object")
        elif hasattr(source, "transport"):
            source = source.transport
        elif hasattr(source, "connection"):
            source = source.connection
        else:
            return None
    return None


def peer_device_id(source: Any) -> str | None:
    """The device ID of the peer's certificate (see ``peer_cert_der``), or ``None``."""
    cert = peer_cert_der(source)
    return None if cert is None else device_id_of(cert)
