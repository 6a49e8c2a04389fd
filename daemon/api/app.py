"""The localhost HTTP API (SPEC §6): aiohttp app, browser safety, auth, JSON errors.

Every request passes, in order: error translation (any ``StetError`` or HTTP error
becomes ``{"error": {"code", "message", ...}}``, never a bare 500 for bad input),
the Host check (421 unless a loopback name with our port: DNS rebinding), the Origin
check (403 unless absent or our own origin; no CORS) and bearer-token auth (401).
"""

from __future__ import annotations

import functools
import hmac
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon.api import (
    attachment_version_routes,
    brake_routes,
    file_routes,
    mcp_server,
    peer_routes,
    snapshot_routes,
    vault_routes,
)
from stet.daemon.api import rest as rest_routes
from stet.daemon.api.keys import (
    DAEMON_KEY as DAEMON_KEY,  # re-exported: the route modules import it from here
)
from stet.daemon.api.keys import PRINCIPAL_KEY, principal_of
from stet.sync.errors import StetError

if TYPE_CHECKING:
    from stet.daemon.ops.host import ApiHost

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def _error(status: int, code: str, message: str, **details: Any) -> web.Response:
    body = {"error": {"code": code, "message": message, **details}}
    return web.json_response(body, status=status)


def _error_answer(request: web.Request, exc: Exception) -> web.StreamResponse:
    """Any error as ``{"error": ...}``: a ``StetError`` with its code, an HTTP error by its
    status, anything else a logged 500 (an HTTP exception below 400 is raised on)."""
    if isinstance(exc, StetError):
        return _error(exc.status, exc.code, exc.message, **exc.details)
    if isinstance(exc, web.HTTPException):
        if exc.status == 413:
            return _error(413, "too_large", "the request body is too large")
        if exc.status == 404:
            return _error(404, "not_found", "no such route")
        if exc.status == 405:
            return _error(405, "bad_request", f"{request.method} is not allowed here")
        if exc.status < 400:
            raise exc
        return _error(exc.status, "bad_request", exc.reason or "bad request")
    logger.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
    return _error(500, "internal", "internal error (see the daemon log)")


def _is_unix(request: web.Request) -> bool:
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    return isinstance(sockname, str)


@functools.lru_cache(maxsize=8)
def _allowed_hosts(port: int) -> frozenset[str]:
    """Made once per port, not on every request (P2: the guard runs on each append)."""
    return frozenset(f"{name}:{port}" for name in LOOPBACK_NAMES)


@functools.lru_cache(maxsize=8)
def _allowed_origins(port: int) -> frozenset[str]:
    return frozenset(f"http://{h}" for h in _allowed_hosts(port))


def make_guard_middleware(daemon: ApiHost, *, own_auth: Collection[Handler] = ()
                          ) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The API's one middleware: the checks below, then the handler, every error answered
    as JSON (one layer, not two: it runs on every request, P2). ``own_auth``: the handlers
    that authenticate the request themselves (the live socket's ``?token=``), given by the
    app's composition (``app/http.py``)."""
    self_authenticating = frozenset(own_auth)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            refused = _refusal(daemon, request, self_authenticating)
            return refused if refused is not None else await handler(request)
        except Exception as exc:
            return _error_answer(request, exc)

    return guard


def _refusal(daemon: ApiHost, request: web.Request, own_auth: frozenset[Handler]) -> web.Response | None:
    """The Host and Origin checks and the bearer token: an answer refusing the request,
    or None to let it through (with its ``PRINCIPAL_KEY`` when it needs one)."""
    port = daemon.api_port
    host = request.headers.get("Host", "").lower()  # host names are case-insensitive
    unix = _is_unix(request)
    if unix:
        if host.rsplit(":", 1)[0] not in LOOPBACK_NAMES and host != "":
            return _error(421, "bad_request", "Host must be a loopback name")
    elif host not in _allowed_hosts(port):
        return _error(421, "bad_request", "Host is not this daemon's loopback address")
    origin = request.headers.get("Origin")
    if origin is not None and origin not in _allowed_origins(port):
        return _error(403, "forbidden", "cross-origin requests are refused")
    # Which route this is, as the router matched it -- never the path read again here: the
    # router keeps a %2F inside its segment, ``request.path`` decodes it, and a guard that
    # split ``request.path`` let "/v1/vaults/x%2Fyjs%2Fy/notes" through as a live socket
    # (issue 33, finding 4). One decoding: the router's.
    route = _route_template(request)
    if request.match_info.handler in own_auth:  # a live socket: ?token= (SPEC §6.13)
        return None
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if not unix and (route == "/ui" or route.startswith("/ui/")):
        return None  # the web page: its session cookie (ui_routes)
    if scheme.lower() != "bearer":  # auth schemes are case-insensitive (RFC 9110 §11.1)
        return _unauthorized("an Authorization: Bearer token is required", None)
    token = credentials.strip()
    # Tokens are ASCII; header bytes that are not UTF-8 arrive as lone surrogates,
    # which would fail (a 500) wherever a token is encoded or hashed.
    principal = daemon.authenticate(token) if token.isascii() else None
    if principal is None:
        return _unauthorized("the token is not valid (revoked or mistyped)", "invalid_token")
    request[PRINCIPAL_KEY] = principal
    return None


def _unauthorized(message: str, error: str | None) -> web.Response:
    """A 401 names its scheme (RFC 9110 §11.6.1; MCP's authorization spec): a client knows
    to send a bearer token (``stet token create``), and which fault it made (RFC 6750 §3)."""
    response = _error(401, "unauthorized", message)
    challenge = 'Bearer realm="stet"'
    if error is not None:
        challenge += f', error="{error}", error_description="{message}"'
    response.headers["WWW-Authenticate"] = challenge
    return response


def _route_template(request: web.Request) -> str:
    """The template of the route the router matched (``/v1/vaults/{vault}/notes``), or ""
    when none did (a 404 or 405 is answered after the checks)."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else ""


def check_token(presented: str, expected: str) -> bool:
    # Header bytes that are not UTF-8 reach us as lone surrogates: "replace" keeps a
    # garbage token a 401 instead of a UnicodeEncodeError (a 500).
    return hmac.compare_digest(presented.encode("utf-8", "replace"), expected.encode())


def _daemon(request: web.Request) -> ApiHost:
    return request.app[DAEMON_KEY]


def _owner_only(request: web.Request) -> None:
    if principal_of(request).kind != "owner":
        raise StetError("only the owner token may do this", code="forbidden")


async def get_status(request: web.Request) -> web.Response:
    _owner_only(request)
    return web.json_response(_daemon(request).status())


async def post_reload(request: web.Request) -> web.Response:
    _owner_only(request)
    opened = await _daemon(request).reload_vaults()
    return web.json_response({"opened": opened})


async def list_vaults(request: web.Request) -> web.Response:
    """Every vault for the owner; an agent token sees only its own vault (name and id)."""
    principal = principal_of(request)
    vaults = _daemon(request).vaults.values()
    if principal.kind == "owner":
        return web.json_response({"vaults": [v.describe() for v in vaults]})
    own = [{"id": v.entry.id, "name": v.entry.name} for v in vaults if v.entry.id == principal.vault_id]
    return web.json_response({"vaults": own})


def register(app: web.Application) -> None:
    """The API's routes (the app itself is composed in ``app/http.py``)."""
    app.router.add_get("/v1/status", get_status)
    app.router.add_post("/v1/reload", post_reload)
    app.router.add_get("/v1/vaults", list_vaults)
    rest_routes.register(app)
    snapshot_routes.register(app)
    file_routes.register(app)
    brake_routes.register(app)
    attachment_version_routes.register(app)
    mcp_server.register(app)
    peer_routes.register(app)
    vault_routes.register(app)
