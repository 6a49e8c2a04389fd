"""REST faces of the agent operations (SPEC §6.4) and the event stream (SPEC §6.9).

Routes under ``/v1/vaults/{vault}``. A note path always ends in a note extension, so
the operation suffixes (``/append``, ``/edit``, ``/move``, ``/versions/...``) after it
are unambiguous; one dispatcher per method splits them off.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon.api.json_stream import json_answer
from stet.daemon.api.keys import DAEMON_KEY, principal_of
from stet.daemon.notes.group_commit import group_for
from stet.daemon.ops.event_stream import stream_events
from stet.daemon.ops.notes import NoteOperations
from stet.sync.errors import StetError
from stet.sync.json_input import parse_json

if TYPE_CHECKING:
    from stet.daemon.ops.host import ApiHost

_SUFFIX = re.compile(
    r"^(?P<path>.+?)/(?P<op>append|edit|move|section|frontmatter|task|links|context"
    r"|versions(?:/(?P<vid>[^/]+)(?:/(?P<restore>restore))?)?)$")


def _daemon(request: web.Request) -> ApiHost:
    return request.app[DAEMON_KEY]


def operations_of(request: web.Request) -> NoteOperations:
    principal = principal_of(request)
    return _daemon(request).operations(request.match_info["vault"], principal)


async def json_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    limit = request.client_max_size
    if request.content_length is not None and request.content_length > limit:
        # Refused on its headers: a declared 100 MB body is never read (aiohttp would
        # buffer up to the limit before refusing); a chunked one stops at the limit.
        raise StetError(f"the request body is {request.content_length} bytes; the limit is {limit}",
                        code="too_large", limit=limit)
    raw = await request.read()
    if not raw.strip():
        return {}
    data = parse_json(raw)  # bad JSON, too deep, lone surrogates: bad_request
    if not isinstance(data, dict):
        raise StetError("the request body must be a JSON object", code="bad_request")
    return data


def int_param(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    # int() alone would also take " 5", "1_0" and non-ASCII digits.
    if not (raw.isascii() and raw.removeprefix("-").isdigit()):
        raise StetError(f"{name} must be a whole number", code="bad_request")
    value = int(raw)
    if not lo <= value <= hi:
        raise StetError(f"{name} must be between {lo} and {hi}", code="bad_request")
    return value


def _split(tail: str) -> tuple[str, str | None, str | None, bool]:
    m = _SUFFIX.match(tail)
    if m is None:
        return tail, None, None, False
    op = m.group("op")
    return m.group("path"), op.split("/")[0], m.group("vid"), bool(m.group("restore"))


def only_fields(data: dict[str, Any], *allowed: str) -> dict[str, Any]:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise StetError(f"unknown field(s): {', '.join(unknown)}", code="bad_request")
    return data


async def list_notes(request: web.Request) -> web.Response:
    ops = operations_of(request)
    return web.json_response(ops.list_notes(
        prefix=request.query.get("prefix", ""), limit=int_param(request, "limit", 1000, 1, 10000),
        cursor=request.query.get("cursor", ""), snapshot=request.query.get("snapshot") or None,
    ))


async def search(request: web.Request) -> web.Response:
    ops = operations_of(request)
    await ops.index_caught_up()
    return web.json_response(ops.search_notes(request.query.get("q", ""),
                                              limit=int_param(request, "limit", 20, 1, 200),
                                              snapshot=request.query.get("snapshot") or None))


async def log(request: web.Request) -> web.Response:
    ops = operations_of(request)
    return web.json_response(ops.recent_changes(
        path=request.query.get("path") or None, since=request.query.get("since") or None,
        limit=int_param(request, "limit", 100, 1, 10000),
    ))


async def conflicts(request: web.Request) -> web.Response:
    ops = operations_of(request)
    return web.json_response(ops.list_conflicts(
        since=request.query.get("since") or None, limit=int_param(request, "limit", 100, 1, 10000),
    ))


async def get_note(request: web.Request) -> web.StreamResponse:
    ops = operations_of(request)
    path, op, vid, _ = _split(request.match_info["tail"])
    if op == "versions":
        if vid is None:
            return web.json_response(ops.history.list_versions(path))
        return await json_answer(request, ops.history.read_version(path, vid))  # a big text: streamed
    if op == "links":
        await ops.index_caught_up()
        return web.json_response(ops.structure.note_links(path))
    if op == "context":
        await ops.index_caught_up()
        return await json_answer(request, ops.structure.build_context(
            path, depth=int_param(request, "depth", 1, 0, 3), limit=int_param(request, "limit", 20, 1, 50)))
    if op is not None:
        raise StetError(f"GET is not allowed on /{op}", code="bad_request")
    include = request.query.get("include")
    return await json_answer(request, ops.read_note(path, version=request.query.get("version") or None,
                                           snapshot=request.query.get("snapshot") or None,
                                           atRevision=request.query.get("atRevision") or None,
                                           include=include.split(",") if include else None))


async def post_note(request: web.Request) -> web.Response:
    ops = operations_of(request)
    path, op, vid, restore = _split(request.match_info["tail"])
    body = await json_body(request)
    if op is None:
        result = ops.create_note(path, **only_fields(body, "content", "idempotencyKey"))
        return web.json_response(result, status=201)
    if op == "append":  # appends of one loop turn share a commit (group_commit.py)
        args = only_fields(body, "text", "idempotencyKey")
        return web.json_response(await group_for(ops.service).run(lambda: ops.append_note(path, **args)))
    if op == "edit":
        return web.json_response(ops.edit_note(
            path, **only_fields(body, "edits", "expectedRevision", "idempotencyKey")))
    if op == "section":
        return web.json_response(ops.structure.edit_section(path, **only_fields(
            body, "heading", "mode", "text", "expectedRevision", "idempotencyKey")))
    if op == "frontmatter":
        return web.json_response(ops.structure.edit_frontmatter(path, **only_fields(
            body, "set", "delete", "addTags", "removeTags", "expectedRevision", "idempotencyKey")))
    if op == "task":
        return web.json_response(ops.structure.tick_task(path, **only_fields(
            body, "task", "done", "expectedRevision", "idempotencyKey")))
    if op == "move":
        return web.json_response(ops.move_note(
            path, **only_fields(body, "newPath", "expectedRevision", "idempotencyKey")))
    if op == "versions" and vid is not None and restore:
        restored = ops.history.restore_version(path, vid, **only_fields(body, "idempotencyKey"))
        return web.json_response(restored)
    raise StetError("no such operation", code="not_found")


async def put_note(request: web.Request) -> web.Response:
    ops = operations_of(request)
    path, op, _, _ = _split(request.match_info["tail"])
    if op is not None:
        raise StetError(f"PUT is not allowed on /{op}", code="bad_request")
    body = await json_body(request)
    return web.json_response(ops.update_note(
        path, **only_fields(body, "content", "expectedRevision", "baseRevision", "idempotencyKey", "force")))


async def delete_note(request: web.Request) -> web.Response:
    ops = operations_of(request)
    path, op, _, _ = _split(request.match_info["tail"])
    if op is not None:
        raise StetError(f"DELETE is not allowed on /{op}", code="bad_request")
    body = await json_body(request)
    if "expectedRevision" in request.query:
        body.setdefault("expectedRevision", request.query["expectedRevision"])
    return web.json_response(ops.delete_note(path, **only_fields(body, "expectedRevision", "idempotencyKey")))


async def events(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events with Last-Event-ID resume (``ops/event_stream.py``, shared with the page)."""
    ops = operations_of(request)  # auth, vault and token-vault checks
    return await stream_events(request, _daemon(request), ops)


def register(app: web.Application) -> None:
    r = app.router
    base = "/v1/vaults/{vault}"
    r.add_get(f"{base}/notes", list_notes)
    r.add_get(f"{base}/search", search)
    r.add_get(f"{base}/log", log)
    r.add_get(f"{base}/conflicts", conflicts)
    r.add_get(f"{base}/events", events)
    r.add_get(base + "/notes/{tail:.+}", get_note)
    r.add_post(base + "/notes/{tail:.+}", post_note)
    r.add_put(base + "/notes/{tail:.+}", put_note)
    r.add_delete(base + "/notes/{tail:.+}", delete_note)
