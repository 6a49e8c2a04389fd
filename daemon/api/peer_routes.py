"""Owner-only API routes for pairing: invites, joins and the member list (SPEC §4.2)."""

from __future__ import annotations

import dataclasses
import socket
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon.api.keys import principal_of
from stet.daemon.api.rest import json_body
from stet.daemon.peers import invite_crypto
from stet.sync.device_ids import normalize_device_id
from stet.sync.errors import NotFound, StetError
from stet.sync.invites import Invite

if TYPE_CHECKING:
    from stet.daemon.app.runtime import Daemon, VaultRuntime


def _daemon(request: web.Request) -> Daemon:
    from stet.daemon.api.app import DAEMON_KEY

    if principal_of(request).kind != "owner":
        raise StetError("only the owner token may manage devices", code="forbidden")
    daemon: Daemon = request.app[DAEMON_KEY]  # type: ignore[assignment]
    if daemon.peers is None or daemon.identity is None:
        raise StetError("peer sync is not running", code="unavailable")
    return daemon


def default_addresses(port: int) -> list[str]:
    """This machine's addresses for an invite: non-loopback IPv4 first, loopback last."""
    found: list[str] = []
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            ip = str(info[4][0])
            if not ip.startswith("127.") and ip not in found:
                found.append(ip)
    except OSError:
        pass
    return [f"{ip}:{port}" for ip in found] + [f"127.0.0.1:{port}"]


async def create_invite(request: web.Request) -> web.Response:
    daemon = _daemon(request)
    runtime = daemon.vault(request.match_info["vault"])
    body = await json_body(request)
    made = await make_invite(daemon, runtime, body.get("ttlHours", 24), body.get("addresses"))
    return web.json_response(made)


async def make_invite(daemon: Daemon, runtime: VaultRuntime, hours: Any, addresses: Any) -> dict[str, Any]:
    """A new invite to ``runtime``'s vault (also the web page's devices page)."""
    if not isinstance(hours, int | float) or isinstance(hours, bool) or not 0 < hours <= 24 * 30:
        raise StetError("ttlHours must be a number of hours between 0 and 720")
    addresses = addresses or list(daemon.config.peer.advertise)
    if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
        raise StetError("addresses must be a list of HOST:PORT strings")
    assert daemon.peers is not None
    assert daemon.identity is not None
    if not addresses:
        addresses = default_addresses(daemon.peers.port)
    key = await invite_crypto.new_invite_key()  # in a child: no cryptography here (P7)
    secret = daemon.registry.create_invite(runtime.entry.id, float(hours) * 3600, key)
    invite = Invite(
        runtime.entry.id,
        runtime.entry.name,
        secret,
        daemon.identity.device_id,
        tuple(addresses),
        time.time() + float(hours) * 3600,
    )
    return {
        "invite": invite.encode(),
        "vault": runtime.entry.name,
        "expiresAt": invite.expires_at,
        "addresses": addresses,
    }


async def run_joins(request: web.Request) -> web.Response:
    daemon = _daemon(request)
    return web.json_response({"results": await daemon.process_pending_joins()})


async def list_devices(request: web.Request) -> web.Response:
    daemon = _daemon(request)
    return web.json_response(devices_json(daemon, daemon.vault(request.match_info["vault"])))


def devices_json(daemon: Daemon, runtime: VaultRuntime) -> dict[str, Any]:
    """The vault's members with their link state (also the web page's devices page)."""
    assert daemon.peers is not None
    assert daemon.identity is not None
    links = daemon.peers.links
    devices = []
    for device, m in sorted(runtime.service.index.members().items()):
        live = links.get(device)
        devices.append(
            {
                "device": device,
                "name": m.name,
                "platform": m.platform,  # declared by the member: the names it can hold
                "addedBy": m.added_by,
                "addedAt": m.added_at,
                "removed": m.removed,
                "self": device == daemon.identity.device_id,
                "connected": live is not None and not live.link.closed,
                "lastSeen": time.time() if live is not None else daemon.peers.last_seen.get(device),
                "addresses": daemon.peers.known_addresses.get(device, []),
            }
        )
    return {"vault": runtime.entry.name, "devices": devices}


async def remove_device(request: web.Request) -> web.Response:
    daemon = _daemon(request)
    runtime = daemon.vault(request.match_info["vault"])
    body = await json_body(request)
    return web.json_response(remove_member(daemon, runtime, body.get("device", "")))


def remove_member(daemon: Daemon, runtime: VaultRuntime, raw_device: Any) -> dict[str, Any]:
    """Mark a device removed from the vault (also the web page's devices page)."""
    try:
        device = normalize_device_id(str(raw_device))
    except ValueError as exc:
        raise StetError(str(exc)) from None
    assert daemon.identity is not None
    assert daemon.peers is not None
    if device == daemon.identity.device_id:
        raise StetError("this device cannot remove itself")
    member = runtime.service.index.members().get(device)
    if member is None:
        raise NotFound(f"{device} is not a member of {runtime.entry.name}")
    runtime.service.add_member(dataclasses.replace(member, removed=True))
    daemon.peers.membership_changed()
    return {"device": device, "removed": True}


def register(app: web.Application) -> None:
    app.router.add_post("/v1/vaults/{vault}/invite", create_invite)
    app.router.add_post("/v1/join", run_joins)
    app.router.add_get("/v1/vaults/{vault}/devices", list_devices)
    app.router.add_post("/v1/vaults/{vault}/devices/remove", remove_device)
