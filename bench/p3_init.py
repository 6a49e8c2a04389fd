#!/usr/bin/env python3
"""P3: `stet init` of a 10,000-note (~50 MB) folder. Target: <= 20 s (SPEC §9).

    python bench/p3_init.py [--notes 10000] [--seed 1] [--runs 3] [--no-write]

Generates the seeded vault once, then runs the real CLI (`python -m`-equivalent
console entry) on a fresh home for each run, timing the whole command (process start,
scan, read, genesis CRDT updates, SQLite commits) and its peak RSS. Prints a table and
appends it to bench/history/rounds.md. Syncthing has no equivalent of an init import, so
there is no reference ratio for P3 (the P4 first-sync benchmark compares with it).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_vault import generate_vault  # noqa: E402
from machine_info import append_results  # noqa: E402


def run_init(vault: Path, home: Path) -> tuple[float, int, str]:
    env = dict(os.environ, STET_HOME=str(home), PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", "from stet.client.cli import main; main()", "init", str(vault), "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"stet init failed: {proc.stderr}")
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, max(rss_kb, before), proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--notes", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stet-p3-"))
    try:
        vault = work / "vault"
        gen = generate_vault(vault, notes=args.notes, seed=args.seed)
        total_mb = gen.total_bytes / 1e6
        times = []
        rss = 0
        for i in range(args.runs):
            home = work / f"home{i}"
            elapsed, rss, out = run_init(vault, home)
            times.append(elapsed)
            print(f"run {i + 1}: {elapsed:.2f} s", flush=True)
            shutil.rmtree(home)
        best, median = min(times), statistics.median(times)
        verdict = "met" if median <= 20 else "MISSED"
        table = (
            f"P3 `stet init` of {args.notes:,} notes ({total_mb:.1f} MB, seed {args.seed}), "
            f"{args.runs} runs\n\n"
            "| metric | value | target |\n|---|---|---|\n"
            f"| median wall time | {median:.2f} s | <= 20 s ({verdict}) |\n"
            f"| best wall time | {best:.2f} s | |\n"
            f"| throughput (median) | {args.notes / median:,.0f} notes/s, {total_mb / median:.1f} MB/s | |\n"
            f"| peak RSS of the CLI | {rss / 1024:.0f} MB | |\n"
        )
        print(table)
        if not args.no_write:
            append_results(table, title="P3 init import")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
