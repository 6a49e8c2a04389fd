#!/usr/bin/env python3
"""P7: where a daemon's resident memory goes. Target (SPEC §9): <= 250 MB with 10,000
notes and below Syncthing's (P7's figure itself comes from `p5_restart.py` / `run_all.py`).

    python bench/p7_memory.py [--notes 1000] [--seed 1] [--no-write]

1. Each library's share: VmRSS of a fresh `python -c "import LIB"` minus that of a bare
   interpreter (shares overlap: aiohttp and cryptography both pull in ssl, and so on),
   and which of them importing the daemon's modules loads.
2. A real daemon at rest: `stet init` of a generated `--notes` vault, the daemon started,
   VmRSS / VmHWM once ready and after the status call; then the libraries mapped into it
   (`/proc/PID/maps`, for the C extensions: cryptography, zeroconf, pydantic-core).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from generate_vault import generate_vault  # noqa: E402
from machine_info import append_results  # noqa: E402
from peer_bench import Daemons, init_vault, load_average, rss_bytes, work_dir  # noqa: E402

LIBRARIES = ("aiohttp", "aiohttp.web", "pycrdt", "watchdog.observers", "sqlite3", "ssl",
             "keyring", "cryptography.x509", "cryptography.hazmat.primitives.asymmetric.ed25519",
             "zeroconf", "rich", "click", "mcp")
DAEMON_MODULES = ("stet.daemon.app.main", "stet.daemon.app.runtime")
MAPPED = ("cryptography", "_cffi_backend", "zeroconf", "pydantic_core", "pycrdt", "_sqlite3", "aiohttp")

_PROBE = """import importlib, gc, json, sys
for m in sys.argv[1].split():
    importlib.import_module(m)
gc.collect()
rss = [l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]
tops = sorted({m.split('.')[0] for m in sys.modules})
print(json.dumps({"rss": int(rss) * 1024, "modules": tops}))"""


def probe(modules: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _PROBE, modules], capture_output=True, text=True,
                         timeout=120, check=True)
    return dict(json.loads(out.stdout))


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def library_shares() -> tuple[list[str], list[str]]:
    bare = int(probe("")["rss"])  # type: ignore[call-overload]
    rows = [f"| (bare interpreter) | {mb(bare)} | |"]
    for lib in LIBRARIES:
        got = int(probe(lib)["rss"])  # type: ignore[call-overload]
        rows.append(f"| `import {lib}` | {mb(got)} | +{mb(got - bare)} |")
    daemon = probe(" ".join(DAEMON_MODULES))
    rss = int(daemon["rss"])  # type: ignore[call-overload]
    rows.append(f"| `import {', '.join(DAEMON_MODULES)}` | {mb(rss)} | +{mb(rss - bare)} |")
    heavy = ("keyring", "cryptography", "zeroconf", "rich", "mcp", "pydantic")
    loaded = [m for m in heavy if m in daemon["modules"]]  # type: ignore[operator]
    return rows, loaded


def daemon_at_rest(notes: int, seed: int) -> list[str]:
    rows = []
    with work_dir("p7-") as tmp, Daemons() as daemons:
        folder = tmp / "vault"
        generate_vault(folder, notes=notes, seed=seed)
        home = tmp / "home"
        init_vault(home, folder)
        for run in ("first start", "restart"):
            d, ready = daemons.start(home)
            assert d.proc is not None
            d.client.status()
            rss, hwm = rss_bytes(d.proc.pid)
            maps = Path(f"/proc/{d.proc.pid}/maps").read_text()
            mapped = [m for m in MAPPED if m in maps]
            rows.append(f"| {run} | {ready:.2f} s | {mb(rss)} | {mb(hwm)} | {', '.join(mapped)} |")
            Daemons.stop(d)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    args = ap.parse_args()
    load_before = load_average()
    shares, loaded = library_shares()
    rest = daemon_at_rest(args.notes, args.seed)
    body = "\n".join([
        "Each library's resident share: VmRSS of a fresh interpreter after `import LIB` (after "
        "`gc.collect()`), and over a bare interpreter. Shares overlap (ssl, importlib.metadata ...).",
        "",
        "| import | VmRSS | over bare |",
        "|---|---|---|",
        *shares,
        "",
        f"Heavy libraries loaded by importing the daemon: {', '.join(loaded) or 'none'}.",
        "",
        f"A real daemon at rest on a {args.notes:,}-note vault (seed {args.seed}; no mDNS; "
        "keyring: the fail backend, as on a server):",
        "",
        "| run | spawn -> ready | VmRSS | VmHWM | C extensions mapped (of " + ", ".join(MAPPED) + ") |",
        "|---|---|---|---|---|",
        *rest,
        "",
        f"Load average (1/5/15 min) before: {load_before}; after: {load_average()}.",
    ])
    print(body)
    if not args.no_write:
        append_results(body, title="P7 memory: library shares and a daemon at rest")


if __name__ == "__main__":
    main()
