"""MCP resources and completions (SPEC §6.4): each note and attachment as a resource.

A resource's URI is ``stet://<vault>/<path>``, the vault's name and each path segment
percent-encoded (UTF-8), so a note at ``会议/数据库 迁移.md`` is
``stet://notes/%E4%BC%9A%E8%AE%AE/...``; the template ``stet://<vault>/{+path}`` lets a
client build one. Every listing and read goes through the token's read scope exactly as
``list_notes`` and ``read_note`` do: a hidden note is never listed, completed, read or
announced. ``resources/list`` pages notes first (cursor ``n:<path>``), then attachments
(``a:<path>``).

Changes reach an MCP client through ``subscriptions/listen`` (2026-07-28): the POST's
answer is an SSE stream of ``notifications/resources/updated`` for the URIs it named and
``notifications/resources/list_changed`` when a note it may read appears, moves or goes.
The handshake-era ``resources/subscribe`` needs a server-to-client stream tied to a
session, which this server does not keep (no sessions, no GET stream): under those
versions the ``subscribe`` capability is not declared.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import urllib.parse
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon.api.file_routes import file_access
from stet.daemon.ops.event_feed import event_feed
from stet.daemon.ops.files import content_type
from stet.daemon.ops.read_scope import visible_event
from stet.sync.errors import NotFound, StetError
from stet.sync.permissions import READ

if TYPE_CHECKING:
    from stet.daemon.api.mcp_server import McpRequest
    from stet.daemon.ops.notes import NoteOperations

SCHEME = "stet://"
PAGE = 100  # resources per resources/list page
BLOB_MAX_BYTES = 8 * 1024 * 1024  # an attachment read inline (base64) at most this size
COMPLETION_MAX = 100  # values per completion/complete answer (the spec's cap)
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
NOTE_MIME = "text/markdown"


class ResourceError(Exception):
    """A resource request that cannot be answered: a JSON-RPC error (``INVALID_PARAMS``)."""

    def __init__(self, message: str, *, uri: Any, error: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = {"uri": uri}
        if error is not None:
            self.data["error"] = error


def uri_of(vault: str, path: str) -> str:
    segments = "/".join(urllib.parse.quote(s, safe="") for s in path.split("/"))
    return f"{SCHEME}{urllib.parse.quote(vault, safe='')}/{segments}"


def template_of(vault: str) -> str:
    return f"{SCHEME}{urllib.parse.quote(vault, safe='')}/{{+path}}"


def parse_uri(uri: Any, vault: str) -> str:
    """The vault path a URI of this vault names (percent-decoded, strict UTF-8)."""
    if not isinstance(uri, str) or not uri:
        raise ResourceError("params.uri must be a non-empty string", uri=uri)
    if not uri.startswith(SCHEME):
        raise ResourceError(f"not a Stet resource URI (they start with {SCHEME}): {uri!r}", uri=uri)
    host, slash, encoded = uri[len(SCHEME):].partition("/")
    try:
        named = urllib.parse.unquote(host, errors="strict")
        path = "/".join(urllib.parse.unquote(s, errors="strict") for s in encoded.split("/"))
    except UnicodeDecodeError:
        raise ResourceError("the URI's percent-encoding is not UTF-8", uri=uri) from None
    if named != vault:
        raise ResourceError(f"this connection serves the vault {vault!r}, not {named!r}", uri=uri)
    if not slash or not path:
        raise ResourceError("the URI names no path inside the vault", uri=uri)
    return path


def _vault_name(mcp: McpRequest, ops: NoteOperations) -> str:
    return mcp.daemon.vault(ops.service.vault_id).entry.name


def _cursor(params: dict[str, Any]) -> tuple[str, str]:
    raw = params.get("cursor")
    if raw is None or raw == "":
        return "n", ""
    if not isinstance(raw, str) or raw[:2] not in ("n:", "a:"):
        raise ResourceError("params.cursor is not a cursor this server handed out", uri=None)
    return raw[0], raw[2:]


async def list_resources(mcp: McpRequest, params: dict[str, Any]) -> dict[str, Any]:
    ops = mcp.operations()
    vault = _vault_name(mcp, ops)
    phase, after = _cursor(params)
    resources: list[dict[str, Any]] = []
    next_cursor: str | None = None
    if phase == "n":
        page = ops.list_notes(limit=PAGE, cursor=after)
        for note in page["notes"]:
            resources.append({"uri": uri_of(vault, note["path"]), "name": note["path"],
                              "title": os.path.basename(note["path"]), "mimeType": NOTE_MIME,
                              "size": note["size"]})
        if page["nextCursor"] is not None:
            next_cursor = "n:" + page["nextCursor"]
        else:
            phase, after = "a", ""
    if phase == "a" and next_cursor is None and len(resources) < PAGE:
        access = file_access(mcp.request.app, mcp.daemon, ops.service.vault_id)
        room = PAGE - len(resources)
        files, more = await access.attachments(ops, cursor=after, limit=room)
        for path, size in files:
            resources.append({"uri": uri_of(vault, path), "name": path,
                              "title": os.path.basename(path), "mimeType": content_type(path),
                              "size": size})
        if more and files:
            next_cursor = "a:" + files[-1][0]
        elif more:
            next_cursor = "a:" + after
    elif phase == "a" and next_cursor is None:
        next_cursor = "a:"
    answer: dict[str, Any] = {"resources": resources}
    if next_cursor is not None:
        answer["nextCursor"] = next_cursor
    return answer


def list_templates(mcp: McpRequest) -> dict[str, Any]:
    vault = _vault_name(mcp, mcp.operations())
    return {"resourceTemplates": [{
        "uriTemplate": template_of(vault), "name": "note",
        "title": f"A note or attachment of the vault {vault}",
        "description": ("Any file of the vault by its path, e.g. projects/plan.md (each path segment "
                        "percent-encoded). Notes read as text/markdown, attachments as base64 blobs."),
        "mimeType": NOTE_MIME,
    }]}


async def read_resource(mcp: McpRequest, params: dict[str, Any]) -> dict[str, Any]:
    ops = mcp.operations()
    uri = params.get("uri")
    path = parse_uri(uri, _vault_name(mcp, ops))
    try:
        note = ops.read_note(path)
    except NotFound:
        pass  # perhaps an attachment
    except StetError as exc:
        raise ResourceError(exc.message, uri=uri, error=exc.to_dict()) from None
    else:
        return {"contents": [{"uri": uri, "mimeType": NOTE_MIME, "text": note["content"],
                              "_meta": {"revision": note["revision"]}}]}
    access = file_access(mcp.request.app, mcp.daemon, ops.service.vault_id)
    try:
        fd, f = await access.open(ops, path)
    except StetError as exc:
        raise ResourceError(f"no note or attachment at {path}" if exc.code == "not_found" else exc.message,
                            uri=uri, error=exc.to_dict()) from None
    try:
        if f.size > BLOB_MAX_BYTES:
            message = (f"{path} is {f.size} bytes; resources/read returns at most {BLOB_MAX_BYTES} "
                       "bytes inline: read it with read_file (a link)")
            raise ResourceError(message, uri=uri, error={"code": "too_large", "limit": BLOB_MAX_BYTES,
                                                         "size": f.size, "message": message})
        data = await asyncio.to_thread(_read_all, fd, f.size)
    finally:
        os.close(fd)
    return {"contents": [{"uri": uri, "mimeType": content_type(path),
                          "blob": base64.b64encode(data).decode("ascii")}]}


def _read_all(fd: int, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining > 0 and (chunk := os.read(fd, min(remaining, 1 << 20))):
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def complete_paths(ops: NoteOperations, typed: str) -> dict[str, Any]:
    """Note paths starting with what was typed, in the token's read scope."""
    page = ops.list_notes(prefix=typed, limit=COMPLETION_MAX)
    values = [n["path"] for n in page["notes"]]
    return {"completion": {"values": values, "hasMore": page["nextCursor"] is not None}}


def complete(mcp: McpRequest, params: dict[str, Any],
             prompt_path_args: dict[str, set[str]]) -> dict[str, Any]:
    ref, argument = params.get("ref"), params.get("argument")
    if not isinstance(ref, dict) or not isinstance(argument, dict):
        raise ResourceError("completion/complete needs params.ref and params.argument objects", uri=None)
    name, value = argument.get("name"), argument.get("value", "")
    if not isinstance(name, str) or not isinstance(value, str):
        raise ResourceError("argument.name and argument.value must be strings", uri=None)
    ops = mcp.operations()
    if ref.get("type") == "ref/resource":
        if ref.get("uri") != template_of(_vault_name(mcp, ops)) or name != "path":
            return {"completion": {"values": [], "hasMore": False}}
        return complete_paths(ops, value)
    if ref.get("type") == "ref/prompt":
        if name not in prompt_path_args.get(str(ref.get("name")), set()):
            return {"completion": {"values": [], "hasMore": False}}
        return complete_paths(ops, value)
    raise ResourceError(f"unknown ref.type {ref.get('type')!r} (ref/resource or ref/prompt)", uri=None)


# -- subscriptions/listen (2026-07-28) --------------------------------------------------------

def _honoured(params: dict[str, Any], vault: str) -> tuple[dict[str, Any], set[str], bool]:
    """The filter this server honours (resources only), the URIs, and list_changed."""
    wanted = params.get("notifications")
    if not isinstance(wanted, dict):
        raise ResourceError("subscriptions/listen needs params.notifications (an object)", uri=None)
    uris = wanted.get("resourceSubscriptions") or []
    if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
        raise ResourceError("notifications.resourceSubscriptions must be a list of URIs", uri=None)
    for uri in uris:
        parse_uri(uri, vault)  # a URI of another vault, or not ours, is refused before the stream
    honoured: dict[str, Any] = {}
    list_changed = wanted.get("resourcesListChanged") is True
    if list_changed:
        honoured["resourcesListChanged"] = True
    if uris:
        honoured["resourceSubscriptions"] = list(uris)
    return honoured, set(uris), list_changed


async def listen(mcp: McpRequest, msg_id: str | int, params: dict[str, Any]) -> web.StreamResponse:
    """One ``subscriptions/listen`` request: its answer is the stream (SSE) of the events
    this token may see, until the client goes or its credential ends."""
    ops = mcp.operations()
    vault = _vault_name(mcp, ops)
    honoured, uris, list_changed = _honoured(params, vault)
    wanted_paths = {parse_uri(u, vault): u for u in uris}
    scopes = ops.principal.scopes
    daemon = mcp.daemon
    request = mcp.request
    meta = {SUBSCRIPTION_ID_KEY: msg_id}
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                       "X-Accel-Buffering": "no"})

    async def send(method: str, body: dict[str, Any]) -> None:
        message = {"jsonrpc": "2.0", "method": method, "params": {**body, "_meta": meta}}
        await resp.write(f"event: message\ndata: {json.dumps(message, ensure_ascii=False)}\n\n".encode())

    async def keepalive() -> None:
        await resp.write(b": keepalive\n\n")

    try:
        async with event_feed(daemon.events, daemon.streams, ops.service.vault_id,
                              ops.principal.holder) as feed:
            await resp.prepare(request)
            await send("notifications/subscriptions/acknowledged", {"notifications": honoured})
            async for event in feed.events(keepalive):
                shown = visible_event(scopes, event.type, event.data)
                if shown is None or not event.type.startswith("note."):
                    continue
                paths = [p for p in (shown.get("path"), shown.get("oldPath")) if isinstance(p, str)]
                for path in paths:
                    if path in wanted_paths and scopes.allows(READ, path):
                        await send("notifications/resources/updated", {"uri": wanted_paths[path]})
                appeared = event.type != "note.changed" or shown.get("created") is True
                if list_changed and appeared:
                    await send("notifications/resources/list_changed", {})
            # A graceful end (the credential was revoked, the daemon stops): the listen result.
            done = {"jsonrpc": "2.0", "id": msg_id, "result": {"resultType": "complete", "_meta": meta}}
            await resp.write(f"event: message\ndata: {json.dumps(done)}\n\n".encode())
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    with contextlib.suppress(ConnectionResetError):
        await resp.write_eof()
    return resp
