"""A deadline for request headers on the API and peer ports (issue 12, slowloris).

aiohttp has no header-read timeout: a client may hold a connection open for an hour
(``keepalive_timeout``) by sending half a request line and a byte now and then. Here a
connection that waits for a request (just opened, or between two requests) and has not
delivered complete headers within ``HEADER_DEADLINE_S`` of its first byte (or of opening)
is closed. Bodies, responses, SSE streams and websockets are not affected: the deadline
runs only while aiohttp's handler is waiting for the next request's headers.

The same handler tells ``loop_slices`` when a request's bytes arrive and when it has been
handled (requests first: long work yields to it in the turns between).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from stet.daemon.base import loop_slices

logger = logging.getLogger(__name__)

HEADER_DEADLINE_S = 10.0


class HeaderDeadlineHandler(RequestHandler):
    """aiohttp's handler with the header deadline (no other change)."""

    header_deadline_s = HEADER_DEADLINE_S
    requests_first = False  # tell loop_slices of requests (the API's port, not the peers')

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stet_timer: asyncio.TimerHandle | None = None
        self._stet_requests: collections.deque[int] = collections.deque()  # loop_slices tokens
        self._stet_fd = -1  # the socket loop_slices watches for unread bytes (API port)

    def _stet_arm(self) -> None:
        if self._stet_timer is None:
            self._stet_timer = self._loop.call_later(self.header_deadline_s, self._stet_expire)

    def _stet_disarm(self) -> None:
        if self._stet_timer is not None:
            self._stet_timer.cancel()
            self._stet_timer = None

    def _waiting_for_headers(self) -> bool:
        waiter = self._waiter
        return not self._upgraded and waiter is not None and not waiter.done()

    def _stet_expire(self) -> None:
        self._stet_timer = None
        if self._waiting_for_headers() or (self._request_count == 0 and not self._upgraded):
            logger.info("closed a connection whose request headers took over %.0f s", self.header_deadline_s)
            self.force_close()
            if self.transport is not None:
                self.transport.close()

    def _stet_mark(self, parsed: int, frame: bool) -> None:
        """Requests parsed from these bytes go first until handled (``_handle_request``);
        bytes of a websocket (a live editor's Yjs messages) for this turn and the next,
        where its reader and its handler run."""
        loop = self._loop
        for _ in range(parsed):
            self._stet_requests.append(loop_slices.request_arrived(loop))
        if frame and self._payload_parser is not None:
            token = loop_slices.request_arrived(loop)
            loop.call_soon(loop.call_soon, loop_slices.request_answered, loop, token)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._stet_arm()  # a connection that never sends a whole request is closed too
        if self.requests_first:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                self._stet_fd = sock.fileno()
                loop_slices.watch_connection(self._loop, self._stet_fd)

    def data_received(self, data: bytes) -> None:
        count = self._request_count
        upgraded = self._upgraded
        super().data_received(data)
        if self.requests_first:
            self._stet_mark(self._request_count - count, upgraded and bool(data))
        if self._request_count != count or self._upgraded:
            self._stet_disarm()  # headers complete: the request is being handled
        elif data and self._waiting_for_headers():
            self._stet_arm()

    async def _handle_request(
        self,
        request: BaseRequest,
        start_time: float | None,
        request_handler: Callable[[BaseRequest], Awaitable[StreamResponse]],
    ) -> tuple[StreamResponse, bool]:
        token = self._stet_requests.popleft() if self._stet_requests else None
        try:
            return await super()._handle_request(request, start_time, request_handler)
        finally:
            if token is not None:
                loop_slices.request_answered(self._loop, token)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stet_disarm()
        while self._stet_requests:  # parsed but never handled
            loop_slices.request_answered(self._loop, self._stet_requests.popleft())
        if self._stet_fd >= 0:
            loop_slices.unwatch_connection(self._loop, self._stet_fd)
            self._stet_fd = -1
        super().connection_lost(exc)


class ApiRequestHandler(HeaderDeadlineHandler):
    """The API's connections: the header deadline, and its requests go first."""

    requests_first = True


class _DeadlineServer(web.Server):
    __slots__ = ()

    def __call__(self) -> RequestHandler:
        return HeaderDeadlineHandler(self, loop=self._loop, **self._kwargs)


class _ApiServer(web.Server):
    __slots__ = ()

    def __call__(self) -> RequestHandler:
        return ApiRequestHandler(self, loop=self._loop, **self._kwargs)


def with_header_deadline(runner: web.AppRunner, *, requests_first: bool = False) -> None:
    """Make a set-up runner's connections use ``HeaderDeadlineHandler`` (call after
    ``await runner.setup()``, before its sites start); ``requests_first``: the API's
    port, whose requests long work yields to (``loop_slices``)."""
    server = runner.server
    assert server is not None, "set the runner up first"
    server.__class__ = _ApiServer if requests_first else _DeadlineServer
