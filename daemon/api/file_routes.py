"""REST faces of the files API (SPEC §6.12): ``GET /v1/vaults/{vault}/files?prefix=``
lists notes and attachments; ``GET /v1/vaults/{vault}/files/{path}`` streams one file's
bytes with its content type. Read scope applies to both; nothing is written."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from stet.daemon.api.keys import DAEMON_KEY, principal_of
from stet.daemon.api.rest import int_param
from stet.daemon.ops.files import VaultFileAccess, content_type
from stet.daemon.ops.notes import NoteOperations

if TYPE_CHECKING:
    from stet.daemon.ops.host import ApiHost

CHUNK = 1 << 20
# Each vault's file access (its hash cache), kept while the app runs.
FILES_KEY = web.AppKey("stet.files", dict)


def _daemon(request: web.Request) -> ApiHost:
    return request.app[DAEMON_KEY]


def operations_of(request: web.Request) -> NoteOperations:
    return _daemon(request).operations(request.match_info["vault"], principal_of(request))


def file_access(app: web.Application, daemon: ApiHost, vault_id: str) -> VaultFileAccess:
    """The vault's file access (created on first use, kept while the daemon runs)."""
    known: dict[str, VaultFileAccess] = app[FILES_KEY]
    runtime = daemon.vault(vault_id)
    root = Path(runtime.entry.path).resolve()
    access = known.get(vault_id)
    if access is None or access.root != root:
        access = VaultFileAccess(root, daemon.config.notes.extensions, daemon.config.attachments.max_bytes)
        known[vault_id] = access
    return access


async def list_files(request: web.Request) -> web.Response:
    ops = operations_of(request)
    access = file_access(request.app, _daemon(request), ops.service.vault_id)
    page = await access.page(ops, prefix=request.query.get("prefix", ""),
                             cursor=request.query.get("cursor", ""),
                             limit=int_param(request, "limit", 1000, 1, 10000))
    # A page of 10,000 files is ~2 MB of JSON (~70 ms to encode here): not on the loop.
    body = await asyncio.to_thread(json.dumps, page, ensure_ascii=False)
    return web.Response(text=body, content_type="application/json")


async def get_file(request: web.Request) -> web.StreamResponse:
    ops = operations_of(request)
    access = file_access(request.app, _daemon(request), ops.service.vault_id)
    fd, f = await access.open(ops, request.match_info["path"])
    loop = asyncio.get_running_loop()
    try:
        resp = web.StreamResponse(headers={
            "Content-Type": content_type(f.path),
            "X-Content-Type-Options": "nosniff",
            # Bytes from a vault are never run as a page of this origin (an SVG or HTML file).
            "Content-Security-Policy": "sandbox; default-src 'none'",
            "Cache-Control": "no-store",
        })
        resp.content_length = f.size
        await resp.prepare(request)
        if request.method != "HEAD":
            remaining = f.size
            while remaining > 0:
                chunk = await loop.run_in_executor(None, os.read, fd, min(CHUNK, remaining))
                if not chunk:
                    break  # the file shrank: the client sees a short body (Content-Length)
                await resp.write(chunk)
                remaining -= len(chunk)
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp
    finally:
        os.close(fd)


def register(app: web.Application) -> None:
    app[FILES_KEY] = {}
    base = "/v1/vaults/{vault}"
    app.router.add_get(f"{base}/files", list_files)
    app.router.add_get(base + "/files/{path:.+}", get_file)
