"""Settling after a burst (daemon/base/memory.py; issue 18, P7): the documents a burst loaded
are dropped (the most recent few kept) and the heap trimmed -- but never inside an open
unit of work, whose documents must stay as they are until it commits or rolls back. The
notes read back whole from the store afterwards."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stet.daemon.base import memory
from stet.daemon.notes.service import DOC_CACHE_SIZE, NotesService
from stet.sync.store import VaultStore


@pytest.fixture
def service(tmp_path: Path) -> NotesService:
    svc = NotesService("v1", VaultStore(tmp_path / "v.db"))
    for i in range(DOC_CACHE_SIZE + 40):  # a burst: more notes than the cache holds
        svc.write_text(f"n/{i:04d}.md", f"note {i}\n" * 20, "disk")
    return svc


def cached(svc: NotesService) -> int:
    return len(svc._docs)  # noqa: SLF001 -- what the cache holds is what this is about


def test_settling_drops_the_bursts_documents_and_trims(service: NotesService,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(memory, "trim_heap", lambda: trims.append(cached(service)))
    assert cached(service) >= DOC_CACHE_SIZE  # creations join it unbounded until the next load
    statements: list[str] = []
    service.store.db.set_trace_callback(statements.append)
    assert memory.settle(service)
    service.store.db.set_trace_callback(None)
    assert cached(service) == memory.SETTLED_DOCUMENTS
    assert statements == ["PRAGMA shrink_memory"]  # SQLite's page cache released too
    assert trims == [memory.SETTLED_DOCUMENTS]  # trimmed after the documents went, once
    for i in range(DOC_CACHE_SIZE + 40):  # every note still whole (reloaded from the store)
        assert service.read(f"n/{i:04d}.md")[1] == f"note {i}\n" * 20
    service.write_text("n/0000.md", "changed\n", "agent:a")  # and writable
    again = NotesService("v1", service.store)
    assert again.read("n/0000.md")[1] == "changed\n"


def test_settling_collects_only_the_young_generations(service: NotesService,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A full collection after a 10,000-note intake held the loop for 0.1-0.45 s (P8):
    the settle collects generations 0-1 on the loop and leaves the trim to a thread."""
    generations: list[int] = []

    def collect(generation: int = 2) -> int:
        generations.append(generation)
        return 0

    monkeypatch.setattr(memory.gc, "collect", collect)
    monkeypatch.setattr(memory, "trim_heap", lambda: None)
    assert memory.settle(service)
    assert generations == [1]


def test_settling_never_runs_during_a_write(service: NotesService, monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[bool] = []
    monkeypatch.setattr(memory, "trim_heap", lambda: trims.append(service.writing))
    with service.write("agent:a"):
        service.write_text("n/0001.md", "in the unit\n", "agent:a")
        before = cached(service)
        assert not memory.settle(service)  # e.g. a timer firing while a write is under way
        assert cached(service) == before
        assert trims == []  # no trim, no cache dropped, inside the unit
        assert service.read("n/0001.md")[1] == "in the unit\n"
    assert service.read("n/0001.md")[1] == "in the unit\n"
    assert memory.settle(service)
    assert cached(service) == memory.SETTLED_DOCUMENTS
    assert trims == [False]  # the trim ran once the unit had committed


def test_a_quiet_moment_settles_after_a_burst_of_commits_or_of_growth() -> None:
    mib = 2**20
    rss, now = [100 * mib], [0.0]
    watch = memory.BurstWatch(50, burst_commits=1000, growth=8 * mib, stable=mib // 2, spacing_s=10,
                              read_rss=lambda: rss[0], clock=lambda: now[0])
    assert not watch.due(60)  # a few commits, no growth: an idle daemon never settles
    assert watch.due(1050)  # a burst of commits settles at once
    watch.settled(1050)
    now[0] += 30
    rss[0] += 7 * mib
    assert not watch.due(1060)  # grown, but not enough
    rss[0] += 2 * mib  # serving a sync: few commits, 9 MiB more ...
    assert not watch.due(1060)  # ... and still moving (2 MiB in the last second): not over
    assert watch.due(1060)  # held still for a second: settle
    rss[0] -= 6 * mib  # the trim gave some back; what is left is measured from now
    watch.settled(1060)
    rss[0] += 8 * mib
    assert not watch.due(1061)  # moved
    now[0] += 5
    assert not watch.due(1061)  # still, grown, but only 5 s after the last settle
    now[0] += 5
    assert watch.due(1061)


def test_without_a_resident_size_only_commits_count() -> None:
    watch = memory.BurstWatch(0, burst_commits=10, read_rss=lambda: None)
    assert not watch.due(9)
    assert watch.due(10)


def test_the_resident_size_is_read_where_it_can_be() -> None:
    size = memory.resident_bytes()
    if sys.platform.startswith("linux"):
        assert size is not None
        assert 1_000_000 < size < 10_000_000_000
    else:
        assert size is None or size > 0


def test_a_closed_store_does_not_stop_the_settle(service: NotesService,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(memory, "trim_heap", lambda: trims.append(1))
    service.store.close()  # the vault was removed while its checkpoint loop still ran
    assert memory.settle(service)
    assert trims == [1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads SQLite's own account (ctypes)")
def test_settling_drops_the_connections_prepared_statements(service: NotesService,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A first sync's lookups ``IN (?, ?, ...)`` of every length each left a prepared
    statement in Python's cache of 128 (native memory ``shrink_memory`` leaves; P7): the
    settle drops them, and the store's statements still run afterwards."""
    from stet.daemon.base.memory_probe import connection_memory

    monkeypatch.setattr(memory, "trim_heap", lambda: None)
    db = service.store.db
    ids = [row[0] for row in db.execute("SELECT id FROM notes")]
    for n in range(1, 100):  # a burst's batched lookups, one length each
        db.execute(f"SELECT count(*) FROM notes WHERE id IN ({','.join('?' * n)})", ids[:n]).fetchone()
    held = connection_memory(db)
    assert held is not None
    assert held["statements"] > 500_000
    assert memory.settle(service)
    after = connection_memory(db)
    assert after is not None
    assert after["statements"] < held["statements"] / 10
    assert service.read("n/0003.md")[1] == "note 3\n" * 20  # prepared again on demand
    service.write_text("n/0003.md", "after the settle\n", "agent:a")
    assert NotesService("v1", service.store).read("n/0003.md")[1] == "after the settle\n"


def test_release_connection_keeps_a_statement_in_use(tmp_path: Path) -> None:
    """Statements dropped from the cache while a cursor still reads through one: the
    cursor finishes its rows."""
    import sqlite3

    db = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    db.execute("CREATE TABLE t (v INTEGER)")
    db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(500)])
    cursor = db.execute("SELECT v FROM t ORDER BY v")
    first = cursor.fetchmany(10)
    assert memory.release_connection(db) >= (1 if sys.implementation.name == "cpython" else 0)
    assert [v for (v,) in first + cursor.fetchall()] == list(range(500))
    assert db.execute("SELECT count(*) FROM t").fetchone() == (500,)
    db.close()
