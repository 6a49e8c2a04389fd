"""``DELETE /v1/vaults/{vault}``: unregister a vault while the daemon runs (``stet vaults remove``).

The vault leaves ``home.db`` (with its agent tokens, open invites and a pending join), the
daemon stops serving it at once (watcher, bridge, store closed; pending disk writes flushed
first) and links to peers that shared it are restarted so they renegotiate without it. The
folder and its files, and the vault's store file (its versions), are left as they are.
Peers are not sent a message: they list this device as offline until removed there with
``stet devices remove`` (documented in docs/teams.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.sync.errors import StetError

from .rest_routes import PRINCIPAL_KEY

if TYPE_CHECKING:
    from .runtime import Daemon

logger = logging.getLogger(__name__)


def _daemon(request: web.Request) -> Daemon:
    from .http_api import DAEMON_KEY

    return request.app[DAEMON_KEY]  # type: ignore[return-value]


async def unregister_vault(daemon: Daemon, ref: str) -> dict[str, Any]:
    entry = daemon.registry.find(ref)
    tokens = daemon.registry.unregister(entry.id)
    runtime = daemon.vaults.pop(entry.id, None)
    if runtime is not None:
        await daemon._close_vault(runtime)
    hub = daemon.peers
    if hub is not None:
        for live in list(hub.links.values()):
            if entry.id in live.link.vaults:
                hub._end(live, "vault removed")
        hub.membership_changed()
    logger.info("vault %s (%s) unregistered; its folder %s is left as it is",
                entry.name, entry.id, entry.path)
    return {"vault": entry.name, "id": entry.id, "path": str(entry.path), "tokensRemoved": tokens,
            "wasOpen": runtime is not None}


async def delete_vault(request: web.Request) -> web.Response:
    if request[PRINCIPAL_KEY].kind != "owner":
        raise StetError("only the owner token may remove a vault", code="forbidden")
    return web.json_response(await unregister_vault(_daemon(request), request.match_info["vault"]))


def register(app: web.Application) -> None:
    app.router.add_delete("/v1/vaults/{vault}", delete_vault)
