#!/usr/bin/env python3
"""Every SPEC §9 benchmark in one run, Stet beside Syncthing: bench/RESULTS.md becomes this run
(and bench/history/rounds.md gets it appended).

    python bench/run_all.py [--seed 1] [--notes 10000] [--p1-notes 1000] [--p3-runs 1]
        [--p2-appends 3000] [--stet-saves 200] [--st-saves-default 20] [--st-saves-fast 100]
        [--restarts 3] [--idle-seconds 60] [--subprocess] [--skip-stet] [--skip-syncthing]
        [--json FILE] [--no-write]

Phases, one after the other (never two workloads at once), each on its own temporary
directory, removed afterwards:

1. P3: `stet init` of the 10,000-note vault (``p3_init.run_init``), ``--p3-runs`` times.
   P2: agent appends over HTTP from 1 and 8 clients (``p2_appends.measure``).
2. Stet P1: two daemons, 1,000-note vault, ``--stet-saves`` editor-style saves A -> B
   (``p1_latency.run_direction``; set-up with ``peer_bench``).
3. Stet P4, P5, P6, P7 on the 10,000-note vault (``p5_restart.run_scenario``): first full
   sync to an empty peer, restarts with nothing changed, resident memory, idle CPU.
4. Syncthing (``syncthing_ref``; installed with apt-get if missing), two instances on
   loopback: P1 at its defaults (fsWatcherDelayS 10) and at fsWatcherDelayS 1, P4, P6, P7.

If a function of ``p1_latency.py`` / ``p2_appends.py`` / ``p5_restart.py`` is missing or its
signature changed (or with ``--subprocess``), the script falls back to running that script
as a subprocess with ``--no-write`` and parsing its printed table (and, for P4/P6/P7, to
its own two-daemon measurement). The section says which path each figure came from.

Ratios: Syncthing / Stet for latency and time (> 1: Stet is faster); Stet / Syncthing for
memory and CPU (< 1: Stet uses less).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from generate_vault import generate_vault, tree_digest  # noqa: E402
from machine_info import append_results, write_latest_run  # noqa: E402
from run_all_extra import stet_p8, stet_p9, stet_p10, stet_p11  # noqa: E402

MB = 1e6


@contextlib.contextmanager
def work_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def run_script(args: list[str], timeout: float) -> str:
    """Run a bench script (``--no-write`` added), return its stdout; raise on failure."""
    cmd = [sys.executable, str(BENCH_DIR / args[0]), *args[1:], "--no-write"]
    print(f"  subprocess: {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


# -- P3 -------------------------------------------------------------------------------------


def stet_p3(notes: int, seed: int, runs: int) -> dict[str, Any]:
    from p3_init import run_init

    with work_dir("stet-all-p3-") as work:
        vault = work / "vault"
        gen = generate_vault(vault, notes=notes, seed=seed)
        times, rss = [], 0
        for i in range(runs):
            home = work / f"home{i}"
            elapsed, rss, _out = run_init(vault, home)
            times.append(elapsed)
            print(f"  stet init run {i + 1}: {elapsed:.2f} s", flush=True)
            shutil.rmtree(home, ignore_errors=True)
    return {
        "times_s": times,
        "median_s": statistics.median(times),
        "peak_rss_kb": rss,
        "total_bytes": gen.total_bytes,
        "source": "p3_init.run_init",
    }


# -- P2 -------------------------------------------------------------------------------------


def _stet_p2_import(appends: int) -> dict[str, Any]:
    import p2_appends

    results = p2_appends.measure(appends, (1, 8))
    out: dict[str, Any] = {"source": "p2_appends.measure", "configs": {}}
    for r in results:
        out["configs"][r.clients] = {
            "appends": r.appends,
            "rate": r.rate,
            "p50_ms": r.pct(50),
            "p99_ms": r.pct(99),
            "verified": r.verified,
            # the clients run on the same 2 CPUs: their share is part of the figure (issue 18)
            "daemon_cpu_us": r.daemon_cpu_s / r.appends * 1e6,
            "client_cpu_us": r.client_cpu_s / r.appends * 1e6,
            "daemon_share": r.machine_share("daemon"),
            "client_share": r.machine_share("clients"),
        }
    return out


_P2_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*([\d,]+)\s*\|\s*([\d,.]+)[^|]*\|\s*([\d.]+)\s*\|\s*([\d.]+)", re.M)


def _stet_p2_subprocess(appends: int) -> dict[str, Any]:
    text = run_script(["p2_appends.py", "--appends", str(appends), "--clients", "1,8"], timeout=900)
    out: dict[str, Any] = {"source": "p2_appends.py (subprocess, parsed)", "configs": {}}
    for m in _P2_ROW.finditer(text):
        out["configs"][int(m.group(1))] = {
            "appends": int(_num(m.group(2))),
            "rate": _num(m.group(3)),
            "p50_ms": _num(m.group(4)),
            "p99_ms": _num(m.group(5)),
        }
    if not out["configs"]:
        raise RuntimeError("no result rows in p2_appends.py's output")
    return out


def stet_p2(appends: int, *, subprocess_only: bool = False) -> dict[str, Any]:
    if subprocess_only:
        return _stet_p2_subprocess(appends)
    return _with_fallback("Stet P2", lambda: _stet_p2_import(appends), lambda: _stet_p2_subprocess(appends))


# -- Stet P1 ----------------------------------------------------------------------------------


def _stet_p1_import(notes: int, seed: int, saves: int) -> dict[str, Any]:
    import p1_latency
    from peer_bench import Daemons, device_id, init_vault, linked, pair, wait_for, wait_synced

    run_direction = p1_latency.run_direction
    with work_dir("stet-all-p1-") as work, Daemons() as daemons:
        folder_a, folder_b = work / "a", work / "b"
        gen = generate_vault(folder_a, notes=notes, seed=seed)
        digest = tree_digest(folder_a)
        init_vault(work / "home-a", folder_a)
        a, _ = daemons.start(work / "home-a")
        b, _ = daemons.start(work / "home-b")
        t = time.perf_counter()
        pair(a, b, folder_b)
        wait_synced(b, folder_b, notes, digest, timeout=300)
        first_sync = time.perf_counter() - t
        dev_a, dev_b = device_id(a), device_id(b)
        wait_for(lambda: linked(a, dev_b) and linked(b, dev_a), timeout=30, what="the link")
        lat, warm, lost, attempted = run_direction(
            folder_a,
            folder_b,
            list(gen.paths),
            count=saves,
            warmup=5,
            gap_s=0.05,
            timeout_s=5.0,
            max_seconds=150.0,
            rng=random.Random(f"p1-latency-{seed}"),
            label="A->B",
        )
        identical = tree_digest(folder_a) == tree_digest(folder_b)
    out: dict[str, Any] = {
        "source": "p1_latency.run_direction",
        "measured": len(lat),
        "lost": lost,
        "attempted": attempted,
        "warmup_s": warm,
        "first_sync_s": first_sync,
        "identical_after": identical,
    }
    if lat:
        out |= {
            "p50_s": pct(lat, 50),
            "p95_s": pct(lat, 95),
            "p99_s": pct(lat, 99),
            "max_s": max(lat),
            "mean_s": statistics.fmean(lat),
        }
    return out


_P1_ROW = re.compile(
    r"\|\s*Stet A -> B\s*\|\s*(\d+) \(\+(\d+) lost of (\d+)\)\s*\|\s*([\d.,]+)\s*\|\s*"
    r"([\d.,]+)\s*\|\s*([\d.,]+)\s*\|\s*([\d.,]+)\s*\|\s*([\d.,]+)\s*\|"
)


def _stet_p1_subprocess(notes: int, seed: int, saves: int) -> dict[str, Any]:
    text = run_script(
        [
            "p1_latency.py",
            "--notes",
            str(notes),
            "--seed",
            str(seed),
            "--saves",
            str(saves),
            "--reverse-saves",
            "0",
        ],
        timeout=900,
    )
    m = _P1_ROW.search(text)
    if not m:
        raise RuntimeError("no 'Stet A -> B' row in p1_latency.py's output")
    n, lost, att, p50, p95, p99, mx, mean = m.groups()
    return {
        "source": "p1_latency.py (subprocess, parsed)",
        "measured": int(n),
        "lost": int(lost),
        "attempted": int(att),
        "p50_s": _num(p50) / 1000,
        "p95_s": _num(p95) / 1000,
        "p99_s": _num(p99) / 1000,
        "max_s": _num(mx) / 1000,
        "mean_s": _num(mean) / 1000,
    }


def stet_p1(notes: int, seed: int, saves: int, *, subprocess_only: bool = False) -> dict[str, Any]:
    if subprocess_only:
        return _stet_p1_subprocess(notes, seed, saves)
    return _with_fallback(
        "Stet P1",
        lambda: _stet_p1_import(notes, seed, saves),
        lambda: _stet_p1_subprocess(notes, seed, saves),
    )


# -- Stet P4, P5, P6, P7 ------------------------------------------------------------------------


def _stet_p5_import(notes: int, seed: int, restarts: int, idle_seconds: float) -> dict[str, Any]:
    import p5_restart

    with work_dir(f"stet-all-p5-{notes}-") as work:
        sc = p5_restart.run_scenario(work, notes, seed, restarts, idle_seconds)
    rs = list(getattr(sc, "restarts", []))
    out: dict[str, Any] = {
        "source": "p5_restart.run_scenario",
        "init_s": getattr(sc, "init_s", None),
        "first_sync_s": sc.first_sync_s,
        "first_sync_wire": getattr(sc, "first_sync_wire", None),
        "rss": {k: {"rss": v[0], "hwm": v[1]} for k, v in getattr(sc, "rss", {}).items()},
        "idle_s": getattr(sc, "idle_s", 0.0),
        "idle_cpu": dict(getattr(sc, "idle_cpu", {})),
        "intact_after": getattr(sc, "intact_after", None),
    }
    if rs:
        out |= {
            "restarts": len(rs),
            "ready_s": statistics.median(r.ready_s for r in rs),
            "sync_after_ready_s": statistics.median(r.sync_after_ready_s for r in rs),
            "wire_bytes": statistics.median(r.wire for r in rs),
        }
    with contextlib.suppress(Exception):
        out["report"] = p5_restart.report([sc], seed, idle_seconds)
    return out


def _stet_own_big(notes: int, seed: int, idle_seconds: float) -> dict[str, Any]:
    """P4 (+ P7, P6) measured here, when p5_restart's function is not usable: two daemons,
    `stet init` on A, `stet invite` on A / `stet join` on B (B's folder empty), time until B's
    folder is byte-identical."""
    from peer_bench import (
        Daemons,
        cpu_seconds,
        device_id,
        init_vault,
        linked,
        pair,
        rss_bytes,
        wait_for,
        wait_synced,
    )

    out: dict[str, Any] = {"source": "run_all.py's own two-daemon P4/P6/P7"}
    with work_dir(f"stet-all-p4-{notes}-") as work, Daemons() as daemons:
        folder_a, folder_b = work / "a", work / "b"
        generate_vault(folder_a, notes=notes, seed=seed)
        digest = tree_digest(folder_a)
        out["init_s"] = init_vault(work / "home-a", folder_a)
        a, _ = daemons.start(work / "home-a")
        b, _ = daemons.start(work / "home-b")
        t = time.perf_counter()
        pair(a, b, folder_b)
        wait_synced(b, folder_b, notes, digest, timeout=900)
        out["first_sync_s"] = time.perf_counter() - t
        dev_a, dev_b = device_id(a), device_id(b)
        wait_for(lambda: linked(a, dev_b) and linked(b, dev_a), timeout=60, what="the link")
        time.sleep(2)
        out["rss"] = {
            f"{k} after first sync": dict(zip(("rss", "hwm"), rss_bytes(d.proc.pid), strict=True))
            for k, d in (("A", a), ("B", b))
        }
        if idle_seconds > 0:
            c0 = {"A": cpu_seconds(a.proc.pid), "B": cpu_seconds(b.proc.pid)}
            t0 = time.perf_counter()
            time.sleep(idle_seconds)
            out["idle_s"] = time.perf_counter() - t0
            out["idle_cpu"] = {"A": cpu_seconds(a.proc.pid) - c0["A"], "B": cpu_seconds(b.proc.pid) - c0["B"]}
        out["intact_after"] = tree_digest(folder_b) == digest
    return out


_P5_READY = re.compile(r"\|\s*P5\s*\|\s*B spawn -> ready[^|]*\|\s*([\d.]+) s")
_P5_SYNC = re.compile(r"\|\s*P5\s*\|\s*reconnect sync[^|]*\|\s*([\d.]+) s")
_P5_WIRE = re.compile(r"\|\s*P5\s*\|\s*reconnect bytes[^|]*\|[^|(]*\(([\d,]+) B\)")


def _stet_p5_subprocess(notes: int, seed: int, restarts: int, idle_seconds: float) -> dict[str, Any]:
    """P4/P6/P7 measured here; P5 from `p5_restart.py` run as a subprocess, parsed."""
    out = _stet_own_big(notes, seed, idle_seconds)
    try:
        text = run_script(
            [
                "p5_restart.py",
                "--notes",
                str(notes),
                "--small-notes",
                "0",
                "--seed",
                str(seed),
                "--restarts",
                str(restarts),
                "--idle-seconds",
                "0",
            ],
            timeout=1800,
        )
        for key, rx in (("ready_s", _P5_READY), ("sync_after_ready_s", _P5_SYNC), ("wire_bytes", _P5_WIRE)):
            m = rx.search(text)
            if m:
                out[key] = _num(m.group(1))
        out["restarts"] = restarts
        out["p5_source"] = "p5_restart.py (subprocess, parsed)"
    except Exception as exc:  # P5's own script missing or failing: say so, keep the rest
        out["p5_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def stet_big(
    notes: int, seed: int, restarts: int, idle_seconds: float, *, subprocess_only: bool = False
) -> dict[str, Any]:
    if subprocess_only:
        return _stet_p5_subprocess(notes, seed, restarts, idle_seconds)
    return _with_fallback(
        "Stet P4-P7",
        lambda: _stet_p5_import(notes, seed, restarts, idle_seconds),
        lambda: _stet_p5_subprocess(notes, seed, restarts, idle_seconds),
    )


def _with_fallback(
    what: str, primary: Callable[[], dict[str, Any]], fallback: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    try:
        return primary()
    except (ImportError, AttributeError, TypeError) as exc:  # the other script's API moved
        print(f"  {what}: import path failed ({type(exc).__name__}: {exc}); falling back", flush=True)
        traceback.print_exc()
        res = fallback()
        res["import_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return res


# -- the section --------------------------------------------------------------------------------


def _ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1000:,.1f} ms" if s < 1 else f"{s:,.2f} s"


def _ratio(num: float | None, den: float | None, digits: int = 1) -> str:
    if not num or not den:
        return "n/a"
    r = num / den
    return f"{r:,.{digits}f}x" if r >= 0.1 else f"{r:.3f}x"


def _ok(cond: bool | None) -> str:
    return "n/a" if cond is None else ("met" if cond else "MISSED")


def _verdict(*checks: bool | None) -> str:
    """met / MISSED over every check; n/a when any could not be judged."""
    if any(c is None for c in checks):
        return "n/a"
    return "met" if all(checks) else "MISSED"


def summary_rows(r: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, ...]]:
    """(id, target, Stet, Syncthing, ratio, verdict) for every SPEC §9 target."""
    from run_all_extra import rows_p8, rows_p9, rows_p10, rows_p11

    p3, sp1, big = r.get("p3"), r.get("stet_p1"), r.get("stet_big")
    ref = r.get("syncthing") or {}
    st_p1, st_big = ref.get("p1") or {}, ref.get("big") or {}
    st_def, st_fast = st_p1.get("default") or {}, st_p1.get("fast") or {}
    rows: list[tuple[str, ...]] = []
    why = _why_not(r)

    # P1
    if sp1 and sp1.get("p50_s") is not None:
        s50, s99 = sp1["p50_s"], sp1["p99_s"]
        fast_enough = None if not st_def.get("p50_s") else st_def["p50_s"] / s50 >= 100
        rows.append((
            "P1 p50", "<= 30 ms; >= 100x faster than Syncthing at its defaults", _ms(s50),
            f"defaults: {_ms(st_def.get('p50_s'))}; delay 1 s: {_ms(st_fast.get('p50_s'))}",
            f"defaults: {_ratio(st_def.get('p50_s'), s50, 0)}; "
            f"delay 1 s: {_ratio(st_fast.get('p50_s'), s50, 0)}",
            _verdict(s50 <= 0.030, fast_enough),
        ))
        rows.append((
            "P1 p99", "<= 150 ms", _ms(s99),
            f"defaults: {_ms(st_def.get('p99_s'))}; delay 1 s: {_ms(st_fast.get('p99_s'))}",
            f"defaults: {_ratio(st_def.get('p99_s'), s99, 0)}; "
            f"delay 1 s: {_ratio(st_fast.get('p99_s'), s99, 0)}",
            _verdict(s99 <= 0.150),
        ))
    else:
        rows.append(("P1", "p50 <= 30 ms, p99 <= 150 ms, >= 100x Syncthing",
                     f"not measured ({why('stet_p1')})",
                     f"defaults: {_ms(st_def.get('p50_s'))} p50", "n/a", "n/a"))
    # P2
    p2 = r.get("stet_p2") or {}
    for clients, target in ((1, 1000), (8, 2000)):
        c = (p2.get("configs") or {}).get(clients)
        name = f"P2 {clients} client{'s' if clients > 1 else ''}"
        if c:
            cpu = ""
            if "daemon_cpu_us" in c:
                daemon_pct, client_pct = 100 * c["daemon_share"], 100 * c["client_share"]
                cpu = (f"; CPU per append: daemon {c['daemon_cpu_us']:.0f} us ({daemon_pct:.0f} % of the "
                       f"machine), clients {c['client_cpu_us']:.0f} us ({client_pct:.0f} %)")
            rows.append((name, f">= {target:,}/s, p99 <= 10 ms",
                         f"{c['rate']:,.0f}/s, p50 {c['p50_ms']:.2f} ms, p99 {c['p99_ms']:.2f} ms{cpu}",
                         "no equivalent", "n/a", _verdict(c["rate"] >= target, c["p99_ms"] <= 10)))
        else:
            rows.append((name, f">= {target:,}/s, p99 <= 10 ms", f"not measured ({why('stet_p2')})",
                         "no equivalent", "n/a", "n/a"))
    # P3
    p3_s = (p3 or {}).get("median_s")
    if p3_s is not None:
        scan = st_big.get("scan_s")
        ref_txt = "no equivalent" + (
            f" (its start + initial scan of the same vault: {scan:.1f} s)" if scan else "")
        rows.append(("P3", f"`stet init` of {args.notes:,} notes <= 20 s",
                     f"{p3_s:.2f} s, median of {len(p3['times_s'])}", ref_txt, "n/a",  # type: ignore[index]
                     _verdict(p3_s <= 20)))
    else:
        rows.append(("P3", f"`stet init` of {args.notes:,} notes <= 20 s", f"not measured ({why('p3')})",
                     "no equivalent", "n/a", "n/a"))
    # P4 (SPEC §9 as amended: <= half of Syncthing's time and <= 2x P3)
    s4 = (big or {}).get("first_sync_s")
    t4 = (st_big.get("first_sync") or {}).get("first_sync_s")
    init_s = p3_s if p3_s is not None else (big or {}).get("init_s")
    rows.append((
        "P4", f"first full sync of {args.notes:,} notes to an empty peer <= half of Syncthing's, <= 2x P3",
        "not measured" if s4 is None else f"{s4:.1f} s" + (f" ({s4 / init_s:.1f}x P3)" if init_s else ""),
        "not run" if t4 is None else f"{t4:.1f} s", _ratio(t4, s4, 2),
        _verdict(None if not (s4 and t4) else s4 <= t4 / 2,
                 None if not (s4 and init_s) else s4 <= 2 * init_s),
    ))
    # P5
    if big and big.get("ready_s") is not None:
        rows.append(("P5 ready", "<= 3 s", f"{big['ready_s']:.2f} s (median of {big.get('restarts')})",
                     "not measured", "n/a", _verdict(big["ready_s"] <= 3)))
    if big and big.get("sync_after_ready_s") is not None:
        rows.append(("P5 reconnect", "<= 1 s", f"{big['sync_after_ready_s']:.2f} s", "not measured", "n/a",
                     _verdict(big["sync_after_ready_s"] <= 1)))
    if big and big.get("wire_bytes") is not None:
        rows.append(("P5 wire", "<= 200 KB", f"{big['wire_bytes'] / 1000:,.1f} KB", "not measured", "n/a",
                     _verdict(big["wire_bytes"] <= 200_000)))
    if not big or big.get("ready_s") is None:
        rows.append(("P5", "ready <= 3 s; reconnect <= 1 s, <= 200 KB",
                     f"not measured ({(big or {}).get('p5_error') or why('stet_big')})", "not measured",
                     "n/a", "n/a"))
    # P6
    st_idle = st_big.get("idle") or {}
    if big and big.get("idle_cpu") and big.get("idle_s"):
        scale = 600 / big["idle_s"]
        per = {k: v * scale for k, v in big["idle_cpu"].items()}
        stet_total = sum(per.values())
        st_total = st_idle.get("total_per_10min")
        st_per = st_idle.get("per_10min") or {}
        rows.append((
            "P6", "idle <= 1 CPU-s / 10 min (per daemon)",
            f"{', '.join(f'{k} {v:.2f}' for k, v in per.items())} CPU-s / 10 min; A+B {stet_total:.2f}",
            f"{', '.join(f'{k} {v:.2f}' for k, v in st_per.items()) or 'n/a'}; all {st_total or 0:.2f}",
            f"{_ratio(stet_total, st_total, 2)} (A+B vs all)", _verdict(max(per.values()) <= 1),
        ))
    else:
        rows.append(("P6", "idle <= 1 CPU-s / 10 min", f"not measured ({why('stet_big')})",
                     f"{st_idle.get('total_per_10min', 'n/a')}", "n/a", "n/a"))
    # P7
    st_rss = st_big.get("rss") or {}
    if big and big.get("rss"):
        stet_a = next((v["rss"] for k, v in big["rss"].items() if k.startswith("A")), None)
        stet_b = next((v["rss"] for k, v in big["rss"].items() if k.startswith("B")), None)
        stet_max = max(v["rss"] for v in big["rss"].values())
        st_a, st_b = (st_rss.get("A") or {}).get("rss"), (st_rss.get("B") or {}).get("rss")
        st_idle_rss = st_big.get("rss_after_idle") or {}
        st_main = [v["rss"] for d in (st_rss, st_idle_rss) for k, v in d.items() if k in ("A", "B")]
        st_main_max = max(st_main, default=None)
        mon = sum(v["rss"] for k, v in st_rss.items() if "monitor" in k)
        st_txt = (
            "not run"
            if not st_main_max
            else f"A {(st_a or 0) / MB:.0f} MB, B {(st_b or 0) / MB:.0f} MB after the sync "
            f"(max of all samples {st_main_max / MB:.0f} MB; + {mon / MB:.0f} MB in the 2 monitor processes)"
        )
        rows.append((
            "P7", "<= 250 MB and below Syncthing",
            f"A {(stet_a or 0) / MB:.0f} MB, B {(stet_b or 0) / MB:.0f} MB after the first sync "
            f"(max of all samples {stet_max / MB:.0f} MB)",
            st_txt, f"{_ratio(stet_max, st_main_max, 2)} (max vs max, monitors left out)",
            _verdict(stet_max <= 250 * MB, None if not st_main_max else stet_max < st_main_max),
        ))
    else:
        rows.append(("P7", "<= 250 MB and below Syncthing", f"not measured ({why('stet_big')})", "n/a", "n/a",
                     "n/a"))
    rows += rows_p8(r.get("p8"))
    rows += rows_p9(r.get("p9"))
    rows += rows_p10(r.get("p10"))
    rows += rows_p11(r.get("p11"))
    return rows


def _why_not(r: dict[str, Any]) -> Callable[[str], str]:
    def why(key: str) -> str:
        v = r.get(key)
        if v is None:
            return "not selected (--only)" if r.get("only") else "skipped"
        return str(v.get("error") or "see below")

    return why


def build_section(r: dict[str, Any], args: argparse.Namespace) -> str:
    sp1, big = r.get("stet_p1"), r.get("stet_big")
    ref = r.get("syncthing") or {}
    st_p1, st_big = ref.get("p1") or {}, ref.get("big") or {}
    st_def, st_fast = st_p1.get("default") or {}, st_p1.get("fast") or {}
    st_idle = st_big.get("idle") or {}
    shown = set(r.get("only") or ALL_IDS) | ({"P3"} if "P4" in (r.get("only") or ()) else set())
    rows = [f"| {' | '.join(row)} |" for row in summary_rows(r, args) if row[0].split()[0] in shown]
    verdicts = [row.rsplit("|", 2)[-2].strip() for row in rows]

    loads = "; ".join(
        f"{k} {v['seconds']:.0f} s (load {v['load_before']} -> {v['load_after']})"
        for k, v in r["phases"].items()
    )
    lines = [
        f"Seed {args.seed}; P1 on {args.p1_notes:,} notes, everything else on {args.notes:,} notes "
        "(`generate_vault.py`). Stet: real daemons on temporary homes, loopback, no mDNS. Syncthing: "
        f"{ref.get('version', 'not run')}, two instances on loopback (see `syncthing_ref.py`). "
        "Phases ran one after the other, never overlapping. Ratio = Syncthing / Stet for latency and time "
        "(> 1: Stet faster); Stet / Syncthing for memory and CPU (< 1: Stet uses less).\n",
        f"Selected: {', '.join(r['only']) if r.get('only') else 'all of P1-P11'}.\n",
        "| id | target (SPEC §9) | Stet | Syncthing | ratio | verdict |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"Verdicts: {verdicts.count('met')} met, {verdicts.count('MISSED')} MISSED, "
        f"{verdicts.count('n/a')} not judged (not run, or no figure to compare).\n",
        f"Phases (wall time, 1-/5-min load average before -> after; the machine has {os.cpu_count()} CPUs): "
        f"{loads}.\n",
    ]
    notes = []
    if sp1:
        notes.append(
            f"Stet P1 ({sp1.get('source')}): {sp1.get('measured')} saves measured (+{sp1.get('lost')} "
            f"lost of {sp1.get('attempted')}) after 5 warm-up saves, p95 {_ms(sp1.get('p95_s'))}, "
            f"max {_ms(sp1.get('max_s'))}, mean {_ms(sp1.get('mean_s'))}."
        )
    if st_def or st_fast:
        notes.append(
            f"Syncthing P1: {st_def.get('measured', 0)} saves at its defaults (fsWatcherDelayS "
            f"{st_def.get('watcher_delay_s', '?')}; timeout "
            f"{max(30, 6 * int(st_def.get('watcher_delay_s') or 5))} s "
            f"each, time-capped) and {st_fast.get('measured', 0)} at fsWatcherDelayS 1 (its minimum), "
            "the same "
            "editor-style saves on the same kind of vault; with so few saves at the defaults, p99 is the "
            "largest but one or the largest sample. Stet's and Syncthing's P1 share the method "
            "(rename on A -> bytes read on B, inotify-woken)."
        )
    if st_big:
        notes.append(
            f"Syncthing P4 clock: A had scanned the vault ({st_big.get('scan_s', 0):.1f} s from its start), "
            "B was running with A paused and an empty folder; from B un-pausing A (REST PATCH) to B's folder "
            "byte-identical (count, then tree digest). Stet's P4 clock: from `stet invite` on A (B's "
            "daemon already running) to B's folder byte-identical. Syncthing's P6 counts the real syncthing "
            "processes and their monitors over "
            f"{st_idle.get('seconds', 0):.0f} s after the sync had settled, extrapolated to 10 minutes "
            "(its hourly full rescan does not fall in the window); Stet's P6 is "
            f"{(big or {}).get('idle_s', 0):.0f} s extrapolated likewise."
        )
        notes.append(
            f"Loopback: P1 pair: {st_p1.get('loopback', 'n/a')}; {args.notes:,}-note pair: "
            f"{st_big.get('loopback')}."
        )
    for key in ("stet_p1", "stet_big"):
        err = (r.get(key) or {}).get("import_error")
        if err:
            notes.append(
                f"{key}: the import path failed ({err}); figures came from the fallback "
                f"({r[key].get('source')})."
            )
    for key, v in r.items():
        if isinstance(v, dict) and v.get("error"):
            notes.append(f"{key} FAILED: {v['error']}")
    lines += [f"- {n}" for n in notes]
    if big and big.get("report"):
        detail = [
            ln
            for ln in big["report"].strip().splitlines()
            if not ln.startswith("Syncthing is not run by this benchmark")
        ]
        lines += ["", "### Stet P5 / P6 / P7 detail (p5_restart.report)", "", *detail]
    for key, title in (("p8", "P8 detail (p8_bulk.py)"), ("p9", "P9 detail (p9_attachments.py)"),
                       ("p10", "P10 detail (p10_cli.py)"), ("p11", "P11 detail (p11_live.py)")):
        text = (r.get(key) or {}).get("detail")
        if text:
            lines += ["", f"### {title}", "", str(text)]
    if ref:
        from syncthing_ref import report as st_report

        lines += ["", "### Syncthing detail", "", st_report(ref).strip()]
    return "\n".join(lines) + "\n"


ALL_IDS = tuple(f"P{i}" for i in range(1, 12))


def _id_order(i: str) -> int:
    return int(i[1:])


def _only(text: str) -> set[str]:
    ids = {part.strip().upper() for part in text.split(",") if part.strip()}
    bad = sorted(ids - set(ALL_IDS))
    if bad or not ids:
        raise argparse.ArgumentTypeError(f"unknown target(s) {', '.join(bad) or '(none)'}: use P1..P11")
    return ids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--notes", type=int, default=10_000, help="vault for P3-P7")
    ap.add_argument("--p1-notes", type=int, default=1000, help="vault for P1")
    ap.add_argument("--p3-runs", type=int, default=1)
    ap.add_argument("--p2-appends", type=int, default=3000, help="P2 measured appends per client count")
    ap.add_argument("--stet-saves", type=int, default=200, help="Stet P1 saves A -> B")
    ap.add_argument("--st-saves-default", type=int, default=20, help="Syncthing P1 saves at its defaults")
    ap.add_argument("--st-saves-fast", type=int, default=100, help="Syncthing P1 saves at fsWatcherDelayS 1")
    ap.add_argument("--restarts", type=int, default=3, help="Stet P5 restarts")
    ap.add_argument("--idle-seconds", type=float, default=60.0, help="P6 window, both products")
    ap.add_argument(
        "--subprocess",
        action="store_true",
        help="run p1_latency.py / p5_restart.py as subprocesses (parsed) instead of importing them",
    )
    ap.add_argument("--p8-notes", type=int, default=10_000, help="P8: notes unzipped into a running daemon")
    ap.add_argument("--p8-changed", type=int, default=2_000, help="P8: notes changed by the git checkout")
    ap.add_argument("--p9-args", default="", help="P9: extra arguments for bench/p9_attachments.py")
    ap.add_argument("--p10-runs", type=int, default=20, help="P10: runs of each CLI command")
    ap.add_argument("--p11-keystrokes", type=int, default=500, help="P11: keystrokes typed on A")
    ap.add_argument("--p11-clients", type=int, default=50, help="P11: clients on one note (fan-out)")
    ap.add_argument("--p11-fanout-keystrokes", type=int, default=200, help="P11: keystrokes in the fan-out")
    ap.add_argument(
        "--only",
        type=_only,
        default=None,
        help="run a subset, e.g. P1,P7,P11 (Syncthing runs where the subset has an equivalent: "
        "P1, P4, P6, P7)",
    )
    ap.add_argument("--skip-stet", action="store_true")
    ap.add_argument("--skip-syncthing", action="store_true")
    ap.add_argument("--json", type=Path, help="also write every raw figure to this JSON file")
    ap.add_argument("--no-write", action="store_true", help="write neither bench/RESULTS.md nor the history")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))

    results: dict[str, Any] = {"phases": {}, "only": sorted(args.only, key=_id_order) if args.only else None}
    started = time.perf_counter()

    def wanted(*ids: str) -> bool:
        return args.only is None or any(i in args.only for i in ids)

    def phase(key: str, title: str, fn: Callable[[], dict[str, Any]]) -> None:
        print(f"== {title} (load {load()})", flush=True)
        before, t0 = load(), time.perf_counter()
        try:
            results[key] = fn()
        except Exception as exc:  # one phase failing must not lose the others' figures
            traceback.print_exc()
            results[key] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        results["phases"][key] = {
            "seconds": time.perf_counter() - t0,
            "load_before": before,
            "load_after": load(),
        }

    if not args.skip_stet:
        if wanted("P3", "P4"):  # P4's target is also <= 2x P3
            phase("p3", f"P3 stet init, {args.notes:,} notes",
                  lambda: stet_p3(args.notes, args.seed, args.p3_runs))
        if wanted("P2"):
            phase("stet_p2", "P2 agent appends",
                  lambda: stet_p2(args.p2_appends, subprocess_only=args.subprocess))
        if wanted("P1"):
            phase(
                "stet_p1",
                f"Stet P1, {args.p1_notes:,} notes",
                lambda: stet_p1(args.p1_notes, args.seed, args.stet_saves, subprocess_only=args.subprocess),
            )
        if wanted("P4", "P5", "P6", "P7"):
            phase(
                "stet_big",
                f"Stet P4-P7, {args.notes:,} notes",
                lambda: stet_big(
                    args.notes, args.seed, args.restarts, args.idle_seconds, subprocess_only=args.subprocess
                ),
            )
        if wanted("P8"):
            phase("p8", f"P8 bulk intake, {args.p8_notes:,} notes",
                  lambda: stet_p8(args.p8_notes, args.seed, args.p8_changed))
        if wanted("P9"):
            phase("p9", "P9 attachments", lambda: stet_p9(args.p9_args.split()))
        if wanted("P10"):
            phase("p10", "P10 CLI start", lambda: stet_p10(args.p10_runs))
        if wanted("P11"):
            phase("p11", "P11 live editing",
                  lambda: stet_p11(args.p11_keystrokes, args.p11_clients, args.p11_fanout_keystrokes))
    if not args.skip_syncthing and wanted("P1", "P4", "P6", "P7"):
        from syncthing_ref import run_reference

        phase(
            "syncthing",
            "Syncthing " + ", ".join(i for i in ("P1", "P4", "P6", "P7") if wanted(i)),
            lambda: run_reference(
                small_notes=args.p1_notes if wanted("P1") else 0,
                notes=args.notes if wanted("P4", "P6", "P7") else 0,
                seed=args.seed,
                saves_default=args.st_saves_default,
                saves_fast=args.st_saves_fast,
                idle_seconds=args.idle_seconds,
            ),
        )
    results["elapsed_s"] = time.perf_counter() - started
    section = build_section(results, args)
    section += f"\nTotal run time {results['elapsed_s'] / 60:.1f} min.\n"
    print(section)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    if not args.no_write:
        append_results(section, title="All of SPEC §9, Stet beside Syncthing")
        write_latest_run(section, title="All of SPEC §9, Stet beside Syncthing")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
