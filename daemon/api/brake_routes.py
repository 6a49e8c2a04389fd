"""REST routes of the burst brake (SPEC §5.6): what ``stet held``, ``stet release`` and
``stet revert`` call. Owner only: releasing a brake is a person's decision, never an
agent's.

- ``GET  /v1/vaults/{vault}/held[?all=1]`` → ``{"held": [...], "engaged": [...]}``
- ``POST /v1/vaults/{vault}/held/release`` ``{"ids": [..]}`` or ``{"all": true}``
- ``POST /v1/vaults/{vault}/held/revert``  ``{"ids": [..]}`` or ``{"all": true}`` →
  ``{"reverted": [...], "skipped": [{id, path, reason}]}``: a note that came back after
  the hold (recreated, or written again) is never overwritten; it is skipped

Held attachment changes (``"target": "attachment"``) are rows of the same list: released
to the folder side, reverted by ``daemon/attachments/brake.py`` (their bytes written back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon.api.keys import DAEMON_KEY, principal_of
from stet.daemon.api.rest import json_body, only_fields
from stet.daemon.base.timestamps import iso
from stet.daemon.ops.held import brake_of, release_held, revert_held
from stet.daemon.safety.brake import Brake, held_json, is_agent
from stet.sync.errors import StetError
from stet.sync.json_input import row_id

if TYPE_CHECKING:
    from stet.daemon.ops.host import VaultHost


def owner_brake(request: web.Request) -> Brake:
    if principal_of(request).kind != "owner":
        raise StetError("only the owner may see or release held changes", code="forbidden")
    return brake_of(_vault(request))


def _vault(request: web.Request) -> VaultHost:
    return request.app[DAEMON_KEY].vault(request.match_info["vault"])


def _ids(body: dict[str, Any]) -> list[int] | None:
    """``{"all": true}`` → None (everything); ``{"ids": [1, 2]}`` → those."""
    only_fields(body, "ids", "all")
    every = body.get("all", False)
    ids = body.get("ids")
    if not isinstance(every, bool):
        raise StetError("all must be true or false", code="bad_request")
    if every and ids is not None:
        raise StetError("give ids or all, not both", code="bad_request")
    if every:
        return None
    if (not isinstance(ids, list) or not ids
            or not all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids)):
        raise StetError("ids must be a non-empty list of held change ids (or give all: true)",
                        code="bad_request")
    if len(ids) > 100_000:
        raise StetError("too many ids in one call", code="bad_request")
    return [row_id(i, "held change id") for i in ids]  # past 2^63: bad_request, not a 500


async def list_held(request: web.Request) -> web.Response:
    brake = owner_brake(request)
    every = request.query.get("all", "") in ("1", "true", "yes")
    held = [held_json(h, brake.policy) for h in brake.changes(include_resolved=every)]
    engaged = [
        {"source": source, "since": iso(since), "held": brake.held.count_held(source),
         "refusesWrites": is_agent(source)}
        for source, since in brake.engaged().items()
    ]
    return web.json_response({"held": held, "engaged": engaged})


async def release(request: web.Request) -> web.Response:
    brake = owner_brake(request)
    ids = _ids(await json_body(request))
    released = await release_held(_vault(request), ids)
    return web.json_response({"released": [held_json(h, brake.policy) for h in released]})


async def revert(request: web.Request) -> web.Response:
    ids = _ids(await json_body(request))  # the body is read first, then the owner is checked
    owner_brake(request)
    reverted, skipped = await revert_held(_vault(request), ids)
    return web.json_response({"reverted": reverted, "skipped": skipped})


def register(app: web.Application) -> None:
    base = "/v1/vaults/{vault}/held"
    app.router.add_get(base, list_held)
    app.router.add_post(base + "/release", release)
    app.router.add_post(base + "/revert", revert)
