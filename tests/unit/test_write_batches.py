"""The bridge's CRDT -> disk writes in batches: a hot note is written at most once per
interval (a live editor's keystrokes at once), a batch of notes is written together
(temp files fsynced side by side), and the search index holds off while a bulk intake
goes on -- never at a search's expense."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from stet.daemon.base import atomic_files, loop_slices
from stet.daemon.folder.bridge import FileBridge
from stet.daemon.folder.writer.background_flush import FIRST_LOOKUP, BackgroundFlush
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.sync.store import VaultStore
from stet.sync.text_diff import Splice
from stet.sync.write_pacing import HOT_CHANGES

from .test_write_unit import counting_commits

EXT = (".md",)
DEADLINE_S = 10.0


def make(tmp_path: Path, **kw: float) -> tuple[Path, VaultStore, NotesService, FileBridge]:
    root = tmp_path / "vault"
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    return root, store, service, FileBridge(root, service, extensions=EXT, max_bytes=1 << 20, **kw)


def append(service: NotesService, path: str, text: str) -> None:
    current = service.read(path)[1]
    service.apply_splices(path, [Splice(len(current), len(current), text)], "agent:a")


def recorded(store: VaultStore, path: str) -> bool:
    """The note's file is recorded as holding its current text (the timer's flush
    records that after the folder's fsync, which runs in a worker thread)."""
    row = store.note_at(path)
    return row is not None and row.disk is not None and row.disk.revision == row.revision


async def until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)  # poll interval, not synchronisation: the check decides


async def test_a_busy_note_waits_its_interval_and_an_explicit_flush_writes_it(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path, busy_note_interval_s=60.0)
    service.write_text("log.md", "one\n", "agent:a")
    # Written and recorded (the timer's flush fsyncs in worker threads, then records).
    # (and its flush over: it tidies the temp folder after recording, still in flight)
    await until(lambda: recorded(store, "log.md") and bridge.pending_writes == 0, "the first write")
    lines = [f"line {i}\n" for i in range(HOT_CHANGES)]  # hot: an agent's burst
    for line in lines:
        append(service, "log.md", line)
    assert bridge.flush_writes(busy_wait=True) == 0  # hot and written a moment ago: it waits
    assert bridge.pending_writes == 1
    assert (root / "log.md").read_text() == "one\n"
    assert bridge.flush_writes() == 1  # shutdown's way: everything, now
    assert (root / "log.md").read_text() == "one\n" + "".join(lines)
    assert bridge.pending_writes == 0
    bridge.close()
    store.close()


async def test_appends_in_a_burst_reach_the_file_when_the_interval_is_up(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path, busy_note_interval_s=0.05)
    service.write_text("log.md", "start\n", "agent:a")
    expected = "start\n"
    for i in range(50):
        append(service, "log.md", f"line {i}\n")
        expected += f"line {i}\n"
        await asyncio.sleep(0)  # let the loop run timers between appends, as requests do
    # (the timed flush writes in worker threads: the file may not be there yet)
    await until(lambda: (root / "log.md").exists() and (root / "log.md").read_text() == expected
                and recorded(store, "log.md"),
                "the last append on disk")
    row = store.note_at("log.md")
    assert row is not None
    assert row.disk is not None
    assert row.disk.revision == row.revision
    bridge.close()
    store.close()


async def test_a_batch_of_notes_is_written_together_and_recorded(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    texts = {f"d{i % 3}/n{i}.md": f"# note {i}\n" + "body é😀\n" * i for i in range(40)}
    for path, text in texts.items():
        service.write_text(path, text, "agent:a")
    assert bridge.flush_writes() == 40
    for path, text in texts.items():
        assert (root / path).read_text(encoding="utf-8") == text
        row = store.note_at(path)
        assert row is not None
        assert row.disk is not None
        assert row.disk.revision == row.revision  # recorded in sync: not re-read as an edit
        assert row.disk.snapshot is not None
    assert not list(root.rglob(".stet-*.tmp"))  # no temp file left behind
    for path in texts:  # every write begun was recorded as done
        assert service.revisions.file_write_in_progress(store.note_at(path).id) is None  # type: ignore[union-attr]
    bridge.close()
    store.close()


async def test_a_bulk_intake_is_indexed_off_the_loop_and_a_search_waits_for_it(tmp_path: Path) -> None:
    _root, store, service, bridge = make(tmp_path)
    keeper = RecordsKeeper(service, EventBus())
    n = 700
    for i in range(n):
        service.write_text(f"n{i}.md", f"word{i} common\n", "peer:B")
    assert await keeper.wait_indexed()  # what a search over HTTP or MCP awaits first
    assert keeper.index.behind == 0
    assert keeper.index.count() == n
    assert [h.path for h in keeper.index.search(f"word{n - 1}")] == [f"n{n - 1}.md"]
    assert keeper.index.batches >= 1
    keeper.close()
    bridge.close()
    store.close()


async def test_a_keystroke_to_a_note_written_a_moment_ago_goes_to_disk_at_once(tmp_path: Path) -> None:
    # P11: a live editor's keystrokes (one small change, then another a moment later) are
    # not a burst to coalesce. The old rule held any note written less than the interval
    # ago: with the interval at 60 s here, the second keystroke waited a minute.
    root, store, service, bridge = make(tmp_path, busy_note_interval_s=60.0)
    service.write_text("live.md", "Typed here: ", "peer:B")
    await until(lambda: recorded(store, "live.md"), "the first write")
    expected = "Typed here: "
    for ch in "abc":  # each typed after the previous one reached the disk
        append(service, "live.md", ch)
        expected += ch
        await until(lambda e=expected: (root / "live.md").read_text() == e, f"keystroke {ch!r} on disk")  # type: ignore[misc]
    bridge.close()
    store.close()



def test_a_batch_of_written_notes_takes_two_commits_and_no_savepoint_per_records_write(
    tmp_path: Path,
) -> None:
    """The writer's bookkeeping (the write begun, the file in sync) joins the batch's unit
    as plain statements: each SQLite call lets go of the interpreter lock (a chance for
    the watcher's threads to keep the loop waiting), and a SAVEPOINT/RELEASE pair around
    each of the three records made 14 of a written note's 20 calls (P8, the receiving
    peer). One nested unit per note stays (planning it may merge a disk edit first)."""
    root, store, service, bridge = make(tmp_path)
    with service.write("peer:x"):
        for i in range(40):
            service.write_text(f"d{i % 4}/n{i}.md", f"# note {i}\n", "peer:x")
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    try:
        assert bridge.flush_writes() == 40
    finally:
        store.db.set_trace_callback(None)
    assert sum(s == "COMMIT" for s in statements) == 2  # begun, then in sync
    savepoints = [s for s in statements if s.startswith("SAVEPOINT")]
    assert len(savepoints) == 40  # the plan's own unit, one per note; none for the records
    assert all(recorded(store, f"d{i % 4}/n{i}.md") for i in range(40))
    assert (root / "d1" / "n5.md").read_text(encoding="utf-8") == "# note 5\n"


def test_a_plan_cut_short_looks_up_the_rows_it_plans_not_the_whole_batch(tmp_path: Path) -> None:
    """A timed flush plans in slices; a slice cut to one note (requests first) looked up
    the rows of the next 256 notes for it (~9 % of the receiving peer's samples in P8).
    Now a slice that may end early looks up ``FIRST_LOOKUP`` rows, then twice as many."""
    _root, store, service, bridge = make(tmp_path)
    with service.write("agent:a"):
        for i in range(200):
            service.write_text(f"n{i}.md", f"note {i}\n", "agent:a")
    ids = [row.id for row in store.live_notes()]
    looked: list[int] = []
    notes = store.notes

    def counting(note_ids):  # type: ignore[no-untyped-def]
        looked.append(len(note_ids))
        return notes(note_ids)

    store.notes = counting  # type: ignore[method-assign]
    plans, taken = bridge.writer.begin_some(ids, lambda: True)  # cut after its first note
    assert (len(plans), taken) == (1, 1)
    assert looked == [FIRST_LOOKUP]
    looked.clear()
    plans, taken = bridge.writer.begin_some(ids[1:], lambda: False)  # a slice that plans them all
    assert taken == len(ids) - 1
    assert len(plans) == len(ids) - 1
    assert sum(looked) == len(ids) - 1
    assert len(looked) <= 6  # 8, 16, 32, 64, 128: a handful of lookups, not one per note
    bridge.close()
    store.close()


def _peers_new_notes(tmp_path: Path, n: int) -> tuple[Path, VaultStore, NotesService, FileBridge, list[str]]:
    """A receiving peer's bridge with ``n`` new notes from a peer applied, not written yet."""
    sender = NotesService("v", VaultStore(tmp_path / "a.db"), device_id="A")
    with sender.write("disk"):
        for i in range(n):
            sender.write_text(f"f{i % 2}/n{i}.md", f"note {i}\n", "disk")
    root, store, service, bridge = make(tmp_path)
    service.apply_remote_index(sender.index.full_update(), "A")
    rows = sorted(sender.store.live_notes(), key=lambda r: r.id)
    items = [(r.id, sender.doc(r.id).full_update(), "peer:A", "A") for r in rows]
    assert service.apply_remote_slice(items, 0, lambda: False) == (n, None)
    return root, store, service, bridge, [r.path for r in rows]


def test_a_new_file_is_placed_without_stats_of_its_path_but_the_plans(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer's new note, no file at its path when planned: its file is placed only if
    there still is none, in one call (renameat2's RENAME_NOREPLACE) -- no ``lstat`` of the
    path before the rename, none for permissions to copy from a file that is not there."""
    root, store, _service, bridge, paths = _peers_new_notes(tmp_path, 20)
    (root / "f0").mkdir()  # (in a folder not made yet, the plan asks nothing of its files)
    targets = {str(root / p) for p in paths}
    stats: list[str] = []
    real_lstat = os.lstat

    def counting_lstat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path) in targets:
            stats.append(str(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counting_lstat)
    assert bridge.flush_writes() == 20
    monkeypatch.undo()
    if getattr(atomic_files, "_RENAMEAT2", True) is not None:  # (Linux)
        # the plan's own check of each file in f0 (before: that, and for each of the 20
        # the temp file's permissions to copy and the check before the rename)
        assert len(stats) == 10
    for p in paths:
        assert (root / p).read_text().startswith("note ")
    bridge.close()
    store.close()


def test_a_file_made_at_a_new_notes_path_just_before_its_rename_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the plan's check (no file) and the rename a person saves a file at the
    path: it is not replaced (before, a window between a second check and the rename)."""
    if atomic_files._RENAMEAT2 is None:
        pytest.skip("no renameat2 here: the check-then-rename path, as before")
    root, store, _service, bridge, paths = _peers_new_notes(tmp_path, 3)
    theirs = root / paths[1]
    real = atomic_files._RENAMEAT2

    def a_save_first(olddir: int, old: bytes, newdir: int, new: bytes, flags: int) -> int:
        if os.fsdecode(new) == str(theirs):
            theirs.write_text("a person's own file\n")
        return real(olddir, old, newdir, new, flags)

    monkeypatch.setattr(atomic_files, "_RENAMEAT2", a_save_first)
    assert bridge.flush_writes() == 2
    assert theirs.read_text() == "a person's own file\n"
    assert not list(root.rglob(".stet-*.tmp"))  # our temp file removed, not left behind
    bridge.close()
    store.close()


def test_a_note_moved_or_deleted_between_its_plan_and_its_rename_is_not_written_there(
        tmp_path: Path) -> None:
    """A timed flush lets the loop run between a note's plan and its rename: a note moved
    or deleted meanwhile gets no file at the path it was planned for (the rename's check
    compares the planned path with the note's live path, looked up at the rename)."""
    root, store, service, bridge, paths = _peers_new_notes(tmp_path, 3)
    writer = bridge.writer
    ids = [row.id for row in store.live_notes()]
    plans, _taken = writer.begin_some(ids, lambda: False)
    for plan in plans:
        writer.write_temp(plan)
    moved, deleted, kept = paths
    service.move(moved, "elsewhere/moved.md", "agent:a")
    service.delete(deleted, "agent:a")
    _dirs, done, _watched = writer.rename_batch(plans, places=writer.places_of(plans))
    assert [plan.rel for plan in done] == [kept]
    assert (root / kept).read_text().startswith("note ")
    assert not (root / moved).exists()
    assert not (root / deleted).exists()
    assert not list(root.rglob(".stet-*.tmp"))  # the two temp files removed
    moved_row = store.note_at("elsewhere/moved.md")
    assert moved_row is not None
    assert moved_row.id in writer.dirty  # written where it is now
    bridge.close()
    store.close()


async def test_a_flush_cut_for_a_request_in_flight_waits_instead_of_a_unit_per_note(tmp_path: Path) -> None:
    """P8: while an agent's request was in flight, the writer planned one note per turn,
    each its own unit (a commit). A planning slice cut before it began now does nothing
    that turn; once the request is answered the notes are planned in a few units, and
    every one is written and recorded."""
    root, store, _service, bridge, paths = _peers_new_notes(tmp_path, 200)
    ids = [row.id for row in store.live_notes()]
    loop = asyncio.get_running_loop()
    token = loop_slices.request_arrived(loop)

    async def answer_later() -> None:
        for _ in range(30):
            await asyncio.sleep(0)
        loop_slices.request_answered(loop, token)

    answering = asyncio.create_task(answer_later())
    with counting_commits(store) as counter:
        await BackgroundFlush(bridge.writer)._batch(ids)
    await answering
    assert all(recorded(store, p) for p in paths)
    assert all((root / p).is_file() for p in paths)
    # Planning one note a turn while the request was in flight made 30 units more (65
    # here); now the plans' few units and the records' chunks (``END_CHUNK`` notes each).
    assert counter.commits <= 20
    bridge.close()
    store.close()
