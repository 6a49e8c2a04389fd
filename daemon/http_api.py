"""The localhost HTTP API (SPEC §6): aiohttp app, browser safety, auth, JSON errors.

Every request passes, in order: error translation (any ``StetError`` or HTTP error
becomes ``{"error": {"code", "message", ...}}``, never a bare 500 for bad input),
the Host check (421 unless a loopback name with our port: DNS rebinding), the Origin
check (403 unless absent or our own origin; no CORS) and bearer-token auth (401).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.sync.errors import StetError
from stet.sync.note_paths import InvalidPath, normalize_note_path
from stet.sync.store import NoteRow

if TYPE_CHECKING:
    from .runtime import Daemon, VaultRuntime

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the owner (CLI) or, later, a named agent token."""

    kind: str  # "owner" | "agent"
    name: str

    @property
    def source(self) -> str:
        return "cli" if self.kind == "owner" else f"agent:{self.name}"


DAEMON_KEY = web.AppKey("daemon", object)
PRINCIPAL_KEY = "stet.principal"


def _error(status: int, code: str, message: str, **details: Any) -> web.Response:
    body = {"error": {"code": code, "message": message, **details}}
    return web.json_response(body, status=status)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except StetError as exc:
        return _error(exc.status, exc.code, exc.message, **exc.details)
    except web.HTTPException as exc:
        if exc.status == 413:
            return _error(413, "too_large", "the request body is too large")
        if exc.status == 404:
            return _error(404, "not_found", "no such route")
        if exc.status == 405:
            return _error(405, "bad_request", f"{request.method} is not allowed here")
        if exc.status < 400:
            raise
        return _error(exc.status, "bad_request", exc.reason or "bad request")
    except Exception:
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return _error(500, "internal", "internal error (see the daemon log)")


def _is_unix(request: web.Request) -> bool:
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    return isinstance(sockname, str)


def _allowed_hosts(port: int) -> set[str]:
    return {f"{name}:{port}" for name in LOOPBACK_NAMES}


def make_guard_middleware(daemon: Daemon) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        port = daemon.api_port
        host = request.headers.get("Host", "").lower()  # host names are case-insensitive
        unix = _is_unix(request)
        if unix:
            if host.rsplit(":", 1)[0] not in LOOPBACK_NAMES and host != "":
                return _error(421, "bad_request", "Host must be a loopback name")
        elif host not in _allowed_hosts(port):
            return _error(421, "bad_request", "Host is not this daemon's loopback address")
        origin = request.headers.get("Origin")
        if origin is not None and origin not in {f"http://{h}" for h in _allowed_hosts(port)}:
            return _error(403, "forbidden", "cross-origin requests are refused")
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":  # auth schemes are case-insensitive (RFC 9110 §11.1)
            return _error(401, "unauthorized", "an Authorization: Bearer token is required")
        principal = daemon.authenticate(credentials.strip())
        if principal is None:
            return _error(401, "unauthorized", "the token is not valid (revoked or mistyped)")
        request[PRINCIPAL_KEY] = principal
        return await handler(request)

    return guard


def check_token(presented: str, expected: str) -> bool:
    # Header bytes that are not UTF-8 reach us as lone surrogates: "replace" keeps a
    # garbage token a 401 instead of a UnicodeEncodeError (a 500).
    return hmac.compare_digest(presented.encode("utf-8", "replace"), expected.encode())


def note_json(row: NoteRow) -> dict[str, Any]:
    return {
        "path": row.path,
        "revision": row.revision,
        "size": row.size,
        "updatedAt": iso(row.updated_at),
        "updatedBy": row.updated_by,
    }


def _daemon(request: web.Request) -> Daemon:
    return request.app[DAEMON_KEY]  # type: ignore[return-value]


def _vault(request: web.Request) -> VaultRuntime:
    return _daemon(request).vault(request.match_info["vault"])


def note_path(raw: str) -> str:
    try:
        return normalize_note_path(raw)
    except InvalidPath as exc:
        raise StetError(f"invalid path {raw!r}: {exc.reason}", code="invalid_path") from None


def _int_param(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    # int() alone would also take " 5", "1_0" and non-ASCII digits.
    if not (raw.isascii() and raw.removeprefix("-").isdigit()):
        raise StetError(f"{name} must be a whole number")
    value = int(raw)
    if not lo <= value <= hi:
        raise StetError(f"{name} must be between {lo} and {hi}")
    return value


async def get_status(request: web.Request) -> web.Response:
    return web.json_response(_daemon(request).status())


async def post_reload(request: web.Request) -> web.Response:
    opened = await _daemon(request).reload_vaults()
    return web.json_response({"opened": opened})


async def list_vaults(request: web.Request) -> web.Response:
    return web.json_response({"vaults": [v.describe() for v in _daemon(request).vaults.values()]})


async def list_notes(request: web.Request) -> web.Response:
    vault = _vault(request)
    prefix = request.query.get("prefix", "")
    limit = _int_param(request, "limit", 1000, 1, 10000)
    cursor = request.query.get("cursor", "")
    rows = vault.store.live_notes(prefix=prefix, after=cursor, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    body: dict[str, Any] = {"notes": [note_json(r) for r in rows]}
    body["nextCursor"] = rows[-1].path if more and rows else None
    return web.json_response(body)


async def read_note(request: web.Request) -> web.Response:
    vault = _vault(request)
    path = note_path(request.match_info["path"])
    row, text = vault.service.read(path)
    return web.json_response({"path": row.path, "content": text, "revision": row.revision})


def build_app(daemon: Daemon, *, client_max_size: int) -> web.Application:
    app = web.Application(
        middlewares=[error_middleware, make_guard_middleware(daemon)],
        client_max_size=client_max_size,
    )
    app[DAEMON_KEY] = daemon
    app.router.add_get("/v1/status", get_status)
    app.router.add_post("/v1/reload", post_reload)
    app.router.add_get("/v1/vaults", list_vaults)
    app.router.add_get("/v1/vaults/{vault}/notes", list_notes)
    app.router.add_get("/v1/vaults/{vault}/notes/{path:.+}", read_note)
    return app
