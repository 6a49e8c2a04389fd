#!/usr/bin/env python3
"""P7: where each daemon's memory is, from the dumps of ``STET_MEMORY_PROBE=DIR``.

Run the P7 scenario with the probe on (and ``PYTHONTRACEMALLOC=1`` for the Python lines;
it slows the daemons, so take RSS figures from a run without it)::

    STET_MEMORY_PROBE=/tmp/probe PYTHONTRACEMALLOC=1 python bench/p5_restart.py \\
        --small-notes 0 --restarts 1 --idle-seconds 0 --no-write
    python bench/p7_split.py /tmp/probe                 # every dump, in time order
    python bench/p7_split.py /tmp/probe --diff PID-N PID-M  # tracemalloc: one dump minus another

Each daemon dumps 1.5 s after each of its settles and on ``SIGUSR2``
(``daemon/base/memory_probe.py``).
"""

from __future__ import annotations

import argparse
import json
import tracemalloc
from pathlib import Path
from typing import Any

MB = 1024 * 1024


def dumps(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    found = [(path, json.loads(path.read_text(encoding="utf-8"))) for path in folder.glob("*.json")]
    return sorted(found, key=lambda pr: float(pr[1]["time"]))


def describe(path: Path, r: dict[str, Any], t0: float) -> str:
    lines = [f"{path.stem} (+{r['time'] - t0:.1f} s, {r['why']}): RSS {r['rss'] / MB:.1f} MB"]
    smaps = r["smaps"]
    by_size = sorted(smaps.items(), key=lambda kv: -kv[1])
    lines.append("  smaps: " + ", ".join(f"{k} {v / MB:.1f}" for k, v in by_size))
    m = r.get("mallinfo2")
    if m:
        lines.append(f"  mallinfo2: arenas {m['arena'] / MB:.1f} MB (in use {m['uordblks'] / MB:.1f}, "
                     f"free {m['fordblks'] / MB:.1f}, top pad {m['keepcost'] / MB:.2f}), "
                     f"mmapped {m['hblkhd'] / MB:.1f} in {m['hblks']} blocks")
    s = r.get("sqlite")
    if s:
        lines.append(f"  sqlite: in use {s['used'] / MB:.2f} MB (peak {s['peak'] / MB:.1f})")
    p = r["python"]
    lines.append(f"  python: {p['gc_objects']:,} gc objects ({p['gc_frozen']:,} frozen), "
                 f"threads {p['threads']}" + (f", traced {p['traced'] / MB:.1f} MB" if "traced" in p else ""))
    for extra in r.get("daemon", []):
        lines.append(f"  daemon: {json.dumps(extra)}")
    return "\n".join(lines)


def diff(folder: Path, newer: str, older: str, top: int) -> str:
    snaps = [tracemalloc.Snapshot.load(str(folder / f"{stem}.tracemalloc")) for stem in (newer, older)]
    stats = snaps[0].compare_to(snaps[1], "lineno")
    total = sum(s.size_diff for s in stats)
    out = [f"tracemalloc, {newer} minus {older}: {total / MB:+.2f} MB"]
    for s in stats[:top]:
        frame = s.traceback[0]
        out.append(f"  {s.size_diff / 1024:+9.1f} KiB {s.count_diff:+8d}  {frame.filename}:{frame.lineno}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--diff", nargs=2, metavar=("NEWER", "OLDER"), help="two dumps' stems (PID-N)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.diff:
        print(diff(args.folder, args.diff[0], args.diff[1], args.top))
        return 0
    found = dumps(args.folder)
    for path, report in found:
        print(describe(path, report, found[0][1]["time"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
