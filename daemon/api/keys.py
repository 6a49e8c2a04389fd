"""The aiohttp application keys, in a module of their own so that route modules can import
them at the top (``http_api`` imports the route modules; a key imported from it had to be
imported inside each handler call, measurably on P2's append path: issue 18)."""

from __future__ import annotations

from aiohttp import web

DAEMON_KEY = web.AppKey("daemon", object)
