"""The folder side's passes are spaced from the end of the last one, not from each wake
(P9, issue 14): the first wake after a quiet spell runs a pass at once -- a first sync's
wanted blobs were asked for a whole ``DEBOUNCE_S`` (0.25 s) after the peer's index came --
while wakes that keep coming still get passes at least ``DEBOUNCE_S`` apart.

In process, on a real folder, store and blob store (as ``test_attachment_last_landing``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from stet.daemon.attachments import passes as attachment_passes
from stet.daemon.attachments.replica import AttachmentReplica

from .test_attachment_last_landing import replica

PNG = b"\x89PNG\x00 some bytes \x00" * 40


def timed_passes(r: AttachmentReplica) -> list[tuple[float, float]]:
    """(start, end) of each pass the replica runs from here on."""
    spans: list[tuple[float, float]] = []
    real = r.loop.run_pass

    async def timed(walk: bool = True) -> None:
        started = time.monotonic()
        try:
            await real(walk)
        finally:
            spans.append((started, time.monotonic()))

    r.loop.run_pass = timed
    return spans


async def until(predicate: object, seconds: float) -> None:
    async with asyncio.timeout(seconds):
        while not predicate():  # type: ignore[operator]  # noqa: ASYNC110 - replica state, under a deadline
            await asyncio.sleep(0.005)


async def test_a_wake_after_a_quiet_spell_runs_a_pass_at_once(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Spaced a minute apart: a pass that waited for the spacing would miss the deadline below.
    monkeypatch.setattr(attachment_passes, "DEBOUNCE_S", 60.0)
    r, root = replica(tmp_path)
    spans = timed_passes(r)
    (root / "a.png").write_bytes(PNG)
    woken = time.monotonic()
    r.start()  # the first pass: nothing ran before it
    await until(lambda: "a.png" in r.index.live(), 20)
    assert spans[0][0] - woken < 5.0
    # A pass just ended: a wake now waits for the spacing (none within a second).
    (root / "b.png").write_bytes(PNG + b"b")
    r.wake()
    with pytest.raises(TimeoutError):
        await until(lambda: len(spans) > 1, 1.0)
    assert "b.png" not in r.index.live()
    await r.stop()


async def test_wakes_that_keep_coming_still_get_spaced_passes(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    spacing = 0.2
    monkeypatch.setattr(attachment_passes, "DEBOUNCE_S", spacing)
    r, root = replica(tmp_path)
    spans = timed_passes(r)
    r.start()
    await until(lambda: len(spans) >= 1, 20)
    # Wakes every 10 ms (a burst of events) for a while: passes keep their distance.
    for i in range(100):
        (root / f"f{i}.png").write_bytes(PNG + bytes([i]))
        r.wake()
        await asyncio.sleep(0.01)  # the burst's pace, not a wait for the replica
    await until(lambda: len(spans) >= 3, 20)
    ends = [end for _start, end in spans]
    starts = [start for start, _end in spans]
    for previous_end, start in zip(ends, starts[1:], strict=False):
        assert start - previous_end >= spacing * 0.9
    await until(lambda: len(r.index.live()) == 100, 20)  # the last wake's pass took in the rest
    await r.stop()
