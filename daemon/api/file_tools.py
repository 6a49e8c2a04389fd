"""MCP faces of the files API (SPEC §6.12): ``list_files`` and ``read_file``.

``read_file`` answers an image (PNG, JPEG, GIF, WebP) of at most 5 MB as MCP image
content, so a model can look at it; any other file as its metadata plus a
``resource_link`` to the REST URL that streams its bytes (the same token reads it).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import urllib.parse
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon.api.file_routes import file_access
from stet.daemon.api.keys import DAEMON_KEY
from stet.daemon.ops.files import describe
from stet.sync.vault_files import hash_fd

if TYPE_CHECKING:
    from stet.daemon.ops.host import ApiHost
    from stet.daemon.ops.notes import NoteOperations

IMAGE_MAX_BYTES = 5 * 1000 * 1000
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def _daemon(request: web.Request) -> ApiHost:
    return request.app[DAEMON_KEY]


def _result(structured: dict[str, Any], *extra: dict[str, Any]) -> dict[str, Any]:
    text = {"type": "text", "text": json.dumps(structured, ensure_ascii=False)}
    return {"content": [text, *extra], "structuredContent": structured, "isError": False}


async def list_files(request: web.Request, ops: NoteOperations, args: dict[str, Any]) -> dict[str, Any]:
    access = file_access(request.app, _daemon(request), ops.service.vault_id)
    page = await access.page(ops, prefix=args.get("prefix", ""), cursor=args.get("cursor", ""),
                             limit=args.get("limit", 100))
    return _result(page)


def _read_all(fd: int, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining > 0 and (chunk := os.read(fd, min(remaining, 1 << 20))):
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


async def read_file(request: web.Request, ops: NoteOperations, args: dict[str, Any]) -> dict[str, Any]:
    daemon = _daemon(request)
    access = file_access(request.app, daemon, ops.service.vault_id)
    fd, f = await access.open(ops, args["path"])
    try:
        meta = describe(f)
        vault = daemon.vault(ops.service.vault_id).entry.name
        url = (f"http://127.0.0.1:{daemon.api_port}/v1/vaults/{urllib.parse.quote(vault, safe='')}"
               f"/files/{urllib.parse.quote(f.path)}")
        meta["url"] = url
        if meta["contentType"] in IMAGE_TYPES and f.size <= IMAGE_MAX_BYTES:
            data = await asyncio.to_thread(_read_all, fd, f.size)
            meta["size"] = len(data)
            meta["sha256"] = hashlib.sha256(data).hexdigest()
            image = {"type": "image", "data": base64.b64encode(data).decode("ascii"),
                     "mimeType": meta["contentType"]}
            return _result(meta, image)
        if f.size <= access.max_bytes:
            meta["sha256"] = await asyncio.to_thread(hash_fd, fd)
        link = {"type": "resource_link", "uri": url, "name": os.path.basename(f.path),
                "title": f.path, "mimeType": meta["contentType"], "size": f.size,
                "description": ("Read with read_note (a note)" if f.kind == "note" else
                                "GET this URL with your token to stream the bytes")}
        return _result(meta, link)
    finally:
        os.close(fd)
