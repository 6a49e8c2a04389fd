"""Time slices for long work on the event loop (SPEC §3.15: no step holds the loop for
more than ~50 ms).

Long work -- a peer's frame of 800 notes, a first sync's answer of 10,000 -- goes on for
``budget_s`` of wall time, then lets the loop run (requests, events, timers) and goes on
in a later turn. A slice is measured in time, not in items: an item's cost varies a
hundredfold (a 50 KB note against an empty one; a loaded machine against a quiet one).

The budget is shared by all long work in one turn of the loop (``turn_deadline``): a
peer's apply, the folder's writer and a rescan each took their own 20 ms in the same turn,
and a request read in that turn waited for all of them (P8 on the receiving peer: turns of
60-150 ms made of three such slices, ``daemon/loop_holds.py``). The first long work of a
turn gets ``TURN_BUDGET_S``; work that comes later in the same turn gets what is left of
it, and at least ``MIN_SLICE_S`` (so that every one of them moves on in every turn, and a
batch is never cut to one item).
"""

from __future__ import annotations

import asyncio
import time
import weakref

SLICE_S = 0.02  # work this long, then let the loop run
TURN_BUDGET_S = 0.02  # all long work in one turn of the loop, together
MIN_SLICE_S = 0.005  # ... of which each one gets at least this


class _Turn:
    """When the current turn's long work began (None: none yet in this turn). Closed by a
    callback scheduled when it opens, which runs in the loop's next turn."""

    __slots__ = ("began",)

    def __init__(self) -> None:
        self.began: float | None = None

    def close(self) -> None:
        self.began = None


_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turn] = weakref.WeakKeyDictionary()


def turn_deadline(budget_s: float) -> float:
    """When long work starting now should stop and let the loop run: after ``budget_s``,
    or sooner if other long work already used this turn's shared budget (never sooner than
    ``MIN_SLICE_S``). Without a running loop (offline tools), after ``budget_s``."""
    now = time.monotonic()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return now + budget_s
    turn = _TURNS.get(loop)
    if turn is None:
        turn = _TURNS[loop] = _Turn()
    if turn.began is None:
        turn.began = now
        loop.call_soon(turn.close)
    left = turn.began + TURN_BUDGET_S - now
    return now + min(budget_s, max(left, MIN_SLICE_S))


class TimeSlice:
    """``over()`` once ``budget_s`` has passed since the slice began; ``pause()`` lets the
    loop run and begins the next slice."""

    __slots__ = ("budget_s", "_deadline")

    def __init__(self, budget_s: float = SLICE_S) -> None:
        self.budget_s = budget_s
        self._deadline = turn_deadline(budget_s)

    def over(self) -> bool:
        return time.monotonic() >= self._deadline

    def restart(self) -> None:
        self._deadline = turn_deadline(self.budget_s)

    async def pause(self) -> None:
        await asyncio.sleep(0)
        self.restart()

    async def pause_if_over(self) -> None:
        if self.over():
            await self.pause()
