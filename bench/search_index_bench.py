#!/usr/bin/env python3
"""The search index on 10,000 notes (issue 34 item 3): time to build it, its size on disk,
and the p50/p95 of searches (the index's own answer, as the daemon's worker thread and
search call it: ``SearchIndex.put_many`` in batches of 256, ``SearchIndex.search``).

The vault is ``generate_vault.py``'s (seed 1: 10,000 notes, ~51 MB, CJK/Korean/RTL/combining
marks in a share of them) with 300 notes of real sentences in Chinese, Japanese, Korean,
Thai, Arabic and Russian mixed in, so the CJK queries find something.

``--main-src DIR``: also measure another version of ``sync/`` (e.g. main's, unpacked by
``git archive main sync | tar -x -C DIR``) on the same texts and queries, side by side::

    mkdir -p /tmp/main-sync && git archive main sync | tar -x -C /tmp/main-sync
    flock /tmp/stet-bench.lock python bench/search_index_bench.py --main-src /tmp/main-sync/sync

and ``--trigram``: the size and build time of an FTS5 ``trigram`` table over the same texts
(the alternative the decision weighed: docs/decisions/4172-search-in-every-language.md).
"""

from __future__ import annotations

import argparse
import importlib
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generate_vault import generate_vault  # noqa: E402

SENTENCES = [
    "我们讨论了数据库迁移计划，下周开始执行。",
    "今天的会议很顺利，大家同意了新的发布流程。",
    "来週の打ち合わせは火曜日に決まりました。",
    "오늘회의록을정리했다. 다음 회의는 금요일이다.",
    "วันนี้เรามีประชุมทีมเรื่องแผนงานไตรมาสหน้า",
    "عقدنا الاجتماع الأسبوعي أمس لمناقشة خطة قاعدة البيانات.",
    "Вчера мы обсудили миграцию базы данных на встрече с командой.",
]
QUERIES = [
    "project",  # a common word: many hits, ranked
    "review plan",
    "rollout schedule",
    "kube",  # a prefix
    '"release report"',  # a phrase
    "meeting OR retro",
    "roadmap -draft",
    "schema migr",
    "数据库",
    "打ち合わせ",
    "회의록",
    "ประชุม",
    "اجتماع",
    "обсуд миграц",
    "cafe",
    "zzzznotthere",
]


def load_texts(root: Path) -> list[tuple[str, str, str, str]]:
    notes = []
    for i, p in enumerate(sorted(root.rglob("*"))):
        if p.is_file():
            text = p.read_bytes().decode("utf-8", errors="replace")
            notes.append((f"n{i}", p.relative_to(root).as_posix(), "r1", text))
    for j in range(300):
        body = "\n".join(SENTENCES[(j + k) % len(SENTENCES)] for k in range(3))
        notes.append((f"m{j}", f"multilingual/m{j}.md", "r1", f"# 会议 {j}\n{body}\n"))
    return notes


def file_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def measure(module: ModuleType, notes: list[tuple[str, str, str, str]], work: Path,
            label: str) -> dict[str, Any]:
    path = work / f"{label}.search.sqlite"
    index = module.SearchIndex(path)
    started = time.perf_counter()
    for at in range(0, len(notes), 256):
        with index.batch():
            index.put_many(notes[at : at + 256])
    build_s = time.perf_counter() - started
    index.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = file_size(path)
    per_query: dict[str, tuple[float, int]] = {}
    all_ms: list[float] = []
    for q in QUERIES:
        times = []
        hits = 0
        for _ in range(25):
            t0 = time.perf_counter()
            try:
                hits = len(index.search(q, limit=20))
            except Exception:  # a query the version cannot read: not timed
                hits = -1
                break
            times.append((time.perf_counter() - t0) * 1000)
        if times:
            per_query[q] = (statistics.median(times), hits)
            all_ms += times
    index.close()
    all_ms.sort()
    return {"build_s": build_s, "size_mb": size / 1e6, "p50": statistics.median(all_ms),
            "p95": all_ms[int(len(all_ms) * 0.95)], "per_query": per_query}


def trigram(notes: list[tuple[str, str, str, str]], work: Path) -> tuple[float, float]:
    path = work / "trigram.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(path, content, tokenize='trigram')")
    started = time.perf_counter()
    for at in range(0, len(notes), 256):
        db.execute("BEGIN")
        db.executemany("INSERT INTO t (path, content) VALUES (?, ?)",
                       [(n[1], n[3]) for n in notes[at : at + 256]])
        db.execute("COMMIT")
    took = time.perf_counter() - started
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return took, file_size(path) / 1e6


def load_other(src: Path) -> ModuleType:
    """``src``'s sync/ as a package of its own name (its modules import each other relatively)."""
    pkg = "other_sync"
    sys.path.insert(0, str(src.parent))
    spec = importlib.util.spec_from_file_location(pkg, src / "__init__.py",
                                                  submodule_search_locations=[str(src)])
    assert spec is not None
    assert spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[pkg] = package
    spec.loader.exec_module(package)
    return importlib.import_module(f"{pkg}.search_index")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--main-src", type=Path, default=None)
    parser.add_argument("--trigram", action="store_true")
    args = parser.parse_args()
    from stet.sync import search_index

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        generate_vault(work / "vault", notes=args.notes, seed=1)
        notes = load_texts(work / "vault")
        text_mb = sum(len(n[3].encode()) for n in notes) / 1e6
        print(f"{len(notes)} notes, {text_mb:.1f} MB of text")
        versions = {"this branch": search_index}
        if args.main_src is not None:
            versions["main"] = load_other(args.main_src)
        results = {label: measure(mod, notes, work, label.replace(" ", "_"))
                   for label, mod in versions.items()}
        for label, r in results.items():
            print(f"{label}: build {r['build_s']:.1f} s, index {r['size_mb']:.1f} MB, "
                  f"search p50 {r['p50']:.2f} ms, p95 {r['p95']:.2f} ms (all queries, 25 runs each)")
        print(f"{'query':24} " + "  ".join(f"{label:>22}" for label in results))
        for q in QUERIES:
            cells = []
            for r in results.values():
                ms, hits = r["per_query"].get(q, (float("nan"), -1))
                cells.append(f"{ms:8.2f} ms {hits:3d} hits" if hits >= 0 else f"{'refused':>22}")
            print(f"{q:24} " + "  ".join(f"{c:>22}" for c in cells))
        if args.trigram:
            took, size = trigram(notes, work)
            print(f"trigram table alone (path, content): build {took:.1f} s, {size:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
