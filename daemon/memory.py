"""Giving memory back after a burst (a first sync, a large import or rescan).

CPython frees the objects, but glibc keeps the freed heap pages mapped, so resident
memory stays at the burst's peak (a 10,000-note first sync: ~400 MB held afterwards,
~90 MB after a restart). ``malloc_trim`` returns them to the OS.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys


def release_memory() -> None:
    gc.collect()
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc (musl): nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)


_M_ARENA_MAX = -8  # glibc mallopt parameter


def limit_arenas(count: int = 2) -> None:
    """Let glibc keep at most ``count`` malloc arenas. Each thread that allocates (the
    watcher's, the file writers') otherwise gets arenas of its own, whose freed pages
    stay resident; the daemon's threads do little allocating, so two are plenty."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, count)
