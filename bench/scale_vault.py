#!/usr/bin/env python3
"""P12, first part: how `stet init`, the daemon's start and search grow with the vault (10k -> 100k).

    python bench/scale_vault.py [--notes 10000 100000] [--seed 1] [--vault-dir DIR]
                                [--queries 200] [--restarts 2] [--no-write] [--keep]

For each size: generate the seeded vault (bench/generate_vault.py; reused from
``--vault-dir/notes-N`` when it is there already, so a 100k vault -- ~500 MB -- is generated
once), then on a fresh home:

1. ``stet init`` of it (the real CLI): wall time and the CLI's peak RSS;
2. start the daemon (spawn -> ``GET /v1/status`` answers), wait until its search index has
   every note (status ``notes`` and a search for a word every note holds is not needed: the
   index count is read from the index database), then restart it ``--restarts`` times with
   nothing changed: ready time;
3. ``--queries`` searches through REST (``GET /v1/vaults/notes/search?q=``, one keep-alive
   connection): single words, two-word AND, a quoted phrase, a prefix, ``-term``; each
   query's words taken from random notes of the vault (seeded), so every query has hits;
4. VmRSS of the daemon at rest after the searches.

Targets (issue 35, P12 at 100,000 notes): init <= 10x P3 (P3 = this script's 10k init);
restart ready <= 5 s; search p50 <= 50 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import re
import sqlite3
import statistics
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_vault import generate_vault  # noqa: E402
from machine_info import append_results  # noqa: E402
from p3_init import run_init  # noqa: E402
from peer_bench import Daemons, install_sigterm_exit, load_average, percentile, rss_bytes, wait_for, work_dir  # noqa: E402

MB = 1e6
WORD = re.compile(r"[A-Za-z]{5,}")


@dataclass
class Size:
    notes: int
    vault_bytes: int = 0
    generate_s: float = 0.0
    init_s: float = 0.0
    init_rss_kb: int = 0
    first_ready_s: float = 0.0
    indexed_s: float = 0.0
    ready_s: list[float] = field(default_factory=list)
    search_s: dict[str, list[float]] = field(default_factory=dict)
    hits: dict[str, float] = field(default_factory=dict)
    rss_rest: tuple[int, int] = (0, 0)
    store_bytes: int = 0
    load: dict[str, str] = field(default_factory=dict)


def _queries(folder: Path, n: int, seed: int) -> list[tuple[str, str]]:
    """(kind, q) pairs whose words come from random notes (so each has a hit)."""
    rng = random.Random(seed)
    files = sorted(folder.rglob("*.md"))
    kinds = ("word", "and", "phrase", "prefix", "not")
    out: list[tuple[str, str]] = []
    while len(out) < n:
        text = rng.choice(files).read_text(encoding="utf-8")
        words = WORD.findall(text)
        if len(words) < 3:
            continue
        kind = kinds[len(out) % len(kinds)]
        i = rng.randrange(len(words) - 1)
        a, b = words[i].lower(), words[i + 1].lower()
        q = {"word": a, "and": f"{a} {rng.choice(words).lower()}", "phrase": f'"{a} {b}"',
             "prefix": f"{a[:4]}*", "not": f"{a} -{rng.choice(words).lower()}zz"}[kind]
        out.append((kind, q))
    return out


Timings = dict[str, list[float]]


def _search_all(api_url: str, token: str, vault: str,
                queries: list[tuple[str, str]]) -> tuple[Timings, dict[str, float]]:
    u = urllib.parse.urlsplit(api_url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=60)
    times: dict[str, list[float]] = {}
    hits: dict[str, list[int]] = {}
    try:
        for kind, q in queries:
            t = time.perf_counter()
            query = urllib.parse.urlencode({"q": q})
            conn.request("GET", f"/v1/vaults/{urllib.parse.quote(vault)}/search?{query}",
                         headers={"Authorization": f"Bearer {token}"})
            resp = conn.getresponse()
            body = resp.read()
            times.setdefault(kind, []).append(time.perf_counter() - t)
            if resp.status != 200:
                raise RuntimeError(f"search {q!r}: {resp.status} {body[:200]!r}")
            hits.setdefault(kind, []).append(len(json.loads(body)["results"]))
    finally:
        conn.close()
    return times, {k: statistics.mean(v) for k, v in hits.items()}


def _index_count(home: Path) -> int:
    found = list((home / "vaults").glob("*.search.sqlite"))
    if not found:
        return 0
    db = sqlite3.connect(f"file:{found[0]}?mode=ro", uri=True, timeout=5)
    try:
        return int(db.execute("SELECT count(*) FROM docs").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        db.close()


def run_size(work: Path, vault_dir: Path | None, notes: int, args: argparse.Namespace) -> Size:
    from stet.client.daemon_link import read_owner_token
    from stet.sync.home_layout import HomeLayout

    sz = Size(notes)
    folder = (vault_dir or work) / f"notes-{notes}-seed{args.seed}"
    t = time.perf_counter()
    done_marker = folder.parent / f"{folder.name}.bytes"  # beside the vault: not synced
    if not done_marker.exists():
        if folder.exists():
            raise SystemExit(f"{folder} exists but was not finished: remove it")
        gen = generate_vault(folder, notes=notes, seed=args.seed)
        done_marker.write_text(str(gen.total_bytes))
    sz.generate_s = time.perf_counter() - t
    sz.vault_bytes = int(done_marker.read_text())
    sz.load["start"] = load_average()
    home = work / f"home-{notes}"
    sz.init_s, sz.init_rss_kb, _ = run_init(folder, home)
    sz.load["after init"] = load_average()
    print(f"== {notes:,} notes ({sz.vault_bytes / MB:.0f} MB): stet init {sz.init_s:.1f} s, "
          f"peak RSS {sz.init_rss_kb / 1024:.0f} MB, load {sz.load['after init']}", flush=True)
    with Daemons() as daemons:
        d, sz.first_ready_s = daemons.start(home, timeout=600)
        t = time.perf_counter()
        wait_for(lambda: _index_count(home) >= notes, timeout=1800, what="the search index", interval=0.5)
        sz.indexed_s = time.perf_counter() - t
        print(f"  first start ready {sz.first_ready_s:.2f} s; search index complete {sz.indexed_s:.1f} s "
              "after", flush=True)
        for _ in range(args.restarts):
            daemons.stop(d)
            d, ready = daemons.start(home, timeout=600)
            sz.ready_s.append(ready)
            print(f"  restart ready {ready:.2f} s", flush=True)
        token = read_owner_token(HomeLayout(home))
        assert token is not None
        queries = _queries(folder, args.queries, args.seed)
        vault = str(d.client.status()["vaults"][0]["id"])
        _search_all(d.api_url, token, vault, queries[:20])  # warm the connection and the page cache
        sz.search_s, sz.hits = _search_all(d.api_url, token, vault, queries)
        sz.load["after searches"] = load_average()
        all_s = [x for v in sz.search_s.values() for x in v]
        print(f"  search p50 {statistics.median(all_s) * 1e3:.1f} ms, "
              f"p99 {percentile(all_s, 99) * 1e3:.1f} ms "
              f"({len(all_s)} queries), load {sz.load['after searches']}", flush=True)
        time.sleep(2)
        assert d.proc is not None
        sz.rss_rest = rss_bytes(d.proc.pid)
    sz.store_bytes = sum(p.stat().st_size for p in (home / "vaults").iterdir() if p.is_file())
    return sz


def report(sizes: list[Size], args: argparse.Namespace) -> str:
    base = sizes[0]
    lines = [
        f"P12 (first part): `stet init`, restart and search by vault size, seed {args.seed} "
        "(bench/generate_vault.py notes of 1-50 KB, mean 5 KiB). Search through REST over one keep-alive "
        f"connection, {args.queries} queries per size (word / two words / phrase / prefix / -term, "
        "words from random notes).\n",
        "| notes | vault | stet init (peak RSS) | init / smallest | first start ready | "
        "index complete after | "
        "restart ready (median) | search p50 / p99 | search p50 by kind | RSS at rest (peak) | store |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for sz in sizes:
        all_s = [x for v in sz.search_s.values() for x in v]
        kinds = ", ".join(f"{k} {statistics.median(v) * 1e3:.1f}" for k, v in sz.search_s.items())
        lines.append(
            f"| {sz.notes:,} | {sz.vault_bytes / MB:.0f} MB | "
            f"{sz.init_s:.1f} s ({sz.init_rss_kb / 1024:.0f} MB) | "
            f"{sz.init_s / base.init_s:.1f}x | {sz.first_ready_s:.2f} s | {sz.indexed_s:.1f} s | "
            f"{statistics.median(sz.ready_s):.2f} s | {statistics.median(all_s) * 1e3:.1f} / "
            f"{percentile(all_s, 99) * 1e3:.1f} ms | {kinds} ms | {sz.rss_rest[0] / MB:.0f} MB "
            f"({sz.rss_rest[1] / MB:.0f} MB) | {sz.store_bytes / MB:.0f} MB |")
    lines.append("")
    for sz in sizes:
        lines.append(f"Load average (1/5/15 min), {sz.notes:,} notes: " +
                     "; ".join(f"{k} {v}" for k, v in sz.load.items()) + ".")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--notes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vault-dir", type=Path, default=None,
                    help="where generated vaults are kept between runs (default: the run's temp dir)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--restarts", type=int, default=2)
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    install_sigterm_exit()
    if args.vault_dir is not None:
        args.vault_dir.mkdir(parents=True, exist_ok=True)
    with work_dir("stet-scale-", keep=args.keep) as work:
        sizes = [run_size(work, args.vault_dir, n, args) for n in sorted(args.notes)]
    table = report(sizes, args)
    print(table)
    if not args.no_write:
        append_results(table, title="P12 init, restart and search by vault size")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
