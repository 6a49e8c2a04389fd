"""MCP at ``/mcp``: Streamable HTTP, JSON responses, on the daemon's aiohttp app.

A small JSON-RPC handler instead of the ``mcp`` SDK's server (the SDK serves only as a
Starlette ASGI app; docs/decisions/0111-mcp-a-small-json-only-handler.md and
docs/decisions/5307-mcp-versions.md say why). It speaks two eras of the protocol:

- the initialize-handshake revisions (2024-11-05 … 2025-11-25): Claude Code, the Inspector
  and the SDK client in ``mode="legacy"``;
- the stateless revision 2026-07-28: no handshake, every request carries its protocol
  version and client capabilities in ``params._meta`` (mirrored by the
  ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` headers, which must agree),
  ``server/discover`` advertises what we serve, every result says ``resultType`` and our
  ``serverInfo``, listings carry ``ttlMs``/``cacheScope``, and ``subscriptions/listen`` is
  the one request answered with a stream (SSE) -- change notifications (mcp_resources).

Each other POST carries one JSON-RPC message and gets one ``application/json`` answer.
Batches only where the negotiated revision has them (2024-11-05 and 2025-03-26; 2025-06-18
removed them). No session: every request is authenticated by its own bearer token (the
app's middlewares run first: Host, Origin, auth; a 401 says ``WWW-Authenticate: Bearer``),
never by an ``Mcp-Session-Id``, and none is issued. The vault is the agent token's own, or
for the owner token ``?vault=NAME`` on the URL (optional with one vault).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon import __version__
from stet.daemon.api import mcp_prompts, mcp_resources
from stet.daemon.api.json_stream import JsonOf, dumps, encode, has_big_string, json_answer
from stet.daemon.api.keys import DAEMON_KEY, principal_of
from stet.daemon.api.mcp_tools import TOOLS, TOOLS_BY_NAME, check_arguments
from stet.daemon.notes.group_commit import group_for
from stet.daemon.ops.notes import NoteOperations, Principal
from stet.sync.errors import StetError
from stet.sync.json_input import parse_json

if TYPE_CHECKING:
    from stet.daemon.ops.host import ApiHost

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
MODERN_VERSIONS = ("2026-07-28",)  # stateless: version and capabilities in each request's _meta
HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
PROTOCOL_VERSIONS = (*MODERN_VERSIONS, *HANDSHAKE_VERSIONS)  # every version served, newest first
# JSON-RPC batches: 2025-03-26 named them, 2025-06-18 removed them. A request without the
# version header is 2025-03-26 (the transport spec's default), so it may batch.
BATCH_VERSIONS = ("2025-03-26", "2024-11-05")
PROTOCOL_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
NAME_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}  # → Mcp-Name
CACHEABLE = frozenset({"server/discover", "tools/list", "resources/list", "resources/templates/list",
                       "resources/read", "prompts/list"})

MAX_BATCH = 32  # messages in one batch (SPEC §6.3)
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # what one POST may make the daemon build
SMALL_ANSWER_BYTES = 1024 * 1024  # headroom: past this, calls are refused before they run
YIELD_S = 0.002  # between a batch's messages: other clients' requests run meanwhile

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION = -32020, -32022
# 2026-07-28: the HTTP status of an error answer follows its code.
MODERN_ERROR_STATUS = {PARSE_ERROR: 400, INVALID_REQUEST: 400, INVALID_PARAMS: 400, HEADER_MISMATCH: 400,
                       UNSUPPORTED_PROTOCOL_VERSION: 400, METHOD_NOT_FOUND: 404}

INSTRUCTIONS = (
    "Markdown notes of the Stet vault {vault!r}, shared with people and other agents who may be "
    "writing at the same time. To add an entry (log, finding, result) use append_note with an "
    "idempotencyKey. For a small change use edit_note with exact, unique oldText anchors. To rewrite a "
    "note, read it first and pass the revision you read as baseRevision (others' changes since are "
    "kept) or expectedRevision (refused if anyone changed it). Errors come back as "
    '{{"error": {{"code", "message", ...}}}}: read the note again and retry with what you learn.'
)


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


def _rpc_error_response(exc: RpcError) -> web.Response:
    """A fault found before any message id could be read."""
    return web.json_response({"jsonrpc": "2.0", "id": None, "error": exc.to_json()}, status=exc.status)


def _daemon(request: web.Request) -> ApiHost:
    return request.app[DAEMON_KEY]


class McpRequest:
    """One POST: who calls (the principal the auth middleware found) and which vault."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.daemon = _daemon(request)
        self.principal: Principal = principal_of(request)
        self.modern: str | None = None  # the 2026-07-28-era version of the message in hand

    def vault_ref(self) -> str:
        ref = self.request.query.get("vault")
        if ref:
            return ref
        if self.principal.vault_id is not None:
            return self.principal.vault_id
        vaults = list(self.daemon.vaults.values())
        if len(vaults) == 1:
            return vaults[0].entry.id
        if not vaults:
            raise StetError("this daemon serves no vault yet: run `stet init PATH`", code="not_found")
        names = ", ".join(sorted(v.entry.name for v in vaults))
        raise StetError(f"this daemon serves several vaults ({names}): add ?vault=NAME to the /mcp URL",
                        code="bad_request")

    def operations(self) -> NoteOperations:
        return self.daemon.operations(self.vault_ref(), self.principal)

    # -- methods ------------------------------------------------------------------------

    async def dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize" and self.modern is None:
            return self.initialize(params)
        if method == "server/discover" and self.modern is not None:
            return self.discover()
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [t.describe() for t in TOOLS]}
        if method == "tools/call":
            return await self.call_tool(params)
        try:
            if method == "resources/list":
                return await mcp_resources.list_resources(self, params)
            if method == "resources/templates/list":
                return mcp_resources.list_templates(self)
            if method == "resources/read":
                return await mcp_resources.read_resource(self, params)
            if method == "completion/complete":
                return mcp_resources.complete(self, params, mcp_prompts.PATH_ARGUMENTS)
            if method == "prompts/list":
                return {"prompts": [p.describe() for p in mcp_prompts.PROMPTS]}
            if method == "prompts/get":
                return mcp_prompts.get_prompt(params)
        except mcp_resources.ResourceError as exc:
            raise RpcError(INVALID_PARAMS, exc.message, data=exc.data) from None
        except mcp_prompts.PromptError as exc:
            raise RpcError(INVALID_PARAMS, exc.message) from None
        except StetError as exc:  # the vault choice (?vault=, the token's vault)
            raise RpcError(INVALID_REQUEST, exc.message, data={"error": exc.to_dict()}) from None
        # Handshake-era resources/subscribe is not served: no session to hold it, no stream
        # to notify on (subscriptions/listen, 2026-07-28, is the way to hear of changes).
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    def capabilities(self) -> dict[str, Any]:
        """What fully works in this era: change notifications only through subscriptions/listen."""
        live = self.modern is not None
        return {"tools": {"listChanged": False},
                "resources": {"subscribe": live, "listChanged": live},
                "prompts": {"listChanged": False},
                "completions": {}}

    def _vault_name(self) -> str:
        try:  # a wrong ?vault= or a token of another vault fails here, at connect, not at the first call
            ops = self.operations()
        except StetError as exc:
            raise RpcError(INVALID_REQUEST, exc.message, data={"error": exc.to_dict()},
                           status=exc.status) from None
        return self.daemon.vault(ops.service.vault_id).entry.name

    def server_info(self, vault: str) -> dict[str, Any]:
        return {"name": "stet", "title": f"Stet notes ({vault})", "version": __version__}

    def discover(self) -> dict[str, Any]:
        vault = self._vault_name()
        return {"supportedVersions": list(PROTOCOL_VERSIONS), "capabilities": self.capabilities(),
                "serverInfo": self.server_info(vault), "instructions": INSTRUCTIONS.format(vault=vault)}

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise RpcError(INVALID_PARAMS, "initialize needs params.protocolVersion (a string)")
        # The client's version if we speak it, else our newest (the client decides whether to go on).
        version = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[0]
        vault = self._vault_name()
        return {
            "protocolVersion": version,
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info(vault),
            "instructions": INSTRUCTIONS.format(vault=vault),
        }

    async def call_tool(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        tool = TOOLS_BY_NAME.get(name) if isinstance(name, str) else None
        if tool is None:
            raise RpcError(INVALID_PARAMS, f"unknown tool: {name!r}")
        raw = params.get("arguments")
        try:
            if raw is None:
                raw = {}
            if not isinstance(raw, dict):
                raise StetError("arguments must be an object", code="bad_request")
            args = check_arguments(tool, raw)
            if tool.run is not None:
                return await tool.run(self.request, self.operations(), args)
            ops = self.operations()
            if tool.searches:
                await ops.index_caught_up()
            if tool.grouped:  # appends of one loop turn share a commit, as REST appends do
                result = await group_for(ops.service).run(lambda: tool.call(ops, args))
            else:
                result = tool.call(ops, args)
        except StetError as exc:
            return _tool_error(exc.to_dict())
        except Exception:
            logger.exception("MCP tool %s failed", tool.name)
            return _tool_error({"code": "internal", "message": "internal error (see the daemon log)"})
        # A big result's text is built (and escaped) slice by slice as it is written (json_stream).
        text = JsonOf(result) if has_big_string(result) else json.dumps(result, ensure_ascii=False)
        return {
            "content": [{"type": "text", "text": text}],
            "structuredContent": result,
            "isError": False,
        }


def _tool_error(error: dict[str, Any]) -> dict[str, Any]:
    body = {"error": error}
    return {
        "content": [{"type": "text", "text": json.dumps(body, ensure_ascii=False)}],
        "structuredContent": body,
        "isError": True,
    }


def _check_protocol_header(request: web.Request, method: str) -> None:
    """A handshake-era request after initialize names the negotiated version; one we don't
    speak is a 400."""
    version = request.headers.get(PROTOCOL_HEADER)
    if version is None or method in ("initialize", "server/discover") or version in HANDSHAKE_VERSIONS:
        return
    raise RpcError(INVALID_REQUEST, f"unsupported {PROTOCOL_HEADER}: {version!r} "
                   f"(supported: {', '.join(PROTOCOL_VERSIONS)})", status=400)


def _is_modern(request: web.Request, message: dict[str, Any]) -> bool:
    """A 2026-07-28-era message: its header names a stateless version, or its _meta carries one."""
    if message.get("method") == "initialize":
        return False
    if request.headers.get(PROTOCOL_HEADER) in MODERN_VERSIONS:
        return True
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and VERSION_KEY in meta


def _header_value(raw: str | None) -> str | None:
    """A header value as the client meant it: ``=?base64?...?=`` wraps a non-ASCII one."""
    if raw is None or not (raw.startswith("=?base64?") and raw.endswith("?=")):
        return raw
    try:
        return base64.b64decode(raw[9:-2], validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None  # a corrupt header never matches


def _modern_envelope(request: web.Request, message: dict[str, Any], method: str) -> str:
    """The 2026-07-28 checks, in the spec's order: the _meta pair, the headers agreeing with
    the body, then the version; the version this request speaks."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        raise RpcError(INVALID_PARAMS, f"params._meta must be an object carrying {VERSION_KEY!r} and "
                       f"{CAPABILITIES_KEY!r} (protocol 2026-07-28 sends them with every request)")
    missing = [k for k in (VERSION_KEY, CAPABILITIES_KEY) if k not in meta]
    if missing:
        raise RpcError(INVALID_PARAMS, f"params._meta is missing {', '.join(missing)}")
    version = meta[VERSION_KEY]
    headers = request.headers
    for name in (PROTOCOL_HEADER, METHOD_HEADER, NAME_HEADER):
        if len(headers.getall(name, [])) > 1:
            raise RpcError(HEADER_MISMATCH, f"the {name} header appears more than once")
    if headers.get(PROTOCOL_HEADER) != version:
        raise RpcError(HEADER_MISMATCH, f"the {PROTOCOL_HEADER} header does not match params._meta's "
                       f"protocol version ({version!r})")
    if headers.get(METHOD_HEADER) != method:
        raise RpcError(HEADER_MISMATCH, f"the {METHOD_HEADER} header does not match the method ({method!r})")
    name_key = NAME_PARAMS.get(method)
    if name_key is not None and isinstance(params, dict) and params.get(name_key) is not None \
            and _header_value(headers.get(NAME_HEADER)) != params.get(name_key):
        raise RpcError(HEADER_MISMATCH, f"the {NAME_HEADER} header does not match params.{name_key}")
    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, "the protocol version in params._meta must be a string")
    if version not in MODERN_VERSIONS:
        raise RpcError(UNSUPPORTED_PROTOCOL_VERSION, f"unsupported protocol version {version!r}",
                       data={"supported": list(MODERN_VERSIONS), "requested": version})
    return version


def _stamp(mcp: McpRequest, method: str, result: dict[str, Any]) -> dict[str, Any]:
    """The fields 2026-07-28 requires on every result (and on cacheable ones)."""
    meta = result.get("_meta")
    try:
        info = mcp.server_info(mcp._vault_name())
    except RpcError:  # the vault choice failed: the error said so; the stamp is only a label
        info = {"name": "stet", "version": __version__}
    server = {SERVER_INFO_KEY: info}
    stamped = {**result, "resultType": "complete",
               "_meta": {**meta, **server} if isinstance(meta, dict) else server}
    if method in CACHEABLE:
        # Notes change under the client at any moment (other agents, people): never cached.
        stamped.setdefault("ttlMs", 0)
        stamped.setdefault("cacheScope", "private")
    return stamped


def _valid_id(msg_id: Any) -> bool:
    return isinstance(msg_id, str | int) and not isinstance(msg_id, bool)


Answer = dict[str, Any] | web.StreamResponse | None


async def _handle_message(mcp: McpRequest, message: Any) -> tuple[Answer, int]:
    """One JSON-RPC message → (its response, HTTP status); None for a notification or a
    response; a stream for ``subscriptions/listen`` (already written)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'not a JSON-RPC 2.0 message (needs "jsonrpc": "2.0")', status=400)
    method = message.get("method")
    if "id" not in message:
        if isinstance(method, str):
            return None, 202  # a notification (notifications/initialized, …/cancelled): nothing to do
        raise RpcError(INVALID_REQUEST, "a message needs a method or an id", status=400)
    msg_id = message["id"]
    if method is None and ("result" in message or "error" in message):
        return None, 202  # a response to a server request: we send none, so nothing to match
    mcp.modern = None
    modern = _is_modern(mcp.request, message)
    try:
        if not _valid_id(msg_id):
            raise RpcError(INVALID_REQUEST, "id must be a string or an integer", status=400)
        if not isinstance(method, str):
            raise RpcError(INVALID_REQUEST, "method must be a string", status=400)
        if modern:
            mcp.modern = _modern_envelope(mcp.request, message, method)
        else:
            _check_protocol_header(mcp.request, method)
        params = message.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object")
        if method == "subscriptions/listen" and mcp.modern is not None:
            if "text/event-stream" not in mcp.request.headers.get("Accept", "").lower():
                raise RpcError(INVALID_REQUEST, "subscriptions/listen answers with a stream: send "
                               "Accept: application/json, text/event-stream", status=406)
            try:
                return await mcp_resources.listen(mcp, msg_id, params), 200
            except mcp_resources.ResourceError as exc:
                raise RpcError(INVALID_PARAMS, exc.message, data=exc.data) from None
        result = await mcp.dispatch(method, params)
    except RpcError as exc:
        reply_id = msg_id if _valid_id(msg_id) else None
        status = MODERN_ERROR_STATUS.get(exc.code, 200) if modern and exc.status == 200 else exc.status
        return {"jsonrpc": "2.0", "id": reply_id, "error": exc.to_json()}, status
    if mcp.modern is not None:
        result = _stamp(mcp, method, result)
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}, 200


async def post_mcp(request: web.Request) -> web.StreamResponse:
    content_type = request.headers.get("Content-Type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        return _rpc_error_response(RpcError(INVALID_REQUEST, "Content-Type must be application/json",
                                            status=415))
    accept = request.headers.get("Accept", "*/*").lower()
    if not any(t in accept for t in ("application/json", "application/*", "*/*")):
        return _rpc_error_response(RpcError(INVALID_REQUEST, "this endpoint answers application/json; "
                                            "send Accept: application/json, text/event-stream", status=406))
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _rpc_error_response(RpcError(INVALID_REQUEST, "the request body is too large", status=413))
    try:
        body = parse_json(raw)  # never a RecursionError; lone surrogates refused here
    except StetError as exc:
        code = PARSE_ERROR if "not valid JSON" in exc.message else INVALID_REQUEST
        return _rpc_error_response(RpcError(code, exc.message, data={"error": exc.to_dict()}, status=400))
    mcp = McpRequest(request)
    if not isinstance(body, list):
        try:
            answer, status = await _handle_message(mcp, body)
        except RpcError as exc:
            return _rpc_error_response(exc)
        if answer is None:
            return web.Response(status=202)
        if isinstance(answer, web.StreamResponse):
            return answer
        return await json_answer(request, answer, status=status, ensure_ascii=False)
    version = request.headers.get(PROTOCOL_HEADER)
    if version is not None and version not in BATCH_VERSIONS:
        return _rpc_error_response(RpcError(
            INVALID_REQUEST, f"JSON-RPC batches are not part of MCP {version} (2025-06-18 removed them): "
            "send one message per POST", status=400))
    if not body:  # a batch (2025-03-26)
        return _rpc_error_response(RpcError(INVALID_REQUEST, "an empty batch", status=400))
    if len(body) > MAX_BATCH:
        return _rpc_error_response(RpcError(
            INVALID_REQUEST, f"a batch holds at most {MAX_BATCH} messages (this one has {len(body)})",
            data={"error": {"code": "too_large", "message": f"at most {MAX_BATCH} messages per batch",
                            "limit": MAX_BATCH}}, status=400))
    return await _answer_batch(mcp, body)


async def _answer_batch(mcp: McpRequest, body: list[Any]) -> web.StreamResponse:
    """Each message in turn, yielding the loop between them (other clients are answered
    meanwhile), each answer serialised on its own; once the answers reach
    ``MAX_ANSWER_BYTES`` the rest are refused with ``too_large`` (SPEC §6.3)."""
    parts: list[bytes] = []
    total = 0
    for i, message in enumerate(body):
        if i:
            # Not sleep(0): a waiting request needs several loop turns to be answered, and a
            # sleep(0) hands the loop back to this batch after one.
            await asyncio.sleep(YIELD_S)
        if total >= MAX_ANSWER_BYTES - SMALL_ANSWER_BYTES:
            if not isinstance(message, dict) or "id" not in message:
                continue  # a notification (or a response): nothing to answer, nothing to run
            part = _too_large_answer(message, total)  # not run at all
        else:
            try:
                answer, _ = await _handle_message(mcp, message)
            except RpcError as exc:
                answer = {"jsonrpc": "2.0", "id": None, "error": exc.to_json()}
            if not isinstance(answer, dict):
                continue  # a notification (no listen stream here: batches are handshake-era only)
            part = await encode(answer, ensure_ascii=False)  # a big read: in slices
            if total + len(part) > MAX_ANSWER_BYTES:  # only a read answers this much
                part = _too_large_answer(message, total)
        parts.append(part)
        total += len(part)
    if not parts:
        return web.Response(status=202)
    # Written part by part: no second 64 MiB copy, no long join on the loop.
    response = web.StreamResponse(headers={"Content-Type": "application/json; charset=utf-8"})
    response.content_length = 2 + sum(len(p) for p in parts) + len(parts) - 1
    await response.prepare(mcp.request)
    for i, part in enumerate(parts):
        await response.write((b"[" if i == 0 else b",") + part if len(part) < 65536 else
                             (b"[" if i == 0 else b","))
        if len(part) >= 65536:
            await response.write(part)
    await response.write(b"]")
    await response.write_eof()
    return response


def _too_large_answer(message: Any, so_far: int) -> bytes:
    msg_id = message.get("id") if isinstance(message, dict) else None
    error = {"code": "too_large", "limit": MAX_ANSWER_BYTES,
             "message": f"this batch's answers reached {so_far} bytes; one batch answers at most "
                        f"{MAX_ANSWER_BYTES} bytes: send this call again on its own"}
    answer = {"jsonrpc": "2.0", "id": msg_id if _valid_id(msg_id) else None, "result": _tool_error(error)}
    return _dumps(answer).encode()


def _dumps(data: Any) -> str:
    return dumps(data, ensure_ascii=False)


async def not_allowed(request: web.Request) -> web.Response:
    """No server-to-client stream and no sessions to end: only POST is served."""
    error = RpcError(INVALID_REQUEST, f"{request.method} is not served here (no stream, no sessions): POST "
                     "JSON-RPC messages", status=405)
    response = _rpc_error_response(error)
    response.headers["Allow"] = "POST"
    return response


def register(app: web.Application) -> None:
    app.router.add_post(MCP_PATH, post_mcp)
    app.router.add_get(MCP_PATH, not_allowed, allow_head=False)
    app.router.add_delete(MCP_PATH, not_allowed)
