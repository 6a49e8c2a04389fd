"""Where the daemon's memory is (P7), for the bench: ``STET_MEMORY_PROBE=DIR``.

Off by default (nothing of it runs unless the variable is set). When set, the daemon
writes ``DIR/<pid>-<n>.json`` a second and a half after each settle (``memory.settle``:
the trim in its worker thread has run by then) and on ``SIGUSR2``, splitting its
resident memory into

- ``smaps``: ``/proc/self/smaps`` summed per kind of mapping -- ``[heap]`` (glibc's main
  arena), anonymous mappings (pymalloc arenas, other arenas, mmapped blocks; those of
  exactly 8 MiB apart: thread stacks, mostly untouched), ``[stack]``, shared libraries and
  other files;
- ``mallinfo2``: glibc's own account -- bytes in use vs free inside its arenas, mmapped;
- ``sqlite``: SQLite's heap in use (``sqlite3_status64``; all connections of the process);
- ``python``: pymalloc's blocks, and with ``PYTHONTRACEMALLOC=1`` the traced total and
  the top allocating lines (a snapshot is also dumped for a diff: ``bench/p7_split.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import json
import logging
import os
import signal
import sqlite3
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

ENV = "STET_MEMORY_PROBE"
EVERY_ENV = "STET_MEMORY_PROBE_EVERY"  # seconds: also dump this often (to follow a sync)
AFTER_SETTLE_S = 1.5  # the settle's trim runs in a worker thread: measure once it is done
TOP_LINES = 40


_MALLINFO2_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]


def mallinfo2() -> dict[str, int] | None:
    """glibc's arenas: ``arena`` bytes got from the OS by sbrk/arenas, ``uordblks`` in
    use, ``fordblks`` free (held, fragmented), ``hblkhd`` in mmapped blocks; None off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    info = fn()
    return {name: int(getattr(info, name)) for name in _MALLINFO2_FIELDS}


def sqlite_memory() -> dict[str, int] | None:
    """SQLite's heap in use and its peak, all connections of the process together."""
    try:
        lib = ctypes.CDLL("libsqlite3.so.0")
        fn = lib.sqlite3_status64
    except (OSError, AttributeError):
        return None
    current, peak = ctypes.c_int64(), ctypes.c_int64()
    if fn(0, ctypes.byref(current), ctypes.byref(peak), 0) != 0:  # SQLITE_STATUS_MEMORY_USED
        return None
    return {"used": current.value, "peak": peak.value}


_DBSTATUS = {"cache": 1, "schema": 2, "statements": 3}  # SQLITE_DBSTATUS_CACHE_USED, _SCHEMA_USED, _STMT_USED


def connection_memory(db: sqlite3.Connection) -> dict[str, int] | None:
    """One connection's page cache, schema and prepared statements (Python's statement
    cache keeps up to 128 of them), in bytes. CPython only: the ``sqlite3*`` handle is
    the first field after the object header (probe only)."""
    if sys.implementation.name != "cpython":
        return None
    try:
        lib = ctypes.CDLL("libsqlite3.so.0")
        handle = ctypes.c_void_p.from_address(id(db) + object.__basicsize__).value
    except (OSError, ValueError):
        return None
    if not handle:
        return None
    out: dict[str, int] = {}
    for name, op in _DBSTATUS.items():
        current, peak = ctypes.c_int(), ctypes.c_int()
        status = lib.sqlite3_db_status(ctypes.c_void_p(handle), op, ctypes.byref(current),
                                       ctypes.byref(peak), 0)
        if status == 0:
            out[name] = current.value
    return out


def smaps_split(pid: int | str = "self") -> dict[str, int]:
    """Resident bytes per kind of mapping (``/proc/PID/smaps``)."""
    kinds: dict[str, int] = {}
    kind = "other"
    try:
        with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as smaps:
            for line in smaps:
                head = line.split(None, 1)[0]
                if not head.endswith(":"):  # a mapping's header: address perms offset dev inode [path]
                    parts = line.split(None, 5)
                    path = parts[5].strip() if len(parts) > 5 else ""
                    size = _span(parts[0])
                    if path == "[heap]":
                        kind = "heap"
                    elif path == "[stack]":
                        kind = "stack"
                    elif path.startswith("["):
                        kind = "kernel"
                    elif not path:
                        # thread stacks are 8 MiB mappings (their guard page mapped apart), but
                        # not every 8 MiB mapping is a stack: told apart by size only
                        kind = "anon 8 MiB mappings" if size == 8 * 2**20 else "anon"
                    elif ".so" in path:
                        kind = "shared libraries"
                    else:
                        kind = "other files"
                elif head == "Rss:":
                    kinds[kind] = kinds.get(kind, 0) + int(line.split()[1]) * 1024
    except OSError:
        return {}
    return kinds


def _span(addresses: str) -> int:
    start, _, end = addresses.partition("-")
    try:
        return int(end, 16) - int(start, 16)
    except ValueError:
        return 0


def python_memory(top: int = TOP_LINES) -> dict[str, Any]:
    out: dict[str, Any] = {"gc_objects": len(gc.get_objects()), "gc_frozen": gc.get_freeze_count(),
                           "threads": sorted(t.name for t in threading.enumerate())}
    if tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot()
        stats = snapshot.statistics("lineno")
        out["traced"] = sum(s.size for s in stats)
        out["top"] = [{"where": f"{s.traceback[0].filename}:{s.traceback[0].lineno}",
                       "size": s.size, "count": s.count} for s in stats[:top]]
        out["snapshot"] = snapshot
    return out


def statm_rss() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class MemoryProbe:
    """Dumps the split into ``folder`` (one JSON file per dump, a tracemalloc snapshot
    beside it when tracing); ``extra()`` adds the daemon's own counts (cached documents)."""

    def __init__(self, folder: Path, every_s: float = 0.0) -> None:
        self.folder = folder
        self.every_s = every_s
        self._ticker: asyncio.TimerHandle | None = None
        self.dumps = 0
        self.extras: list[Any] = []

    def dump(self, why: str) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.dumps += 1
        stem = self.folder / f"{os.getpid()}-{self.dumps:03d}"
        python = python_memory()
        snapshot = python.pop("snapshot", None)
        if snapshot is not None:
            snapshot.dump(str(stem) + ".tracemalloc")
        report = {"why": why, "time": time.time(), "pid": os.getpid(), "rss": statm_rss(),
                  "smaps": smaps_split(), "mallinfo2": mallinfo2(), "sqlite": sqlite_memory(),
                  "python": python, "daemon": [extra() for extra in self.extras]}
        path = Path(str(stem) + ".json")
        path.write_text(json.dumps(report, indent=1), encoding="utf-8")
        logger.info("memory probe: %s (%s)", path, why)
        return path

    def after_settle(self) -> None:
        """Called by ``memory.settle``: dump once its trim (in a worker thread) is done."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.dump("settle")
            return
        loop.call_later(AFTER_SETTLE_S, self._dump_quietly, "settle")

    def _dump_quietly(self, why: str) -> None:
        try:
            self.dump(why)
        except Exception:  # a probe must never take the daemon down
            logger.exception("memory probe failed")

    def install_hooks(self) -> None:
        from stet.daemon.base import memory  # here: the probe is optional, memory.py does not know it

        memory.AFTER_SETTLE.append(self.after_settle)

    def install(self) -> None:
        """From the loop: dump after each settle and on ``SIGUSR2``."""
        self.install_hooks()
        loop = asyncio.get_running_loop()
        if sys.platform != "win32":
            with contextlib.suppress(RuntimeError, ValueError):
                loop.add_signal_handler(signal.SIGUSR2, self._dump_quietly, "SIGUSR2")
        if self.every_s > 0:
            self._ticker = loop.call_later(self.every_s, self._tick)

    def _tick(self) -> None:
        self._dump_quietly("timer")
        self._ticker = asyncio.get_running_loop().call_later(self.every_s, self._tick)

    def stop(self) -> None:
        from stet.daemon.base import memory

        with contextlib.suppress(ValueError):
            memory.AFTER_SETTLE.remove(self.after_settle)
        if self._ticker is not None:
            self._ticker.cancel()


def daemon_counts(daemon: Any) -> dict[str, Any]:
    """What the daemon's vaults hold that a burst fills: documents loaded, the writer's
    queues, the search worker's backlog (read through ``getattr``: a probe only)."""
    vaults = {}
    for vault_id, runtime in dict(getattr(daemon, "vaults", {})).items():
        service = runtime.service
        vaults[vault_id] = {
            "documents": len(getattr(service, "_docs", ())),
            "pendingWrites": runtime.bridge.pending_writes,
            "pendingReads": runtime.bridge.pending_reads,
            "indexBehind": runtime.records.index.behind,
            "storeConnection": connection_memory(runtime.store.db),
        }
    registry = getattr(daemon, "registry", None)
    home_db = getattr(registry, "_db", None)
    return {"vaults": vaults,
            "homeConnection": connection_memory(home_db) if isinstance(home_db, sqlite3.Connection) else None}


def from_environment() -> MemoryProbe | None:
    folder = os.environ.get(ENV)
    if not folder:
        return None
    try:
        every = float(os.environ.get(EVERY_ENV, "0"))
    except ValueError:
        every = 0.0
    return MemoryProbe(Path(folder), every_s=every)
