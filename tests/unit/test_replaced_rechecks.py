"""The later looks at replaced files share timers and run in slices (``daemon/replaced_rechecks``):
a flush's 128 replaced files cost one or two timers, never a look before it is due, and a
turn of the loop that is out of budget looks at one file and leaves the rest to later turns."""

from __future__ import annotations

import asyncio

import pytest

from stet.daemon.base import loop_slices
from stet.daemon.folder import replaced_rechecks
from stet.daemon.folder.replaced_files import ReplacedFile
from stet.sync.folder_scan import FileStat


def _item(i: int) -> ReplacedFile:
    return ReplacedFile(note_id=f"n{i}", path=f"{i}.md", fd=-1, seen=FileStat(0, 0, 0), base_revision=None,
                        base_snapshot=None)


async def test_a_flushs_files_share_a_timer_and_none_is_looked_at_early() -> None:
    loop = asyncio.get_running_loop()
    looked: dict[str, float] = {}
    done = asyncio.Event()
    items = [_item(i) for i in range(128)]

    def check(item: ReplacedFile) -> None:
        looked[item.note_id] = loop.time()
        if len(looked) == len(items):
            done.set()

    rechecks = replaced_rechecks.Rechecks(check)
    due: dict[str, float] = {}
    for item in items:  # as one flush's end does: all of them in one go
        due[item.note_id] = loop.time() + 0.05
        rechecks.after(0.05, item)
    assert rechecks.timers <= 2  # a timer each: 128
    await asyncio.wait_for(done.wait(), 10)
    assert all(looked[k] >= due[k] for k in due)  # never early
    assert rechecks.pending() == 0


async def test_out_of_budget_one_file_a_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_slices, "turn_deadline", lambda budget_s: 0.0)  # always over
    looked: list[str] = []
    done = asyncio.Event()
    rechecks = replaced_rechecks.Rechecks(lambda item: looked.append(item.note_id))
    drains = 0
    drain = rechecks._drain

    def counted() -> None:
        nonlocal drains
        drains += 1
        drain()
        if not rechecks.pending():
            done.set()

    rechecks._drain = counted  # type: ignore[method-assign]
    for i in range(10):
        rechecks.after(0.0, _item(i))
    await asyncio.wait_for(done.wait(), 10)
    assert looked == [f"n{i}" for i in range(10)]
    assert drains == 10
