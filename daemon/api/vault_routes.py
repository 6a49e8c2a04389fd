"""``DELETE /v1/vaults/{vault}``: unregister a vault while the daemon runs (``stet vaults remove``).

The vault leaves ``home.db`` (with its agent tokens, open invites and a pending join), the
daemon stops serving it at once (watcher, bridge, store closed; pending disk writes flushed
first) and links to peers that shared it are restarted so they renegotiate without it. The
folder and its files, and the vault's store file (its versions), are left as they are.

Peers are told this device left (SPEC §7): before the vault closes, this device marks its
own member entry in the vault index ``removed`` — the same record ``stet devices remove``
writes for another device — and waits (at most ``LEAVE_WAIT_S``) until every connected link
that shares the vault has sent that update. A peer then lists the device as removed, drops
the link and stops trusting its certificate for the vault. Peers not connected at that
moment hear it from any other member that did (the index replicates like any note); if none
was connected, they list the device as offline until removed there (``tellTo`` in the
answer says which devices were told).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon.api.keys import DAEMON_KEY, principal_of
from stet.sync.errors import StetError

if TYPE_CHECKING:
    from stet.daemon.ops.host import ApiHost

logger = logging.getLogger(__name__)

LEAVE_WAIT_S = 5.0


def _daemon(request: web.Request) -> ApiHost:
    return request.app[DAEMON_KEY]


async def _say_goodbye(daemon: ApiHost, vault_id: str) -> list[str]:
    """Mark this device removed in the vault's index and wait until the connected links of
    the vault have sent it; returns the devices whose links carried it."""
    runtime = daemon.vaults.get(vault_id)
    hub, identity = daemon.peers, daemon.identity
    if runtime is None or hub is None or identity is None:
        return []
    me = runtime.service.index.members().get(identity.device_id)
    if me is None or me.removed:
        return []
    members = runtime.service.index.members()
    if not any(d != identity.device_id and not m.removed for d, m in members.items()):
        return []
    with runtime.service.write("pairing"):
        runtime.service.add_member(dataclasses.replace(me, removed=True))
    return await hub.flush_vault_links(vault_id, LEAVE_WAIT_S)


async def unregister_vault(daemon: ApiHost, ref: str) -> dict[str, Any]:
    entry = daemon.registry.find(ref)
    told = await _say_goodbye(daemon, entry.id)
    tokens = daemon.registry.unregister(entry.id)
    was_open = await daemon.close_vault(entry.id)
    hub = daemon.peers
    if hub is not None:
        for live in list(hub.links.values()):
            if entry.id in live.link.vaults:
                hub._end(live, "vault removed")
        hub.membership_changed()
    logger.info("vault %s (%s) unregistered; its folder %s is left as it is",
                entry.name, entry.id, entry.path)
    return {"vault": entry.name, "id": entry.id, "path": str(entry.path), "tokensRemoved": tokens,
            "wasOpen": was_open, "toldDevices": told}


async def delete_vault(request: web.Request) -> web.Response:
    if principal_of(request).kind != "owner":
        raise StetError("only the owner token may remove a vault", code="forbidden")
    return web.json_response(await unregister_vault(_daemon(request), request.match_info["vault"]))


def register(app: web.Application) -> None:
    app.router.add_delete("/v1/vaults/{vault}", delete_vault)
