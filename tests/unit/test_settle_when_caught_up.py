"""The settle after a first sync waits for the work the sync left behind (issue 18, P7):
``memory.SettleWhenCaughtUp`` settles once the files are written, their echoes read and
the notes indexed (``caught_up``), and whatever else was asked (``also``: the links'
queued frames sent) -- never inside an open unit of work, once per burst however often it
is asked, and at most ``at_most_s`` late."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stet.daemon.base import memory
from stet.daemon.notes.service import DOC_CACHE_SIZE, NotesService
from stet.sync.store import VaultStore
from tests.harness import until

NOTES = DOC_CACHE_SIZE + 20


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NotesService:
    monkeypatch.setattr(memory, "trim_heap", lambda: None)
    svc = NotesService("v1", VaultStore(tmp_path / "v.db"))
    for i in range(NOTES):
        svc.write_text(f"n/{i:04d}.md", f"note {i}\n" * 10, "disk")
    return svc


def cached(svc: NotesService) -> int:
    return len(svc._docs)  # noqa: SLF001 -- what the cache holds is what this is about


def test_it_settles_only_once_the_work_is_over_and_once(service: NotesService) -> None:
    work = {"writes": 3}

    async def run() -> None:
        settler = memory.SettleWhenCaughtUp(service, lambda: work["writes"] == 0, poll_s=0.01)
        settler.request()
        for _ in range(5):  # the writes go on: nothing is dropped meanwhile
            await asyncio.sleep(0.02)
            assert settler.settled == 0
            assert cached(service) > memory.SETTLED_DOCUMENTS
        settler.request()  # asked again (the other side's SYNCED): joins the waiting one
        work["writes"] = 0
        await until(lambda: settler.settled, "the settle")
        assert cached(service) == memory.SETTLED_DOCUMENTS
        # Once for both requests: the second joined the first's task, so no other task is
        # left to settle again (the one that settled returned in the same step).
        waiting = [t for t in asyncio.all_tasks() if t.get_name() == "settle when caught up" and not t.done()]
        assert waiting == []
        assert settler.settled == 1

    asyncio.run(run())
    for i in range(NOTES):  # every note still whole
        assert service.read(f"n/{i:04d}.md")[1] == f"note {i}\n" * 10


def test_it_never_settles_inside_an_open_unit(service: NotesService) -> None:
    async def run() -> None:
        settler = memory.SettleWhenCaughtUp(service, lambda: True, poll_s=0.01)
        with service.write("agent:a"):
            service.write_text("n/0001.md", "in the unit\n", "agent:a")
            settler.request()
            for _ in range(5):  # the loop turns while the unit is open (an awaited step)
                await asyncio.sleep(0.02)
                assert settler.settled == 0
            assert service.read("n/0001.md")[1] == "in the unit\n"
        await until(lambda: settler.settled, "the settle after the unit")
        assert service.read("n/0001.md")[1] == "in the unit\n"

    asyncio.run(run())


def test_it_waits_for_the_extra_condition_too(service: NotesService) -> None:
    sent = {"done": False}

    async def run() -> None:
        settler = memory.SettleWhenCaughtUp(service, lambda: True, poll_s=0.01)
        settler.request(lambda: sent["done"])
        await asyncio.sleep(0.1)
        assert settler.settled == 0
        sent["done"] = True
        await until(lambda: settler.settled, "the settle")
        settler.request()  # a later burst: its own settle, the old condition forgotten
        await until(lambda: settler.settled == 2, "the second settle")

    asyncio.run(run())


def test_a_burst_that_never_ends_settles_when_the_wait_is_up(service: NotesService) -> None:
    async def run() -> None:
        settler = memory.SettleWhenCaughtUp(service, lambda: False, poll_s=0.01, at_most_s=0.1)
        settler.request()
        await until(lambda: settler.settled, "the bounded settle")

    asyncio.run(run())
    assert cached(service) == memory.SETTLED_DOCUMENTS
