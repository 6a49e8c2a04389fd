"""Giving memory back after a burst (a first sync, a large import or rescan).

CPython frees the objects, but glibc keeps the freed heap pages mapped, so resident
memory stays at the burst's peak (a 10,000-note first sync: ~400 MB held afterwards,
~90 MB after a restart). ``malloc_trim`` returns them to the OS.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import sys
from typing import Protocol

logger = logging.getLogger(__name__)


def release_memory() -> None:
    gc.collect()
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc (musl): nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)


SETTLED_DOCUMENTS = 16  # documents kept loaded once a burst is over (the cache holds 256)


class HasDocuments(Protocol):
    def shrink_documents(self, keep: int) -> int: ...


def settle(service: HasDocuments) -> None:
    """A burst (a first sync, a large intake) is over: drop the documents it loaded -- a
    full cache of 256 held ~4.5 MB of note text plus their CRDT state after a 10,000-note
    first sync (bench/RESULTS.md, issue 18 P7) -- then give the heap back. The next writes
    load what they need again (one store read each)."""
    dropped = service.shrink_documents(SETTLED_DOCUMENTS)
    release_memory()
    if dropped:
        logger.info("settled after a burst: %d documents dropped, heap trimmed", dropped)


_M_ARENA_MAX = -8  # glibc mallopt parameter


def limit_arenas(count: int = 2) -> None:
    """Let glibc keep at most ``count`` malloc arenas. Each thread that allocates (the
    watcher's, the file writers') otherwise gets arenas of its own, whose freed pages
    stay resident; the daemon's threads do little allocating, so two are plenty."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, count)
