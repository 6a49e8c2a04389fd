"""REST faces of snapshot reads and promotion (SPEC §6.4).

- ``POST /v1/vaults/{vault}/snapshots`` → 201 ``{snapshot, at, expiresAt}``; the snapshot
  is then passed as ``?snapshot=`` to ``GET /notes``, ``GET /notes/{path}`` and ``GET /search``.
- ``GET  /v1/vaults/{vault}/conflicts/{id}``: what a refused write attempted, beside the
  note now (``stet conflicts show ID``). Owner only.
- ``POST /v1/vaults/{vault}/conflicts/{id}/apply``: promote it (``stet conflicts apply ID``).
  Owner only.
"""

from __future__ import annotations

from aiohttp import web

from stet.daemon.api.rest import json_body, only_fields, operations_of
from stet.daemon.ops import promotion


async def open_snapshot(request: web.Request) -> web.Response:
    ops = operations_of(request)
    only_fields(await json_body(request))
    return web.json_response(ops.open_snapshot(), status=201)


async def show_conflict(request: web.Request) -> web.Response:
    ops = operations_of(request)
    return web.json_response(promotion.show(ops, request.match_info["id"]))


async def apply_conflict(request: web.Request) -> web.Response:
    ops = operations_of(request)
    only_fields(await json_body(request))
    return web.json_response(promotion.promote(ops, request.match_info["id"]))


def register(app: web.Application) -> None:
    base = "/v1/vaults/{vault}"
    app.router.add_post(f"{base}/snapshots", open_snapshot)
    app.router.add_get(base + "/conflicts/{id}", show_conflict)
    app.router.add_post(base + "/conflicts/{id}/apply", apply_conflict)
