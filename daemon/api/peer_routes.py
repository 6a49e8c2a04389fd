"""Owner-only API routes for pairing: invites, joins and the member list (SPEC §4.2); what they
do is ``ops/devices.py``'s, shared with the web page."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from stet.daemon.api.keys import DAEMON_KEY, principal_of
from stet.daemon.api.rest import json_body
from stet.daemon.ops.devices import devices_json, make_invite, remove_member
from stet.sync.errors import StetError

if TYPE_CHECKING:
    from stet.daemon.ops.host import ApiHost


def _daemon(request: web.Request) -> ApiHost:
    if principal_of(request).kind != "owner":
        raise StetError("only the owner token may manage devices", code="forbidden")
    daemon: ApiHost = request.app[DAEMON_KEY]
    if daemon.peers is None or daemon.identity is None:
        raise StetError("peer sync is not running", code="unavailable")
    return daemon


async def create_invite(request: web.Request) -> web.Response:
    daemon = _daemon(request)
    runtime = daemon.vault(request.match_info["vault"])
    body = await json_body(request)
    made = await make_invite(daemon, runtime, body.get("ttlHours", 24), body.get("addresses"))
    return web.json_response(made)


async def run_joins(request: web.Request) -> web.Response:
    daemon = _daemon(request)
    return web.json_response({"results": await daemon.process_pending_joins()})


async def list_devices(request: web.Request) -> web.Response:
    daemon = _daemon(request)
    return web.json_response(devices_json(daemon, daemon.vault(request.match_info["vault"])))


async def remove_device(request: web.Request) -> web.Response:
    daemon = _daemon(request)
    runtime = daemon.vault(request.match_info["vault"])
    body = await json_body(request)
    return web.json_response(remove_member(daemon, runtime, body.get("device", "")))


def register(app: web.Application) -> None:
    app.router.add_post("/v1/vaults/{vault}/invite", create_invite)
    app.router.add_post("/v1/join", run_joins)
    app.router.add_get("/v1/vaults/{vault}/devices", list_devices)
    app.router.add_post("/v1/vaults/{vault}/devices/remove", remove_device)
