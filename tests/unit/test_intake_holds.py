"""What kept the loop busy beside a bulk intake (issue 11 P8, the daemon's own long-step
log: ``daemon/base/loop_holds.py``), each taken out and checked here: a rescan asked for by
folder events waits for the intake queue to empty instead of running beside it; folders
made for our own writes are known as ours before their events can arrive; the memory of a
burst is given back without a full collection on the loop; the intake's look-ups stay on
their indexes."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from stet.daemon.base import memory
from stet.daemon.folder.bridge import FileBridge
from stet.daemon.notes.service import NotesService
from stet.sync.store import VaultStore

EXT = (".md",)
DEADLINE_S = 30.0


def make(tmp_path: Path) -> tuple[Path, VaultStore, FileBridge]:
    root = tmp_path / "vault"
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    return root, store, FileBridge(root, service, extensions=EXT, max_bytes=1 << 20)


async def test_a_rescan_waits_until_the_intake_has_taken_in_what_its_events_said(tmp_path: Path) -> None:
    """An unzip's folders each asked for a full rescan; four of them ran beside P8's intake
    of 10,000 files (1.3-1.5 s of scanning each, finding nothing). ``until_quiet`` lets the
    runtime's rescan wait for an empty queue: not done while files wait to be read, done
    once the intake has them all."""
    root, store, bridge = make(tmp_path)
    for i in range(300):
        (root / f"n{i}.md").write_text(f"# {i}\n", encoding="utf-8")
    for i in range(300):
        bridge.schedule(f"n{i}.md", awaiting_close=False)  # as their events do
    assert bridge.pending_reads == 300
    waiting = asyncio.create_task(bridge.until_quiet(DEADLINE_S))
    await asyncio.sleep(0)
    assert not waiting.done()  # files are still to be read: the rescan waits
    await asyncio.wait_for(waiting, DEADLINE_S)
    assert bridge.pending_reads == 0
    assert store.count_live() == 300  # the intake took them all in before it returned
    # Nothing waiting: no wait at all.
    await asyncio.wait_for(bridge.until_quiet(DEADLINE_S), 1.0)
    store.close()


async def test_a_rescan_waits_no_longer_than_its_bound(tmp_path: Path) -> None:
    root, store, bridge = make(tmp_path)
    (root / "slow.md").write_text("being written\n", encoding="utf-8")
    bridge.schedule("slow.md", awaiting_close=True)  # a write with no close yet: 2 s
    await asyncio.wait_for(bridge.until_quiet(0.05), 1.5)  # returns at its bound, not after 2 s
    assert bridge.pending_reads == 1
    bridge.cancel("slow.md")
    store.close()


def test_a_folder_made_for_a_note_is_known_as_ours_before_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The folder's dir_created event may reach the loop before the writer thread that
    made it runs again; the receiving peer then took it for a stranger's folder and
    rescanned the vault (twice in P8)."""
    root, store, bridge = make(tmp_path)
    known_at_mkdir: list[bool] = []
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        if self.is_relative_to(root):
            known_at_mkdir.append(self.relative_to(root).as_posix() in bridge.writer.folders._own_dirs)
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", mkdir)
    bridge.writer.folders.make_parents(root / "a" / "b")
    assert known_at_mkdir == [True, True]
    assert bridge.writer.created_dir("a")
    assert bridge.writer.created_dir("a/b")
    # One that someone else made first is not taken for ours.
    monkeypatch.setattr(Path, "mkdir", real_mkdir)
    (root / "c").mkdir()
    monkeypatch.setattr(Path, "is_dir", lambda self: False)  # as if it appeared after the check
    bridge.writer.folders.make_parents(root / "c")
    assert not bridge.writer.created_dir("c")
    store.close()


def test_the_intakes_look_ups_search_their_indexes(tmp_path: Path) -> None:
    """A new file is checked for a rename (by inode) and a case clash (by lowered path)
    with one indexed look-up each. An index on ``deleted`` alone (tried for the status
    count) made the planner scan every live row for both instead: the 10,000-file intake
    took 240 s, not 30."""
    _root, store, _bridge = make(tmp_path)
    for sql, index in (
        ("SELECT id FROM notes WHERE disk_ino = 1 AND deleted = 0", "notes_by_disk_ino"),
        ("SELECT path FROM notes WHERE deleted = 0 AND lower(path) = lower('d/a.md') "
         "AND path >= 'd/' AND path < 'd0'", "notes_by_lower_path"),
    ):
        plan = " ".join(str(step[-1]) for step in store.db.execute("EXPLAIN QUERY PLAN " + sql).fetchall())
        assert plan.startswith("SEARCH"), plan
        assert index in plan, plan
    store.close()


def test_the_status_count_of_live_notes_reads_the_live_path_index(tmp_path: Path) -> None:
    """``GET /v1/status`` counts live notes at every poll (every 20 ms in P8): by the
    partial live-path index, not by ``notes_by_lower_path`` (the planner's choice,
    twice the work: ~2 ms at 10,000 notes)."""
    _root, store, _bridge = make(tmp_path)
    seen: list[str] = []
    store.db.set_trace_callback(seen.append)
    assert store.count_live() == 0
    store.db.set_trace_callback(None)
    (sql,) = [s for s in seen if "count(*)" in s]
    plan = " ".join(str(step[-1]) for step in store.db.execute("EXPLAIN QUERY PLAN " + sql).fetchall())
    assert "notes_live_path" in plan, plan
    store.close()


def test_what_start_made_is_left_out_of_later_collections() -> None:
    """A full collection on the receiving peer visited ~60,000 objects during P8, nearly
    all of them made at start (modules, routes): frozen once ready, they are skipped."""
    before = gc.get_freeze_count()
    made_at_start = [[i] for i in range(1000)]  # tracked containers, alive like start's
    try:
        memory.freeze_startup_objects()
        assert gc.get_freeze_count() >= before + len(made_at_start)
    finally:
        memory.thaw_startup_objects()  # as a vault closed while running does
    assert gc.get_freeze_count() == 0  # collectable again: a closed vault's cycles are freed


def test_two_writer_threads_making_the_same_folder_keep_it_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Notes of one new folder are written by different writer threads: the second one,
    running between the first's bookkeeping and its mkdir, made the folder itself; the
    first then took the folder for a stranger's and forgot it (a rescan of the vault)."""
    import threading

    root, store, bridge = make(tmp_path)
    real_mkdir = Path.mkdir
    others: list[threading.Thread] = []

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        if self == root / "a" and not others:  # the other thread's turn, just before ours
            other = threading.Thread(target=bridge.writer.folders.make_parents, args=(root / "a",))
            others.append(other)
            other.start()
            other.join(timeout=0.5)  # (blocked until we are done, if folders are made one at a time)
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", mkdir)
    bridge.writer.folders.make_parents(root / "a")
    others[0].join()
    assert (root / "a").is_dir()
    assert bridge.writer.created_dir("a")
    store.close()
