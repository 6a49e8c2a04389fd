"""Long work shares one budget per turn of the loop (``daemon/base/loop_slices.py``).

On the receiving peer of P8, a peer's apply, the folder's writer and a rescan each took
their own 20 ms slice in the same turn: turns of 60-150 ms, and a request read in that
turn waited for all three. With the shared budget a turn's long work together stays near
``TURN_BUDGET_S`` (each piece at least ``MIN_SLICE_S``), and every piece still moves on.
"""

from __future__ import annotations

import asyncio
import time

from stet.daemon.base.loop_slices import MIN_SLICE_S, TimeSlice, turn_deadline


def busy_until(deadline: float) -> int:
    """Items of 1 ms each until ``deadline`` (at least one, as every caller does)."""
    n = 0
    while True:
        end = time.monotonic() + 0.001
        while time.monotonic() < end:
            pass
        n += 1
        if time.monotonic() >= deadline:
            return n


async def test_work_later_in_a_turn_gets_what_is_left_of_its_budget() -> None:
    first = turn_deadline(0.02)
    busy_until(first)
    second = turn_deadline(0.02)  # the same turn: the shared budget is used up
    assert second - time.monotonic() <= MIN_SLICE_S + 0.001
    await asyncio.sleep(0)  # the next turn: a whole budget again
    await asyncio.sleep(0)
    third = turn_deadline(0.02)
    assert third - time.monotonic() > MIN_SLICE_S + 0.005


async def test_three_long_tasks_keep_a_turn_short_and_all_move_on() -> None:
    """Three tasks that each slice their work by ``TimeSlice``: no turn of the loop holds
    much more than the shared budget plus the minimum slices, and each task finishes."""
    turns: list[float] = []
    done: dict[str, int] = {}

    async def task(name: str, items: int) -> None:
        slice_ = TimeSlice(0.02)
        n = 0
        while n < items:
            end = time.monotonic() + 0.001
            while time.monotonic() < end:
                pass
            n += 1
            await slice_.pause_if_over()
        done[name] = n

    async def ticker() -> None:  # measures the gaps between its turns
        last = time.monotonic()
        while len(done) < 3:
            await asyncio.sleep(0)
            now = time.monotonic()
            turns.append(now - last)
            last = now

    await asyncio.wait_for(asyncio.gather(task("a", 120), task("b", 120), task("c", 120), ticker()), 30)
    assert done == {"a": 120, "b": 120, "c": 120}
    work_turns = sorted(t for t in turns if t > 0.002)  # turns that ran long work
    middle = work_turns[len(work_turns) // 2]  # a loaded machine may stretch a few turns
    # Without the shared budget each such turn held 3 x 20 ms = 60 ms of work; with it,
    # 20 ms + 2 x 5 ms.
    assert middle < 0.045, work_turns


def test_without_a_running_loop_the_budget_is_the_callers() -> None:
    before = time.monotonic()
    assert turn_deadline(0.5) - before >= 0.49
