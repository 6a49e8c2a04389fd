"""Long steps of the event loop, measured by the daemon itself (SPEC §3.15, issue 11 P8).

A request's latency is mostly the step the loop is in when it arrives: P8's p99 is about
the handful of steps over ~100 ms, not the average. With ``STET_LOOP_HOLDS=DIR`` in its
environment the daemon times every callback the loop runs (``asyncio.Handle._run``: a
task's step, a timer, an I/O callback) and writes each that held the loop for at least
``STET_LOOP_HOLDS_MS`` (default 50) to ``DIR/holds-<pid>.jsonl``: its duration, what ran
(the task and its coroutine, or the callback) and the loop thread's stack sampled while
the step was over the threshold (a sampler thread looks every 10 ms; a stack at 80 % of
the threshold, then every 20 ms). Off by default: it
costs two clock reads per callback, and the sampler wakes 100 times a second.

Every second it also writes the requests-first counters (``loop_slices.request_stats``:
requests answered, the loop turns they took from their bytes' arrival to their answer,
slices of long work cut for them) as a ``{"requests": ...}`` line.

``bench/loop_holds_report.py`` summarises the files (counts over 50/100/200 ms, the
longest steps, and where the samples fall).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stet.daemon.base import loop_slices

logger = logging.getLogger(__name__)

SAMPLE_EVERY_S = 0.01
MAX_SAMPLES = 8  # stacks kept per long step
SAMPLE_GAP_S = 0.02  # between two samples of one step (the first at 80 % of the threshold)
STACK_DEPTH = 40
GC_NOTE_S = 0.01  # garbage collections this long (on the loop's thread) are written down
TURN_PART_S = 0.002  # a turn's callbacks this long are named in its entry


def _describe(handle: asyncio.Handle) -> str:
    callback: Any = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro: Any = owner.get_coro()
        name = getattr(coro, "__qualname__", repr(coro))
        return f"task {owner.get_name()} {name}"
    name = getattr(callback, "__qualname__", None) or repr(callback)
    module = getattr(callback, "__module__", "") or ""
    return f"{module}.{name}" if module else str(name)


def _stack(frame: Any) -> list[str]:
    out: list[str] = []
    while frame is not None and len(out) < STACK_DEPTH:
        code = frame.f_code
        out.append(f"{_short(code.co_filename)}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    out.reverse()  # outermost first
    return out


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/lib/python3"):
        at = filename.rfind(marker)
        if at >= 0:
            return filename[at + len(marker):]
    for marker in ("/stet/daemon/", "/stet/sync/", "/daemon/", "/sync/", "/client/"):
        at = filename.rfind(marker)
        if at >= 0:
            return "stet/" + filename[at + 1 :].removeprefix("stet/")
    return filename


class LoopHolds:
    """Times the loop's callbacks; records those over ``threshold_s`` with stack samples."""

    def __init__(self, out: Path, threshold_s: float = 0.05) -> None:
        self.out = out
        self.threshold_s = threshold_s
        self._tid = 0
        self._native_id = 0
        self._started: float | None = None  # the running step's start (perf_counter)
        self._step = 0  # counts steps, so the sampler knows a new one began
        self._samples: list[list[str]] = []
        self._turn: list[tuple[float, asyncio.Handle]] = []  # this turn's callbacks >= TURN_PART_S
        self._turn_began: float | None = None
        self._turns = 0  # returns from the selector: the loop's turns
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_requests: dict[str, float] = loop_slices.RequestStats().as_dict()  # written once changed
        self._gc_began = 0.0
        self._undo: list[Callable[[], None]] = []
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def install(self) -> None:
        """Start timing the running loop's callbacks (call from the loop's thread)."""
        self._tid = threading.get_ident()
        self._native_id = threading.get_native_id()
        original: Callable[[asyncio.Handle], None] = asyncio.Handle._run
        holds = self

        def _run(handle: asyncio.Handle) -> None:
            holds._step += 1
            holds._samples = []
            started = time.perf_counter()
            cpu = time.thread_time()
            holds._started = started
            try:
                original(handle)
            finally:
                took = time.perf_counter() - started
                holds._started = None
                if took >= holds.threshold_s:
                    holds._record(handle, took, time.thread_time() - cpu, holds._samples)
                if took >= TURN_PART_S:
                    holds._turn.append((took, handle))

        asyncio.Handle._run = _run  # type: ignore[method-assign,assignment]
        self._undo.append(lambda: setattr(asyncio.Handle, "_run", original))
        # A turn of the loop runs every callback ready at its start: a request waits for
        # whole turns (accept, read, answer), so long *turns* are timed too, between two
        # returns from the selector, naming the callbacks that took >= TURN_PART_S.
        loop: Any = asyncio.get_running_loop()
        self._loop = loop
        loop_slices.turn_counter = lambda: holds._turns
        self._undo.append(lambda: setattr(loop_slices, "turn_counter", None))
        selector = loop._selector
        select = selector.select

        def _select(timeout: float | None = None) -> Any:
            began = holds._turn_began
            if began is not None:
                took = time.perf_counter() - began
                if took >= holds.threshold_s:
                    parts = sorted(holds._turn, key=lambda p: -p[0])[:6]
                    entry = {"at": time.time(), "ms": round(took * 1000, 1), "turn": True,
                             "what": "; ".join(f"{_describe(h)} {t * 1000:.0f}" for t, h in parts)}
                    with holds._lock:
                        holds._pending.append(entry)
            holds._turn = []
            try:
                return select(timeout)
            finally:
                holds._turns += 1
                holds._turn_began = time.perf_counter()

        selector.select = _select
        self._undo.append(lambda: setattr(selector, "select", select))
        gc.callbacks.append(self._on_gc)
        self._undo.append(lambda: gc.callbacks.remove(self._on_gc))
        self._thread = threading.Thread(target=self._sample_loop, name="stet-loop-holds", daemon=True)
        self._thread.start()
        logger.info("timing the loop's steps: those over %.0f ms go to %s", self.threshold_s * 1000, self.out)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        """Collections of the cyclic garbage collector: each one holds whichever thread
        triggered it (the loop's, mostly), so those >= GC_NOTE_S are written down too."""
        if phase == "start":
            self._gc_began = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_began
        if took >= GC_NOTE_S and threading.get_ident() == self._tid:
            entry: dict[str, Any] = {
                "at": time.time(), "ms": round(took * 1000, 1), "gc": info.get("generation", -1),
                "what": f"gc of generation {info.get('generation')} ({info.get('collected')} collected)"}
            if info.get("generation") == 2 and os.environ.get("STET_LOOP_HOLDS_GC_TYPES"):
                objects = gc.get_objects()
                kinds = collections.Counter(type(o).__qualname__ for o in objects)
                entry["objects"] = len(objects)
                entry["types"] = kinds.most_common(15)
            with self._lock:
                self._pending.append(entry)

    def _record(self, handle: asyncio.Handle, took: float, cpu: float, samples: list[list[str]]) -> None:
        entry = {"at": time.time(), "ms": round(took * 1000, 1), "cpu_ms": round(cpu * 1000, 1),
                 "what": _describe(handle), "samples": samples}
        with self._lock:
            self._pending.append(entry)

    def _sample_loop(self) -> None:
        seen_step = -1
        taken = 0
        next_at = 0.0
        last_write = time.monotonic()
        while not self._stop.wait(SAMPLE_EVERY_S):
            started, step = self._started, self._step
            if step != seen_step:
                seen_step, taken, next_at = step, 0, self.threshold_s * 0.8
            if started is not None and taken < MAX_SAMPLES and time.perf_counter() - started >= next_at:
                state = self._kernel_state()  # before the interpreter lock is needed again
                frame = sys._current_frames().get(self._tid)
                if frame is not None and self._step == step:
                    self._samples.append([*_stack(frame), state])
                    taken += 1
                    next_at += SAMPLE_GAP_S
            if time.monotonic() - last_write >= 1.0:
                self._note_requests()
                self._write()
                last_write = time.monotonic()
        self._note_requests()
        self._write()

    def _kernel_state(self) -> str:
        """``kernel:<state>:<wchan>`` of the loop's thread (Linux): R running or waiting
        for a CPU, S asleep (``futex_*``: the interpreter lock, most likely), D in I/O
        (``jbd2_*``, ``balance_dirty_pages``: the file system)."""
        base = f"/proc/self/task/{self._native_id}/"
        try:
            with open(base + "stat", encoding="ascii") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(base + "wchan", encoding="ascii") as f:
                wchan = f.read().strip() or "-"
        except OSError:
            return "kernel:?:?"
        return f"kernel:{state}:{wchan}"

    def _note_requests(self) -> None:
        """The requests-first counters so far (read from the sampler thread: ints and
        floats, each read whole), when they changed."""
        if self._loop is None:
            return
        stats = loop_slices.request_stats(self._loop).as_dict()
        if stats != self._last_requests:
            self._last_requests = stats
            with self._lock:
                self._pending.append({"at": time.time(), "requests": stats,
                                      "requests_first": loop_slices.REQUESTS_FIRST})

    def _write(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        try:
            with open(self.out, "a", encoding="utf-8") as f:
                for entry in pending:
                    f.write(json.dumps(entry) + "\n")
        except OSError as exc:
            logger.warning("cannot write the loop's long steps to %s: %s", self.out, exc)

    def stop(self) -> None:
        """Stop timing (the loop's callbacks run as before) and write what is left."""
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def from_environment() -> LoopHolds | None:
    """``STET_LOOP_HOLDS=DIR`` (and ``STET_LOOP_HOLDS_MS``): a monitor, else None."""
    folder = os.environ.get("STET_LOOP_HOLDS")
    if not folder:
        return None
    threshold_ms = float(os.environ.get("STET_LOOP_HOLDS_MS", "50"))
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return LoopHolds(path / f"holds-{os.getpid()}.jsonl", threshold_ms / 1000)
