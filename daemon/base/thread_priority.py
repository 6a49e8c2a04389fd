"""A lower OS priority for the daemon's worker threads (issue 11 P8 on B, issue 18).

On 2 cores the event loop's thread is often runnable but not running while the folder's
writer threads and the search index's worker take the CPUs (``daemon/base/loop_holds.py``
shows it: a long step's thread runnable, not running). A worker thread may ask Linux to run
it at a lower priority (a higher nice value, per thread: ``setpriority`` on its thread
id); the loop then gets a CPU first. ``[STET_WORKER_NICE]`` (environment; 0 = unchanged)
sets how much lower; measured in bench/history/rounds.md ("B's first sync and P8 ...").
"""

from __future__ import annotations

import logging
import os
import sys
import threading

logger = logging.getLogger(__name__)

DEFAULT_NICE = 0  # how much lower than the loop a worker thread runs (0: the same)
BLOB_NICE = 5  # how much lower the attachment transfers' threads run (P1 during P9)


def _nice_from_env(name: str, default: int) -> int:
    """A nice increment from the environment variable ``name`` (0-19), else ``default``."""
    raw = os.environ.get(name, "")
    try:
        return max(0, min(19, int(raw))) if raw else default
    except ValueError:
        return default


def worker_nice() -> int:
    return _nice_from_env("STET_WORKER_NICE", DEFAULT_NICE)


def lower_this_thread() -> None:
    """Run the calling thread at ``worker_nice()`` above the process's nice value (Linux
    only; elsewhere, or refused, nothing changes). Call it first thing in a worker thread
    (a ``ThreadPoolExecutor``'s ``initializer``)."""
    _lower(worker_nice())


def blob_nice() -> int:
    """How much lower than the loop the attachment transfers' threads run:
    ``[STET_BLOB_NICE]`` (environment), else ``BLOB_NICE``."""
    return _nice_from_env("STET_BLOB_NICE", BLOB_NICE)


def lower_blob_thread() -> None:
    """``lower_this_thread`` for a thread of the attachment transfers (the blob channel's,
    their disk, hash, landing and read pools), by ``blob_nice()``: on 2 busy cores a note
    saved while a gigabyte moves gets a core before the chunks do (P1 during P9,
    bench/history/rounds.md "P9: the hash beside the write ..."); ``STET_WORKER_NICE`` if higher.
    And its disk requests in the idle I/O class (``idle_io``; ``STET_BLOB_IOPRIO=0``: not),
    so the note's write and fsync go first on the disk too (bench/history/rounds.md, "P9 round 3")."""
    _lower(max(worker_nice(), blob_nice()))
    if os.environ.get("STET_BLOB_IOPRIO", "1") != "0":
        idle_io()


# ioprio_set(2) / ioprio_get(2): no wrapper in glibc or Python; the syscalls' numbers.
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "arm64": 30}
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31, "arm64": 31}
IOPRIO_WHO_PROCESS = 1  # "process" = a thread id here
IOPRIO_CLASS_IDLE = 3
IOPRIO_CLASS_SHIFT = 13


def idle_io() -> bool:
    """The calling thread's disk requests in the idle I/O class: a scheduler that keeps
    classes apart (mq-deadline, BFQ) serves them only when no other request waits (aged
    after a few seconds, never starved for good), so a note's write and fsync go ahead of a
    gigabyte's chunks on the same disk. Linux only; False where it could not be set."""
    return _ioprio(_IOPRIO_SET, IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT) == 0


def io_class() -> int | None:
    """The calling thread's I/O priority class (``IOPRIO_CLASS_IDLE`` once ``idle_io``);
    None where it cannot be read."""
    value = _ioprio(_IOPRIO_GET)
    return None if value is None or value < 0 else value >> IOPRIO_CLASS_SHIFT


def _ioprio(numbers: dict[str, int], *value: int) -> int | None:
    number = numbers.get(os.uname().machine) if sys.platform.startswith("linux") else None
    if number is None:
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.syscall(number, IOPRIO_WHO_PROCESS, threading.get_native_id(), *value))
    except (OSError, AttributeError):  # pragma: no cover - a sandbox refusing it
        return None


def _lower(nice: int) -> None:
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)
    except OSError as exc:  # pragma: no cover - a sandbox refusing it
        logger.debug("cannot lower a worker thread's priority: %s", exc)
