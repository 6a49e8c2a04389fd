"""P1's measurement, one procedure for Stet and for Syncthing (SPEC §9 P1).

An editor-style save on ``src`` (a temp file in the note's folder, fsynced, then
``os.replace`` over the note); the clock starts just before the rename and stops when the
other side's copy holds exactly the new bytes. The other side's folders are watched with
inotify and the file is re-read on every event, with a 5 ms fallback re-read. Used by
``p1_latency.py`` (Stet), ``syncthing_ref.measure_p1`` (Syncthing) and ``run_all.py``, so
the two are measured the same way in the same run.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from peer_bench import Inotify


def new_bytes(old: bytes, tag: str) -> bytes:
    """``old`` plus one unique line, in the note's own line-ending style."""
    eol = b"\r\n" if b"\r\n" in old else b"\n"
    line = f"- saved {tag} {time.time_ns()}".encode() + eol
    if old and not old.endswith(b"\n"):
        line = eol + line
    return old + line


def editor_save(path: Path, data: bytes, n: int) -> float:
    """Write ``data`` to ``path`` as an editor does (temp file, fsync, rename over it);
    returns the ``perf_counter`` just before the rename: the moment the save becomes visible."""
    tmp = path.with_name(f".{path.name}.{n}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    t0 = time.perf_counter()
    os.replace(tmp, path)
    return t0


@dataclass
class Saves:
    """What one direction measured; latencies in seconds."""

    latencies: list[float] = field(default_factory=list)
    warmup: list[float] = field(default_factory=list)
    lost: int = 0
    attempted: int = 0


def measure_saves(src: Path, dst: Path, paths: list[str], *, count: int, warmup: int, gap_s: float,
                  timeout_s: float, max_seconds: float, rng: random.Random, label: str,
                  give_up_after: int = 10, progress_every: int = 50, indent: str = "") -> Saves:
    """``warmup + count`` saves of random ``paths``, one at a time, each waited for on ``dst``.
    Bounded: a save not seen after ``timeout_s`` is lost (``give_up_after`` lost ones end the
    direction), and the whole direction stops after ``max_seconds``."""
    ino = Inotify()
    out = Saves()
    deadline = time.monotonic() + max_seconds
    try:
        for i in range(warmup + count):
            if time.monotonic() > deadline:
                print(f"{indent}{label}: stopped after {max_seconds:.0f} s ({out.attempted} saves)",
                      flush=True)
                break
            rel = rng.choice(paths)
            target_src, target_dst = src / rel, dst / rel
            ino.watch(target_dst.parent)
            ino.wait(0)  # drain stale events
            data = new_bytes(target_src.read_bytes(), f"{label}-{i}")
            out.attempted += 1
            t0 = editor_save(target_src, data, i)
            arrived = None
            while True:
                try:
                    if target_dst.read_bytes() == data:
                        arrived = time.perf_counter()
                        break
                except FileNotFoundError:
                    pass
                left = t0 + timeout_s - time.perf_counter()
                if left <= 0:
                    break
                ino.wait(min(left, 0.005))
            if arrived is None:
                out.lost += 1
                print(f"{indent}{label}: save {i} to {rel!r} did not arrive within {timeout_s} s", flush=True)
                if out.lost >= give_up_after:
                    print(f"{indent}{label}: {out.lost} saves lost, stopping this direction", flush=True)
                    break
            else:
                (out.warmup if i < warmup else out.latencies).append(arrived - t0)
            if (i + 1) % progress_every == 0:
                print(f"{indent}{label}: {i + 1} saves", flush=True)
            time.sleep(gap_s)  # the pace of the saves (the bench's own, not a synchronisation)
    finally:
        ino.close()
    return out
