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

from stet.daemon.ops.event_feed import event_feed
from stet.daemon.ops.host import ApiHost
from stet.daemon.ops.notes import NoteOperations
from stet.daemon.ops.read_scope import visible_event
from stet.sync.errors import StetError

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
    resp = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
    })
    await resp.prepare(request)
    cut_off: list[asyncio.TimerHandle] = []

    def cut(_reason: str) -> None:
        transport = request.transport
        if transport is not None:  # a client that reads nothing is cut off in a second
            cut_off.append(asyncio.get_running_loop().call_later(END_GRACE_S, transport.close))

    async def send(event_id: int, type_: str, data: dict[str, Any]) -> None:
        payload = json.dumps(data, ensure_ascii=False)
        await resp.write(f"id: {event_id}\nevent: {type_}\ndata: {payload}\n\n".encode())

    async def keepalive() -> None:
        await resp.write(b": keepalive\n\n")

    try:
        async with event_feed(daemon.events, daemon.streams, vault_id, ops.principal.holder,
                              on_end=cut) as feed:
            await resp.write(b": stet events\n\n")
            for past in daemon.events.replay(vault_id, last):
                if feed.ended:
                    break
                shown = visible_event(scopes, past.type, past.data)  # every path it names
                if shown is not None:
                    await send(past.id, past.type, shown)
                    last = past.id
            async for event in feed.events(keepalive):
                shown = visible_event(scopes, event.type, event.data) if event.id > last else None
                if shown is not None:
                    await send(event.id, event.type, shown)
                    last = event.id
            if feed.ended:  # said as a comment: EventSource ignores it, a person reading it sees it
                await resp.write(f": closed: {feed.ended[0]}\n\n".encode())
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    with contextlib.suppress(ConnectionResetError):
        await resp.write_eof()
    for handle in cut_off:
        handle.cancel()
    return resp
