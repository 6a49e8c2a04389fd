"""The receiving end of a blob channel on a blocking TLS socket of its own (issue 14, P9).

A blob channel carries 1 MiB CHUNK frames from the peer's aiohttp websocket to us. Read
through asyncio's SSL protocol and aiohttp's websocket reader (in a thread with its own
loop), each MiB was copied several times after its decryption and every chunk woke two
loops; profiled on the receiver of a 1 GB transfer, that thread was the busiest stage of
the pipe (bench/history/rounds.md, "P9: the blob channel read on a socket of its own"). Here the
thread owns a plain blocking ``ssl.SSLSocket``: ``recv_into`` decrypts straight into the
frame's own buffer (OpenSSL runs without the GIL), and the thread knows when more bytes are
already waiting, so its caller can hand several chunks over in one wake-up.

The websocket is the minimum RFC 6455 client the channel needs, and no more:
- the opening handshake (``Sec-WebSocket-Key``/``Accept`` checked; no extensions offered,
  so no compression and no reserved bits);
- server frames are unmasked, unfragmented: BINARY is a message; PING is answered with a
  PONG, PONG ignored; CLOSE is answered with a CLOSE and ends the channel; anything else
  (TEXT, a continuation, a masked or fragmented frame, reserved bits, a message over the
  cap) is a ``ChannelError``;
- our own frames (PONG, CLOSE) are masked, as a client's must be, and sent only by the
  reading thread (one thread per ``SSLSocket``: OpenSSL's connection is not shared);
- ``shutdown`` (any thread) shuts the TCP socket down, so a read blocked in it returns.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import select
import socket
import ssl
import struct
from collections.abc import Callable
from urllib.parse import urlsplit

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_HEADER = 16 * 1024  # the server's handshake answer
BINARY, CLOSE, PING, PONG = 0x2, 0x8, 0x9, 0xA


class ChannelError(Exception):
    """The peer broke the websocket protocol, or the socket ended without a close."""


class HandshakeRefused(Exception):
    """The server answered the upgrade with another status (409: no such live link yet)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a host and a port."""
    parts = urlsplit(f"//{address}")
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"not a host:port address: {address!r}")
    return parts.hostname, parts.port


class BlobSocket:
    """One open blob channel: binary messages in, our control frames out."""

    def __init__(self, sock: ssl.SSLSocket, leftover: bytes, max_size: int) -> None:
        self.sock = sock
        self.max_size = max_size
        # Where a message's bytes are read into (``frame_buffers.FramePool.take``: reused
        # buffers); by default a new bytearray each.
        self.buffer: Callable[[int], bytearray | memoryview] = bytearray
        self._buf = bytearray(leftover)  # bytes read past the handshake's answer
        self._head = bytearray(8)

    @classmethod
    def dial(cls, address: str, path: str, ctx: ssl.SSLContext, server_hostname: str,
             timeout: float, max_size: int) -> BlobSocket:
        """Connect, TLS (the context's checks), upgrade; ``HandshakeRefused``, ``OSError``,
        ``ssl.SSLError`` or ``ChannelError`` if any of it fails."""
        host, port = split_address(address)
        raw = socket.create_connection((host, port), timeout=timeout)
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = ctx.wrap_socket(raw, server_hostname=server_hostname)
        except BaseException:
            raw.close()
            raise
        try:
            leftover = _upgrade(sock, address, path)
            sock.settimeout(None)  # from here on, the link's own heartbeat tells a dead peer
            return cls(sock, leftover, max_size)
        except BaseException:
            sock.close()
            raise

    def peer_cert_der(self) -> bytes | None:
        return self.sock.getpeercert(binary_form=True)

    # -- reading (the channel's thread only) ------------------------------------------------

    def read_message(self) -> bytearray | memoryview | None:
        """The next binary message; None once the peer closed the channel (answered)."""
        while True:
            b0, b1 = self._exact(2)
            fin, rsv, opcode = b0 & 0x80, b0 & 0x70, b0 & 0x0F
            if rsv:
                raise ChannelError("a frame with reserved bits set")
            if b1 & 0x80:
                raise ChannelError("a masked frame from the server")
            length = b1 & 0x7F
            if length == 126:
                (length,) = struct.unpack(">H", self._exact(2))
            elif length == 127:
                (length,) = struct.unpack(">Q", self._exact(8))
            if opcode == BINARY:
                if not fin:
                    raise ChannelError("a fragmented message")
                if length > self.max_size:
                    raise ChannelError(f"a message of {length} bytes is over the cap")
                data = self.buffer(length)
                self._exact_into(memoryview(data))
                return data
            if opcode in (CLOSE, PING, PONG):
                if not fin or length > 125:
                    raise ChannelError("a bad control frame")
                payload = bytes(self._exact(length)) if length else b""
                if opcode == PING:
                    self._send(PONG, payload)
                elif opcode == CLOSE:
                    self._send(CLOSE, payload[:2])
                    return None
                continue
            raise ChannelError(f"unexpected websocket opcode {opcode:#x}")

    def more_waiting(self) -> bool:
        """Whether bytes of a next frame are already here (read without blocking)."""
        if self._buf or self.sock.pending():
            return True
        try:
            ready, _w, _x = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(ready)

    def _exact(self, n: int) -> memoryview:
        head = self._head if n <= len(self._head) else bytearray(n)
        view = memoryview(head)[:n]
        self._exact_into(view)
        return view

    def _exact_into(self, view: memoryview) -> None:
        got = 0
        if self._buf:
            got = min(len(view), len(self._buf))
            view[:got] = self._buf[:got]
            del self._buf[:got]
        while got < len(view):
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise ChannelError("the connection ended without a close")
            got += n

    def _send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    # -- any thread ---------------------------------------------------------------------------

    def shutdown(self) -> None:
        """End the connection under a read blocked in it (the read returns; nothing is sent)."""
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()


def _upgrade(sock: ssl.SSLSocket, address: str, path: str) -> bytes:
    key = base64.b64encode(os.urandom(16))
    sock.sendall(b"".join((
        f"GET {path} HTTP/1.1\r\nHost: {address}\r\n".encode("ascii"),
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n",
        b"Sec-WebSocket-Key: ", key, b"\r\n\r\n")))
    answer = bytearray()
    while b"\r\n\r\n" not in answer:
        if len(answer) > MAX_HEADER:
            raise ChannelError("the handshake's answer is too long")
        data = sock.recv(4096)
        if not data:
            raise ChannelError("the connection ended during the handshake")
        answer += data
    head, _, rest = bytes(answer).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1.") or not status_line[1].isdigit():
        raise ChannelError(f"not an HTTP answer: {lines[0][:80]!r}")
    status = int(status_line[1])
    if status != 101:
        raise HandshakeRefused(status)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    expected = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode("ascii")  # noqa: S324 -- RFC 6455
    if headers.get("upgrade", "").lower() != "websocket" or headers.get("sec-websocket-accept") != expected:
        raise ChannelError("the server did not upgrade to a websocket")
    if headers.get("sec-websocket-extensions"):
        raise ChannelError("the server chose an extension none was offered")
    return rest
