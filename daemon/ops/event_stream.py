"""The event stream of a vault (SPEC §6.9), one implementation for the faces that serve it:
REST's ``GET /v1/vaults/{vault}/events`` and the web page's live activity feed. The face
checks who is asking and hands over the operations it got for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web

from stet.daemon.ops.host import ApiHost
from stet.daemon.ops.notes import NoteOperations
from stet.daemon.ops.read_scope import visible_event
from stet.sync.errors import StetError

KEEPALIVE_S = 15.0
END_GRACE_S = 1.0  # a stream whose credential ended and that does not drain is cut off after this


async def stream_events(request: web.Request, daemon: ApiHost, ops: NoteOperations) -> web.StreamResponse:
    """The vault of ``ops`` as Server-Sent Events to ``ops.principal``, from now or after
    ``Last-Event-ID`` (a resume; 0: everything still buffered), keepalive comments every
    ``KEEPALIVE_S``, every event shown only as the caller's read scope allows, and the
    stream ended when the caller's credential ends."""
    vault_id = ops.service.vault_id
    scopes = ops.principal.scopes
    raw_last = request.headers.get("Last-Event-ID") or request.query.get("lastEventId")
    try:
        # Without Last-Event-ID the stream starts now (issue 34): a new client is not sent
        # the whole buffer (up to 10,000 past events); ``Last-Event-ID: 0`` asks for it.
        last = daemon.events.latest_id if raw_last is None else int(raw_last)
    except ValueError:
        raise StetError("Last-Event-ID must be a number", code="bad_request") from None
    queue = daemon.events.subscribe(vault_id)
    resp = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
    })
    await resp.prepare(request)
    ended: list[str] = []  # why the credential ended (revoked, signed out): the stream stops
    cut_off: list[asyncio.TimerHandle] = []

    def end(reason: str) -> None:
        ended.append(reason)
        with contextlib.suppress(asyncio.QueueFull):  # a full queue wakes the loop anyway
            queue.put_nowait(None)
        transport = request.transport
        if transport is not None:  # a client that reads nothing is cut off in a second
            cut_off.append(asyncio.get_running_loop().call_later(END_GRACE_S, transport.close))

    forget = daemon.streams.add(ops.principal.holder, end)

    async def send(event_id: int, type_: str, data: dict[str, Any]) -> None:
        payload = json.dumps(data, ensure_ascii=False)
        await resp.write(f"id: {event_id}\nevent: {type_}\ndata: {payload}\n\n".encode())

    try:
        await resp.write(b": stet events\n\n")
        for past in daemon.events.replay(vault_id, last):
            if ended:
                break
            shown = visible_event(scopes, past.type, past.data)  # every path it names
            if shown is not None:
                await send(past.id, past.type, shown)
                last = past.id
        while not ended:
            try:
                event = await asyncio.wait_for(queue.get(), timeout=KEEPALIVE_S)
            except TimeoutError:
                if not daemon.events.is_subscribed(queue):
                    break
                await resp.write(b": keepalive\n\n")
                continue
            if event is None or ended:
                break
            shown = visible_event(scopes, event.type, event.data) if event.id > last else None
            if shown is not None:
                await send(event.id, event.type, shown)
                last = event.id
        if ended:  # said as a comment: EventSource ignores it, a person reading the stream sees it
            await resp.write(f": closed: {ended[0]}\n\n".encode())
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
