"""P8, P9, P10, P11 for `run_all.py`: each benchmark script run as a subprocess with
``--no-write`` (each starts its own daemons and cleans up after itself), its printed
section kept verbatim for the detail, its key figures parsed for the summary table.

P9 (`bench/p9_attachments.py`) is run when the file is
present, else the table says "not run". Its figures are taken from table rows whose first
cell starts with "P9" (``| P9 ... | target | Stet | Syncthing | ratio | verdict |``) when it
prints such rows; otherwise its output is kept as the detail only.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent


def run_bench(script: str, args: list[str], timeout: float) -> str:
    """stdout of ``python bench/SCRIPT ARGS --no-write``; raises on a non-zero exit."""
    cmd = [sys.executable, str(BENCH_DIR / script), *args, "--no-write"]
    print(f"  subprocess: {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{script} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}")
    return proc.stdout


def section_of(text: str, first_words: str) -> str:
    """The printed section: from the line starting with ``first_words`` to the end."""
    at = text.find(first_words)
    return text[at:].strip() if at >= 0 else text.strip()


def _f(s: str) -> float:
    return float(s.replace(",", ""))


# -- P8 ------------------------------------------------------------------------------------------

_P8_ROW = re.compile(r"^\| ([^|]+?) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", re.M)
_P8_INGEST = re.compile(r"all ([\d,]+) notes on A after ([\d.]+) s; B byte-identical after ([\d.]+) s\. "
                        r"`stet init` of the same notes \(P3\): ([\d.]+) s")


def parse_p8(text: str) -> dict[str, Any]:
    rows = {m.group(1): {"answers": int(m.group(2)), "p50_ms": _f(m.group(3)), "p99_ms": _f(m.group(4)),
                         "worst_ms": _f(m.group(5))} for m in _P8_ROW.finditer(text)}
    if not rows:
        raise RuntimeError("no latency rows in p8_bulk.py's output")
    out: dict[str, Any] = {"rows": rows}
    m = _P8_INGEST.search(text)
    if m:
        out |= {"on_a_s": _f(m.group(2)), "on_b_s": _f(m.group(3)), "init_s": _f(m.group(4))}
    return out


def stet_p8(notes: int, seed: int, changed: int) -> dict[str, Any]:
    text = run_bench("p8_bulk.py", ["--notes", str(notes), "--changed", str(changed), "--seed", str(seed)],
                     timeout=3600)
    return parse_p8(text) | {"source": "p8_bulk.py (subprocess)",
                             "detail": section_of(text, "P8 bulk intake:")}


# -- P9 ------------------------------------------------------------------------------------------

_P9_ROW = re.compile(r"^\|\s*(P9[^|]*?)\s*\|([^\n]*)\|\s*$", re.M)


def parse_p9(text: str) -> dict[str, Any]:
    rows = []
    for m in _P9_ROW.finditer(text):
        cells = [c.strip() for c in m.group(2).split("|")]
        if len(cells) >= 5:
            rows.append([m.group(1), *cells[:5]])
    return {"rows": rows}


def stet_p9(args: list[str]) -> dict[str, Any]:
    script = BENCH_DIR / "p9_attachments.py"
    if not script.is_file():
        return {"not_run": "bench/p9_attachments.py is not on this branch (issue 14 writes it)"}
    text = run_bench(script.name, args, timeout=3600)
    return parse_p9(text) | {"source": "p9_attachments.py (subprocess)", "detail": text.strip()}


# -- P10 -----------------------------------------------------------------------------------------

_P10_ROW = re.compile(r"^\| `([^`]+)`[^|]* \| ([\d.]+) ms \| ([\d.]+) ms \|", re.M)


def parse_p10(text: str) -> dict[str, Any]:
    rows = {m.group(1): {"median_ms": _f(m.group(2)), "p90_ms": _f(m.group(3))}
            for m in _P10_ROW.finditer(text)}
    read = next((v for k, v in rows.items() if k.startswith("stet read")), None)
    status = rows.get("stet status")
    if read is None or status is None:
        raise RuntimeError("no `stet read` / `stet status` rows in p10_cli.py's output")
    return {"rows": rows, "read_ms": read["median_ms"], "status_ms": status["median_ms"]}


def stet_p10(runs: int) -> dict[str, Any]:
    text = run_bench("p10_cli.py", ["--runs", str(runs)], timeout=1800)
    return parse_p10(text) | {"source": "p10_cli.py (subprocess)", "detail": section_of(text, "Each command")}


# -- P11 -----------------------------------------------------------------------------------------

_P11_ROW = re.compile(r"^\| ([^|]+?) \| (\d+) \(\+(\d+) lost of (\d+)\) \| ([\d.]+) \| ([\d.]+) \| "
                      r"([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", re.M)


def parse_p11(text: str) -> dict[str, Any]:
    rows = {m.group(1): {"measured": int(m.group(2)), "lost": int(m.group(3)), "p50_ms": _f(m.group(5)),
                         "p99_ms": _f(m.group(7)), "max_ms": _f(m.group(8))} for m in _P11_ROW.finditer(text)}
    key = rows.get("keystroke on A -> bytes on B")
    if key is None:
        raise RuntimeError("no 'keystroke on A -> bytes on B' row in p11_live.py's output")
    return {"rows": rows, "p50_ms": key["p50_ms"], "p99_ms": key["p99_ms"], "lost": key["lost"]}


def stet_p11(keystrokes: int, clients: int, fanout_keystrokes: int) -> dict[str, Any]:
    text = run_bench("p11_live.py", ["--keystrokes", str(keystrokes), "--clients", str(clients),
                                     "--fanout-keystrokes", str(fanout_keystrokes)], timeout=1800)
    return parse_p11(text) | {"source": "p11_live.py (subprocess)", "detail": section_of(text, "P11 live")}


# -- summary rows: (id, target, Stet, Syncthing, ratio, verdict) --------------------------------


def _verdict(*checks: bool) -> str:
    return "met" if all(checks) else "MISSED"


def rows_p8(r: dict[str, Any] | None) -> list[tuple[str, ...]]:
    target = "API p99 <= 100 ms, worst <= 500 ms throughout; ingested <= 2x P3; on the peer too"
    if not r or r.get("error") or not r.get("rows"):
        return [("P8", target, f"not measured ({(r or {}).get('error', 'not selected')})", "no equivalent",
                 "n/a", "n/a")]
    worst_p99 = max(v["p99_ms"] for v in r["rows"].values())
    worst = max(v["worst_ms"] for v in r["rows"].values())
    ratio = r["on_a_s"] / r["init_s"] if r.get("init_s") else None
    stet = (f"API p99 {worst_p99:,.0f} ms, worst {worst:,.0f} ms (all phases, both daemons); "
            + (f"on A after {r['on_a_s']:.1f} s = {ratio:.1f}x P3 ({r['init_s']:.1f} s), "
               f"B identical after {r['on_b_s']:.1f} s" if ratio is not None else "ingest time not parsed"))
    return [("P8", target, stet, "no equivalent", "n/a",
             _verdict(worst_p99 <= 100, worst <= 500, ratio is not None and ratio <= 2))]


def rows_p9(r: dict[str, Any] | None) -> list[tuple[str, ...]]:
    target = "first sync of 1 GB (200 x 5 MB) and of one 1 GB file <= Syncthing; RSS grows <= 50 MB"
    if not r or r.get("not_run") or r.get("error"):
        why = (r or {}).get("not_run") or (r or {}).get("error") or "not selected"
        return [("P9", target, f"not run ({why})", "not run", "n/a", "n/a")]
    if r.get("rows"):
        return [tuple(row) for row in r["rows"]]
    return [("P9", target, "see the P9 detail below", "see the P9 detail below", "n/a", "see detail")]


def rows_p10(r: dict[str, Any] | None) -> list[tuple[str, ...]]:
    target = "<= 150 ms wall each"
    if not r or r.get("error"):
        return [("P10", f"`stet read`, `stet status` {target}",
                 f"not measured ({(r or {}).get('error', 'not selected')})", "no equivalent", "n/a", "n/a")]
    return [
        ("P10 read", f"`stet read PATH` {target}", f"{r['read_ms']:.0f} ms (median)", "no equivalent", "n/a",
         _verdict(r["read_ms"] <= 150)),
        ("P10 status", f"`stet status` {target}", f"{r['status_ms']:.0f} ms (median)", "no equivalent", "n/a",
         _verdict(r["status_ms"] <= 150)),
    ]


def rows_p11(r: dict[str, Any] | None) -> list[tuple[str, ...]]:
    target = "keystroke in a Yjs client on A -> bytes on B's disk: p50 <= 40 ms, p99 <= 150 ms"
    if not r or r.get("error"):
        return [("P11", target, f"not measured ({(r or {}).get('error', 'not selected')})", "no equivalent",
                 "n/a", "n/a")]
    return [("P11", target, f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms ({r['lost']} lost)",
             "no equivalent", "n/a", _verdict(r["p50_ms"] <= 40, r["p99_ms"] <= 150, r["lost"] == 0))]
