"""``stet mcp --stdio``: a stdio MCP server that proxies every message to the daemon's ``/mcp``
(SPEC §6.11), for MCP clients that only spawn stdio servers (Claude Desktop).

The stdio transport is newline-delimited JSON-RPC on stdin/stdout; the daemon speaks
Streamable HTTP with plain JSON answers and no sessions. So the bridge is a line proxy: each
line read is POSTed as is, one loopback connection per message (with the agent token and,
after ``initialize``, the negotiated ``MCP-Protocol-Version``), and each answer is written
back as one line. Notifications get no answer (HTTP 202). When the daemon cannot be
reached, or refuses the token, a request gets a JSON-RPC error saying so in one sentence,
and the bridge keeps running (the daemon may be started or restarted meanwhile; its
address is looked up again).

Standard library only, and nothing heavy imported: it must start in ≤ 300 ms. Logs and
warnings go to stderr; stdout carries only protocol messages.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from collections.abc import Callable
from typing import Any, BinaryIO

from .loopback_http import exchange

DAEMON_UNAVAILABLE = -32000  # implementation-defined server error (JSON-RPC 2.0 §5.1)
PARSE_ERROR = -32700
PROTOCOL_HEADER = "MCP-Protocol-Version"


def _request_ids(message: Any) -> list[Any]:
    """The ids a message (or batch) expects answers for: requests only, not notifications."""
    items = message if isinstance(message, list) else [message]
    return [m["id"] for m in items
            if isinstance(m, dict) and "id" in m and isinstance(m.get("method"), str)]


def _error(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


class StdioBridge:
    def __init__(self, find_url: Callable[[], str], token: str, out: BinaryIO, *, timeout: float = 120.0,
                 log: Callable[[str], None] | None = None) -> None:
        self._find_url = find_url
        self._token = token
        self._out = out
        self._timeout = timeout
        self._log = log or (lambda text: print(f"stet mcp: {text}", file=sys.stderr, flush=True))
        self._url: urllib.parse.SplitResult | None = None
        self._protocol: str | None = None

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stdin: BinaryIO) -> int:
        try:
            for raw in iter(stdin.readline, b""):
                line = raw.strip()
                if line:
                    self.handle(line)
        except (KeyboardInterrupt, BrokenPipeError):
            pass
        return 0

    def handle(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self._write(_error(None, PARSE_ERROR, "not valid JSON"))
            return
        ids = _request_ids(message)
        try:
            status, body = self._post(line)
        except OSError as exc:
            self._log(f"cannot reach the Stet daemon: {exc}")
            for msg_id in ids:
                self._write(_error(msg_id, DAEMON_UNAVAILABLE,
                                   "the Stet daemon is not running or not reachable: start it with "
                                   "`stet start`, then retry"))
            return
        if not body.strip():
            return  # 202: a notification or a response
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if isinstance(answer, dict) and "jsonrpc" not in answer:
            # The daemon's own refusal before MCP (bad token, Host, Origin): {"error": {...}}.
            raw_err = answer.get("error")
            err: dict[str, Any] = raw_err if isinstance(raw_err, dict) else {}
            text = str(err.get("message") or f"HTTP {status}")
            if status == 401:
                text += " (check the token in --token-file or STET_TOKEN; `stet token list`)"
            for msg_id in ids:
                self._write(_error(msg_id, DAEMON_UNAVAILABLE, text))
            return
        if answer is None:
            for msg_id in ids:
                self._write(_error(msg_id, DAEMON_UNAVAILABLE,
                                   f"the daemon sent a non-JSON answer (HTTP {status})"))
            return
        self._note_protocol(message, answer)
        self._write(answer)

    # -- helpers ----------------------------------------------------------------------------

    def _note_protocol(self, message: Any, answer: Any) -> None:
        if (isinstance(message, dict) and message.get("method") == "initialize"
                and isinstance(answer, dict) and isinstance(answer.get("result"), dict)):
            version = answer["result"].get("protocolVersion")
            self._protocol = version if isinstance(version, str) else None

    def _write(self, message: Any) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        self._out.write(data)
        self._out.flush()

    def _post(self, body: bytes) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if self._protocol is not None:
            headers[PROTOCOL_HEADER] = self._protocol
        for attempt in (1, 2):
            if self._url is None:
                self._url = urllib.parse.urlsplit(self._find_url())
            url = self._url
            target = (url.path or "/mcp") + (f"?{url.query}" if url.query else "")
            try:
                return exchange(url.hostname or "127.0.0.1", url.port or 80, "POST", target, headers, body,
                                timeout=self._timeout)
            except ConnectionRefusedError:
                # Nothing was sent: the daemon stopped, or restarted on another port.
                self._url = None
                if attempt == 2:
                    raise
        raise ConnectionRefusedError("unreachable")  # pragma: no cover - the loop returns or raises
