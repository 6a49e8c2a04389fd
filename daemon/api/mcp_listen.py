"""``subscriptions/listen`` (MCP 2026-07-28): the answer to one POST is a stream of change
notifications for the resources the client named, until it hangs up.

2026-07-28 replaced ``resources/subscribe`` and the standing GET stream with this: the client
POSTs ``subscriptions/listen`` with a filter (``resourceSubscriptions``: URIs;
``resourcesListChanged``), the server answers ``text/event-stream``, first
``notifications/subscriptions/acknowledged`` with what it agreed to, then
``notifications/resources/updated`` / ``…/list_changed``, each tagged with the listen
request's id under ``_meta["io.modelcontextprotocol/subscriptionId"]``. When the daemon stops,
the stream ends with the request's result (a graceful close); a revoked token ends it at once
(``daemon.streams``, issue 33). Nothing is replayed: a client that listens again reads again.

Scope: a URI the token may not read is left out of the acknowledgment (never notified), and
every event passes ``visible_event`` first, as on the REST SSE stream. A URI ending in ``/``
(a folder, or the vault: ``stet://notes/``) hears of every note under it.
The handshake era (2025-11-25 and before) has no stream here (no sessions, no GET stream):
there ``resources.subscribe`` is false and ``resources/subscribe`` is refused, naming this.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from stet.daemon.api.mcp_resources import path_of, uri_of, vault_prefix
from stet.daemon.api.mcp_versions import INVALID_PARAMS, SUBSCRIPTION_ID_KEY, RpcError, modern_result
from stet.daemon.ops.notes import NoteOperations
from stet.daemon.ops.read_scope import visible_event
from stet.sync.permissions import READ

if TYPE_CHECKING:
    from stet.daemon.app.runtime import Daemon

KEEPALIVE_S = 15.0
END_GRACE_S = 1.0  # a client that reads nothing is cut off this long after its token ended


class Filter:
    """What one listen stream agreed to send."""

    def __init__(self, ops: NoteOperations, vault: str, requested: Any) -> None:
        if not isinstance(requested, dict):
            raise RpcError(INVALID_PARAMS, "subscriptions/listen needs params.notifications (an object)")
        uris = requested.get("resourceSubscriptions") or []
        if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
            raise RpcError(INVALID_PARAMS, "resourceSubscriptions must be a list of URIs")
        scopes = ops.principal.scopes
        self.exact: dict[str, str] = {}  # path -> the URI as the client wrote it
        self.folders: dict[str, str] = {}  # path prefix ("" for the vault) -> URI
        self.honored_uris: list[str] = []
        for uri in uris[:1000]:
            if uri == vault_prefix(vault):
                path = "/"  # the whole vault
            else:
                try:
                    path = path_of(vault, uri)
                except RpcError:
                    continue  # not ours: not honored
            if path.endswith("/"):
                self.folders[path.lstrip("/")] = uri
            elif scopes.allows(READ, path):
                self.exact[path] = uri
            else:
                continue  # out of scope: never honored, never notified
            self.honored_uris.append(uri)
        self.list_changed = requested.get("resourcesListChanged") is True

    def honored(self) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        if self.honored_uris:
            shown["resourceSubscriptions"] = self.honored_uris
        if self.list_changed:
            shown["resourcesListChanged"] = True
        return shown

    def uri_for(self, vault: str, path: Any) -> str | None:
        if not isinstance(path, str):
            return None
        exact = self.exact.get(path)
        if exact is not None:
            return exact
        if any(path.startswith(prefix) for prefix in self.folders):
            return uri_of(vault, path)  # a sub-resource of a subscribed folder
        return None


def notifications_for(flt: Filter, vault: str, type_: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    """The notifications (method, params) one vault event makes for this stream."""
    out: list[dict[str, Any]] = []
    if type_ not in ("note.changed", "note.moved", "note.deleted"):
        return out
    for key in ("path", "oldPath"):
        uri = flt.uri_for(vault, data.get(key))
        if uri is not None:
            out.append({"method": "notifications/resources/updated", "params": {"uri": uri}})
    if flt.list_changed and (type_ != "note.changed" or data.get("created")):
        out.append({"method": "notifications/resources/list_changed", "params": {}})
    return out


def _frame(message: dict[str, Any]) -> bytes:
    return f"event: message\ndata: {json.dumps(message, ensure_ascii=False)}\n\n".encode()


async def listen(request: web.Request, daemon: Daemon, ops: NoteOperations, vault: str, msg_id: Any,
                 params: dict[str, Any]) -> web.StreamResponse:
    flt = Filter(ops, vault, params.get("notifications"))
    meta = {SUBSCRIPTION_ID_KEY: msg_id}
    vault_id = ops.service.vault_id
    scopes = ops.principal.scopes
    queue = daemon.events.subscribe(vault_id)  # before the ack: nothing between is lost
    ended: list[str] = []
    cut_off: list[asyncio.TimerHandle] = []

    def end(reason: str) -> None:
        ended.append(reason)
        with contextlib.suppress(asyncio.QueueFull):
            queue.put_nowait(None)
        transport = request.transport
        if transport is not None:
            cut_off.append(asyncio.get_running_loop().call_later(END_GRACE_S, transport.close))

    forget = daemon.streams.add(ops.principal.holder, end)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                       "X-Accel-Buffering": "no"})
    graceful = False
    try:
        await resp.prepare(request)
        await resp.write(_frame({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                                 "params": {"notifications": flt.honored(), "_meta": meta}}))
        while not ended:
            try:
                event = await asyncio.wait_for(queue.get(), timeout=KEEPALIVE_S)
            except TimeoutError:
                if not daemon.events.is_subscribed(queue):
                    break  # cut off as a slow reader: the client listens again
                await resp.write(b": keepalive\n\n")
                continue
            if event is None:
                graceful = not ended  # the daemon stopping, not a credential ending
                break
            shown = visible_event(scopes, event.type, event.data)
            if shown is None:
                continue
            for note in notifications_for(flt, vault, event.type, shown):
                note["params"]["_meta"] = meta
                await resp.write(_frame({"jsonrpc": "2.0", **note}))
        if graceful:
            result = modern_result("subscriptions/listen", {"_meta": meta})
            await resp.write(_frame({"jsonrpc": "2.0", "id": msg_id, "result": result}))
        elif ended:
            error = {"code": -32600, "message": f"subscription closed: {ended[0]}"}
            await resp.write(_frame({"jsonrpc": "2.0", "id": msg_id, "error": error}))
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        forget()
        daemon.events.unsubscribe(queue)
    with contextlib.suppress(ConnectionResetError):
        await resp.write_eof()
    for handle in cut_off:
        handle.cancel()
    return resp
