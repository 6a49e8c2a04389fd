"""The versions ticker beside a bulk intake (issue 11 P8): it holds the loop for a bounded
slice at a time, and finding nothing due costs no query over every waiting note.

Before: every tick (each 30 s) asked SQLite for the due notes with a join over the whole
``version_due`` table (10,000 rows after an unzip: 25-50 ms on the loop, the 415 ms step of
P8's long-step log on a loaded machine), and ten minutes after the unzip one tick saved all
10,000 idle versions at once: 3.4 s on the loop."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from stet.daemon.safety import versions_keeper
from stet.daemon.safety.versions_keeper import TICK_BATCH, tick_forever

from .test_versions_keeper import Rig, make_rig


class CountingConnection:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.calls: list[str] = []

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        self.calls.append(sql)
        return self._db.execute(sql, *args)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self._db, name)


def many_notes(rig: Rig, count: int) -> None:
    with rig.service.write("cli"):
        for i in range(count):
            rig.service.write_text(f"n{i}.md", f"note {i}\n", "cli")


def test_a_tick_with_nothing_due_asks_sqlite_nothing(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    many_notes(rig, 300)
    counting = CountingConnection(rig.store._db)
    rig.store._db = counting  # type: ignore[assignment]
    assert rig.keeper.tick(rig.clock.advance(599)) == 0
    assert not [sql for sql in counting.calls if "version_due" in sql]
    rig.store._db = counting._db
    assert rig.keeper.tick(rig.clock.advance(1)) == 300  # and all are saved once due
    rig.store.close()


def test_a_tick_with_a_budget_saves_a_batch_and_says_more_are_due(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    many_notes(rig, 3 * TICK_BATCH + 5)
    now = rig.clock.advance(600)
    assert rig.keeper.tick(now, budget_s=0.0) == TICK_BATCH  # one batch, then the loop runs
    assert rig.keeper.more_due
    saved = TICK_BATCH
    for _ in range(10):
        if not rig.keeper.more_due:
            break
        saved += rig.keeper.tick(now, budget_s=0.0)
    assert saved == 3 * TICK_BATCH + 5
    assert not rig.keeper.more_due
    assert rig.keeper.tick(rig.clock.advance(600)) == 0  # none twice
    rig.store.close()


def test_a_note_changed_unheard_since_it_was_marked_waits_for_its_own_idle_time(tmp_path: Path) -> None:
    """The in-memory times are a first sift; the row decides (an update applied to the
    store without a change announced still counts as an edit)."""
    rig = make_rig(tmp_path)
    rig.service.write_text("a.md", "one\n", "cli")
    rig.clock.advance(500)
    row = rig.store.note_at("a.md")
    assert row is not None
    rig.store.db.execute("UPDATE notes SET updated_at = ? WHERE id = ?", (rig.clock(), row.id))
    assert rig.keeper.tick(rig.clock.advance(100)) == 0  # 600 s after the write, 100 s after the edit
    assert rig.keeper.tick(rig.clock.advance(500)) == 1
    rig.store.close()


async def test_the_ticker_lets_the_loop_run_between_batches(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions_keeper, "TICK_SLICE_S", 0.0)  # one batch per turn of the loop
    rig = make_rig(tmp_path)
    total = 4 * TICK_BATCH
    many_notes(rig, total)
    rig.clock.advance(600)
    seen: set[int] = set()  # how many were waiting, at each turn of the loop
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            seen.add(len(rig.keeper._due))
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    ticker = asyncio.create_task(tick_forever(rig.keeper, None, 0.0))
    try:
        for _ in range(600):  # bounded: <= 60 s
            if not rig.keeper._due:
                break
            await asyncio.sleep(0.1)
        assert not rig.keeper._due
    finally:
        ticker.cancel()
        stop.set()
        await watcher
    assert {n for n in seen if 0 < n < total}  # the loop ran between the batches
    rig.store.close()
