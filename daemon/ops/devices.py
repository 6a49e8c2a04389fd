"""The vault's devices, for every face (SPEC §4.2): a new invite, the member list with
link state, a member removed. One implementation for the REST routes (``api/peer_routes.py``)
and the web page's devices page (``ui/admin.py``); the owner-only check is the face's.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from typing import Any

from stet.daemon.ops.host import ApiHost, VaultHost
from stet.daemon.peers import invite_crypto
from stet.sync.device_ids import normalize_device_id
from stet.sync.errors import NotFound, StetError
from stet.sync.invites import Invite


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


async def make_invite(daemon: ApiHost, runtime: VaultHost, hours: Any, addresses: Any) -> dict[str, Any]:
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


def devices_json(daemon: ApiHost, runtime: VaultHost) -> dict[str, Any]:
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


def remove_member(daemon: ApiHost, runtime: VaultHost, raw_device: Any) -> dict[str, Any]:
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
