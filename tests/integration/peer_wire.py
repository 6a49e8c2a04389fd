"""A hand-made TLS + WebSocket client for the peer port that records every byte it receives.

The security and robustness tests must see exactly what crosses the socket, so this
client is a blocking ``ssl`` socket with an HTTP/1.1 upgrade and RFC 6455 framing
written out by hand (no library buffering or retrying anything out of sight):
``received`` holds every TLS-decrypted byte the daemon sent (HTTP response and
websocket frames, unparsed), ``ended`` says why reading stopped (EOF, a TLS alert, a
reset). Every read is bounded by a socket timeout and a deadline. Loopback only.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stet.daemon.identity.device_identity import DeviceIdentity
from stet.daemon.peers.tls import SYNC_SERVER_NAME, client_context
from stet.sync import peer_protocol as pp

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def peer_cert_of(home: Path) -> bytes:
    """A running or stopped daemon's certificate (DER), read from its home."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    cert = x509.load_pem_x509_certificate((home / "device.crt").read_bytes())
    return cert.public_bytes(Encoding.DER)


def no_cert_context() -> ssl.SSLContext:
    """TLS 1.3, no client certificate, server certificate not checked."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def sync_context(identity: DeviceIdentity, server_cert_der: bytes) -> ssl.SSLContext:
    return client_context(identity, [server_cert_der])


@dataclass
class Message:
    opcode: int
    data: bytes
    close_code: int | None = None

    @property
    def frame(self) -> pp.Frame:
        return pp.decode(self.data)


@dataclass
class WireClient:
    port: int
    ctx: ssl.SSLContext
    server_name: str = SYNC_SERVER_NAME
    timeout: float = 10.0
    received: bytearray = field(default_factory=bytearray)
    ended: str | None = None  # why the connection stopped delivering bytes
    handshake_error: str | None = None
    sock: Any = None
    _buf: bytearray = field(default_factory=bytearray)
    _closed_sent: bool = False

    # -- connection ------------------------------------------------------------------

    def connect(self) -> WireClient:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        try:
            self.sock = self.ctx.wrap_socket(raw, server_hostname=self.server_name)
        except (ssl.SSLError, OSError) as exc:
            raw.close()
            self.handshake_error = self.ended = f"handshake: {exc}"
        return self

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None

    def __enter__(self) -> WireClient:
        return self if self.sock is not None or self.ended is not None else self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fill(self, deadline: float) -> bool:
        """Read more bytes into the buffer; False once the connection ended (or the deadline)."""
        if self.sock is None or self.ended is not None:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self.sock.settimeout(min(left, self.timeout))
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return False
        except ssl.SSLError as exc:
            self.ended = f"tls: {exc}"
            return False
        except OSError as exc:
            self.ended = f"socket: {exc}"
            return False
        if not data:
            self.ended = "eof"
            return False
        self.received += data
        self._buf += data
        return True

    def send_raw(self, data: bytes) -> bool:
        """Send bytes on the TLS stream; False if the daemon has already cut the connection."""
        if self.sock is None:
            return False
        try:
            self.sock.settimeout(self.timeout)
            self.sock.sendall(data)
            return True
        except (ssl.SSLError, OSError):
            return False

    def drain(self, timeout: float = 5.0) -> str | None:
        """Read (and record) everything until the daemon closes or ``timeout``; returns ``ended``."""
        deadline = time.monotonic() + timeout
        while self._fill(deadline):  # bounded by the deadline
            self._buf.clear()
        return self.ended

    # -- HTTP upgrade ----------------------------------------------------------------

    def upgrade(self, path: str, *, timeout: float = 10.0) -> int | None:
        """Ask for a websocket at ``path``; the HTTP status, or None if the daemon said nothing."""
        key = base64.b64encode(os.urandom(16)).decode()
        request = (f"GET {path} HTTP/1.1\r\nHost: {self.server_name}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        if not self.send_raw(request.encode()):
            self.drain(1.0)
            return None
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self._buf:
            if not self._fill(deadline):
                return None
        head, _, rest = bytes(self._buf).partition(b"\r\n\r\n")
        self._buf = bytearray(rest)
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        return int(status_line.split()[1])

    # -- websocket framing -----------------------------------------------------------

    @staticmethod
    def frame_bytes(opcode: int, payload: bytes, *, fin: bool = True, declared: int | None = None) -> bytes:
        """One client frame (masked, as RFC 6455 requires of clients); ``declared`` lies about the length."""
        n = len(payload) if declared is None else declared
        head = bytes([(0x80 if fin else 0) | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        # Masking is required of clients; its key is not: a zero key leaves a big payload
        # as it is (no XOR pass over tens of megabytes).
        mask = os.urandom(4) if len(payload) < 1 << 20 else b"\0\0\0\0"
        if not payload or mask == b"\0\0\0\0":
            return head + mask + payload
        stream = (mask * (len(payload) // 4 + 1))[: len(payload)]
        masked = int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")
        return head + mask + masked.to_bytes(len(payload), "big")

    def send_frame(self, opcode: int, payload: bytes, *, fin: bool = True) -> bool:
        return self.send_raw(self.frame_bytes(opcode, payload, fin=fin))

    def send_binary(self, data: bytes) -> bool:
        return self.send_frame(OP_BINARY, data)

    def send_stet(self, type_: int, header: dict[str, Any], payload: bytes = b"") -> bool:
        return self.send_binary(pp.encode(type_, header, payload))

    def _parse_one(self) -> tuple[bool, int, bytes] | None:
        buf = self._buf
        if len(buf) < 2:
            return None
        fin, opcode, masked, n = bool(buf[0] & 0x80), buf[0] & 0x0F, bool(buf[1] & 0x80), buf[1] & 0x7F
        pos = 2
        if n == 126:
            if len(buf) < 4:
                return None
            n, pos = struct.unpack(">H", buf[2:4])[0], 4
        elif n == 127:
            if len(buf) < 10:
                return None
            n, pos = struct.unpack(">Q", buf[2:10])[0], 10
        mask = b""
        if masked:
            if len(buf) < pos + 4:
                return None
            mask, pos = bytes(buf[pos : pos + 4]), pos + 4
        if len(buf) < pos + n:
            return None
        payload = bytes(buf[pos : pos + n])
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        del buf[: pos + n]
        return fin, opcode, payload

    def recv(self, timeout: float = 10.0) -> Message | None:
        """The next data or close message (pings are answered); None on EOF or the deadline."""
        deadline = time.monotonic() + timeout
        parts: list[bytes] = []
        first_opcode = None
        for _ in range(100_000):  # bounded: each turn consumes a frame or reads more bytes
            parsed = self._parse_one()
            if parsed is None:
                if not self._fill(deadline):
                    return None
                continue
            fin, opcode, payload = parsed
            if opcode == OP_PING:
                self.send_frame(OP_PONG, payload)
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                if not self._closed_sent:
                    self._closed_sent = True
                    self.send_frame(OP_CLOSE, payload[:2])
                return Message(OP_CLOSE, payload[2:], code)
            if opcode != OP_CONT:
                first_opcode = opcode
            parts.append(payload)
            if fin:
                return Message(first_opcode if first_opcode is not None else opcode, b"".join(parts))
        raise AssertionError("too many websocket frames")

    def until(self, wanted: set[int], timeout: float = 10.0) -> tuple[Message | None, list[Message]]:
        """Read until a Stet frame of a ``wanted`` type (returned), a close, EOF or the deadline.

        Returns (the wanted message or the close/None that stopped it, everything read).
        """
        deadline = time.monotonic() + timeout
        seen: list[Message] = []
        for _ in range(10_000):  # bounded
            msg = self.recv(max(0.0, deadline - time.monotonic()))
            if msg is None or msg.opcode == OP_CLOSE:
                return msg, seen
            seen.append(msg)
            if msg.opcode == OP_BINARY:
                try:
                    if msg.frame.type in wanted:
                        return msg, seen
                except pp.ProtocolError:
                    pass
        raise AssertionError("too many messages")

    def until_closed(self, timeout: float = 10.0) -> tuple[int | None, list[Message]]:
        """Read until the daemon closes the websocket; (close code, every message before it)."""
        deadline = time.monotonic() + timeout
        seen: list[Message] = []
        for _ in range(10_000):  # bounded
            msg = self.recv(max(0.0, deadline - time.monotonic()))
            if msg is None:
                assert self.ended is not None, f"the daemon did not close the link within {timeout}s"
                return None, seen
            if msg.opcode == OP_CLOSE:
                self.drain(timeout=max(0.5, deadline - time.monotonic()))
                return msg.close_code, seen
            seen.append(msg)
        raise AssertionError("too many messages")


def errors_in(messages: list[Message]) -> list[dict[str, Any]]:
    """The headers of the Stet ERROR frames among ``messages``."""
    out = []
    for m in messages:
        if m.opcode == OP_BINARY:
            try:
                frame = m.frame
            except pp.ProtocolError:
                continue
            if frame.type == pp.ERROR:
                out.append(frame.header)
    return out


def leaks(data: bytes, secrets: list[str]) -> list[str]:
    """Which ``secrets`` appear in ``data`` as UTF-8, JSON-escaped, or base64 (either alignment)."""
    found = []
    for s in secrets:
        raw = s.encode()
        forms = {raw, json.dumps(s).encode()[1:-1]}
        for shift in range(3):
            padded = b"\0" * shift + raw
            b64 = base64.b64encode(padded)[4 if shift else 0 : -4]
            if len(b64) >= 8:
                forms.add(b64)
        if any(f and f in data for f in forms):
            found.append(s)
    return found


EMPTY_SV = base64.b64encode(b"\x00").decode()


def open_member_session(port: int, identity: DeviceIdentity, server_cert_der: bytes, vault_id: str,
                        *, timeout: float = 10.0) -> WireClient:
    """A paired device's link, by hand: TLS with its certificate, upgrade, HELLO both ways."""
    client = WireClient(port, sync_context(identity, server_cert_der), timeout=timeout).connect()
    status = client.upgrade("/stet/peer")
    assert status == 101, f"the daemon refused a member's link ({status}, {client.ended})"
    client.send_stet(pp.HELLO, {"device": identity.device_id, "vaults": [vault_id]})
    msg, _ = client.until({pp.INDEX_SYNC}, timeout=timeout)
    assert msg is not None, f"no INDEX_SYNC from the daemon ({client.ended})"
    assert msg.opcode == OP_BINARY, f"the daemon closed the link: {msg.close_code}"
    return client


def fetch_everything(client: WireClient, vault_id: str, *, timeout: float = 10.0) -> list[Message]:
    """Ask, as a peer that has nothing, for the whole vault; every message up to SYNCED."""
    client.send_stet(pp.INDEX_SYNC, {"vault": vault_id, "sv": EMPTY_SV, "digest": "nothing"})
    msg, seen = client.until({pp.NOTE_SVS}, timeout=timeout)
    assert msg is not None, "no NOTE_SVS"
    assert msg.opcode == OP_BINARY, f"the daemon closed the link: {errors_in(seen)}"
    client.send_stet(pp.NOTE_SVS, {"vault": vault_id, "notes": []})
    msg, more = client.until({pp.SYNCED}, timeout=timeout)
    assert msg is not None, "no SYNCED"
    assert msg.opcode == OP_BINARY, f"the daemon closed the link: {errors_in(more)}"
    return seen + more


def note_updates(messages: list[Message]) -> list[pp.UpdateItem]:
    """Every update item carried by the NOTE_UPDATES frames among ``messages``."""
    out: list[pp.UpdateItem] = []
    for m in messages:
        if m.opcode == OP_BINARY and m.data[2] == pp.NOTE_UPDATES:
            out += pp.decode_updates(m.frame).items
    return out
