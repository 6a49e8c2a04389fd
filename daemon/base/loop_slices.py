"""Time slices for long work on the event loop (SPEC §3.15: no step holds the loop for
more than ~50 ms).

Long work -- a peer's frame of 800 notes, a first sync's answer of 10,000 -- goes on for
``budget_s`` of wall time, then lets the loop run (requests, events, timers) and goes on
in a later turn. A slice is measured in time, not in items: an item's cost varies a
hundredfold (a 50 KB note against an empty one; a loaded machine against a quiet one).

The budget is shared by all long work in one turn of the loop (``turn_deadline``): a
peer's apply, the folder's writer and a rescan each took their own 20 ms in the same turn,
and a request read in that turn waited for all of them (P8 on the receiving peer: turns of
60-150 ms made of three such slices, ``daemon/base/loop_holds.py``). The first long work of a
turn gets ``TURN_BUDGET_S``; work that comes later in the same turn gets what is left of
it, and at least ``MIN_SLICE_S`` (so that every one of them moves on in every turn, and a
batch is never cut to one item).

Requests first: a request of the API (REST, MCP, the web page) waits for the turn its
bytes are read in and the next one, where its handler runs; all the long work ready
before it runs first in both (P8 on the folder side: a ``GET /v1/status`` answered in
two turns of 20-30 ms of bulk work each). So while a request is in flight
(``request_arrived`` .. ``request_answered``, kept by the API's connection handler,
``slow_clients.ApiRequestHandler``), ``turn_deadline`` hands long work a deadline
already passed: every bulk worker using the turn budget does its one item and yields,
and the handler runs in the next turn. A request counts only for ``REQUEST_FIRST_S``
after it arrived (an SSE stream, a long poll or a slow upload must not stop bulk work
for good), and long work cut for requests without a break for that long gets its
``MIN_SLICE_S`` again (agents polling all the time slow an intake down, never stop it).
``STET_REQUESTS_FIRST=0`` turns it off (to measure before/after).

A request's first turn is cut too where it can be: the loop's selector found its bytes,
but their callback is queued behind the long work already scheduled for that turn. So the
API's connections are also watched for bytes not read yet (``watch_connection``: an epoll
set of their sockets, Linux), asked once per turn, before the turn's first slice of long
work: bytes waiting there cut the turn's slices as a request in flight does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import select
import time
import weakref
from collections.abc import Callable

SLICE_S = 0.02  # work this long, then let the loop run
TURN_BUDGET_S = 0.02  # all long work in one turn of the loop, together
MIN_SLICE_S = 0.005  # ... of which each one gets at least this
REQUEST_FIRST_S = 0.25  # a request in flight holds long work back for at most this long
REQUESTS_FIRST = os.environ.get("STET_REQUESTS_FIRST", "1") != "0"


class RequestStats:
    """What the requests-first rule did on one loop (read by ``loop_holds``' log)."""

    __slots__ = ("answered", "turns", "most_turns", "slices_cut", "waited_s", "longest_s")

    def __init__(self) -> None:
        self.answered = 0  # requests answered
        self.turns = 0  # loop turns they took, summed (0 unless a turn counter is set)
        self.most_turns = 0
        self.slices_cut = 0  # slices of long work cut to one item for a waiting request
        self.waited_s = 0.0  # arrival to answer, summed
        self.longest_s = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"answered": self.answered, "turns": self.turns, "most_turns": self.most_turns,
                "slices_cut": self.slices_cut, "waited_ms": round(self.waited_s * 1000, 1),
                "longest_ms": round(self.longest_s * 1000, 1)}


class _Turn:
    """When the current turn's long work began (None: none yet in this turn). Closed by a
    callback scheduled when it opens, which runs in the loop's next turn. Also the
    requests in flight on this loop (token -> arrival time and turn)."""

    __slots__ = ("began", "requests", "stats", "cut_since", "unread", "sockets")

    def __init__(self) -> None:
        self.began: float | None = None
        self.requests: dict[int, tuple[float, int]] = {}
        self.cut_since: float | None = None  # long work cut for requests without a break since
        self.unread = False  # this turn began with bytes waiting on an API connection
        self.sockets: select.epoll | None = None  # the API's connections (``watch_connection``)
        self.stats = RequestStats()

    def close(self) -> None:
        self.began = None
        self.unread = False

    def bytes_waiting(self) -> bool:
        """Whether an API connection has bytes the loop has not read yet (one
        ``epoll_wait`` with no timeout: microseconds)."""
        if self.sockets is None:
            return False
        try:
            return bool(self.sockets.poll(0))
        except OSError:
            return False

    def request_waiting(self, now: float) -> bool:
        """A request in flight that arrived less than ``REQUEST_FIRST_S`` ago (older ones,
        a stream or a long poll, no longer hold long work back)."""
        return any(now - arrived < REQUEST_FIRST_S for arrived, _ in self.requests.values())


_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turn] = weakref.WeakKeyDictionary()
_TOKENS = itertools.count(1)
turn_counter: Callable[[], int] | None = None  # the loop's turn number, when measured (loop_holds)


def _turn_of(loop: asyncio.AbstractEventLoop) -> _Turn:
    turn = _TURNS.get(loop)
    if turn is None:
        turn = _TURNS[loop] = _Turn()
    return turn


def request_arrived(loop: asyncio.AbstractEventLoop) -> int:
    """A request's bytes arrived (on ``loop``'s thread): long work yields until
    ``request_answered(loop, token)`` with the token returned (or for ``REQUEST_FIRST_S``)."""
    token = next(_TOKENS)
    if REQUESTS_FIRST or turn_counter is not None:
        _turn_of(loop).requests[token] = (time.monotonic(), turn_counter() if turn_counter else 0)
    return token


def request_answered(loop: asyncio.AbstractEventLoop, token: int) -> None:
    """The request of ``token`` has its answer (or failed): it holds nothing back now."""
    turn = _TURNS.get(loop)
    if turn is None:
        return
    arrival = turn.requests.pop(token, None)
    if arrival is None:
        return
    stats = turn.stats
    waited = time.monotonic() - arrival[0]
    turns = turn_counter() - arrival[1] if turn_counter is not None else 0
    stats.answered += 1
    stats.turns += turns
    stats.most_turns = max(stats.most_turns, turns)
    stats.waited_s += waited
    stats.longest_s = max(stats.longest_s, waited)


def watch_connection(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Watch an API connection's socket for bytes not read yet (``unwatch_connection``
    when it is lost). Linux only; elsewhere requests count from their parsing alone."""
    if not hasattr(select, "epoll"):
        return
    turn = _turn_of(loop)
    if turn.sockets is None:
        turn.sockets = select.epoll()
    try:
        turn.sockets.register(fd, select.EPOLLIN)
    except FileExistsError:  # a number reused after a close the set did not hear of
        turn.sockets.modify(fd, select.EPOLLIN)
    except OSError:
        pass


def unwatch_connection(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    turn = _TURNS.get(loop)
    if turn is not None and turn.sockets is not None:
        with contextlib.suppress(OSError, ValueError):  # closed already: the set dropped it
            turn.sockets.unregister(fd)


def request_stats(loop: asyncio.AbstractEventLoop) -> RequestStats:
    """The requests-first counters of ``loop`` (for the loop-holds log and tests; any
    thread may read them)."""
    turn = _TURNS.get(loop)
    return turn.stats if turn is not None else RequestStats()


def turn_deadline(budget_s: float) -> float:
    """When long work starting now should stop and let the loop run: after ``budget_s``,
    or sooner if other long work already used this turn's shared budget (never sooner than
    ``MIN_SLICE_S``); while a request is in flight, now (the worker does one item and
    yields: requests first). Without a running loop (offline tools), after ``budget_s``."""
    now = time.monotonic()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return now + budget_s
    turn = _turn_of(loop)
    if turn.began is None:
        turn.began = now
        loop.call_soon(turn.close)
        turn.unread = REQUESTS_FIRST and turn.bytes_waiting()
    if REQUESTS_FIRST and (turn.unread or (turn.requests and turn.request_waiting(now))):
        if turn.cut_since is None:
            turn.cut_since = now
        if now - turn.cut_since < REQUEST_FIRST_S:
            turn.stats.slices_cut += 1
            return now  # one item, then the loop runs the request (``request_arrived``)
        # Requests one after another for longer (agents polling all the time): long work
        # keeps its minimum slice per turn, so it is slowed down, never stopped.
        return now + min(budget_s, MIN_SLICE_S)
    turn.cut_since = None
    left = turn.began + TURN_BUDGET_S - now
    return now + min(budget_s, max(left, MIN_SLICE_S))


class TimeSlice:
    """``over()`` once ``budget_s`` has passed since the slice began; ``pause()`` lets the
    loop run and begins the next slice."""

    __slots__ = ("budget_s", "_deadline", "_cut_since")

    def __init__(self, budget_s: float = SLICE_S) -> None:
        self.budget_s = budget_s
        self._deadline = turn_deadline(budget_s)
        self._cut_since: float | None = None

    def over(self) -> bool:
        return time.monotonic() >= self._deadline

    def cut_before_it_began(self) -> bool:
        """Over before any of its work began (cut for a request in flight): the caller
        does nothing this turn and pauses, instead of its one item -- for work whose item
        is a unit of work (a commit) of its own. For at most ``REQUEST_FIRST_S`` in a row:
        then it does its one item a slice again, slowed down, never stopped."""
        if not self.over():
            self._cut_since = None
            return False
        now = time.monotonic()
        if self._cut_since is None:
            self._cut_since = now
        return now - self._cut_since < REQUEST_FIRST_S

    def restart(self) -> None:
        self._deadline = turn_deadline(self.budget_s)

    async def pause(self) -> None:
        await asyncio.sleep(0)
        self.restart()

    async def pause_if_over(self) -> None:
        if self.over():
            await self.pause()
