"""The aiohttp application keys, in a module of their own so that route modules can import
them at the top (``http_api`` imports the route modules; a key imported from it had to be
imported inside each handler call, measurably on P2's append path: issue 18)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from stet.sync.errors import StetError

if TYPE_CHECKING:
    from stet.daemon.ops.notes import Principal

DAEMON_KEY = web.AppKey("daemon", object)
PRINCIPAL_KEY = "stet.principal"  # set by the guard (api/app.py) or the page's ui_page


def principal_of(request: web.Request) -> Principal:
    """Who is calling, as the guard found it. Typed, and closed by default: a request that
    reached a handler without one (a route the guard let through for its own auth, reached
    by a path the router read differently) is a 401, never a KeyError's 500 or a default."""
    from stet.daemon.ops.notes import Principal

    found = request.get(PRINCIPAL_KEY)
    if not isinstance(found, Principal):
        raise StetError("an Authorization: Bearer token is required", code="unauthorized")
    return found
