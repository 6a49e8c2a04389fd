"""Helpers for the agent API tests (SPEC §6): agent tokens, a keep-alive JSON client per
agent, the SSE event stream read with a deadline, and looks at the vault folder.

Every request goes over real loopback HTTP to a real daemon process. Nothing sleeps to
synchronise: waits are ``wait_until`` or socket timeouts bounded by a deadline.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stet.sync.home import HomeLayout, HomeRegistry
from tests.harness import DaemonProcess


def quote(path: str) -> str:
    return urllib.parse.quote(path, safe="/")


def make_token(home: Path, name: str, *, vault: str = "notes", read: tuple[str, ...] = (),
               append: tuple[str, ...] = (), write: tuple[str, ...] = ()) -> str:
    """An agent token, created the way ``stet token create`` does (on home.db directly)."""
    registry = HomeRegistry(HomeLayout(home))
    try:
        entry = registry.find(vault)
        return registry.create_token(name, entry.id, {"read": list(read), "append": list(append),
                                                      "write": list(write)})
    finally:
        registry.close()


@dataclass
class Answer:
    status: int
    body: Any
    raw: bytes = b""

    @property
    def code(self) -> str | None:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return str(self.body["error"].get("code"))
        return None

    @property
    def error(self) -> dict[str, Any]:
        assert isinstance(self.body, dict), self.body
        err: dict[str, Any] = self.body["error"]
        return err


class Agent:
    """One agent: its own token and one keep-alive connection (reopened after a failure)."""

    def __init__(self, api_url: str, token: str, vault: str = "notes", *, timeout: float = 30.0) -> None:
        parsed = urllib.parse.urlsplit(api_url)
        assert parsed.hostname is not None
        assert parsed.port is not None
        self.host, self.port = parsed.hostname, parsed.port
        self.token = token
        self.vault = vault
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def retarget(self, api_url: str) -> None:
        """The daemon restarted on another port."""
        self.close()
        parsed = urllib.parse.urlsplit(api_url)
        assert parsed.port is not None
        self.port = parsed.port

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def url(self, tail: str) -> str:
        return f"/v1/vaults/{quote(self.vault)}/{tail}"

    def note(self, path: str, suffix: str = "") -> str:
        return self.url(f"notes/{quote(path)}{suffix}")

    def request(self, method: str, target: str, body: Any = None, *, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> Answer:
        """One request on the kept-alive connection; an OSError leaves it closed."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        hdrs = {"Authorization": f"Bearer {self.token}", "Host": f"127.0.0.1:{self.port}"}
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self._conn.request(method, target, body=data, headers=hdrs)
            resp = self._conn.getresponse()
            payload = resp.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if resp.will_close:
            self.close()
        assert resp.status != 500, f"{method} {target}: HTTP 500 {payload[:300]!r}"
        try:
            decoded = json.loads(payload) if payload else None
        except ValueError:
            decoded = None
        return Answer(resp.status, decoded, payload)

    # the operations, by their REST faces ------------------------------------------------

    def read(self, path: str) -> Answer:
        return self.request("GET", self.note(path))

    def create(self, path: str, content: str, **extra: Any) -> Answer:
        return self.request("POST", self.note(path), {"content": content, **extra})

    def append(self, path: str, text: str, **extra: Any) -> Answer:
        return self.request("POST", self.note(path, "/append"), {"text": text, **extra})

    def update(self, path: str, content: str, **extra: Any) -> Answer:
        return self.request("PUT", self.note(path), {"content": content, **extra})

    def edit(self, path: str, edits: list[tuple[str, str]], **extra: Any) -> Answer:
        body = {"edits": [{"oldText": o, "newText": n} for o, n in edits], **extra}
        return self.request("POST", self.note(path, "/edit"), body)

    def delete(self, path: str, **extra: Any) -> Answer:
        return self.request("DELETE", self.note(path), extra or None)

    def move(self, path: str, new_path: str, **extra: Any) -> Answer:
        return self.request("POST", self.note(path, "/move"), {"newPath": new_path, **extra})

    def search(self, q: str) -> Answer:
        return self.request("GET", self.url(f"search?q={urllib.parse.quote(q)}"))

    def log(self, path: str | None = None) -> Answer:
        query = f"?path={urllib.parse.quote(path)}" if path else ""
        return self.request("GET", self.url(f"log{query}"))

    def ok(self, answer: Answer) -> dict[str, Any]:
        assert answer.status in (200, 201), (answer.status, answer.body)
        assert isinstance(answer.body, dict)
        return answer.body


def agent_for(daemon: DaemonProcess, token: str, vault: str = "notes") -> Agent:
    return Agent(daemon.api_url, token, vault)


def owner_agent(daemon: DaemonProcess, vault: str = "notes") -> Agent:
    return Agent(daemon.api_url, daemon.client.token, vault)


@dataclass
class SseEvent:
    id: int
    type: str
    data: dict[str, Any]


@dataclass
class EventStream:
    """``GET /v1/vaults/{vault}/events`` on a raw connection, read with a deadline."""

    conn: http.client.HTTPConnection
    resp: http.client.HTTPResponse
    seen: list[SseEvent] = field(default_factory=list)
    consumed: int = 0

    def next_event(self, deadline: float) -> SseEvent | None:
        """The next event, or None once the deadline passes (keepalive comments skipped)."""
        fields: dict[str, str] = {}
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            sock = self.conn.sock
            assert sock is not None
            sock.settimeout(remaining)
            try:
                line = self.resp.readline()
            except TimeoutError:
                return None
            if not line:
                return None  # the stream ended
            text = line.decode("utf-8").rstrip("\r\n")
            if text == "":
                if "data" in fields:
                    event = SseEvent(int(fields.get("id", "0")), fields.get("event", "message"),
                                     json.loads(fields["data"]))
                    self.seen.append(event)
                    return event
                fields = {}
                continue
            if text.startswith(":"):
                continue
            name, _, value = text.partition(":")
            fields[name] = value.removeprefix(" ")

    def wait_for(self, type_: str, *, timeout: float = 10.0, **match: Any) -> SseEvent:
        """The next matching event after the one this returned last (events in between are
        kept in ``seen``)."""
        deadline = time.monotonic() + timeout
        while True:
            while self.consumed < len(self.seen):
                event = self.seen[self.consumed]
                self.consumed += 1
                if event.type == type_ and all(event.data.get(k) == v for k, v in match.items()):
                    return event
            if self.next_event(deadline) is None:
                seen = [(e.type, e.data.get("path")) for e in self.seen]
                raise AssertionError(f"no {type_} event matching {match} within {timeout}s; saw {seen}")


@contextlib.contextmanager
def event_stream(daemon: DaemonProcess, token: str, vault: str = "notes",
                 last_event_id: int | None = None) -> Iterator[EventStream]:
    parsed = urllib.parse.urlsplit(daemon.api_url)
    assert parsed.port is not None
    conn = http.client.HTTPConnection("127.0.0.1", parsed.port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Host": f"127.0.0.1:{parsed.port}",
               "Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    try:
        conn.request("GET", f"/v1/vaults/{quote(vault)}/events", headers=headers)
        resp = conn.getresponse()
        assert resp.status == 200, (resp.status, resp.read())
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        yield EventStream(conn, resp)
    finally:
        conn.close()


def folder_files(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (relative path -> bytes), dot-temp files included."""
    out: dict[str, bytes] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = Path(dirpath) / name
            with contextlib.suppress(FileNotFoundError):
                out[full.relative_to(root).as_posix()] = full.read_bytes()
    return out
