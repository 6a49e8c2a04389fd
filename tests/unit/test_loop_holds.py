"""The daemon's own measurement of long loop steps (``daemon/base/loop_holds.py``, used by
``bench/p8_bulk.py --loop-holds``): a callback that holds the loop is written down with
its name and a stack sampled while it ran; short ones are not."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from stet.daemon.base.loop_holds import LoopHolds

_SAMPLED: list[LoopHolds] = []  # the LoopHolds whose sampler _hold_the_loop waits for


def _hold_the_loop() -> None:
    """Hold the loop 0.12 s, and on past that until the sampler thread took a stack of
    this step (on a loaded machine it may not get a core within 0.12 s), 20 s at most."""
    start = time.perf_counter()
    end, deadline = start + 0.12, start + 20.0
    while time.perf_counter() < end or (_SAMPLED and not _SAMPLED[0]._samples):
        if time.perf_counter() > deadline:
            break


def _quick() -> None:
    pass


def test_a_long_callback_is_written_with_its_name_and_a_stack(tmp_path: Path) -> None:
    out = tmp_path / "holds.jsonl"
    original = asyncio.Handle._run
    seen: list[bool] = []

    async def main() -> None:
        holds = LoopHolds(out, threshold_s=0.05)
        holds.install()
        _SAMPLED[:] = [holds]
        try:
            loop = asyncio.get_running_loop()
            for _ in range(20):
                loop.call_soon(_quick)
            loop.call_soon(_hold_the_loop)
            await asyncio.sleep(0.05)
        finally:
            holds.stop()
            _SAMPLED.clear()
        seen.append(asyncio.Handle._run is original)

    asyncio.run(main())
    assert seen == [True]  # stopped: the loop's callbacks run untimed again
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    steps = [r for r in rows if not r.get("turn") and "gc" not in r]
    assert [r["what"] for r in steps] == [f"{__name__}._hold_the_loop"]
    assert steps[0]["ms"] >= 100
    assert any("_hold_the_loop" in frame for sample in steps[0]["samples"] for frame in sample)
    turns = [r for r in rows if r.get("turn")]
    assert turns
    assert "_hold_the_loop" in turns[0]["what"]
