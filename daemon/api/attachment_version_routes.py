"""REST routes of attachment versions (SPEC §3.14, §7: ``stet versions/show/restore`` for a
path that is not a note):

- ``GET  /v1/vaults/{vault}/attachments/{path}/versions`` → ``{path, deleted, versions}``
- ``GET  /v1/vaults/{vault}/attachments/{path}/versions/{id}`` → the version's bytes,
  streamed, with the path's content type and ``X-Stet-Version-*`` headers
- ``POST /v1/vaults/{vault}/attachments/{path}/versions/{id}/restore`` → ``{path, versionId,
  sha256, changed}``: the bytes back at the path (what they replace is kept as a version)
"""

from __future__ import annotations

import asyncio
import contextlib
import re

from aiohttp import web

from stet.daemon.api.keys import DAEMON_KEY, principal_of
from stet.daemon.ops.attachment_versions import AttachmentVersionOps
from stet.daemon.ops.files import content_type
from stet.daemon.ops.notes import check_path
from stet.sync.errors import StetError

_TAIL = re.compile(r"^(?P<path>.+?)/versions(?:/(?P<vid>[^/]+)(?:/(?P<restore>restore))?)?$")
CHUNK = 1 << 20


def operations_of(request: web.Request) -> tuple[AttachmentVersionOps, str, str | None, bool]:
    daemon = request.app[DAEMON_KEY]
    face = daemon.attachment_versions(request.match_info["vault"], principal_of(request))  # checks the vault
    m = _TAIL.match(request.match_info["tail"])
    if m is None:
        raise StetError("ask /attachments/PATH/versions[/ID[/restore]]", code="not_found")
    path = check_path(m["path"])
    return face, path, m["vid"], m["restore"] is not None


async def get_versions(request: web.Request) -> web.StreamResponse:
    face, path, vid, restore = operations_of(request)
    if restore:
        raise StetError("restore is a POST", code="bad_request")
    if vid is None:
        return web.json_response(face.list_versions(path))
    v = face.version(path, vid)
    blobs = face.blob_of(v)
    resp = web.StreamResponse(headers={
        "Content-Type": content_type(path),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox; default-src 'none'",
        "Cache-Control": "no-store",
        "X-Stet-Version-Id": str(v.id),
        "X-Stet-Version-Kind": v.kind,
        "X-Stet-Version-Sha256": v.sha256,
        "X-Stet-Version-Executable": "1" if v.executable else "0",
    })
    resp.content_length = v.size
    await resp.prepare(request)
    if request.method != "HEAD":
        offset = 0
        while offset < v.size:
            chunk = await asyncio.to_thread(blobs.read_range, v.sha256, offset, min(CHUNK, v.size - offset))
            if not chunk:
                break
            await resp.write(chunk)
            offset += len(chunk)
    with contextlib.suppress(ConnectionResetError):
        await resp.write_eof()
    return resp


async def post_versions(request: web.Request) -> web.Response:
    face, path, vid, restore = operations_of(request)
    if vid is None or not restore:
        raise StetError("POST /attachments/PATH/versions/ID/restore restores a version", code="bad_request")
    return web.json_response(await face.restore(path, vid))


def register(app: web.Application) -> None:
    base = "/v1/vaults/{vault}/attachments/{tail:.+}"
    app.router.add_get(base, get_versions)
    app.router.add_post(base, post_versions)
