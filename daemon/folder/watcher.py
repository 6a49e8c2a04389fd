"""watchdog → the event loop: file system events as small records, overflow included.

The observer thread only translates and hands over (``call_soon_threadsafe``); all
decisions are made on the loop by the file bridge.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from stet.daemon.base.loop_slices import turn_deadline
from stet.daemon.folder.observer import make_observer

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FsEvent:
    # created | modified | closed | deleted | moved | dir_created | dir_deleted | dir_moved | overflow
    # | attrib (a file's mode changed: only attachments sync the executable bit)
    kind: str
    path: str | None = None  # vault-relative POSIX path
    dest: str | None = None  # for moves; None if moved out of the vault
    # When the observer thread saw it (wall clock): was it git's? (SPEC §3.16)
    at: float = field(default_factory=time.time, compare=False)


Sink = Callable[[FsEvent], None]
# Where watchdog logs "Inotify queue overflowed" (it has no other overflow signal).
_WATCHDOG_LOGGERS = ("watchdog.observers.inotify_c", "watchdog.observers.inotify")

_KINDS: dict[type[FileSystemEvent], str] = {
    FileCreatedEvent: "created",
    FileModifiedEvent: "modified",
    FileClosedEvent: "closed",
    FileDeletedEvent: "deleted",
    FileAttribEvent: "attrib",
    FileMovedEvent: "moved",
    DirCreatedEvent: "dir_created",
    DirDeletedEvent: "dir_deleted",
    DirMovedEvent: "dir_moved",
}


class _OverflowSpy(logging.Filter):
    """watchdog only logs an inotify queue overflow; we turn that log line into an event."""

    def __init__(self, on_overflow: Callable[[], None]) -> None:
        super().__init__()
        self.on_overflow = on_overflow

    def filter(self, record: logging.LogRecord) -> bool:
        if "overflow" in record.getMessage().lower():
            self.on_overflow()
        return True


DELIVER_SLICE_S = 0.01  # events handed to the bridge for this long per turn of the loop


def _relative(root: str, raw: str | bytes) -> str | None:
    """The vault-relative POSIX path of watchdog's ``raw`` ("" for the root; None: outside)."""
    path = os.fsdecode(raw)
    if path == root:
        return ""
    if not path.startswith(root + os.sep):
        return None
    return path[len(root) + 1 :].replace(os.sep, "/")


class _Handler(FileSystemEventHandler):
    """Translates in the observer thread; hands over through a queue that the loop
    drains in time slices. An unzip of 10,000 files makes ~40,000 events within a
    second or two: one loop callback each, they all ran in one turn of the loop (the
    API waited behind them); now one callback takes ``DELIVER_SLICE_S`` worth, in
    order, and the next turn goes on."""

    def __init__(self, root: str, loop: asyncio.AbstractEventLoop, sink: Sink,
                 own_arrival: Callable[[str], bool] | None = None) -> None:
        self.root = root
        self.loop = loop
        self.sink = sink
        self.own_arrival = own_arrival
        self._queue: collections.deque[FsEvent] = collections.deque()
        self._lock = threading.Lock()
        self._scheduled = False  # a delivery is scheduled on the loop (under _lock)

    def _rel(self, raw: str | bytes) -> str | None:
        return _relative(self.root, raw)

    def arrival_is_own(self, raw: bytes) -> bool:
        """From watchdog's reading thread, for a file's arrival (``make_observer``): the
        file we renamed to that path (``own_arrival``), dropped before any event is made."""
        rel = _relative(self.root, raw)
        if not rel or self.own_arrival is None:
            return False
        return self.own_arrival(rel)

    def on_any_event(self, event: FileSystemEvent) -> None:
        kind = _KINDS.get(type(event))
        if kind is None:
            return
        src = self._rel(event.src_path)
        dest = self._rel(event.dest_path) if event.dest_path else None
        if kind in ("moved", "dir_moved"):
            if src is None and dest is None:
                return
            if src is None:  # moved in from outside the vault
                kind = "created" if kind == "moved" else "dir_created"
                src, dest = dest, None
        elif src is None:
            return
        if kind == "created" and src and self.own_arrival is not None and self.own_arrival(src):
            return  # the echo of our own write (``DiskWrites.arrived_as_written``)
        self.emit(FsEvent(kind, src, dest))

    def emit(self, event: FsEvent) -> None:
        """From the observer thread (or the loop): queue ``event`` for the loop."""
        with self._lock:
            self._queue.append(event)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop closed during shutdown
            with self._lock:
                self._scheduled = False

    def _deliver(self) -> None:
        """On the loop: hand queued events to the sink for a slice, in order."""
        deadline = turn_deadline(DELIVER_SLICE_S)  # shared with the turn's other long work
        while True:
            with self._lock:
                if not self._queue:
                    self._scheduled = False
                    return
                event = self._queue.popleft()
            try:
                self.sink(event)
            except Exception:
                logger.exception("failed to handle %s", event)
            if time.monotonic() >= deadline:
                break
        self.loop.call_soon(self._deliver)  # the rest in the next turn (still scheduled)


class FolderWatcher:
    """Watches one vault folder recursively; an async context manager."""

    def __init__(self, root: Path, sink: Sink, own_arrival: Callable[[str], bool] | None = None) -> None:
        """``own_arrival``: asked in the observer thread for a file's "created" event;
        True drops it there (the arrival of a file we just wrote)."""
        self.root = str(root)
        self.sink = sink
        self.own_arrival = own_arrival
        self._observer: Observer | None = None  # type: ignore[valid-type]
        self._spy: _OverflowSpy | None = None

    async def __aenter__(self) -> FolderWatcher:
        loop = asyncio.get_running_loop()
        handler = _Handler(self.root, loop, self.sink, self.own_arrival)
        self._spy = _OverflowSpy(lambda: handler.emit(FsEvent("overflow")))
        for name in _WATCHDOG_LOGGERS:
            logging.getLogger(name).addFilter(self._spy)
        # Our own arrivals dropped as inotify reports them, where the observer can
        # (``observer_without_git``); the handler drops any that still come through.
        observer = make_observer(handler.arrival_is_own if self.own_arrival is not None else None)
        # Only the kinds the bridge reads: the inotify mask then leaves out IN_OPEN and
        # IN_CLOSE_NOWRITE, so reading a file (our read-ahead of 10,000 new files, the
        # check before a write) wakes no watchdog thread (P8's profile: watchdog's
        # threads took about as much of the interpreter as the loop on the receiving peer).
        observer.schedule(handler, self.root, recursive=True, event_filter=list(_KINDS))
        observer.daemon = True
        observer.start()
        self._observer = observer
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._observer is not None:
            self._observer.stop()
            await asyncio.to_thread(self._observer.join, 5)
            self._observer = None
        if self._spy is not None:
            for name in _WATCHDOG_LOGGERS:
                logging.getLogger(name).removeFilter(self._spy)
