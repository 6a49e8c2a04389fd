#!/usr/bin/env python3
"""Summarise the loop's long steps written by daemons run with ``STET_LOOP_HOLDS=DIR``
(``daemon/base/loop_holds.py``; ``bench/p8_bulk.py --loop-holds DIR`` sets it and names the
daemons and phases in ``DIR/phases.json``).

    python bench/loop_holds_report.py DIR [--phase unzip] [--top 15]

For each daemon: how many steps held the loop for >= 50 / 100 / 200 ms and their total,
the longest steps (what ran, and the innermost Stet frames of its stack samples), and
where the samples of all long steps fall (the deepest frame in Stet's own code, and the
outermost one under the loop: which work it was).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

OURS = ("stet/daemon/", "stet/sync/")


def _ours(frame: str) -> bool:
    return frame.startswith(OURS) and "loop_holds" not in frame


def _fn(frame: str) -> str:
    path, name, _line = frame.rsplit(":", 2)
    return f"{path.rsplit('/', 1)[-1]}:{name}"


def split_state(sample: list[str]) -> tuple[list[str], str]:
    """(the stack, the loop thread's kernel state at the sample: ``R``, ``S:futex_...``)."""
    if sample and sample[-1].startswith("kernel:"):
        return sample[:-1], sample[-1].removeprefix("kernel:")
    return sample, "?"


def where(sample: list[str]) -> tuple[str, str]:
    """(outermost Stet frame, deepest frame: Stet's, and the library call under it if any)."""
    sample = split_state(sample)[0]
    ours = [i for i, f in enumerate(sample) if _ours(f)]
    if not ours:
        return ("(not Stet)", _fn(sample[-1]) if sample else "?")
    deepest = ours[-1]
    below = sample[deepest + 1] if deepest + 1 < len(sample) else None
    inner = _fn(sample[deepest]) + (f" -> {_fn(below)}" if below else "")
    return (_fn(sample[ours[0]]), inner)


def load(folder: Path, phase: str | None) -> dict[str, list[dict[str, Any]]]:
    phases: dict[str, Any] = {}
    meta = folder / "phases.json"
    if meta.exists():
        phases = json.loads(meta.read_text(encoding="utf-8"))
    names = {str(pid): name for name, pid in phases.get("daemons", {}).items()}
    window = phases.get(phase) if phase else None
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("holds-*.jsonl")):
        pid = path.stem.split("-", 1)[1]
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if window:
            rows = [r for r in rows if window[0] <= r["at"] <= window[1] + 1.0]
        out[names.get(pid, f"pid {pid}")] = rows
    return out


def report(name: str, everything: list[dict[str, Any]], top: int) -> str:
    turns = [r for r in everything if r.get("turn")]
    gcs = [r for r in everything if "gc" in r]
    requests = [r for r in everything if "requests" in r]
    rows = [r for r in everything if not r.get("turn") and "gc" not in r and "requests" not in r]
    lines = [f"### {name}: {len(turns)} turns of the loop and {len(rows)} single steps >= threshold"]
    for bound in (50, 100, 200, 500):
        over = [r["ms"] for r in turns if r["ms"] >= bound]
        lines.append(f"- turns >= {bound} ms: {len(over)}, {sum(over) / 1000:.2f} s in all")
    lines.append("")
    lines.append("| turn ms | its callbacks >= 2 ms (ms each) |")
    lines.append("|---|---|")
    for r in sorted(turns, key=lambda r: -r["ms"])[:top]:
        lines.append(f"| {r['ms']:.0f} | {r['what']} |")
    lines.append("")
    for bound in (50, 100, 200, 500):
        over = [r["ms"] for r in rows if r["ms"] >= bound]
        lines.append(f"- single steps >= {bound} ms: {len(over)}, {sum(over) / 1000:.2f} s in all")
    lines.append("")
    lines.append("| ms | its thread's CPU ms | what ran | where (samples: deepest Stet frame) |")
    lines.append("|---|---|---|---|")
    for r in sorted(rows, key=lambda r: -r["ms"])[:top]:
        inner = Counter(where(s)[1] for s in r["samples"])
        lines.append(f"| {r['ms']:.0f} | {r.get('cpu_ms', float('nan')):.0f} | {r['what']} | "
                     + "; ".join(f"{k} x{n}" for k, n in inner.most_common(3)) + " |")
    outer: Counter[str] = Counter()
    inner_all: Counter[str] = Counter()
    for r in rows:
        for s in r["samples"]:
            o, i = where(s)
            outer[o] += 1
            inner_all[i] += 1
    total = sum(outer.values()) or 1
    lines.append("")
    lines.append(f"Samples of the long steps ({total}), by the outermost Stet frame: "
                 + "; ".join(f"{k} {100 * n / total:.0f} %" for k, n in outer.most_common(8)))
    lines.append("")
    lines.append("By the deepest: "
                 + "; ".join(f"{k} {100 * n / total:.0f} %" for k, n in inner_all.most_common(12)))
    states = Counter(split_state(s)[1] for r in rows for s in r["samples"])
    lines.append("")
    lines.append("The loop thread's kernel state at the samples (R: running or waiting for a CPU; "
                 "S futex: asleep, the interpreter lock most likely; D: in I/O): "
                 + "; ".join(f"{k} {100 * n / total:.0f} %" for k, n in states.most_common(8)))
    lines.append("")
    by_gen = Counter(r["gc"] for r in gcs)
    lines.append(f"Garbage collections >= 10 ms on the loop's thread: {len(gcs)} "
                 f"({sum(r['ms'] for r in gcs) / 1000:.2f} s; by generation {dict(sorted(by_gen.items()))}; "
                 f"longest {max((r['ms'] for r in gcs), default=0):.0f} ms)")
    if requests:
        lines.append("")
        lines.append(_requests_line(requests))
    return "\n".join(lines)


def _requests_line(rows: list[dict[str, Any]]) -> str:
    """The requests-first counters (``loop_slices.request_stats``, written once a second):
    what changed from the first line in the window to the last (the first line already
    holds what came before)."""
    first, last = rows[0]["requests"], rows[-1]["requests"]
    if len(rows) == 1:
        first = {k: 0 for k in last}
    d = {k: last[k] - first[k] for k in last}
    answered = d["answered"] or 1
    return (f"Requests (requests first {'on' if rows[-1].get('requests_first') else 'off'}): "
            f"{d['answered']} answered, {d['turns'] / answered:.2f} loop turns each from their bytes' "
            f"arrival to their answer (most {last['most_turns']} since start), "
            f"{d['waited_ms'] / answered:.1f} ms each on average (longest {last['longest_ms']:.0f} ms "
            f"since start); {d['slices_cut']} slices of long work cut to one item for them")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--phase", default=None,
                    help="only steps within this phase of phases.json (unzip, checkout)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    for name, rows in load(args.folder, args.phase).items():
        print(report(name, rows, args.top))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
