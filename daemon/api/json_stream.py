"""JSON answers whose content is large, written in slices so the event loop runs between them.

SPEC §6.3: no request may hold the loop for more than ~50 ms of work. ``json.dumps`` of a
10 MiB note takes 40-160 ms and cannot be moved to a thread (the C encoder holds the GIL
throughout), so a big string is escaped in slices of ``SLICE_CHARS`` code points instead:
the escape of a string is the concatenation of its characters' escapes, so
``json.dumps(slice)[1:-1]`` per slice gives the same bytes as ``json.dumps`` of the whole.

``JsonOf(value)`` stands for the string ``json.dumps(value, ensure_ascii=False)`` (an MCP
answer's ``content[0].text``) without building it: streamed, it is produced and escaped
slice by slice; anywhere else, ``materialize`` builds it (see ``dumps``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

logger = logging.getLogger(__name__)

BIG_CHARS = 1024 * 1024  # a string this long is streamed, not encoded in one go
SLICE_CHARS = 256 * 1024  # code points escaped per slice (~1-4 ms of work each)
WRITE_BYTES = 256 * 1024  # small pieces are gathered up to this before a write
YIELD_S = 0.002  # between slices: not sleep(0), a waiting request needs several loop turns


@dataclass(frozen=True)
class JsonOf:
    """The JSON text of ``value`` (``ensure_ascii=False``), as a string value, built lazily."""

    value: Any

    def materialize(self) -> str:
        return dumps(self.value, ensure_ascii=False)


def dumps(value: Any, *, ensure_ascii: bool = True) -> str:
    """``json.dumps`` that also accepts ``JsonOf`` values (built in one go)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, JsonOf):
        return value.materialize()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def has_big_string(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` holds a string of at least ``BIG_CHARS`` (or a ``JsonOf`` that does)."""
    if isinstance(value, str):
        return len(value) >= BIG_CHARS
    if depth > 8:
        return False  # answers are shallow; a deep one is encoded the ordinary way
    if isinstance(value, JsonOf):
        return has_big_string(value.value, depth + 1)
    if isinstance(value, dict):
        return any(has_big_string(v, depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_big_string(v, depth + 1) for v in value)
    return False


def iter_json(value: Any, *, ensure_ascii: bool) -> Iterator[str]:
    """The pieces of ``json.dumps(value, ensure_ascii=...)`` (default separators), lazily:
    each piece is at most one slice of work."""
    if isinstance(value, str):
        if len(value) < BIG_CHARS:
            yield json.dumps(value, ensure_ascii=ensure_ascii)
            return
        yield '"'
        for start in range(0, len(value), SLICE_CHARS):
            yield json.dumps(value[start:start + SLICE_CHARS], ensure_ascii=ensure_ascii)[1:-1]
        yield '"'
    elif isinstance(value, JsonOf):
        yield '"'
        for piece in iter_json(value.value, ensure_ascii=False):
            yield json.dumps(piece, ensure_ascii=ensure_ascii)[1:-1]
        yield '"'
    elif isinstance(value, dict):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"keys must be str, not {type(key).__name__}")
            yield (", " if i else "") + json.dumps(key, ensure_ascii=ensure_ascii) + ": "
            yield from iter_json(item, ensure_ascii=ensure_ascii)
        yield "}"
    elif isinstance(value, list | tuple):
        yield "["
        for i, item in enumerate(value):
            if i:
                yield ", "
            yield from iter_json(item, ensure_ascii=ensure_ascii)
        yield "]"
    else:
        yield dumps(value, ensure_ascii=ensure_ascii)


async def encode(value: Any, *, ensure_ascii: bool = True) -> bytes:
    """The bytes of ``json.dumps(value)``, built slice by slice, yielding the loop between
    slices (for an answer whose size must be known before it is sent: an MCP batch's parts)."""
    if not has_big_string(value):
        return dumps(value, ensure_ascii=ensure_ascii).encode()
    chunks: list[bytes] = []
    pending: list[str] = []
    size = 0
    for piece in iter_json(value, ensure_ascii=ensure_ascii):
        pending.append(piece)
        size += len(piece)
        if size >= WRITE_BYTES:
            chunks.append("".join(pending).encode())
            pending, size = [], 0
            await asyncio.sleep(YIELD_S)
    chunks.append("".join(pending).encode())
    return b"".join(chunks)


async def stream_json(request: web.Request, value: Any, *, status: int = 200,
                      ensure_ascii: bool = True) -> web.StreamResponse:
    """Answer ``value`` as JSON (the bytes of ``json.dumps``), written slice by slice (chunked),
    yielding the loop between slices."""
    response = web.StreamResponse(status=status, headers={"Content-Type": "application/json; charset=utf-8"})
    await response.prepare(request)
    pending: list[str] = []
    size = 0
    try:
        for piece in iter_json(value, ensure_ascii=ensure_ascii):
            pending.append(piece)
            size += len(piece)
            if size >= WRITE_BYTES:
                await response.write("".join(pending).encode())
                pending, size = [], 0
                await asyncio.sleep(YIELD_S)
        if pending:
            await response.write("".join(pending).encode())
        await response.write_eof()
    except ConnectionResetError:  # the client left mid-answer: nothing more to send, no error
        logger.debug("%s %s: the client left during a streamed answer", request.method, request.path)
    return response


async def json_answer(request: web.Request, value: Any, *, status: int = 200,
                      ensure_ascii: bool = True) -> web.StreamResponse:
    """A JSON answer: streamed when it holds a big string, else ``web.json_response``."""
    if has_big_string(value):
        return await stream_json(request, value, status=status, ensure_ascii=ensure_ascii)
    return web.json_response(value, status=status,
                             dumps=lambda v: dumps(v, ensure_ascii=ensure_ascii))
