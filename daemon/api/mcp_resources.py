"""MCP resources and completions: every note and attachment a token may read, by URI.

A file's URI is ``stet://<vault>/<path>``, the vault name and the path percent-encoded
(UTF-8; ``/`` kept between folders): ``stet://notes/projects/%E8%AE%A1%E5%88%92.md``. The one
resource template, ``stet://<vault>/{+path}``, expands to the same URIs (RFC 6570 reserved
expansion), and ``completion/complete`` offers its ``path`` (and the prompts' path
arguments) from the notes the token may read.

``resources/list`` pages the notes first (from the store, exactly ``list_notes``' scope and
order: cheap on 10,000 notes), then the attachments (the store's ``attachment_files``).
``resources/read`` answers a note's text, an attachment's bytes (base64) up to
``BLOB_MAX_BYTES``; a bigger one is refused with the REST URL that streams it.
"""

from __future__ import annotations

import asyncio
import base64
import os
import urllib.parse
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon.api.file_routes import file_access
from stet.daemon.api.mcp_versions import INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError
from stet.daemon.base.timestamps import iso
from stet.daemon.ops.files import content_type
from stet.daemon.ops.notes import NoteOperations
from stet.sync.attachment_files import AttachmentFiles
from stet.sync.errors import StetError
from stet.sync.note_paths import is_note_name
from stet.sync.permissions import READ

if TYPE_CHECKING:
    from stet.daemon.app.runtime import Daemon

SCHEME = "stet://"
PAGE = 500  # resources per resources/list page (10,000 notes: 20 pages)
BLOB_MAX_BYTES = 5 * 1000 * 1000  # an attachment read inline (base64: ~6.7 MB of JSON)
COMPLETION_MAX = 100  # the spec's cap on completion values
NOTES_CURSOR, FILES_CURSOR = "n:", "a:"


def _daemon(request: web.Request) -> Daemon:
    from stet.daemon.api.app import DAEMON_KEY

    return request.app[DAEMON_KEY]  # type: ignore[return-value]


def vault_prefix(vault: str) -> str:
    return f"{SCHEME}{urllib.parse.quote(vault, safe='')}/"


def uri_of(vault: str, path: str) -> str:
    return vault_prefix(vault) + urllib.parse.quote(path, safe="/")


def template_of(vault: str) -> str:
    return vault_prefix(vault) + "{+path}"


def path_of(vault: str, uri: Any) -> str:
    """The vault path a URI of this vault names (percent-encoded or not); a URI of
    another scheme or vault, or one that does not decode, is refused."""
    if not isinstance(uri, str) or not uri.startswith(SCHEME):
        raise RpcError(INVALID_PARAMS, f"not a Stet resource URI (expected "
                       f"{vault_prefix(vault)}<path>): {uri!r}")
    host, sep, rest = uri[len(SCHEME):].partition("/")
    try:
        host_name = urllib.parse.unquote(host, errors="strict")
        path = urllib.parse.unquote(rest, errors="strict")
    except UnicodeDecodeError:
        raise RpcError(INVALID_PARAMS, f"the URI does not decode as UTF-8: {uri!r}") from None
    if not sep or host_name != vault:
        raise RpcError(INVALID_PARAMS, f"this server serves the vault {vault!r}: its URIs start with "
                       f"{vault_prefix(vault)}")
    if not path:
        raise RpcError(INVALID_PARAMS, f"the URI names no file: {uri!r}")
    return path


def _note_resource(vault: str, note: dict[str, Any]) -> dict[str, Any]:
    return {"uri": uri_of(vault, note["path"]), "name": note["path"], "title": note["path"],
            "mimeType": content_type(note["path"]), "size": note["size"],
            "annotations": {"lastModified": note["updatedAt"]}}


def _file_resource(vault: str, path: str, size: int, mtime_ns: int) -> dict[str, Any]:
    return {"uri": uri_of(vault, path), "name": path, "title": path, "mimeType": content_type(path),
            "size": size, "annotations": {"lastModified": iso(mtime_ns / 1e9)}}


def _attachments(ops: NoteOperations, after: str, limit: int) -> tuple[list[tuple[str, int, int]], bool]:
    """The attachments the token may read after ``after``: the store's record of the folder
    (``attachment_files``), not a walk of it (10,000 files: ~250 ms a walk)."""
    scopes = ops.principal.scopes
    files = AttachmentFiles(ops.store)
    found: list[tuple[str, int, int]] = []
    for _ in range(1000):  # bounded: 1000 batches of 500 rows
        rows = files.page(after, 500)
        found += [r for r in rows if scopes.allows(READ, r[0])]
        if len(found) > limit or len(rows) < 500:
            break
        after = rows[-1][0]
    return found[:limit], len(found) > limit


async def list_resources(request: web.Request, ops: NoteOperations, vault: str,
                         params: dict[str, Any]) -> dict[str, Any]:
    cursor = params.get("cursor") or ""
    if not isinstance(cursor, str) or (cursor and not cursor.startswith((NOTES_CURSOR, FILES_CURSOR))):
        raise RpcError(INVALID_PARAMS, "cursor must be a nextCursor this server gave")
    resources: list[dict[str, Any]] = []
    after_file = cursor[len(FILES_CURSOR):] if cursor.startswith(FILES_CURSOR) else ""
    if not cursor.startswith(FILES_CURSOR):
        page = ops.list_notes(limit=PAGE, cursor=cursor[len(NOTES_CURSOR):])  # list_notes' scope
        resources = [_note_resource(vault, n) for n in page["notes"]]
        if page["nextCursor"] is not None:
            return {"resources": resources, "nextCursor": NOTES_CURSOR + page["nextCursor"]}
    room = PAGE - len(resources)
    if room <= 0:  # a full page of notes: a next page only if there are attachments to show
        _, any_file = _attachments(ops, "", 0)
        return {"resources": resources, "nextCursor": FILES_CURSOR} if any_file else {"resources": resources}
    files, more = _attachments(ops, after_file, room)
    resources += [_file_resource(vault, *f) for f in files]
    result: dict[str, Any] = {"resources": resources}
    if more and files:
        result["nextCursor"] = FILES_CURSOR + files[-1][0]
    return result


def list_templates(vault: str) -> dict[str, Any]:
    return {"resourceTemplates": [{
        "uriTemplate": template_of(vault), "name": "file", "title": f"A file of the vault {vault}",
        "description": ("Any note (its text) or attachment (its bytes) of this vault by its path, e.g. "
                        "projects/plan.md. Complete `path` with completion/complete."),
    }]}


def not_found(exc: StetError, uri: str, modern: bool) -> RpcError:
    """A read refused: -32002 "resource not found" in the 2025 era (-32602 in 2026-07-28,
    which retired -32002), the Stet error object in ``data.error``."""
    code = INVALID_PARAMS if modern or exc.code != "not_found" else RESOURCE_NOT_FOUND
    return RpcError(code, exc.message, data={"uri": uri, "error": exc.to_dict()})


async def read_resource(request: web.Request, ops: NoteOperations, vault: str, params: dict[str, Any],
                        *, modern: bool) -> dict[str, Any]:
    uri = params.get("uri")
    path = path_of(vault, uri)
    assert isinstance(uri, str)
    try:
        if is_note_name(path, ops.extensions):
            note = ops.read_note(path)
            return {"contents": [{"uri": uri, "mimeType": content_type(path), "text": note["content"],
                                  "_meta": {"revision": note["revision"]}}]}
        return {"contents": [await _read_blob(request, ops, vault, uri, path)]}
    except StetError as exc:
        raise not_found(exc, uri, modern) from None


def _read_all(fd: int, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining > 0 and (chunk := os.read(fd, min(remaining, 1 << 20))):
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


async def _read_blob(request: web.Request, ops: NoteOperations, vault: str, uri: str,
                     path: str) -> dict[str, Any]:
    daemon = _daemon(request)
    access = file_access(request.app, daemon, ops.service.vault_id)
    fd, f = await access.open(ops, path)  # the read scope first: a refusal says nothing of the disk
    try:
        url = (f"http://127.0.0.1:{daemon.api_port}/v1/vaults/{urllib.parse.quote(vault, safe='')}"
               f"/files/{urllib.parse.quote(f.path)}")
        if f.size > BLOB_MAX_BYTES:
            raise StetError(f"{path} is {f.size} bytes; resources/read answers files of at most "
                            f"{BLOB_MAX_BYTES} bytes: GET {url} with your token for its bytes",
                            code="too_large", size=f.size, limit=BLOB_MAX_BYTES, url=url)
        data = await asyncio.to_thread(_read_all, fd, f.size)
    finally:
        os.close(fd)
    blob = await asyncio.to_thread(lambda: base64.b64encode(data).decode("ascii"))
    return {"uri": uri, "mimeType": content_type(path), "blob": blob, "_meta": {"size": len(data)}}


def complete_paths(ops: NoteOperations, value: str) -> dict[str, Any]:
    """Note paths starting with ``value`` that the token may read, in path order."""
    scopes = ops.principal.scopes
    values: list[str] = []
    after = ""
    more = False
    for _ in range(100):  # bounded: 100 batches of 500 rows
        rows = ops.store.live_notes(prefix=value, after=after, limit=500)
        for row in rows:
            if scopes.allows(READ, row.path):
                if len(values) == COMPLETION_MAX:
                    more = True
                    break
                values.append(row.path)
        if more or len(rows) < 500:
            break
        after = rows[-1].path
    return {"completion": {"values": values, "hasMore": more}}
