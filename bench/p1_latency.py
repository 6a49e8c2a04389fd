#!/usr/bin/env python3
"""P1: a file saved on A has the same bytes on B's disk. 1,000-note vault (SPEC §9).

Target: p50 <= 30 ms, p99 <= 150 ms; >= 100x faster than Syncthing at its defaults.

    python bench/p1_latency.py [--notes 1000] [--seed 1] [--saves 200] [--reverse-saves 50]
                               [--gap-ms 50] [--timeout 5] [--max-seconds 150] [--no-write]

Two real daemons on loopback, each on its own temporary home. The generated vault is
imported on A (`stet init`), B joins into an empty folder (`stet invite` / `stet join`)
and the run waits until B's folder is byte-identical (tree digest). Then, one at a time,
each save appends a unique line to a random note on A the way an editor saves: write a
temp file in the note's folder (`.<name>.<n>.tmp`, fsynced), then `os.replace` it over
the note. The clock starts just before `os.replace` and stops when B's copy of the note
holds exactly A's new bytes: the bench watches B's folders with inotify (IN_MOVED_TO,
IN_CLOSE_WRITE, ...) and reads the file on every event, with a 5 ms fallback re-read.
A gap (`--gap-ms`, default 50 ms) separates the arrival of one save from the next.
The first `--warmup` saves (default 5) are reported separately, not in the percentiles.
Then the same in reverse (saves on B, watched on A). Bounded: a save that has not
arrived after `--timeout` s counts as lost, and each direction stops after
`--max-seconds`. Syncthing is not run here (a separate task installs and configures
it): the table says so.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_vault import generate_vault, tree_digest  # noqa: E402
from machine_info import append_results  # noqa: E402
from peer_bench import (  # noqa: E402
    Daemons,
    device_id,
    init_vault,
    install_sigterm_exit,
    linked,
    load_average,
    pair,
    percentile,
    wait_for,
    wait_synced,
    work_dir,
)
from save_latency import measure_saves  # noqa: E402


def run_direction(src: Path, dst: Path, paths: list[str], *, count: int, warmup: int, gap_s: float,
                  timeout_s: float, max_seconds: float, rng: random.Random, label: str
                  ) -> tuple[list[float], list[float], int, int]:
    """(latencies, warm-up latencies, lost saves, attempted saves), latencies in seconds."""
    saves = measure_saves(src, dst, paths, count=count, warmup=warmup, gap_s=gap_s, timeout_s=timeout_s,
                          max_seconds=max_seconds, rng=rng, label=label)
    return saves.latencies, saves.warmup, saves.lost, saves.attempted


def row(name: str, lat: list[float], lost: int, attempted: int, target: bool) -> str:
    if not lat:
        return f"| {name} | 0 of {attempted} arrived | | | | | | |"
    ms = [x * 1000 for x in lat]
    p50, p95, p99 = percentile(ms, 50), percentile(ms, 95), percentile(ms, 99)
    verdict = ""
    if target:
        verdict = (f"p50 <= 30 ms: {'met' if p50 <= 30 else 'MISSED'}; "
                   f"p99 <= 150 ms: {'met' if p99 <= 150 else 'MISSED'}")
    return (f"| {name} | {len(ms)} (+{lost} lost of {attempted}) | {p50:.1f} | {p95:.1f} | {p99:.1f} | "
            f"{max(ms):.1f} | {statistics.fmean(ms):.1f} | {verdict} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--notes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--saves", type=int, default=200, help="measured saves A -> B")
    ap.add_argument("--reverse-saves", type=int, default=50, help="measured saves B -> A")
    ap.add_argument("--warmup", type=int, default=5, help="saves before each direction's measured ones")
    ap.add_argument("--gap-ms", type=float, default=50.0, help="pause after each save has arrived")
    ap.add_argument("--timeout", type=float, default=5.0, help="a save not arrived by then is lost (s)")
    ap.add_argument("--max-seconds", type=float, default=150.0, help="time cap per direction (s)")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (debugging)")
    args = ap.parse_args()
    install_sigterm_exit()
    load_start = load_average()

    with work_dir("stet-p1-", keep=args.keep) as work, Daemons() as daemons:
        folder_a, folder_b = work / "a", work / "b"
        gen = generate_vault(folder_a, notes=args.notes, seed=args.seed)
        digest = tree_digest(folder_a)
        init_s = init_vault(work / "home-a", folder_a)
        a, ready_a = daemons.start(work / "home-a")
        b, ready_b = daemons.start(work / "home-b")
        t = time.perf_counter()
        pair(a, b, folder_b)
        wait_synced(b, folder_b, args.notes, digest, timeout=180)
        first_sync = time.perf_counter() - t
        dev_a, dev_b = device_id(a), device_id(b)
        wait_for(lambda: linked(a, dev_b) and linked(b, dev_a), timeout=30, what="the link")
        print(f"setup: init {init_s:.1f} s, A ready {ready_a:.2f} s, B ready {ready_b:.2f} s, "
              f"join + first sync of {args.notes} notes {first_sync:.1f} s", flush=True)

        rng = random.Random(f"p1-latency-{args.seed}")
        paths = list(gen.paths)
        fwd, fwd_warm, fwd_lost, fwd_n = run_direction(
            folder_a, folder_b, paths, count=args.saves, warmup=args.warmup, gap_s=args.gap_ms / 1000,
            timeout_s=args.timeout, max_seconds=args.max_seconds, rng=rng, label="A->B")
        rev, rev_warm, rev_lost, rev_n = run_direction(
            folder_b, folder_a, paths, count=args.reverse_saves, warmup=args.warmup,
            gap_s=args.gap_ms / 1000, timeout_s=args.timeout, max_seconds=args.max_seconds, rng=rng,
            label="B->A")
        final_same = tree_digest(folder_a) == tree_digest(folder_b)
        load_end = load_average()

    warm = ", ".join(f"{x * 1000:.0f}" for x in fwd_warm + rev_warm) or "none"
    table = (
        f"P1 save on one device -> same bytes on the other's disk; {args.notes:,}-note vault "
        f"({gen.total_bytes / 1e6:.1f} MB, seed {args.seed}), two daemons on loopback. Editor-style "
        f"saves (temp file + fsync + os.replace) appending one unique line to a random note, one at "
        f"a time, {args.gap_ms:.0f} ms apart; latency = os.replace on one side to identical bytes "
        f"read on the other (inotify-woken reads). Warm-up saves (not in the figures, ms): {warm}.\n\n"
        "| direction | saves measured | p50 ms | p95 ms | p99 ms | max ms | mean ms | target (SPEC §9) |\n"
        "|---|---|---|---|---|---|---|---|\n"
        f"{row('Stet A -> B', fwd, fwd_lost, fwd_n, True)}\n"
        f"{row('Stet B -> A', rev, rev_lost, rev_n, False)}\n"
        "| Syncthing (reference) | not measured in this run (TODO: a separate task installs and "
        "configures Syncthing) | | | | | | >= 100x slower than Stet |\n\n"
        f"Setup (not part of P1): `stet init` {init_s:.1f} s; daemon ready A {ready_a:.2f} s, "
        f"B {ready_b:.2f} s; `stet join` + first full sync of {args.notes:,} notes to B "
        f"{first_sync:.1f} s. Vaults byte-identical at the end: {'yes' if final_same else 'NO'}. "
        f"Load average (1/5/15 min) at the start: {load_start}, after the saves: {load_end} "
        f"(with 2 daemons and this script, ~1 means the CPUs were not shared with other work).\n"
    )
    print(table)
    if not args.no_write:
        append_results(table, title=f"P1 save-to-peer latency, {args.notes:,} notes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
