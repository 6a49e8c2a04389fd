"""Helpers for R5 (SPEC §10), the eight-agent run: one face over REST or the official MCP
SDK client for an agent, a shared ledger of what was acknowledged and refused, and the
lost answer (a request sent on its own socket whose response is never read).

Each agent runs in its own thread with its own event loop; the REST face blocks that
loop, which serves only that agent. Nothing here sleeps to synchronise.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.integration.agent_support import Agent, quote


@dataclass
class Result:
    ok: bool
    body: dict[str, Any]

    @property
    def code(self) -> str | None:
        err = self.body.get("error")
        return str(err.get("code")) if isinstance(err, dict) else None


class RestFace:
    """The SPEC's tools by their REST faces, on one kept-alive connection."""

    kind = "rest"

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def call(self, tool: str, **args: Any) -> Result:
        a = self.agent
        path = args.pop("path")
        if tool == "read_note":
            answer = a.read(path)
        elif tool == "append_note":
            answer = a.append(path, args.pop("text"), **args)
        elif tool == "update_note":
            answer = a.update(path, args.pop("content"), **args)
        elif tool == "edit_note":
            answer = a.request("POST", a.note(path, "/edit"), args)
        elif tool == "create_note":
            answer = a.create(path, args.pop("content"), **args)
        elif tool == "delete_note":
            answer = a.delete(path, **args)
        elif tool == "move_note":
            answer = a.move(path, args.pop("newPath"), **args)
        else:
            raise AssertionError(f"no REST face for {tool}")
        raw = {"raw": answer.raw[:200].decode(errors="replace")}
        body = answer.body if isinstance(answer.body, dict) else raw
        return Result(answer.status in (200, 201), body)


class McpFace:
    """The same tools through the official MCP SDK client (Streamable HTTP)."""

    kind = "mcp"

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, **args: Any) -> Result:
        result = await self.client.call_tool(tool, args)
        body = result.structured_content
        assert isinstance(body, dict), result
        return Result(not result.is_error, body)


@contextlib.asynccontextmanager
async def mcp_face(api_url: str, token: str) -> AsyncIterator[McpFace]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{api_url}/mcp", http_client=http)) as client:
        yield McpFace(client)


def lost_answer(api_url: str, token: str, path: str, body: dict[str, Any], *, read_first_byte: bool) -> None:
    """POST an append on a socket of its own and never read the answer: the request may or
    may not have been applied (the client cannot know), as after a dropped connection."""
    host_port = api_url.removeprefix("http://")
    host, _, port = host_port.partition(":")
    data = json.dumps(body).encode()
    head = (f"POST /v1/vaults/notes/notes/{quote(path)}/append HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head + data)
        if read_first_byte:  # the daemon answered; the answer is lost on the way back
            with contextlib.suppress(OSError):
                sock.recv(1)


@dataclass
class Refusal:
    daemon: str
    path: str
    code: str
    marker: str | None
    who: str


@dataclass
class Ledger:
    seed: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, str] = field(default_factory=dict)  # marker -> what wrote it
    refused: list[Refusal] = field(default_factory=list)
    gone: dict[str, str] = field(default_factory=dict)  # text an acknowledged write removed -> note
    counts: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    counter: int = 0

    def marker(self, who: str) -> str:
        with self.lock:
            self.counter += 1
            return f"<{who}-{self.seed:x}-{self.counter:05d}>"

    def ack(self, marker: str, what: str) -> None:
        with self.lock:
            assert marker not in self.acked, marker
            self.acked[marker] = what
            self.counts["acknowledged"] += 1

    def refuse(self, refusal: Refusal) -> None:
        with self.lock:
            self.refused.append(refusal)
            self.counts[f"refused {refusal.code}"] += 1

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1


def run_agent(ledger: Ledger, name: str, body: Callable[[], Awaitable[None]]) -> threading.Thread:
    """Start an agent's coroutine in a thread with its own loop; a failure lands in the ledger."""
    import asyncio

    def main() -> None:
        try:
            asyncio.run(body())
        except BaseException:  # reported by the test, with the agent's name
            with ledger.lock:
                ledger.errors.append(f"{name}: {traceback.format_exc()}")

    thread = threading.Thread(target=main, name=name, daemon=True)
    thread.start()
    return thread


class Budget:
    """An agent's bounds: at most ``ops`` operations and until ``deadline``."""

    def __init__(self, ops: int, seconds: float) -> None:
        self.ops = ops
        self.deadline = time.monotonic() + seconds

    def steps(self) -> range:
        return range(self.ops)

    @property
    def over(self) -> bool:
        return time.monotonic() > self.deadline
