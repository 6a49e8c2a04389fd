"""Requests first (``daemon/base/loop_slices.py``, issue 11 P8): while an API request is in
flight, long work that uses the turn budget does one item per turn and yields, so the
request's handler is not queued behind 20 ms of bulk work in each of its turns.

No timing is asserted: the tests count items per turn and requests answered."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp import web

from stet.daemon.base import loop_slices
from stet.daemon.base.loop_slices import (
    TimeSlice,
    request_answered,
    request_arrived,
    request_stats,
    turn_deadline,
)
from stet.daemon.base.slow_clients import with_header_deadline


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


class BulkWorker:
    """Long work sliced by ``TimeSlice`` (as the peer apply and the writer are): items of
    0.2 ms; records how many items each of its slices did."""

    def __init__(self) -> None:
        self.per_slice: list[int] = []
        self.stop = False

    async def run(self) -> None:
        slice_ = TimeSlice(0.02)
        n = 0
        while not self.stop:
            _spin(0.0002)
            n += 1
            if slice_.over():
                self.per_slice.append(n)
                n = 0
                await slice_.pause()


@pytest.fixture(autouse=True)
def _requests_first_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_slices, "REQUESTS_FIRST", True)


async def test_long_work_yields_after_one_item_while_a_request_is_in_flight() -> None:
    loop = asyncio.get_running_loop()
    worker = BulkWorker()
    task = asyncio.create_task(worker.run())
    for _ in range(5):  # the worker runs its normal slices first
        await asyncio.sleep(0)
    token = request_arrived(loop)
    before = len(worker.per_slice)
    for _ in range(10):
        await asyncio.sleep(0)
    during = worker.per_slice[before + 1:]  # (the slice that was running when it arrived aside)
    assert during
    assert all(n == 1 for n in during), during
    cut = request_stats(loop).slices_cut
    assert cut >= len(during)
    request_answered(loop, token)
    assert turn_deadline(0.02) > time.monotonic()  # answered: the budget is whole again
    after = len(worker.per_slice)
    for _ in range(5):
        await asyncio.sleep(0)
    worker.stop = True
    await task
    assert sum(worker.per_slice[after:]) > len(worker.per_slice[after:])  # more than one item a slice
    assert request_stats(loop).answered >= 1


async def test_a_request_in_flight_too_long_holds_nothing_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream (SSE), a long poll or a slow upload is in flight for minutes: after
    ``REQUEST_FIRST_S`` it counts no more, so bulk work is never stopped for good."""
    loop = asyncio.get_running_loop()
    token = request_arrived(loop)
    await asyncio.sleep(0)
    assert turn_deadline(0.02) <= time.monotonic()
    monkeypatch.setattr(loop_slices, "REQUEST_FIRST_S", 0.0)
    await asyncio.sleep(0)
    assert turn_deadline(0.02) > time.monotonic()
    request_answered(loop, token)


async def test_work_cut_before_it_began_waits_a_turn_and_never_for_good(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Work whose one item is a unit of its own (the peer's apply, the writer's plans)
    does nothing in a turn cut before it began -- while it stays over for less than
    ``REQUEST_FIRST_S``; then it does its item again (a slice that is always over, as
    tests force, still ends)."""
    loop = asyncio.get_running_loop()
    slice_ = TimeSlice(0.02)
    assert not slice_.cut_before_it_began()  # nothing in flight
    token = request_arrived(loop)
    await slice_.pause()
    assert slice_.cut_before_it_began()
    monkeypatch.setattr(TimeSlice, "over", lambda self: True)
    monkeypatch.setattr(loop_slices, "REQUEST_FIRST_S", 0.05)
    end = time.monotonic() + 5.0
    while slice_.cut_before_it_began():  # bounded: REQUEST_FIRST_S, then False
        assert time.monotonic() < end
        await slice_.pause()
    request_answered(loop, token)
    monkeypatch.undo()
    await slice_.pause()
    assert not slice_.cut_before_it_began()


async def test_off_switch_keeps_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_slices, "REQUESTS_FIRST", False)
    loop = asyncio.get_running_loop()
    token = request_arrived(loop)
    await asyncio.sleep(0)
    assert turn_deadline(0.02) > time.monotonic()
    request_answered(loop, token)


async def test_the_api_connection_handler_marks_a_request_from_its_bytes_to_its_answer() -> None:
    """Through aiohttp's real request handling (``slow_clients.HeaderDeadlineHandler``):
    inside the handler long work is cut to one item; once answered, the request holds
    nothing back and is counted."""
    loop = asyncio.get_running_loop()
    seen: list[bool] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(turn_deadline(0.02) <= time.monotonic())
        await asyncio.sleep(0)  # a handler that awaits: still in flight in its next turn
        seen.append(turn_deadline(0.02) <= time.monotonic())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/x", handler)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    with_header_deadline(runner, requests_first=True)
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    answered = request_stats(loop).answered
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                async with session.get(f"http://127.0.0.1:{port}/x") as response:
                    assert response.status == 200
                    assert await response.json() == {"ok": True}
            # No answer: a 404 goes through the same path and is released too.
            async with session.get(f"http://127.0.0.1:{port}/missing") as response:
                assert response.status == 404
    finally:
        await runner.cleanup()
    assert seen == [True] * 6
    assert request_stats(loop).answered == answered + 4
    await asyncio.sleep(0)
    assert turn_deadline(0.02) > time.monotonic()  # nothing left in flight


async def _serve(app: web.Application, *, requests_first: bool) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    with_header_deadline(runner, requests_first=requests_first)
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def _until_nothing_held() -> None:
    for _ in range(int(loop_slices.REQUEST_FIRST_S * 4000)):
        await asyncio.sleep(0.001)
        if turn_deadline(0.02) > time.monotonic():
            return
    raise AssertionError("long work is still held back")


async def test_a_live_editors_websocket_message_goes_first_in_the_turn_it_is_handled() -> None:
    """A Yjs message arrives as websocket bytes: the reader and the room's handler run in
    that turn and the next; long work is cut there, and only there."""
    seen: list[bool] = []

    async def live(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            seen.append(turn_deadline(0.02) <= time.monotonic())
            await ws.send_bytes(message.data)
        return ws

    app = web.Application()
    app.router.add_get("/live", live)
    runner, port = await _serve(app, requests_first=True)
    try:
        url = f"http://127.0.0.1:{port}/live"
        async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
            await _until_nothing_held()  # the upgrade request is in flight as long as the socket
            for i in range(3):
                await ws.send_bytes(bytes([i]))
                assert (await ws.receive()).data == bytes([i])
                await _until_nothing_held()  # between messages: nothing held back
    finally:
        await runner.cleanup()
    assert seen == [True, True, True]


async def test_the_peer_port_does_not_hold_long_work_back() -> None:
    """The peers' port (``requests_first=False``): its frames are bulk work themselves."""
    seen: list[bool] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(turn_deadline(0.02) <= time.monotonic())
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/x", handler)
    runner, port = await _serve(app, requests_first=False)
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/x") as response:
            assert response.status == 200
    finally:
        await runner.cleanup()
    assert seen == [False]


async def test_requests_one_after_another_slow_long_work_down_but_never_stop_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents polling all the time: a new request in flight in every turn. Past
    ``REQUEST_FIRST_S`` of cut slices, long work has its minimum slice again."""
    monkeypatch.setattr(loop_slices, "REQUEST_FIRST_S", 0.05)
    loop = asyncio.get_running_loop()
    worker = BulkWorker()
    task = asyncio.create_task(worker.run())
    tokens = [request_arrived(loop)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    first = len(worker.per_slice)
    began = time.monotonic()
    while time.monotonic() - began < 2.0:  # bounded; a loaded machine may stretch turns
        tokens.append(request_arrived(loop))  # the next request arrives before the last is answered
        request_answered(loop, tokens.pop(0))
        await asyncio.sleep(0)
        if any(n > 1 for n in worker.per_slice[first + 1:]):
            break
    worker.stop = True
    for token in tokens:
        request_answered(loop, token)
    await task
    later = worker.per_slice[first + 1:]
    assert later[0] == 1  # cut at first
    assert any(n > 1 for n in later), later  # then its minimum slice again


@pytest.mark.skipif(not hasattr(__import__("select"), "epoll"), reason="epoll: Linux")
async def test_bytes_not_read_yet_cut_the_turn_they_wait_in() -> None:
    """The loop's selector saw a request's bytes, but their callback is queued behind the
    long work already scheduled in that turn: that long work is cut too (the API's
    connections are watched for unread bytes), not only the handler's turn."""
    import socket

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/x", handler)
    runner, port = await _serve(app, requests_first=True)
    client = socket.create_connection(("127.0.0.1", port))
    try:
        await _until_nothing_held()  # connected (the connection watched), nothing in flight
        turn_deadline(0.02)  # this turn's long work began: the next turn is a fresh one
        client.sendall(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        for _ in range(1000):  # until the kernel has them (loopback: at once, mostly)
            if loop_slices._turn_of(asyncio.get_running_loop()).bytes_waiting():
                break
            _spin(0.001)  # not a yield: the loop must not read them yet
        await asyncio.sleep(0)  # the next turn: this task runs before the bytes' callback
        assert turn_deadline(0.02) <= time.monotonic()
        await _until_nothing_held()  # read, handled and answered: nothing held back
        client.settimeout(10)
        assert client.recv(4096).startswith(b"HTTP/1.1 200")
        client.close()  # its end of file is read, the connection lost and no longer watched
        await _until_nothing_held()
    finally:
        client.close()
        await runner.cleanup()
