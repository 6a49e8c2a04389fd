"""A small TCP proxy for the chaos tests: one listener per directed dial, cuttable per pair.

Each daemon dials its peers only through these listeners (the test writes them into
``[peer] addresses`` and into the invites, so even the addresses learned at join are
proxies). A listener forwards to the *current* peer port of its target, read from the
target's ``daemon.json`` at each connection, so a daemon killed and restarted on a new
port is found again. Cutting a pair aborts its live connections (an RST, as a dropped
route looks to TCP once the peer answers) and refuses new ones until the cut ends.
Loopback only; everything runs on one asyncio loop in a background thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TargetPort = Callable[[], int | None]


class _TrackedProtocol(asyncio.StreamReaderProtocol):
    """A stream protocol that keeps its transport in ``accepted`` while it is open, so
    ``close`` can abort every socket, even one accepted as the proxies stop whose handler
    never ran (else it is left to the garbage collector: an unclosed-socket warning)."""

    def __init__(self, accepted: set[asyncio.BaseTransport],
                 cb: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object] | None = None) -> None:
        # The protocol holds its reader by a weak reference only: keep a strong one.
        self.reader = asyncio.StreamReader(limit=2**16)
        super().__init__(self.reader, cb)  # type: ignore[arg-type]
        self._accepted = accepted
        self._tracked: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._tracked = transport
        self._accepted.add(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._tracked is not None:
            self._accepted.discard(self._tracked)
        super().connection_lost(exc)


def port_from_daemon_json(daemon_json: Path) -> TargetPort:
    def port() -> int | None:
        try:
            return int(json.loads(daemon_json.read_text())["peer_port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    return port


@dataclass
class ProxyStats:
    connections: int = 0
    refused: int = 0  # while cut, or the target was down
    cut_connections: int = 0  # live connections aborted by a cut
    bytes: int = 0


@dataclass
class Connection:
    """One forwarded connection of a pair, in the order they came (``LinkProxies.connections``)."""

    open: bool = True
    bytes: int = 0
    transports: set[asyncio.Transport] = field(default_factory=set)


@dataclass
class LinkProxies:
    stats: ProxyStats = field(default_factory=ProxyStats)
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _thread: threading.Thread | None = None
    _listeners: list[socket.socket] = field(default_factory=list)
    _unwrapped: set[socket.socket] = field(default_factory=set)  # accepted, no transport yet
    _cut_until: dict[frozenset[str], float] = field(default_factory=dict)
    _live: dict[frozenset[str], set[asyncio.Transport]] = field(default_factory=dict)
    _conns: dict[frozenset[str], list[Connection]] = field(default_factory=dict)
    _rate: dict[frozenset[str], float] = field(default_factory=dict)  # bytes/s, per direction
    _sockets: set[asyncio.BaseTransport] = field(default_factory=set)  # every open socket, both sides
    _closing: bool = False

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._loop.run_forever, name="link-proxies", daemon=True)
        self._thread.start()

    def _run(self, coro: object, timeout: float = 10.0) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    def add(self, dialer: str, target: str, target_port: TargetPort) -> int:
        """A listener for ``dialer``'s dials of ``target``; returns its port."""
        pair = frozenset((dialer, target))
        self._live.setdefault(pair, set())

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.CancelledError):  # the proxies stopping
                await self._forward(pair, target_port, reader, writer)

        async def start() -> int:
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            listener.setblocking(False)
            self._listeners.append(listener)
            self._loop.add_reader(listener.fileno(), self._on_acceptable, listener, handle)
            return int(listener.getsockname()[1])

        port = self._run(start())
        assert isinstance(port, int)
        return port

    def _on_acceptable(self, listener: socket.socket,
                       handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]) -> None:
        """Accept what is waiting. Not asyncio's ``Server``: a socket it accepts just before
        ``Server.close()`` gets its transport in a task that then fails (the server is
        closed) or is cancelled before it runs, and the socket is left to the garbage
        collector (an unclosed-socket warning in some later test). Here every accepted
        socket is in ``_unwrapped`` until a transport owns it, so ``close`` closes it."""
        for _ in range(128):  # bounded: what is waiting now
            try:
                conn, _addr = listener.accept()
            except OSError:  # nothing more waiting (BlockingIOError), or the listener closed
                return
            if self._closing:
                conn.close()
                continue
            conn.setblocking(False)
            self._unwrapped.add(conn)
            self._loop.create_task(self._wrap(conn, handle))

    async def _wrap(self, conn: socket.socket,
                    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]) -> None:
        try:
            await self._loop.connect_accepted_socket(lambda: _TrackedProtocol(self._sockets, handle), conn)
        except OSError:
            conn.close()
        except BaseException:
            conn.close()  # closing it twice (its transport closed it too) is harmless
            raise
        finally:
            self._unwrapped.discard(conn)

    def is_cut(self, pair: frozenset[str]) -> bool:
        return self._cut_until.get(pair, 0.0) > time.monotonic()

    async def _forward(self, pair: frozenset[str], target_port: TargetPort, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        port = target_port()
        if self._closing or self.is_cut(pair) or port is None:
            self.stats.refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(self._dial(port), 5)
        except (OSError, TimeoutError):
            self.stats.refused += 1
            writer.transport.abort()
            return
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        transports = {writer.transport, up_writer.transport}
        live = self._live[pair]
        live.update(transports)  # type: ignore[arg-type]
        conn = Connection(transports=transports)  # type: ignore[arg-type]
        self._conns.setdefault(pair, []).append(conn)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                for _ in range(10_000_000):  # bounded; ends at EOF or a cut
                    data = await src.read(65536)
                    if not data:
                        break
                    self.stats.bytes += len(data)
                    conn.bytes += len(data)
                    dst.write(data)
                    await dst.drain()
                    rate = self._rate.get(pair)
                    if rate:
                        await asyncio.sleep(len(data) / rate)
            with contextlib.suppress(OSError, RuntimeError):
                if dst.can_write_eof():
                    dst.write_eof()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            conn.open = False
            live.difference_update(transports)  # type: ignore[arg-type]
            for t in transports:
                t.close()

    async def _dial(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        protocol = _TrackedProtocol(self._sockets)
        transport, _ = await self._loop.create_connection(lambda: protocol, "127.0.0.1", port)
        reader = protocol.reader
        return reader, asyncio.StreamWriter(transport, protocol, reader, self._loop)

    def cut(self, a: str, b: str, seconds: float) -> None:
        """Drop the pair's live connections and refuse new ones for ``seconds``."""
        pair = frozenset((a, b))

        def do() -> None:
            until = time.monotonic() + seconds
            self._cut_until[pair] = max(until, self._cut_until.get(pair, 0.0))  # never shortens a cut
            for t in list(self._live.get(pair, ())):
                self.stats.cut_connections += 1
                t.abort()

        self._loop.call_soon_threadsafe(do)

    def connections(self, a: str, b: str) -> list[Connection]:
        """The pair's forwarded connections so far, oldest first (read from the test's thread)."""
        return list(self._conns.get(frozenset((a, b)), []))

    def abort(self, conn: Connection) -> None:
        """Abort one connection (an RST both ways), leaving the pair's others alone."""
        def do() -> None:
            for t in list(conn.transports):
                t.abort()

        self._loop.call_soon_threadsafe(do)
    def throttle(self, a: str, b: str, bytes_per_s: float | None) -> None:
        """Forward the pair's bytes at most this fast each way (None: at full speed again),
        live connections included: a transfer held back while frames still pass."""
        pair = frozenset((a, b))
        done = threading.Event()

        def do() -> None:
            if bytes_per_s is None:
                self._rate.pop(pair, None)
            else:
                self._rate[pair] = bytes_per_s
            done.set()

        self._loop.call_soon_threadsafe(do)
        assert done.wait(10)

    def heal(self) -> None:
        done = threading.Event()

        def do() -> None:
            self._cut_until.clear()
            done.set()

        self._loop.call_soon_threadsafe(do)
        assert done.wait(10)

    def close(self) -> None:
        async def stop() -> None:
            self._closing = True
            for listener in self._listeners:
                self._loop.remove_reader(listener.fileno())
                listener.close()
            # Let every task end on its own first: each socket is aborted, a handler that
            # starts now refuses (``_closing``); only what still runs after that is cancelled.
            for _round in range(20):  # bounded: each round ends the tasks of the one before
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for sock in list(self._sockets):
                    sock.abort()  # type: ignore[attr-defined]
                if not tasks:
                    break
                _done, pending = await asyncio.wait(tasks, timeout=1.0)
                for t in pending:
                    t.cancel()
                if pending:
                    await asyncio.wait(pending, timeout=1.0)
            for sock in list(self._sockets):
                sock.abort()  # type: ignore[attr-defined]
            for conn in list(self._unwrapped):  # a wrapping task cancelled before it ran
                conn.close()
            for _ in range(3):
                await asyncio.sleep(0)  # let the aborts' connection_lost callbacks run

        with contextlib.suppress(Exception):
            self._run(stop(), timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop.close()
