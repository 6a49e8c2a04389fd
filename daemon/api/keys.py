"""The aiohttp application keys, imported at the top of the route modules (``api/app.py``
imports the route modules; a key imported from it had to be imported inside each handler
call, measurably on P2's append path: issue 18). They live in the faces' door,
``ops/host.py``, so the page and the live socket read the same typed keys without
importing api/; this module keeps api/'s imports short.
"""

from __future__ import annotations

from stet.daemon.ops.host import DAEMON_KEY, PRINCIPAL_KEY, principal_of

__all__ = ["DAEMON_KEY", "PRINCIPAL_KEY", "principal_of"]
