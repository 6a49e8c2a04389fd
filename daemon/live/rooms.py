"""Live editing rooms (SPEC §6.13): the Yjs clients of each note, and what they are sent.

One ``Room`` per open note holds its connections and their awareness states. Changes of
the note from anywhere (disk, agents, peers, another client) arrive through the write
path's listener and are queued to every connection at once; a connection's own update is
not echoed back. Each connection has one sender task and a bounded queue: a client that
falls behind by more than ``[live] max_queued_bytes`` or ``max_queued_messages`` is dropped
(close ``SLOW``) instead of being buffered for without end; it reconnects and resyncs
with a state-vector exchange. One ticker per hub sends a keepalive to connections that
were sent nothing for ``[live] keepalive_seconds`` (the JS client drops a socket after 30 s of
silence; websocket pings do not reach it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from stet.daemon.live.write_path import LiveWritePath
from stet.daemon.notes.changes import Change
from stet.sync.change_kinds import ChangeKind
from stet.sync.config import LiveConfig
from stet.sync.permissions import READ, Scopes
from stet.sync.yjs_protocol import (
    KEEPALIVE,
    AwarenessEntry,
    AwarenessStates,
    awareness_message,
    encode_awareness,
    sync_update,
)

logger = logging.getLogger(__name__)

# Close codes. 4400-4499 are permanent for the stock y-websocket client (it stops
# reconnecting and emits "closed"); others make it reconnect.
BAD_MESSAGE = 4400
UNAUTHORIZED = 4401
FORBIDDEN = 4403
NOT_FOUND = 4404
FOREIGN_DOCUMENT = 4409  # the client's document shares no history with the note (doubled text)
GONE = 4410  # the note was deleted, or moved (the reason says where)
TOO_LARGE = 4413
NOT_TEXT = 4415  # the update carries something besides the note's text (issue 33)
BRAKE_ENGAGED = 4423
TOO_MANY = 4429  # a limit of [live] (sockets, awareness updates a second): permanent for the client
SLOW = 4503  # the client fell too far behind: reconnect and resync
TRY_AGAIN = 4503  # not yet (the daemon is opening its vaults): reconnect
GOING_AWAY = 1001  # the daemon is stopping
INTERNAL = 1011  # a bug (logged); the client reconnects

MAX_CLIENT_IDS = 4  # awareness client ids one connection may speak for (a Yjs doc is one)


def close_reason(text: str) -> bytes:
    """A close reason fits in 123 bytes (RFC 6455): cut at a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= 123:
        return data
    return data[:120].decode("utf-8", "ignore").encode("utf-8") + b"..."


@dataclass(eq=False)
class Connection:
    ws: web.WebSocketResponse
    source: str  # attribution of its writes
    token: str  # who refusals are recorded against
    scopes: Scopes
    limits: LiveConfig
    still_valid: Callable[[], bool]  # the way in still holds (a revoked token does not)
    room: Room | None = None
    client_ids: set[int] = field(default_factory=set)  # awareness ids it spoke for
    last_sent: float = field(default_factory=time.monotonic)
    # Awareness updates it may still send now: a bucket of 2 s worth, refilled at
    # ``[live] awareness_per_second``.
    _awareness_allowance: float = -1.0
    _awareness_at: float = field(default_factory=time.monotonic)
    _queue: deque[bytes] = field(default_factory=deque)
    _queued_bytes: int = 0
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _close: tuple[int, bytes] | None = None
    _sender: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._sender = asyncio.create_task(self._pump(), name=f"yjs-send:{self.source}")

    def send(self, data: bytes) -> None:
        """Queue a message (never blocks). A client too far behind is dropped."""
        if self._close is not None:
            return
        limits = self.limits
        if self._queue and (self._queued_bytes + len(data) > limits.max_queued_bytes
                            or len(self._queue) >= limits.max_queued_messages):
            logger.warning("live client %s is %d messages (%d bytes) behind: dropped",
                           self.source, len(self._queue), self._queued_bytes)
            self._queue.clear()
            self._queued_bytes = 0
            self.close(SLOW, "too far behind; reconnect")
            return
        self._queue.append(data)
        self._queued_bytes += len(data)
        self.last_sent = time.monotonic()
        self._wake.set()

    def close(self, code: int, reason: str) -> None:
        """Close after what is queued has been sent (the first close wins)."""
        if self._close is None:
            self._close = (code, close_reason(reason))
            self._wake.set()

    def cut(self, code: int, reason: str) -> None:
        """Close now, dropping what is queued: its credential ended (revoked, signed out),
        so nothing more reaches it, not even what was queued before."""
        self._queue.clear()
        self._queued_bytes = 0
        self.close(code, reason)

    @property
    def closing(self) -> bool:
        return self._close is not None

    def take_awareness_turn(self) -> bool:
        """One awareness update counted against the rate, before it is decoded; False
        (and the socket closing, 4429) when over it."""
        rate = self.limits.awareness_per_second
        now = time.monotonic()
        if self._awareness_allowance < 0:
            self._awareness_allowance = 2 * rate
        refilled = self._awareness_allowance + (now - self._awareness_at) * rate
        self._awareness_allowance = min(2 * rate, refilled)
        self._awareness_at = now
        if self._awareness_allowance < 1:
            self.close(TOO_MANY, f"more than {rate:g} awareness updates a second "
                                 "([live] awareness_per_second)")
            return False
        self._awareness_allowance -= 1
        return True

    async def _pump(self) -> None:
        ws = self.ws
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    data = self._queue.popleft()
                    self._queued_bytes -= len(data)
                    await ws.send_bytes(data)
                if self._close is not None:
                    code, reason = self._close
                    await ws.close(code=code, message=reason)
                    return
        except (ConnectionError, RuntimeError, asyncio.CancelledError):
            # The socket went away under us (the reader sees it too and leaves).
            return
        except Exception:
            logger.exception("live client %s: sending failed", self.source)
            with contextlib.suppress(Exception):
                await ws.close(code=INTERNAL)

    async def stop(self) -> None:
        if self._sender is not None and not self._sender.done():
            if self._close is None:
                self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._sender, timeout=15.0)


class Room:
    """The live clients of one note."""

    def __init__(self, hub: LiveHub, notes: LiveWritePath, note_id: str) -> None:
        self.hub = hub
        self.notes = notes
        self.note_id = note_id
        self.connections: set[Connection] = set()
        self.awareness = AwarenessStates()
        self.owners: dict[int, Connection] = {}  # awareness client id -> the socket speaking for it
        self.applying: Connection | None = None  # whose update the write path is applying

    def broadcast(self, data: bytes, *, skip: Connection | None = None) -> None:
        for conn in list(self.connections):
            if conn is not skip:
                conn.send(data)

    def on_change(self, change: Change) -> None:
        if change.kind in (ChangeKind.CHANGED, ChangeKind.CREATED) and change.update is not None:
            self.broadcast(sync_update(change.update), skip=self.applying)
        elif change.kind == ChangeKind.DELETED:
            self.close_all(GONE, "the note was deleted")
        elif change.kind == ChangeKind.MOVED:
            for conn in list(self.connections):
                # A client is told where the note went only if it may read it there: a
                # move out of a token's scope names no hidden path (issue 33, finding 6).
                if conn.scopes.allows(READ, change.path):
                    conn.close(GONE, f"moved to {change.path}")
                else:
                    conn.close(GONE, "the note was moved where this token may not read it")

    def close_all(self, code: int, reason: str) -> None:
        for conn in list(self.connections):
            conn.close(code, reason)

    def relay_awareness(self, conn: Connection, entries: list[AwarenessEntry]) -> None:
        """A client's awareness update: kept for later joiners, relayed to the others.

        A socket speaks only for its own client ids: the first it names (up to
        ``MAX_CLIENT_IDS``) that no other socket of the note speaks for. Entries for the
        ids of another socket are dropped, so no client can move or remove another's
        cursor (issue 33, finding 10). A state over ``[live] max_awareness_state_bytes``
        closes the socket (4413); the rate is counted before decoding
        (``Connection.take_awareness_turn``, 4429).
        """
        limits = conn.limits
        for e in entries:
            size = len(e.state.encode("utf-8"))
            if size > limits.max_awareness_state_bytes:
                conn.close(TOO_LARGE, f"an awareness state of {size} bytes is over [live] "
                                      f"max_awareness_state_bytes ({limits.max_awareness_state_bytes})")
                return
        mine = []
        for e in entries:
            owner = self.owners.get(e.client_id)
            if owner is None and len(conn.client_ids) < MAX_CLIENT_IDS:
                self.owners[e.client_id] = owner = conn
                conn.client_ids.add(e.client_id)
            if owner is conn:
                mine.append(e)
        taken = self.awareness.apply(mine)
        if taken:
            self.broadcast(awareness_message(encode_awareness(taken)), skip=conn)


class LiveHub:
    """Every room of the daemon; subscribed once to each vault's write path."""

    def __init__(self, limits: LiveConfig) -> None:
        self.limits = limits
        self.rooms: dict[tuple[str, str], Room] = {}
        self._per_token: dict[str, int] = {}  # open sockets of each token
        self._services: dict[str, LiveWritePath] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def write_path(self, notes: LiveWritePath) -> LiveWritePath:
        """The adapter of a vault, subscribed once (a vault reopened gets a new one)."""
        known = self._services.get(notes.vault_id)
        if known is not None and known.service is notes.service:
            return known
        self._services[notes.vault_id] = notes
        vault_id = notes.vault_id
        notes.subscribe(lambda change: self._on_change(vault_id, change))
        return notes

    def _on_change(self, vault_id: str, change: Change) -> None:
        room = self.rooms.get((vault_id, change.note_id))
        if room is not None:
            room.on_change(change)

    def refusal(self, notes: LiveWritePath, note_id: str, token: str) -> str | None:
        """Why one more socket of ``token`` on the note may not open (None: it may)."""
        limits = self.limits
        if self.connection_count() >= limits.max_sockets:
            return f"{limits.max_sockets} live sockets are open, the most allowed ([live] max_sockets)"
        if self._per_token.get(token, 0) >= limits.max_sockets_per_token:
            return (f"this token has {limits.max_sockets_per_token} live sockets open, the most allowed "
                    "([live] max_sockets_per_token)")
        room = self.rooms.get((notes.vault_id, note_id))
        if room is not None and len(room.connections) >= limits.max_sockets_per_note:
            return (f"this note has {limits.max_sockets_per_note} live sockets open, the most allowed "
                    "([live] max_sockets_per_note)")
        return None

    def join(self, notes: LiveWritePath, note_id: str, conn: Connection) -> Room:
        key = (notes.vault_id, note_id)
        room = self.rooms.get(key)
        if room is None:
            room = self.rooms[key] = Room(self, notes, note_id)
        room.connections.add(conn)
        self._per_token[conn.token] = self._per_token.get(conn.token, 0) + 1
        conn.room = room
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.create_task(self._keepalive(), name="yjs-keepalive")
        return room

    def leave(self, conn: Connection) -> None:
        room = conn.room
        if room is None:
            return
        conn.room = None
        room.connections.discard(conn)
        left = self._per_token.get(conn.token, 0) - 1
        if left > 0:
            self._per_token[conn.token] = left
        else:
            self._per_token.pop(conn.token, None)
        for client_id in conn.client_ids:
            if room.owners.get(client_id) is conn:
                del room.owners[client_id]
        gone = room.awareness.remove(conn.client_ids)
        if gone is not None:
            room.broadcast(awareness_message(gone))
        if not room.connections:
            self.rooms.pop((room.notes.vault_id, room.note_id), None)

    def connection_count(self) -> int:
        return sum(len(r.connections) for r in self.rooms.values())

    async def _keepalive(self) -> None:
        while self.rooms:
            every = self.limits.keepalive_seconds
            await asyncio.sleep(every / 2)
            quiet_since = time.monotonic() - every
            for room in list(self.rooms.values()):
                for conn in list(room.connections):
                    if conn.last_sent < quiet_since:
                        conn.send(KEEPALIVE)

    async def close_all(self, _app: web.Application | None = None) -> None:
        """The daemon is stopping: every client is told (1001) and its sender ends."""
        self._closed = True
        conns = [c for room in self.rooms.values() for c in room.connections]
        for conn in conns:
            conn.close(GOING_AWAY, "the daemon is stopping")
        for conn in conns:
            await conn.stop()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
