"""The bench's memory probe (daemon/base/memory_probe.py, ``STET_MEMORY_PROBE=DIR``; P7): off
unless asked for; when on, each settle leaves a dump that splits the process's resident
memory (mappings, glibc's arenas, SQLite's heap, Python objects)."""

from __future__ import annotations

import json
import sqlite3
import sys
import tracemalloc
from pathlib import Path

import pytest

from stet.daemon.base import memory, memory_probe
from stet.daemon.notes.service import NotesService
from stet.sync.store import VaultStore

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")


def test_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(memory_probe.ENV, raising=False)
    assert memory_probe.from_environment() is None
    monkeypatch.setenv(memory_probe.ENV, str(tmp_path / "probe"))
    probe = memory_probe.from_environment()
    assert probe is not None
    assert probe.folder == tmp_path / "probe"


@linux
def test_the_split_adds_up_to_what_is_resident() -> None:
    kinds = memory_probe.smaps_split()
    total = sum(kinds.values())
    assert kinds.get("heap", 0) > 0
    assert kinds.get("shared libraries", 0) > 0
    rss = memory_probe.statm_rss()
    assert 0.8 * rss <= total <= 1.2 * rss  # the same pages, read a moment apart
    info = memory_probe.mallinfo2()
    assert info is not None
    assert info["uordblks"] > 0
    assert info["arena"] >= info["uordblks"]


@linux
def test_sqlite_heap_is_seen_growing_with_a_page_cache(tmp_path: Path) -> None:
    before = memory_probe.sqlite_memory()
    assert before is not None
    db = sqlite3.connect(tmp_path / "x.db")
    db.execute("CREATE TABLE t (v BLOB)")
    db.executemany("INSERT INTO t VALUES (?)", [(b"x" * 1000,) for _ in range(2000)])
    db.commit()
    db.execute("SELECT count(*) FROM t WHERE v LIKE '%y%'").fetchone()
    grown = memory_probe.sqlite_memory()
    assert grown is not None
    assert grown["used"] > before["used"] + 500_000
    db.execute("PRAGMA shrink_memory")
    shrunk = memory_probe.sqlite_memory()
    assert shrunk is not None
    assert shrunk["used"] < grown["used"]
    db.close()


@linux
def test_a_settle_leaves_a_dump(tmp_path: Path) -> None:
    probe = memory_probe.MemoryProbe(tmp_path / "probe")
    probe.extras.append(lambda: {"marker": 7})
    service = NotesService("v1", VaultStore(tmp_path / "v.db"))
    service.write_text("a.md", "hello\n", "disk")
    probe.install_hooks()
    tracemalloc.start()
    try:
        assert memory.settle(service)  # no loop running here: dumped at once
    finally:
        tracemalloc.stop()
        probe.stop()
    assert memory.AFTER_SETTLE == []  # stopped: settles go on without it
    dumps = sorted((tmp_path / "probe").glob("*.json"))
    assert len(dumps) == 1
    report = json.loads(dumps[0].read_text(encoding="utf-8"))
    assert report["why"] == "settle"
    assert report["daemon"] == [{"marker": 7}]
    assert report["rss"] > 0
    assert report["smaps"]["heap"] > 0
    assert report["sqlite"]["used"] > 0
    assert report["python"]["traced"] > 0
    assert report["python"]["top"]
    assert dumps[0].with_suffix(".tracemalloc").exists()


@linux
def test_one_connections_statements_and_cache_are_told_apart(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "x.db")
    db.execute("CREATE TABLE t (v BLOB)")
    empty = memory_probe.connection_memory(db)
    assert empty is not None
    for n in range(1, 60):  # as many statements as lengths of an IN list
        db.execute(f"SELECT count(*) FROM t WHERE v IN ({','.join('?' * n)})", [b"x"] * n).fetchone()
    held = memory_probe.connection_memory(db)
    assert held is not None
    assert held["statements"] > empty["statements"] + 100_000
    db.close()
