"""MCP at ``/mcp``: Streamable HTTP, JSON responses, on the daemon's aiohttp app.

A small JSON-RPC handler instead of the ``mcp`` SDK's server (the SDK serves only as a
Starlette ASGI app; docs/decisions/0111-mcp-a-small-json-only-handler.md and
7261-mcp-versions.md say why). It speaks both eras (``mcp_versions``): the
initialize-handshake revisions 2024-11-05 … 2025-11-25 and the stateless 2026-07-28
(``server/discover``, the version and client capabilities in each request's ``_meta``),
chosen per POST by its ``MCP-Protocol-Version`` header, as the SDK's server does.

Each POST carries one JSON-RPC message (or, under 2025-03-26 and 2024-11-05 only, a batch)
and gets one ``application/json`` answer -- except 2026-07-28's ``subscriptions/listen``,
answered by an event stream (``mcp_listen``). There is no GET stream (405) and no session:
every request is authenticated by its own bearer token (the app's middlewares run first:
Host, Origin, auth), never by an ``Mcp-Session-Id``, and none is issued. The vault is the
agent token's own, or for the owner token ``?vault=NAME`` on the URL (optional with one vault).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon import __version__
from stet.daemon.api import mcp_listen, mcp_prompts, mcp_resources
from stet.daemon.api.json_stream import JsonOf, dumps, encode, has_big_string, json_answer
from stet.daemon.api.keys import principal_of
from stet.daemon.api.mcp_tools import TOOLS, TOOLS_BY_NAME, check_arguments
from stet.daemon.api.mcp_versions import (
    ALL_VERSIONS,
    BATCH_VERSIONS,
    HANDSHAKE_VERSIONS,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MODERN_ERROR_STATUS,
    MODERN_VERSIONS,
    PARSE_ERROR,
    PROTOCOL_HEADER,
    RpcError,
    check_envelope,
    modern_result,
    unsupported_version,
)
from stet.daemon.notes.group_commit import group_for
from stet.daemon.ops.notes import NoteOperations, Principal
from stet.sync.errors import StetError
from stet.sync.json_input import parse_json

if TYPE_CHECKING:
    from stet.daemon.app.runtime import Daemon

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
PROTOCOL_VERSIONS = HANDSHAKE_VERSIONS  # the initialize-handshake revisions, newest first

MAX_BATCH = 32  # messages in one batch (SPEC §6.3)
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # what one POST may make the daemon build
SMALL_ANSWER_BYTES = 1024 * 1024  # headroom: past this, calls are refused before they run
YIELD_S = 0.002  # between a batch's messages: other clients' requests run meanwhile

INSTRUCTIONS = (
    "Markdown notes of the Stet vault {vault!r}, shared with people and other agents who may be "
    "writing at the same time. To add an entry (log, finding, result) use append_note with an "
    "idempotencyKey. For a small change use edit_note with exact, unique oldText anchors. To rewrite a "
    "note, read it first and pass the revision you read as baseRevision (others' changes since are "
    "kept) or expectedRevision (refused if anyone changed it). Errors come back as "
    '{{"error": {{"code", "message", ...}}}}: read the note again and retry with what you learn.'
)


def _rpc_error_response(exc: RpcError) -> web.Response:
    """A fault found before any message id could be read."""
    return web.json_response({"jsonrpc": "2.0", "id": None, "error": exc.to_json()}, status=exc.status)


def _daemon(request: web.Request) -> Daemon:
    from stet.daemon.api.app import DAEMON_KEY

    return request.app[DAEMON_KEY]  # type: ignore[return-value]


class McpRequest:
    """One POST: who calls (the principal the auth middleware found), which vault, which era."""

    def __init__(self, request: web.Request, *, version: str | None = None) -> None:
        self.request = request
        self.daemon = _daemon(request)
        self.principal: Principal = principal_of(request)
        self.version = version  # a 2026-07-28 request's; None in the handshake era

    @property
    def modern(self) -> bool:
        return self.version in MODERN_VERSIONS

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

    def vault_name(self, ops: NoteOperations) -> str:
        return self.daemon.vault(ops.service.vault_id).entry.name

    def connected_vault(self) -> tuple[NoteOperations, str]:
        """The vault, checked at connect (initialize, server/discover): a wrong ?vault= or a
        token of another vault fails there, not at the first call."""
        try:
            ops = self.operations()
        except StetError as exc:
            raise RpcError(INVALID_REQUEST, exc.message, data={"error": exc.to_dict()},
                           status=exc.status) from None
        return ops, self.vault_name(ops)

    def server_info(self) -> dict[str, Any]:
        """Who answers (2026-07-28 stamps it on every result), naming the vault when it is known."""
        try:
            vault = self.vault_name(self.operations())
        except StetError:
            return {"name": "stet", "version": __version__}
        return {"name": "stet", "title": f"Stet notes ({vault})", "version": __version__}

    def capabilities(self) -> dict[str, Any]:
        # Only what fully works: change notifications need 2026-07-28's listen stream (there is
        # no session or GET stream for the handshake era's resources/subscribe).
        modern = self.modern
        return {"tools": {"listChanged": False}, "prompts": {"listChanged": False}, "completions": {},
                "resources": {"subscribe": modern, "listChanged": modern}}

    # -- methods ------------------------------------------------------------------------

    async def dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize" and not self.modern:
            return self.initialize(params)
        if method == "server/discover" and self.modern:
            return self.discover()
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [t.describe() for t in TOOLS]}
        if method == "tools/call":
            return await self.call_tool(params)
        if method == "prompts/list":
            return {"prompts": [p.describe() for p in mcp_prompts.PROMPTS]}
        if method == "resources/templates/list":
            ops = self.operations()
            return mcp_resources.list_templates(self.vault_name(ops))
        if method in ("resources/list", "resources/read", "prompts/get", "completion/complete"):
            return await self.vault_method(method, params)
        if method == "server/discover":
            raise RpcError(METHOD_NOT_FOUND, "server/discover is a 2026-07-28 method: send it with "
                           f"{PROTOCOL_HEADER}: 2026-07-28 and the _meta envelope, or use initialize")
        if method in ("resources/subscribe", "resources/unsubscribe"):
            raise RpcError(METHOD_NOT_FOUND, f"{method} is not served (no sessions, no GET stream): hear of "
                           "changes with 2026-07-28's subscriptions/listen, or the REST event stream "
                           "GET /v1/vaults/NAME/events")
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    async def vault_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            ops = self.operations()
        except StetError as exc:
            raise RpcError(INVALID_REQUEST, exc.message, data={"error": exc.to_dict()}) from None
        vault = self.vault_name(ops)
        if method == "resources/list":
            return await mcp_resources.list_resources(self.request, ops, vault, params)
        if method == "resources/read":
            return await mcp_resources.read_resource(self.request, ops, vault, params, modern=self.modern)
        if method == "prompts/get":
            return mcp_prompts.get_prompt(ops, vault, params)
        return self.complete(ops, vault, params)

    def complete(self, ops: NoteOperations, vault: str, params: dict[str, Any]) -> dict[str, Any]:
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise RpcError(INVALID_PARAMS, "completion/complete needs params.ref and params.argument")
        name, value = argument.get("name"), argument.get("value", "")
        if not isinstance(name, str) or not isinstance(value, str):
            raise RpcError(INVALID_PARAMS, "argument.name and argument.value must be strings")
        if ref.get("type") == "ref/resource":
            if ref.get("uri") != mcp_resources.template_of(vault):
                raise RpcError(INVALID_PARAMS, f"no resource template {ref.get('uri')!r} "
                               f"(this vault's: {mcp_resources.template_of(vault)})")
            paths = name == "path"
        elif ref.get("type") == "ref/prompt":
            paths = name in mcp_prompts.find_prompt(ref.get("name")).path_arguments
        else:
            raise RpcError(INVALID_PARAMS, "ref.type must be ref/resource or ref/prompt")
        if not paths:
            return {"completion": {"values": [], "hasMore": False}}
        return mcp_resources.complete_paths(ops, value)

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise RpcError(INVALID_PARAMS, "initialize needs params.protocolVersion (a string)")
        # The client's version if we speak it, else our newest (the client decides whether to go on).
        version = requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        _, vault = self.connected_vault()
        return {
            "protocolVersion": version,
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info(),
            "instructions": INSTRUCTIONS.format(vault=vault),
        }

    def discover(self) -> dict[str, Any]:
        _, vault = self.connected_vault()
        return {"supportedVersions": list(ALL_VERSIONS), "capabilities": self.capabilities(),
                "instructions": INSTRUCTIONS.format(vault=vault)}

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
    """A request after initialize names the negotiated version; one we don't speak is a 400
    (-32022, naming the versions we do)."""
    version = request.headers.get(PROTOCOL_HEADER)
    if version is None or method == "initialize" or version in PROTOCOL_VERSIONS:
        return
    raise unsupported_version(version)


def _valid_id(msg_id: Any) -> bool:
    return isinstance(msg_id, str | int) and not isinstance(msg_id, bool)


async def _handle_message(mcp: McpRequest, message: Any) -> tuple[dict[str, Any] | None, int]:
    """One JSON-RPC message → (its response, HTTP status); None for a notification or a response."""
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
    try:
        if not _valid_id(msg_id):
            raise RpcError(INVALID_REQUEST, "id must be a string or an integer", status=400)
        if not isinstance(method, str):
            raise RpcError(INVALID_REQUEST, "method must be a string", status=400)
        _check_protocol_header(mcp.request, method)
        params = message.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object")
        result = await mcp.dispatch(method, params)
    except RpcError as exc:
        reply_id = msg_id if _valid_id(msg_id) else None
        return {"jsonrpc": "2.0", "id": reply_id, "error": exc.to_json()}, exc.status
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
    header = request.headers.get(PROTOCOL_HEADER)
    if header in MODERN_VERSIONS:  # the era is the header's, as in the SDK's server
        return await _post_modern(request, body, accept)
    mcp = McpRequest(request)
    if not isinstance(body, list):
        try:
            answer, status = await _handle_message(mcp, body)
        except RpcError as exc:
            return _rpc_error_response(exc)
        if answer is None:
            return web.Response(status=202)
        return await json_answer(request, answer, status=status, ensure_ascii=False)
    if header is not None and header not in BATCH_VERSIONS:
        return _rpc_error_response(RpcError(
            INVALID_REQUEST, f"JSON-RPC batches are not part of MCP {header} (2025-06-18 removed them): "
            "send one message per POST", status=400))
    if not body:  # a batch (2025-03-26)
        return _rpc_error_response(RpcError(INVALID_REQUEST, "an empty batch", status=400))
    if len(body) > MAX_BATCH:
        return _rpc_error_response(RpcError(
            INVALID_REQUEST, f"a batch holds at most {MAX_BATCH} messages (this one has {len(body)})",
            data={"error": {"code": "too_large", "message": f"at most {MAX_BATCH} messages per batch",
                            "limit": MAX_BATCH}}, status=400))
    return await _answer_batch(mcp, body)


def _modern_error(exc: RpcError, msg_id: Any) -> web.Response:
    """A 2026-07-28 error: its HTTP status follows its code (404 for an unknown method, 400
    for a bad request), as the spec and the SDK's server answer."""
    status = MODERN_ERROR_STATUS.get(exc.code, exc.status if exc.status >= 400 else 200)
    reply_id = msg_id if _valid_id(msg_id) else None
    return web.json_response({"jsonrpc": "2.0", "id": reply_id, "error": exc.to_json()}, status=status)


async def _post_modern(request: web.Request, body: Any, accept: str) -> web.StreamResponse:
    """One 2026-07-28 POST: one request (the envelope in ``params._meta``), one answer."""
    if isinstance(body, list):
        return _modern_error(RpcError(INVALID_REQUEST, "MCP 2026-07-28 takes one JSON-RPC message per POST "
                                      "(no batches)"), None)
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        return _modern_error(RpcError(INVALID_REQUEST, 'not a JSON-RPC 2.0 message (needs "jsonrpc": "2.0")'),
                             None)
    method, msg_id = body.get("method"), body.get("id")
    if "id" not in body and isinstance(method, str):
        return web.Response(status=202)  # 2026-07-28 defines no client notifications here: dropped
    if not isinstance(method, str) or not _valid_id(msg_id):
        return _modern_error(RpcError(INVALID_REQUEST, "a 2026-07-28 POST carries one request (a string "
                                      "method and a string or integer id)"), msg_id)
    try:
        version = check_envelope(request, body, method)
        params = body.get("params")
        assert isinstance(params, dict)  # check_envelope found its _meta
        mcp = McpRequest(request, version=version)
        if method == "subscriptions/listen":
            if "text/event-stream" not in accept:
                refusal = RpcError(INVALID_REQUEST, "subscriptions/listen answers an event stream: send "
                                   "Accept: application/json, text/event-stream", status=406)
                return _modern_error(refusal, msg_id)
            ops, vault = mcp.connected_vault()
            return await mcp_listen.listen(request, mcp.daemon, ops, vault, msg_id, params)
        result = modern_result(method, await mcp.dispatch(method, params), mcp.server_info())
    except RpcError as exc:
        return _modern_error(exc, msg_id)
    return await json_answer(request, {"jsonrpc": "2.0", "id": msg_id, "result": result}, status=200,
                             ensure_ascii=False)


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
            if answer is None:
                continue
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
