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
import sys


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


def freeze_startup_objects() -> None:
    """Leave what the daemon made to start (modules, classes, functions, the app and its
    routes: ~55,000 objects) out of every later collection (``gc.freeze``). A full
    collection of the receiving peer visited ~60,000 objects during P8's intake, nearly all
    of them these, and held its loop for 50-280 ms each time; they live as long as the
    process, and what is not a cycle is freed by its reference count all the same."""
    gc.freeze()


async def release_memory_in_background() -> None:
    """``release_memory`` for a daemon that must keep answering (SPEC §3.15): the young
    generations collected on the loop (a few ms), the trim in a worker thread. A full
    collection held the loop for 0.1-0.45 s after a 10,000-note intake (P8, the daemon's
    own long-step log: ``daemon/loop_holds.py``); cyclic garbage in the oldest generation
    is left to the collector's own full passes."""
    gc.collect(1)
    await asyncio.to_thread(trim_heap)


_M_ARENA_MAX = -8  # glibc mallopt parameter


def limit_arenas(count: int = 2) -> None:
    """Let glibc keep at most ``count`` malloc arenas. Each thread that allocates (the
    watcher's, the file writers') otherwise gets arenas of its own, whose freed pages
    stay resident; the daemon's threads do little allocating, so two are plenty."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, count)
