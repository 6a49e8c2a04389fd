"""The MCP protocol revisions /mcp speaks, and the 2026-07-28 request envelope.

Two eras (docs/decisions/7261-mcp-versions.md):

- the initialize handshake (2024-11-05 … 2025-11-25): ``initialize`` names the version,
  later POSTs repeat it in the ``MCP-Protocol-Version`` header;
- 2026-07-28, stateless: no handshake; every request carries the version and the client's
  capabilities in ``params._meta`` (``io.modelcontextprotocol/protocolVersion``,
  ``…/clientCapabilities``), repeated in the ``MCP-Protocol-Version``, ``Mcp-Method`` and
  (for ``tools/call``, ``prompts/get``, ``resources/read``) ``Mcp-Name`` headers, and every
  result says ``resultType`` (lists and reads also ``ttlMs`` and ``cacheScope``).

The checks below are the SDK's "inbound ladder" (``mcp.shared.inbound``) rewritten in a few
lines of stdlib: importing the SDK's would pull pydantic models of the whole schema into the
daemon (decision 0111).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from aiohttp import web

from stet.daemon import __version__

HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
MODERN_VERSIONS = ("2026-07-28",)
ALL_VERSIONS = (*MODERN_VERSIONS, *HANDSHAKE_VERSIONS)
# JSON-RPC batches: 2025-03-26 added them, 2025-06-18 removed them, 2026-07-28 takes one
# message per POST. 2024-11-05 did not forbid JSON-RPC 2.0's batches. A POST without the
# header is, by the transport spec, 2025-03-26.
BATCH_VERSIONS = frozenset({"2025-03-26", "2024-11-05"})

PROTOCOL_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
RESOURCE_NOT_FOUND = -32002  # 2025-era; retired in 2026-07-28 (there: -32602)
HEADER_MISMATCH, UNSUPPORTED_VERSION = -32020, -32022
# 2026-07-28: the HTTP status of an error answer follows its code.
MODERN_ERROR_STATUS = {PARSE_ERROR: 400, INVALID_REQUEST: 400, INVALID_PARAMS: 400, HEADER_MISMATCH: 400,
                       -32021: 400, UNSUPPORTED_VERSION: 400, METHOD_NOT_FOUND: 404}

# Results a 2026-07-28 client may cache (the schema requires ``ttlMs`` and ``cacheScope``
# on them). Everything is "private": what a token sees depends on its scopes.
STATIC_TTL_MS = 60_000  # tool, prompt and template lists change only with the daemon's version
CACHEABLE = {"server/discover": STATIC_TTL_MS, "tools/list": STATIC_TTL_MS, "prompts/list": STATIC_TTL_MS,
             "resources/templates/list": STATIC_TTL_MS, "resources/list": 0, "resources/read": 0}
SERVER_INFO = {"name": "stet", "version": __version__}


class RpcError(Exception):
    """A JSON-RPC error answer (a protocol error, not a tool's error)."""

    def __init__(self, code: int, message: str, *, data: Any = None, status: int = 200) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.status = status

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def unsupported_version(requested: str) -> RpcError:
    """-32022 naming every version we speak (an SDK client in ``auto`` mode falls back to
    ``initialize`` when the list holds a handshake version)."""
    return RpcError(UNSUPPORTED_VERSION, f"unsupported protocol version {requested!r} (supported: "
                    f"{', '.join(ALL_VERSIONS)})", status=400,
                    data={"supported": list(ALL_VERSIONS), "requested": requested})


_B64_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")


def decode_header_value(value: str | None) -> str | None:
    """A header value, unwrapped from the ``=?base64?…?=`` form clients use for values that
    are not plain ASCII; None for a malformed one (it then matches nothing)."""
    if value is None:
        return None
    m = _B64_SENTINEL.fullmatch(value)
    if m is None:
        return value
    try:
        return base64.b64decode(m.group("payload"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def check_envelope(request: web.Request, message: dict[str, Any], method: str) -> str:
    """The version of a 2026-07-28 request whose envelope and headers agree; else the
    error the spec names (-32602 a missing envelope, -32020 a header that disagrees with
    the body, -32022 a version we do not speak)."""
    for header in (PROTOCOL_HEADER, METHOD_HEADER, NAME_HEADER):
        if len(request.headers.getall(header, [])) > 1:
            raise RpcError(HEADER_MISMATCH, f"the {header} header appears more than once", status=400)
    raw_params = message.get("params")
    params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise RpcError(INVALID_PARAMS, f"a 2026-07-28 request carries params._meta with {VERSION_KEY!r} and "
                       f"{CAPABILITIES_KEY!r}", status=400)
    missing = [k for k in (VERSION_KEY, CAPABILITIES_KEY) if k not in meta]
    if missing:
        raise RpcError(INVALID_PARAMS, f"params._meta lacks {', '.join(missing)}", status=400)
    version = meta[VERSION_KEY]
    if request.headers.get(PROTOCOL_HEADER) != version:
        raise RpcError(HEADER_MISMATCH, f"the {PROTOCOL_HEADER} header does not match params._meta's "
                       "protocol version", status=400)
    if request.headers.get(METHOD_HEADER) != method:
        raise RpcError(HEADER_MISMATCH, f"the {METHOD_HEADER} header does not match the method", status=400)
    name_key = NAME_BEARING.get(method)
    if (name_key is not None and params.get(name_key) is not None
            and decode_header_value(request.headers.get(NAME_HEADER)) != params[name_key]):
        raise RpcError(HEADER_MISMATCH, f"the {NAME_HEADER} header does not match params.{name_key}",
                       status=400)
    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, "the protocol version must be a string", status=400)
    if version not in MODERN_VERSIONS:
        raise unsupported_version(version)
    if not isinstance(meta[CAPABILITIES_KEY], dict):
        raise RpcError(INVALID_PARAMS, f"{CAPABILITIES_KEY} must be an object", status=400)
    return version


def modern_result(method: str, result: dict[str, Any],
                  server_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """A result as 2026-07-28 shapes it: ``resultType``, the server's identity in
    ``_meta``, and for cacheable results a time to live private to this token."""
    shaped = dict(result)
    shaped.setdefault("resultType", "complete")
    meta = shaped.get("_meta")
    shaped["_meta"] = {**(meta if isinstance(meta, dict) else {}),
                       SERVER_INFO_KEY: server_info or dict(SERVER_INFO)}
    ttl = CACHEABLE.get(method)
    if ttl is not None:
        shaped.setdefault("ttlMs", ttl)
        shaped.setdefault("cacheScope", "private")
    return shaped
