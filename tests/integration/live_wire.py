"""A y-websocket client by hand (aiohttp + pycrdt), for what a stock client never sends:
crafted updates, other clients' awareness ids, many sockets at once (issue 33).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pycrdt

from stet.sync.yjs_protocol import (
    MSG_AWARENESS,
    MSG_SYNC,
    SYNC_STEP2,
    AwarenessEntry,
    decode_awareness,
    encode_awareness,
    parse,
)
from tests.harness import DaemonProcess
from tests.integration.live_support import live_url

TIMEOUT = 30.0


def step1(state_vector: bytes) -> bytes:
    return bytes([MSG_SYNC, 0]) + pycrdt.write_message(state_vector)


def update_message(update: bytes, *, step2: bool = False) -> bytes:
    return bytes([MSG_SYNC, SYNC_STEP2 if step2 else 2]) + pycrdt.write_message(update)


def awareness(entries: list[tuple[int, int, dict[str, Any] | None]]) -> bytes:
    body = encode_awareness([AwarenessEntry(c, clock, json.dumps(state)) for c, clock, state in entries])
    return bytes([MSG_AWARENESS]) + pycrdt.write_message(body)


class RawLive:
    """One socket; ``doc`` mirrors the note once ``join`` has synced it."""

    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.session = session
        self.ws = ws
        self.doc: pycrdt.Doc[Any] = pycrdt.Doc()
        self.step2_bytes = 0
        self.awareness: list[AwarenessEntry] = []  # every entry the server relayed to us

    @classmethod
    async def open(cls, d: DaemonProcess, path: str, token: str) -> RawLive:
        session = aiohttp.ClientSession()
        try:
            ws = await session.ws_connect(f"{live_url(d)}/{path}?token={token}", max_msg_size=0)
        except BaseException:
            await session.close()
            raise
        return cls(session, ws)

    async def receive(self) -> aiohttp.WSMessage:
        msg = await self.ws.receive(timeout=TIMEOUT)
        if msg.type == aiohttp.WSMsgType.BINARY:
            parsed = parse(bytes(msg.data))
            if parsed.kind == MSG_SYNC and parsed.sync_type == SYNC_STEP2:
                self.step2_bytes = len(parsed.payload)
                self.doc.apply_update(parsed.payload)
            elif parsed.kind == MSG_SYNC and parsed.sync_type == 2:
                self.doc.apply_update(parsed.payload)
            elif parsed.kind == MSG_AWARENESS:
                self.awareness.extend(decode_awareness(parsed.payload))
        return msg

    async def first(self) -> aiohttp.WSMessage:
        """The server's first message: sync step 1 on an accepted socket, else the close."""
        return await self.receive()

    async def join(self) -> str:
        """Sync with the note (our empty step 1, its step 2); returns its text."""
        first = await self.receive()
        assert first.type == aiohttp.WSMsgType.BINARY, (first.type, first.data, first.extra)
        await self.ws.send_bytes(step1(b"\x00"))
        for _ in range(100):
            msg = await self.receive()
            assert msg.type == aiohttp.WSMsgType.BINARY, (msg.type, msg.data, msg.extra)
            if self.step2_bytes or parse(bytes(msg.data)).sync_type == SYNC_STEP2:
                return str(self.doc.get("content", type=pycrdt.Text))
        raise AssertionError("no sync step 2 in 100 messages")

    async def send(self, data: bytes) -> None:
        await self.ws.send_bytes(data)

    async def closed(self, within_s: float = 15.0) -> tuple[int | None, str]:
        """Read until the server closes: (code, reason); (None, "still open") if it has
        not within ``within_s`` (keepalives and relays are read and kept meanwhile)."""
        deadline = time.monotonic() + within_s
        for _ in range(100_000):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                msg = await asyncio.wait_for(self.receive(), left)
            except TimeoutError:
                break
            if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
                return self.ws.close_code, str(msg.extra or "")
        return None, "still open"

    async def close(self) -> None:
        await self.ws.close()
        await self.session.close()
