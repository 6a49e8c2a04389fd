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
from stet.sync.permissions import Scopes
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
BRAKE_ENGAGED = 4423
SLOW = 4503  # the client fell too far behind: reconnect and resync
TRY_AGAIN = 4503  # not yet (the daemon is opening its vaults): reconnect
GOING_AWAY = 1001  # the daemon is stopping
INTERNAL = 1011  # a bug (logged); the client reconnects

MAX_CLIENT_IDS = 16  # awareness client ids one connection may speak for


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
            self.close_all(GONE, f"moved to {change.path}")

    def close_all(self, code: int, reason: str) -> None:
        for conn in list(self.connections):
            conn.close(code, reason)

    def relay_awareness(self, conn: Connection, entries: list[AwarenessEntry]) -> None:
        """A client's awareness update: kept for later joiners, relayed to the others."""
        mine = [e for e in entries if e.client_id in conn.client_ids or len(conn.client_ids) < MAX_CLIENT_IDS]
        for e in mine:
            conn.client_ids.add(e.client_id)
        taken = self.awareness.apply(mine)
        if taken:
            self.broadcast(awareness_message(encode_awareness(taken)), skip=conn)


class LiveHub:
    """Every room of the daemon; subscribed once to each vault's write path."""

    def __init__(self, limits: LiveConfig) -> None:
        self.limits = limits
        self.rooms: dict[tuple[str, str], Room] = {}
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

    def join(self, notes: LiveWritePath, note_id: str, conn: Connection) -> Room:
        key = (notes.vault_id, note_id)
        room = self.rooms.get(key)
        if room is None:
            room = self.rooms[key] = Room(self, notes, note_id)
        room.connections.add(conn)
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
