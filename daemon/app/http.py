"""The daemon's aiohttp application, composed (issue 31 item 3): the API's guard and routes
(``api/``), the web page (``ui/``) and the live sockets (``live/``), three faces that do not
import each other. Each reaches the daemon through ``ops/host.py``'s ``DAEMON_KEY``; this is
where the ``Daemon`` is put under it, so mypy checks here that it is an ``ApiHost``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from stet.daemon.api import app as api_app
from stet.daemon.live import routes as live_routes
from stet.daemon.ops.host import DAEMON_KEY, ApiHost
from stet.daemon.ui import routes as ui_routes

if TYPE_CHECKING:
    from stet.daemon.app.runtime import Daemon


def build_app(daemon: Daemon, *, client_max_size: int) -> web.Application:
    host: ApiHost = daemon  # the faces see the daemon through its door, nothing more
    app = web.Application(
        # The live socket authenticates itself (?token= or the page's cookie): SPEC §6.13.
        middlewares=[api_app.make_guard_middleware(host, own_auth=(live_routes.live_note,))],
        client_max_size=client_max_size,
    )
    app[DAEMON_KEY] = host
    # In this order, as before the split: the page first, then the API, the live sockets last.
    ui_routes.register(app)  # the web page (SPEC §6.14)
    api_app.register(app)
    live_routes.register(app, daemon.config.live)
    return app
