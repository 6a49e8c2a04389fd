#!/usr/bin/env python3
"""Cost of the three-way text merge (sync/text_merge.py) on a large note.

    python bench/merge_bench.py [--size 1000000] [--regions 100] [--overlap 20] [--runs 7] [--seed 1]

Builds a markdown-ish note of about ``--size`` characters (headings, task items, paragraphs,
blank lines; Latin with accents, CJK, Arabic, Cyrillic), then two or three sides that each change
``--regions`` places (replaced lines, word edits inside a line, inserted lines, deleted lines);
``--overlap`` of each side's regions are on lines the first side also changed (half of them on
the same word, so they overlap; half on another word of the line, so they merge). Prints the
median (and min / max) wall time of ``merge_texts`` over ``--runs`` runs for two sides and for
three, and, for comparison, of ``merge3.Merge3(...).merge_regions()`` alone on the two-side case
(the line-level core only) when the ``merge3`` package is installed.

A benchmark, not a test: it asserts nothing about time. Standard library plus Stet.
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from stet.sync.text_merge import Side, merge_texts

WORDS = [
    "note", "sync", "merge", "daemon", "agent", "device", "vault", "draft", "status", "rate",
    "limit", "plan", "review", "the", "a", "of", "and", "to", "in", "is", "it", "for", "on", "with",
    "as", "café", "naïve", "résumé", "Ärger", "straße", "élève", "数据库", "迁移", "计划", "会议", "東京",
    "です", "設計", "مرحبا", "بالعالم", "ملاحظة", "привет", "мир", "данные", "заметка",
]


def _words(r: random.Random, lo: int = 6, hi: int = 14) -> str:
    return " ".join(r.choice(WORDS) for _ in range(r.randint(lo, hi)))


def make_base(size: int, r: random.Random) -> list[str]:
    lines: list[str] = []
    n = 0
    while n < size:
        k = r.random()
        if k < 0.05:
            line = "## " + _words(r, 2, 6)
        elif k < 0.25:
            line = "- [ ] " + _words(r)
        elif k < 0.4:
            line = ""
        else:
            line = _words(r)
        lines.append(line + "\n")
        n += len(line) + 1
    return lines


def _word_edit(line: str, r: random.Random, which: int | None = None) -> str:
    body = line.rstrip("\n")
    words = body.split(" ")
    if len(words) < 2:
        return _words(r) + "\n"
    i = which if which is not None else r.randrange(len(words))
    i = min(i, len(words) - 1)
    words[i] = words[i] + "-" + str(r.randrange(10_000))
    return " ".join(words) + line[len(body) :]


def make_side(base: list[str], targets: list[int], r: random.Random, first: set[int]) -> list[str]:
    """``base`` with each target line changed; lines in ``first`` get a word edit (the first
    side's lines: same word on even targets, another word on odd ones)."""
    out = list(base)
    for n, i in enumerate(sorted(targets, reverse=True)):
        if i in first:
            out[i] = _word_edit(out[i], r, 0 if n % 2 == 0 else 3)
            continue
        k = r.random()
        if k < 0.4:
            out[i] = _words(r) + "\n"
        elif k < 0.7:
            out[i] = _word_edit(out[i], r)
        elif k < 0.9:
            out.insert(i + 1, _words(r) + "\n")
        else:
            del out[i]
    return out


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    times: list[float] = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def fmt(times: list[float]) -> str:
    return f"median {statistics.median(times):7.1f} ms  (min {min(times):.1f}, max {max(times):.1f})"


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--regions", type=int, default=100)
    ap.add_argument("--overlap", type=int, default=20)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    r = random.Random(args.seed)
    base_lines = make_base(args.size, r)
    base = "".join(base_lines)
    # Changed lines are spaced out so one side's regions stay distinct.
    slots = r.sample(range(1, len(base_lines) - 1, 3), 3 * args.regions)
    a_targets = slots[: args.regions]
    shared = a_targets[: args.overlap]
    b_targets = shared + slots[args.regions : 2 * args.regions - args.overlap]
    c_targets = shared + slots[2 * args.regions : 3 * args.regions - args.overlap]
    a = "".join(make_side(base_lines, a_targets, r, set(shared)))
    b = "".join(make_side(base_lines, b_targets, r, set(shared)))
    c = "".join(make_side(base_lines, c_targets, r, set(shared)))
    sides2 = [Side(a, "device:a"), Side(b, "agent:b")]
    sides3 = [*sides2, Side(c, "device:c")]

    print(f"command: {' '.join(['python', *sys.argv])}")
    print(f"machine: {cpu_model()}, nproc {_nproc()}; Python {platform.python_version()}")
    print(
        f"note: {len(base):,} chars, {len(base_lines):,} lines; {args.regions} changed regions per side, "
        f"{args.overlap} on lines the first side changed too"
    )
    result2 = merge_texts(base, sides2)
    result3 = merge_texts(base, sides3)
    print(f"2 sides: {len(result2.overlaps)} overlaps;  3 sides: {len(result3.overlaps)} overlaps")
    print(f"merge_texts, 2 sides:  {fmt(timed(lambda: merge_texts(base, sides2), args.runs))}")
    print(f"merge_texts, 3 sides:  {fmt(timed(lambda: merge_texts(base, sides3), args.runs))}")
    try:
        import merge3  # noqa: PLC0415 -- optional comparison only
    except ImportError:
        print("merge3: not installed (comparison skipped)")
        return
    bl, al, cl = base.splitlines(True), a.splitlines(True), b.splitlines(True)
    print(
        "merge3 merge_regions, 2 sides (line level only): "
        f"{fmt(timed(lambda: list(merge3.Merge3(bl, al, cl).merge_regions()), args.runs))}"
    )


def _nproc() -> int:
    import os  # noqa: PLC0415

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


if __name__ == "__main__":
    main()
