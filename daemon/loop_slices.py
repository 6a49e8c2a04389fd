"""Time slices for long work on the event loop (SPEC §3.15: no step holds the loop for
more than ~50 ms).

Long work -- a peer's frame of 800 notes, a first sync's answer of 10,000 -- goes on for
``budget_s`` of wall time, then lets the loop run (requests, events, timers) and goes on
in a later turn. A slice is measured in time, not in items: an item's cost varies a
hundredfold (a 50 KB note against an empty one; a loaded machine against a quiet one).
"""

from __future__ import annotations

import asyncio
import time

SLICE_S = 0.02  # work this long, then let the loop run


class TimeSlice:
    """``over()`` once ``budget_s`` has passed since the slice began; ``pause()`` lets the
    loop run and begins the next slice."""

    __slots__ = ("budget_s", "_deadline")

    def __init__(self, budget_s: float = SLICE_S) -> None:
        self.budget_s = budget_s
        self._deadline = time.monotonic() + budget_s

    def over(self) -> bool:
        return time.monotonic() >= self._deadline

    def restart(self) -> None:
        self._deadline = time.monotonic() + self.budget_s

    async def pause(self) -> None:
        await asyncio.sleep(0)
        self.restart()

    async def pause_if_over(self) -> None:
        if self.over():
            await self.pause()
