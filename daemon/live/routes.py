"""``/v1/vaults/{vault}/yjs/{path}``: a note live over the y-websocket protocol (SPEC §6.13).

The socket authenticates itself (``socket_principal``): browsers cannot set headers on a
WebSocket, so the token comes as ``?token=`` (an ``Authorization: Bearer`` header is
taken too). The Host and Origin checks of SPEC §6.3 have already run in the API's
guard middleware. Then: the vault (a token of another vault: 4404), the path, read scope
(4403), the note (4404) -- in that order, so nothing tells a token about a note it may not
read -- then the socket limits of ``[live]`` (4429). The server sends sync step 1 and the
awareness states it knows; a client's step 2 and updates go through ``LiveWritePath``
(the write path with scope, size and brake checks); its awareness is relayed to the
note's other clients.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from aiohttp import WSMsgType, web

from stet.daemon.live.rooms import (
    BAD_MESSAGE,
    BRAKE_ENGAGED,
    FORBIDDEN,
    FOREIGN_DOCUMENT,
    GOING_AWAY,
    INTERNAL,
    NOT_FOUND,
    NOT_TEXT,
    TOO_LARGE,
    TOO_MANY,
    TRY_AGAIN,
    UNAUTHORIZED,
    Connection,
    LiveHub,
    Room,
    close_reason,
)
from stet.daemon.live.write_path import LiveWritePath
from stet.daemon.ops.host import DAEMON_KEY
from stet.daemon.ops.notes import Principal, check_path
from stet.daemon.ops.sessions import session_principal
from stet.sync.config import LiveConfig
from stet.sync.errors import StetError
from stet.sync.permissions import READ
from stet.sync.yjs_protocol import (
    MSG_AWARENESS,
    MSG_QUERY_AWARENESS,
    MSG_SYNC,
    SYNC_STEP1,
    SYNC_STEP2,
    ProtocolError,
    awareness_message,
    decode_awareness,
    foreign_history,
    parse,
    sync_step1,
    sync_step2,
)

if TYPE_CHECKING:
    from stet.daemon.ops.host import ApiHost

logger = logging.getLogger(__name__)

HUB_KEY = web.AppKey("yjs_hub", LiveHub)
ROUTE = "/v1/vaults/{vault}/yjs/{path:.+}"
CLOSE_CODES = {"forbidden": FORBIDDEN, "not_found": NOT_FOUND, "too_large": TOO_LARGE,
               "brake_engaged": BRAKE_ENGAGED, "not_text": NOT_TEXT}


def socket_principal(daemon: ApiHost, request: web.Request) -> tuple[Principal, str] | None:
    """Who opens a live socket, and the source its writes are attributed to.

    The one place a way in is decided: ``?token=`` (agent or owner token), a bearer
    header, or else the web page's session cookie (``ops/sessions.py``: the owner, source "ui").
    The guard has already applied the Origin rule, so only the daemon's own page gets here
    with a cookie.
    """
    token = request.query.get("token", "")
    if not token and "Authorization" not in request.headers:
        page = session_principal(request)
        if page is not None:
            return page, page.source
    if not token:
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        token = credentials.strip() if scheme.lower() == "bearer" else ""
    if not token or not token.isascii():
        return None
    principal = daemon.authenticate(token)
    if principal is None:
        return None
    return principal, principal.source


async def _refuse(ws: web.WebSocketResponse, code: int, reason: str) -> web.WebSocketResponse:
    await ws.close(code=code, message=close_reason(reason))
    return ws


async def live_note(request: web.Request) -> web.WebSocketResponse:
    daemon: ApiHost = request.app[DAEMON_KEY]
    hub = request.app[HUB_KEY]
    max_bytes = daemon.config.notes.max_bytes
    # A message past the update cap by more than the protocol's framing is cut by aiohttp
    # (1009) before it is buffered whole; up to it, the write path refuses it (4413).
    ws = web.WebSocketResponse(max_msg_size=hub.limits.max_update_bytes + 65536)
    await ws.prepare(request)
    if hub.closed:
        return await _refuse(ws, GOING_AWAY, "the daemon is stopping")
    who = socket_principal(daemon, request)
    if who is None:
        return await _refuse(ws, UNAUTHORIZED, "a valid ?token= is required")
    principal, source = who
    try:
        # Another token's vault is "no vault named ..." as one that does not exist (finding 9).
        runtime = daemon.vault_for(request.match_info["vault"], principal)
        path = check_path(request.match_info["path"])
    except StetError as exc:
        if exc.code == "not_found" and not daemon.activity.ready:
            # Still opening its vaults (the API answers from the start): a 44xx close would
            # make a stock client stop for good (y-websocket 3: 4400-4499 are permanent), so
            # this one says "again later" and the client reconnects (issue 18, mixed R1).
            return await _refuse(ws, TRY_AGAIN, "the daemon is starting: try again")
        return await _refuse(ws, NOT_FOUND if exc.code == "not_found" else BAD_MESSAGE, exc.message)
    if not principal.scopes.allows(READ, path):
        return await _refuse(ws, FORBIDDEN, f"this token may not read {path}")
    notes = hub.write_path(LiveWritePath(runtime.service, daemon.events, max_bytes=max_bytes,
                                         clock=time.time, max_update_bytes=hub.limits.max_update_bytes))
    try:
        row = notes.note_at(path)
    except StetError:
        return await _refuse(ws, NOT_FOUND, f"no note at {path}")
    refusal = hub.refusal(notes, row.id, principal.token_key)
    if refusal is not None:
        return await _refuse(ws, TOO_MANY, refusal)
    conn = Connection(ws, source, principal.token_key, principal.scopes, hub.limits,
                      still_valid=lambda: socket_principal(daemon, request) is not None)
    room = hub.join(notes, row.id, conn)
    conn.start()
    # Revoking the token or signing out closes this socket at once (ops/open_streams.py).
    forget = daemon.streams.add(principal.holder, lambda reason: conn.cut(UNAUTHORIZED, reason))
    try:
        conn.send(sync_step1(notes.state_vector(row.id)))
        states = room.awareness.full()
        if states is not None:
            conn.send(awareness_message(states))
        async for msg in ws:
            if conn.closing:  # its credential ended: nothing more it sends is taken
                break
            if msg.type != WSMsgType.BINARY:
                conn.close(BAD_MESSAGE, "y-websocket messages are binary")
                break
            _handle(room, conn, msg.data)
            if conn.closing:
                break
    finally:
        forget()
        hub.leave(conn)
        await conn.stop()
    return ws


def _handle(room: Room, conn: Connection, data: bytes) -> None:
    try:
        msg = parse(data)
        if msg.kind == MSG_SYNC:
            if msg.sync_type == SYNC_STEP1:
                if foreign_history(msg.payload, room.notes.state_vector(room.note_id)):
                    conn.close(FOREIGN_DOCUMENT, "this document is not this note's (edited before its "
                               "first sync, or the note was made again): discard it and reconnect")
                    return
                conn.send(sync_step2(room.notes.update_since(room.note_id, msg.payload)))
            else:
                _apply(room, conn, msg.payload, step2=msg.sync_type == SYNC_STEP2)
        elif msg.kind == MSG_AWARENESS:
            if conn.take_awareness_turn():  # counted before the JSON states are decoded
                room.relay_awareness(conn, decode_awareness(msg.payload))
        elif msg.kind == MSG_QUERY_AWARENESS:
            states = room.awareness.full()
            if states is not None:
                conn.send(awareness_message(states))
    except ProtocolError as exc:
        conn.close(BAD_MESSAGE, exc.message)
    except StetError as exc:
        conn.close(CLOSE_CODES.get(exc.code, BAD_MESSAGE), exc.message)
    except Exception:
        logger.exception("live client %s on %s: message failed", conn.source, room.note_id)
        conn.close(INTERNAL, "internal error (see the daemon log)")


def _apply(room: Room, conn: Connection, update: bytes, *, step2: bool) -> None:
    # A revoked token stops writing at once (its socket stays open no longer than this).
    if not conn.still_valid():
        conn.close(UNAUTHORIZED, "the token was revoked")
        return
    room.applying = conn
    try:
        room.notes.apply(room.note_id, update, source=conn.source, token=conn.token, scopes=conn.scopes,
                         step2=step2)
    finally:
        room.applying = None


def register(app: web.Application, limits: LiveConfig) -> None:
    hub = LiveHub(limits)
    app[HUB_KEY] = hub
    app.on_shutdown.append(hub.close_all)
    app.router.add_get(ROUTE, live_note)
