"""The vault's inotify watches ask only for what the bridge reads (issue 11 P8): reading
a file -- the intake's read-ahead, the check before a write, an editor opening a note --
makes no event (IN_OPEN, IN_CLOSE_NOWRITE, IN_ACCESS), so watchdog's threads do not take
the interpreter from the loop for events that are dropped anyway. Read from the kernel's
own list of the process's watches (``/proc/self/fdinfo``)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from stet.daemon.folder.watcher import FolderWatcher, FsEvent
from tests.harness import until

IN_ACCESS, IN_CLOSE_WRITE, IN_CLOSE_NOWRITE, IN_OPEN = 0x1, 0x8, 0x10, 0x20
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


def _watch_masks() -> list[int]:
    masks = []
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            text = (Path("/proc/self/fdinfo") / fd).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("inotify wd:"):
                field = next(f for f in line.split() if f.startswith("mask:"))
                masks.append(int(field[len("mask:"):], 16))
    return masks


async def test_the_watches_ask_for_writes_and_names_not_for_reads(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    note = tmp_path / "sub" / "a.md"
    note.write_text("one\n")
    events: list[FsEvent] = []
    before = _watch_masks()
    async with FolderWatcher(tmp_path, events.append):
        masks = [m for m in _watch_masks() if m not in before] or _watch_masks()
        assert len(masks) >= 2  # the vault and its folder
        for mask in masks:
            assert mask & (IN_OPEN | IN_CLOSE_NOWRITE | IN_ACCESS) == 0, hex(mask)
            for wanted in (IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE):
                assert mask & wanted, (hex(mask), hex(wanted))
        note.write_text("two\n")  # still heard: written and closed
        for _ in range(500):  # bounded: up to ~10 s
            if any(e.kind == "closed" and e.path == "sub/a.md" for e in events):
                break
            await asyncio.sleep(0.02)
        assert any(e.kind == "closed" and e.path == "sub/a.md" for e in events)


async def test_a_flood_of_events_reaches_the_bridge_in_order_with_the_loop_running_between() -> None:
    """An unzip's ~40,000 events: handed over in slices, not one loop turn for all."""
    from stet.daemon.folder import watcher as folder_watcher

    loop = asyncio.get_running_loop()
    got: list[str] = []
    turns_during: list[int] = []

    def sink(event: FsEvent) -> None:
        got.append(event.path or "")
        deadline = time.monotonic() + 0.0002  # a little work per event, as the bridge does
        while time.monotonic() < deadline:
            pass

    handler = folder_watcher._Handler("/vault", loop, sink)
    n = 5000
    flood = threading.Thread(target=lambda: [handler.emit(FsEvent("closed", f"n{i}.md")) for i in range(n)])

    def tick() -> None:  # runs whenever the loop gets a turn
        if 0 < len(got) < n:
            turns_during.append(len(got))
        if len(got) < n:
            loop.call_soon(tick)

    flood.start()
    flood.join()
    loop.call_soon(tick)
    for _ in range(3000):  # bounded: the flood is handed over within ~seconds
        if len(got) == n:
            break
        await asyncio.sleep(0.002)
    assert got == [f"n{i}.md" for i in range(n)]  # all, in order
    assert turns_during  # the loop ran while the flood was handed over


async def test_our_own_write_makes_one_event_its_rename_into_place(tmp_path: Path) -> None:
    """The bridge's temp files live in the unwatched ``.stet-tmp`` folder: a note written
    from the store makes no created/modified/closed events of a temp file beside it, only
    its arrival (before: five events of the temp file, each through watchdog's threads)."""
    from stet.daemon.folder.bridge import FileBridge
    from stet.daemon.notes.service import NotesService
    from stet.sync.store import VaultStore

    root = tmp_path / "vault"
    (root / "sub").mkdir(parents=True)
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=(".md",), max_bytes=1 << 20)
    events: list[FsEvent] = []
    async with FolderWatcher(root, events.append):
        service.write_text("sub/n.md", "from a peer\n", "peer:B")
        await until(lambda: any("sub/n.md" in (e.path, e.dest) for e in events), "the note's arrival")
        # A file made after the write is over: inotify hands one watcher its events in order,
        # so once this one's is in, anything the write made has arrived too.
        await bridge.writer.wait_flushed()
        (root / "sentinel.txt").write_text("after the write\n")
        await until(lambda: any(e.path == "sentinel.txt" for e in events), "the sentinel's event")
    assert (root / "sub" / "n.md").read_text() == "from a peer\n"
    temp_events = [e for e in events if ".stet-" in f"{e.path}|{e.dest}" and e.path != ".stet-tmp"]
    assert temp_events == []
    assert [e.kind for e in events if "sub/n.md" in (e.path, e.dest)] == ["created"]
    bridge.close()
    store.close()
