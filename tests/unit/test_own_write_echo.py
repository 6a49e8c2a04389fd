"""The echo of our own writes (issue 11 P4): a note file the writer renames into place
makes a "created" event; it tells nothing new, so it is dropped in the watcher's own
thread (``DiskWrites.arrived_as_written``) instead of being handed to the loop, settled
and compared there (10,000 of them in a first sync). A file someone else puts or
changes at such a path still reaches the bridge. Real watchdog on a real folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from watchdog.events import FileSystemEvent
from watchdog.observers.api import EventEmitter

from stet.daemon.folder.watcher import FolderWatcher, FsEvent
from tests.harness import until

from .test_bridge_inprocess import make


async def test_our_writes_arrivals_are_dropped_in_the_watchers_thread(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    seen: list[FsEvent] = []
    async with FolderWatcher(root, seen.append, own_arrival=bridge.writer.arrived_as_written):
        for i in range(20):
            service.write_text(f"peer/n{i}.md", f"from a peer {i}\n", "peer:b")
        assert bridge.flush_writes() == 20
        (root / "peer" / "mine.md").write_text("the user's own file\n")  # not ours: delivered
        await until(lambda: any(e.path == "peer/mine.md" and e.kind == "closed" for e in seen),
                    "the user's file's events")
        await until(lambda: bridge.writer.echoes_dropped == 20, "our 20 arrivals dropped")
    ours = {f"peer/n{i}.md" for i in range(20)}
    assert not [e for e in seen if e.path in ours or e.dest in ours]
    assert any(e.path == "peer/mine.md" and e.kind == "created" for e in seen)
    store.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")
async def test_our_arrivals_are_dropped_before_watchdog_makes_events_of_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Linux the watch group drops them as inotify reports them: watchdog's emitter
    never queues an event for them (nor its dispatcher thread hands one over), while the
    user's file at a path beside them is queued and delivered."""
    root, store, service, bridge = make(tmp_path)
    queued: list[str] = []
    original = EventEmitter.queue_event

    def spy(self: EventEmitter, event: FileSystemEvent) -> None:
        queued.append(str(event.src_path))
        original(self, event)

    monkeypatch.setattr(EventEmitter, "queue_event", spy)
    seen: list[FsEvent] = []
    # The folder exists and is watched before the arrivals: into a folder made by the writes
    # themselves, watchdog may walk the new folder before its watch is in place and queue a
    # "created" of its own for each file already there (seen once on a loaded CI machine);
    # those are not inotify's reports and are dropped by the handler, a step later.
    (root / "peer").mkdir()
    async with FolderWatcher(root, seen.append, own_arrival=bridge.writer.arrived_as_written):
        for i in range(20):
            service.write_text(f"peer/n{i}.md", f"from a peer {i}\n", "peer:b")
        assert bridge.flush_writes() == 20
        await until(lambda: bridge.writer.echoes_dropped == 20, "our 20 arrivals dropped")
        (root / "peer" / "mine.md").write_text("the user's own file\n")
        await until(lambda: any(e.path == "peer/mine.md" and e.kind == "closed" for e in seen),
                    "the user's file's events")
    ours = {str(root / "peer" / f"n{i}.md") for i in range(20)}
    assert not ours & set(queued)
    assert str(root / "peer" / "mine.md") in queued
    assert not [e for e in seen if e.path and e.path.startswith("peer/n")]
    store.close()


async def test_a_file_changed_before_its_arrival_is_read_is_not_dropped(tmp_path: Path) -> None:
    """The arrival is dropped only while the path holds exactly the file we wrote."""
    root, store, service, bridge = make(tmp_path)
    service.write_text("a.md", "ours\n", "peer:b")
    assert bridge.flush_writes() == 1
    # (no watcher ran: the arrival is still awaited) -- the user replaces the file
    (root / "a.md").write_text("the user's\n")
    assert not bridge.writer.arrived_as_written("a.md")
    assert bridge.writer.echoes_dropped == 0
    store.close()
