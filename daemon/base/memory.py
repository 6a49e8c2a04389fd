"""Giving memory back after a burst (a first sync, a large import or rescan).

CPython frees the objects, but glibc keeps the freed heap pages mapped, so resident
memory stays at the burst's peak (a 10,000-note first sync: ~400 MB held afterwards,
~90 MB after a restart). ``malloc_trim`` returns them to the OS.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)


def release_memory() -> None:
    gc.collect()
    trim_heap()


def trim_heap() -> None:
    """Give freed heap pages back to the OS (glibc's ``malloc_trim``; may run in a worker
    thread: ctypes lets go of the interpreter lock for the call)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc (musl): nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _trim_off_the_loop() -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop in this thread (tests, tools): trim here
        trim_heap()
        return
    loop.run_in_executor(None, trim_heap)


def release_connection(db: sqlite3.Connection) -> int:
    """Free what a burst left in one SQLite connection (from its own thread): its page
    cache (``PRAGMA shrink_memory``, refilled on demand) and Python's cache of prepared
    statements (up to 128 kept; a first sync's lookups ``IN (?, ?, ...)`` of every length
    made one each: ~12 KiB apiece, all of them native memory that ``shrink_memory``
    leaves). The statements are prepared again when next run (microseconds each). How
    many caches were cleared (0 where this Python keeps its cache elsewhere)."""
    db.execute("PRAGMA shrink_memory")
    cleared = 0
    for held in gc.get_referents(db):  # CPython: the cache is a functools.lru_cache
        if type(held).__name__ == "_lru_cache_wrapper" and callable(getattr(held, "cache_clear", None)):
            held.cache_clear()
            cleared += 1
    return cleared


AFTER_SETTLE: list[Callable[[], None]] = []  # told after each settle (the bench's memory probe)

SETTLED_DOCUMENTS = 16  # documents kept loaded once a burst is over (the cache holds 256)


class HasDocuments(Protocol):
    @property
    def writing(self) -> bool: ...

    def shrink_documents(self, keep: int) -> int: ...

    def release_store_cache(self) -> None: ...


def settle(service: HasDocuments) -> bool:
    """A burst (a first sync, a large intake) is over: drop the documents it loaded -- a
    full cache of 256 held ~4.5 MB of note text plus their CRDT state after a 10,000-note
    first sync (bench/history/rounds.md, issue 18 P7) -- and SQLite's page cache (refilled on
    demand), then give the heap back. The next writes load what they need again (one store
    read each). Never while a unit of work is open (a write under way): returns False."""
    if service.writing:
        return False
    dropped = service.shrink_documents(SETTLED_DOCUMENTS)
    try:
        service.release_store_cache()
    except Exception:  # a store closed meanwhile (its vault removed): nothing to release
        logger.debug("could not release the store's page cache", exc_info=True)
    # Not ``release_memory``: a full collection held the loop 0.1-0.45 s after a bulk
    # intake (P8); the young generations here, the trim in a worker thread when a loop runs.
    gc.collect(1)
    _trim_off_the_loop()
    logger.info("settled after a burst: %d documents dropped, caches released, heap trimmed", dropped)
    for hook in AFTER_SETTLE:
        hook()
    return True


GROWTH_TO_SETTLE = 4 * 2**20  # resident growth since the last settle that makes a quiet moment settle
STABLE_WITHIN = 512 * 1024  # ... once it moved no more than this in the last quiet second
SETTLE_SPACING_S = 10.0  # ... and not sooner than this after the last settle


def resident_bytes() -> int | None:
    """This process's resident memory (Linux: /proc/self/statm); None where unknown."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class BurstWatch:
    """Whether a quiet moment (no commit for a second) should settle (``settle``): after a
    burst of commits (a first sync, an intake), or once the process grew ``growth`` bytes
    since the last settle and then held still -- work that commits little but allocates
    much (serving or indexing a first sync) used to leave its heap behind until the next
    burst of commits. Held still: within ``stable`` bytes of the previous quiet second, and
    ``spacing_s`` after the last settle (a daemon serving a sync commits nothing, so each of
    its seconds is "quiet"; measured: without these it settled every 1-3 s mid-sync)."""

    def __init__(self, commits: int, *, burst_commits: int, growth: int = GROWTH_TO_SETTLE,
                 stable: int = STABLE_WITHIN, spacing_s: float = SETTLE_SPACING_S,
                 read_rss: Callable[[], int | None] = resident_bytes,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst_commits = burst_commits
        self.growth = growth
        self.stable = stable
        self.spacing_s = spacing_s
        self._read_rss = read_rss
        self._clock = clock
        self._commits = commits
        self._rss = read_rss()
        self._last: int | None = self._rss
        self._settled_at = clock()

    def due(self, commits: int) -> bool:
        if commits - self._commits >= self.burst_commits:
            return True
        rss = self._read_rss()
        last, self._last = self._last, rss
        if rss is None or self._rss is None or last is None:
            return False
        return (rss - self._rss >= self.growth and abs(rss - last) <= self.stable
                and self._clock() - self._settled_at >= self.spacing_s)

    def settled(self, commits: int) -> None:
        """Just settled: measure from here (the resident size after the trim)."""
        self._commits = commits
        self._rss = self._last = self._read_rss()
        self._settled_at = self._clock()
def freeze_startup_objects() -> None:
    """Leave what the daemon made to start (modules, classes, functions, the app and its
    routes: ~55,000 objects) out of every later collection (``gc.freeze``). A full
    collection of the receiving peer visited ~60,000 objects during P8's intake, nearly all
    of them these, and held its loop for 50-280 ms each time; they live as long as the
    process, and what is not a cycle is freed by its reference count all the same."""
    gc.freeze()


def thaw_startup_objects() -> None:
    """Put them back under the collector (``gc.unfreeze``): a vault closed while the
    daemon runs (``stet vaults remove``) was opened at start, and its objects hold cycles
    (the bridge and its writer, the service and its documents) that only a collection
    frees -- frozen, they would stay for the life of the process."""
    gc.unfreeze()


_M_ARENA_MAX = -8  # glibc mallopt parameter


def limit_arenas(count: int = 2) -> None:
    """Let glibc keep at most ``count`` malloc arenas. Each thread that allocates (the
    watcher's, the file writers') otherwise gets arenas of its own, whose freed pages
    stay resident; the daemon's threads do little allocating, so two are plenty."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, count)


CAUGHT_UP_POLL_S = 0.1  # how often a settle waiting for the work to be over looks again
CAUGHT_UP_AT_MOST_S = 300.0  # ... and how long it waits at most (then settles anyway)


class SettleWhenCaughtUp:
    """Settle (``settle``) once the work a first sync left behind is over, not at a time.

    The peer says ``SYNCED`` when its updates are applied, but the receiving daemon still
    writes the files (``pendingWrites``), takes in their echoes (``pendingReads``) and
    indexes the notes for search (a worker thread) afterwards, allocating all the while;
    settled at ``SYNCED`` only, B held 107 MB two seconds after its folder was complete
    on the quiet machine (bench/history/rounds.md, 2026-12-01 00:31), while the growth trigger of
    the checkpoint loop waits ``SETTLE_SPACING_S`` after the last settle. ``request()``
    (coalesced: one waiting task at most) settles as soon as ``caught_up()`` says the
    writes, reads and indexing are done and no unit of work is open -- checked each
    ``poll_s``, bounded by ``at_most_s`` (then it settles with what there is)."""

    def __init__(self, service: HasDocuments, caught_up: Callable[[], bool], *,
                 poll_s: float = CAUGHT_UP_POLL_S, at_most_s: float = CAUGHT_UP_AT_MOST_S,
                 on_settled: Callable[[], None] | None = None) -> None:
        self.service = service
        self.caught_up = caught_up
        self.poll_s = poll_s
        self.at_most_s = at_most_s
        self.on_settled = on_settled
        self._task: asyncio.Task[None] | None = None
        self._also: list[Callable[[], bool]] = []
        self.settled = 0  # settles made (tests, status)

    def request(self, also: Callable[[], bool] | None = None) -> None:
        """Settle once the work is over and ``also()`` holds (from the loop); a request
        while one waits joins it (its condition added)."""
        if also is not None and also not in self._also:
            self._also.append(also)
        if self._task is not None and not self._task.done():
            return
        self._task = asyncio.get_running_loop().create_task(self._settle_when_over(),
                                                            name="settle when caught up")

    def _over(self) -> bool:
        try:
            return not self.service.writing and self.caught_up() and all(ok() for ok in self._also)
        except Exception:  # a vault closed meanwhile: nothing to wait for
            logger.debug("could not tell whether the work is over", exc_info=True)
            return True

    async def _settle_when_over(self) -> None:
        deadline = time.monotonic() + self.at_most_s
        while True:
            late = time.monotonic() >= deadline
            if self._over() or late:
                if settle(self.service):  # refused inside an open unit: look again
                    self._also.clear()
                    self.settled += 1
                    if self.on_settled is not None:
                        self.on_settled()
                    return
                if late:  # still busy: the checkpoint loop's BurstWatch settles it later
                    self._also.clear()
                    return
            await asyncio.sleep(self.poll_s)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
