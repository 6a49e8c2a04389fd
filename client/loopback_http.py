"""One HTTP/1.1 exchange with the daemon on loopback, over a plain socket.

``http.client`` imports ``email`` and ``ssl`` (a good part of a CLI command's start, SPEC
P10) to speak to any server; the CLI speaks to one, on 127.0.0.1, that always answers with a
length or chunks. One request per connection (``Connection: close``); the answer is read to
the end of the stream.
"""

from __future__ import annotations

import socket


class BadAnswer(OSError):
    """Not an HTTP answer (cut short, or not HTTP at all)."""


def exchange(host: str, port: int, method: str, target: str, headers: dict[str, str], body: bytes | None,
             *, timeout: float) -> tuple[int, bytes]:
    """Send one request; return the answer's status and body."""
    host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host_header}", "Connection: close",
             f"Content-Length: {len(body or b'')}", *(f"{k}: {v}" for k, v in headers.items())]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    return parse_answer(b"".join(chunks))


def parse_answer(raw: bytes) -> tuple[int, bytes]:
    head, sep, rest = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.split(b"\r\n")
    parts = status_line.split(None, 2)
    if not sep or len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise BadAnswer("the daemon's answer was cut short or is not HTTP")
    fields = {}
    for line in header_lines:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        rest = _dechunk(rest)
    elif b"content-length" in fields:
        length = int(fields[b"content-length"])
        if len(rest) < length:
            raise BadAnswer("the daemon's answer was cut short")
        rest = rest[:length]
    return int(parts[1]), rest


def _dechunk(data: bytes) -> bytes:
    out: list[bytes] = []
    pos = 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            raise BadAnswer("the daemon's answer was cut short")
        size = int(data[pos:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(data[end + 2:end + 2 + size])
        pos = end + 2 + size + 2
