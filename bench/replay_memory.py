#!/usr/bin/env python3
"""Issue 37 item 11: resident memory of two paired daemons after a long `git checkout` replay.

    python bench/replay_memory.py [--notes 3000] [--twins 800] [--steps 20] [--cycles 4]

A vault history in the real vault's shape (tests/integration/vault_shape.py: notes in five
scripts, png/svg twins of different modes) is committed; A starts at its first commit, B
joins; then A checks out each of ``--steps`` commits, then ``--cycles`` times a commit that
deletes 90 % of the vault and back (the real replay's 10,257-deletion checkout). VmRSS of
both daemons is read once each is at rest (RSS unchanged for 3 s, bounded) after the first
sync, after the steps and after each cycle. With ``STET_MEMORY_PROBE=DIR`` (and
``PYTHONTRACEMALLOC=1``) set, the daemons also dump their split at each settle: diff two
with ``bench/p7_split.py DIR --diff PID-N PID-M``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness import DaemonProcess, run_stet, wait_until  # noqa: E402
from tests.integration.git_support import git  # noqa: E402
from tests.integration.peer_support import invite, join, wait_linked  # noqa: E402
from tests.integration.vault_shape import History, commit_history, shape_of  # noqa: E402


def rss_mib(d: DaemonProcess) -> float:
    assert d.proc is not None
    for line in Path(f"/proc/{d.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def at_rest(*daemons: DaemonProcess, quiet_s: float = 3.0, limit_s: float = 90.0) -> list[float]:
    """Each daemon's RSS once none moved by more than 0.2 MiB for ``quiet_s`` (bench only:
    polled every 0.5 s, at most ``limit_s``)."""
    deadline = time.monotonic() + limit_s
    last = [rss_mib(d) for d in daemons]
    still_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = [rss_mib(d) for d in daemons]
        if any(abs(x - y) > 0.2 for x, y in zip(now, last, strict=True)):
            still_since, last = time.monotonic(), now
        elif time.monotonic() - still_since >= quiet_s:
            return now
    return [rss_mib(d) for d in daemons]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=3000)
    ap.add_argument("--twins", type=int, default=800)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stet-replay-mem-"))
    va, vb = work / "a", work / "b"
    history = History(seed=11)
    history.first(notes=args.notes, twins=args.twins)
    for _ in range(args.steps):
        history.step()
    rnd = random.Random(5)
    last = history.trees[-1]
    history.trees.append({p: f for p, f in last.items() if rnd.random() < 0.1})  # 90 % deleted
    history.messages.append("most of the vault deleted")
    started = time.monotonic()
    ids = commit_history(va, history)
    git(va, "checkout", "-q", ids[0])
    print(f"history: {len(ids)} commits, {len(history.trees[0])} files at first "
          f"({time.monotonic() - started:.0f} s to commit)", flush=True)
    daemons: list[DaemonProcess] = []
    try:
        run_stet(work / "ha", "init", str(va), "--name", "notes", timeout=600)
        for home in ("ha", "hb"):
            (work / home).mkdir(exist_ok=True)
            (work / home / "config.toml").write_text("[peer]\ndelete_delay_seconds = 60\n")
        a, b = DaemonProcess(work / "ha"), DaemonProcess(work / "hb")
        daemons += [a, b]
        a.start(timeout=120)
        b.start(timeout=120)
        join(b, invite(a), vb)
        wait_linked(a, b, timeout=60)
        wait_until(lambda: shape_of(vb) == shape_of(va), timeout=600, what="the first sync")
        first = at_rest(a, b)
        print(f"after the first sync: A {first[0]:.1f} MiB, B {first[1]:.1f} MiB", flush=True)

        def step(target: int) -> float:
            t0, wall = time.monotonic(), time.strftime("%H:%M:%S")
            git(va, "checkout", "-q", ids[target])
            checked_out = time.monotonic() - t0
            want = shape_of(va)
            wait_until(lambda: shape_of(vb) == want, timeout=300, what=f"B at commit {target}")
            took = time.monotonic() - t0
            if took > 5:  # with the wall time, to find the step in the daemons' logs
                print(f"  commit {target}: began {wall}, git took {checked_out:.1f} s, B equal after "
                      f"{took:.1f} s", flush=True)
            return took

        took = [step(t) for t in range(1, args.steps + 1)]
        rest = at_rest(a, b)
        print(f"after {args.steps} steps (max {max(took):.2f} s to B): A {rest[0]:.1f} MiB, "
              f"B {rest[1]:.1f} MiB", flush=True)
        for cycle in range(1, args.cycles + 1):
            down, up = step(len(ids) - 1), step(args.steps)
            rest = at_rest(a, b)
            print(f"after cycle {cycle} (90 % deleted in {down:.1f} s, back in {up:.1f} s): "
                  f"A {rest[0]:.1f} MiB, B {rest[1]:.1f} MiB", flush=True)
        status = git(va, "status", "--porcelain")
        print("git status on A:", "clean" if not status else status[:500])
    finally:
        for d in daemons:
            if d.proc is not None and d.proc.poll() is None:
                d.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept", work, file=sys.stderr)
    os.sync()


if __name__ == "__main__":
    main()
