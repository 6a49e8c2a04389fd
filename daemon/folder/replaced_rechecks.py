"""The later looks at replaced files (``replaced_files.RECHECK_AFTER_S``), a group at a time.

Each replaced file is looked at again 50 ms and 500 ms after its rename (a writer preempted
mid-append). With a timer per file, the up to ``MAX_WATCHED`` files of one flush came due in
the same turn of the loop, a callback each: during P8's git checkout of 2,000 notes the
receiving peer's loop had turns of 57-61 ms made of nothing else (``daemon/base/loop_holds.py``),
and its API p99 went over 100 ms. Here the looks due within ``GROUP_S`` of each other share
one timer (set at the group's end: a look is never early, at most ``GROUP_S`` late), and run
in slices of the turn's budget (``loop_slices.turn_deadline``), the rest in the next turns.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable

from stet.daemon.base import loop_slices
from stet.daemon.folder.replaced_files import ReplacedFile

GROUP_S = 0.01  # looks due this close together share a timer


class Rechecks:
    def __init__(self, check: Callable[[ReplacedFile], None]) -> None:
        self._check = check
        self._groups: dict[int, list[ReplacedFile]] = {}  # due slot -> its files
        self._ready: deque[ReplacedFile] = deque()
        self.timers = 0  # timers set (tests)

    def after(self, delay: float, item: ReplacedFile) -> None:
        """Look at ``item`` again ``delay`` seconds from now (``RuntimeError`` without a
        running loop, as ``call_later``)."""
        loop = asyncio.get_running_loop()
        slot = math.ceil((loop.time() + delay) / GROUP_S)
        group = self._groups.get(slot)
        if group is None:
            group = self._groups[slot] = []
            loop.call_at(slot * GROUP_S, self._due, slot)
            self.timers += 1
        group.append(item)

    def pending(self) -> int:
        return sum(len(g) for g in self._groups.values()) + len(self._ready)

    def _due(self, slot: int) -> None:
        self._ready.extend(self._groups.pop(slot, ()))
        self._drain()

    def _drain(self) -> None:
        end = loop_slices.turn_deadline(loop_slices.TURN_BUDGET_S)
        while self._ready:
            self._check(self._ready.popleft())
            if self._ready and time.monotonic() >= end:
                asyncio.get_running_loop().call_soon(self._drain)
                return
