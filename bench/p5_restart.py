#!/usr/bin/env python3
"""P5: restart with nothing changed, 10,000 notes; with P6 (idle CPU) and P7 (memory).

Targets (SPEC §9): P5 ready <= 3 s, reconnect sync <= 1 s and <= 200 KB on the wire;
P6 idle <= 1 CPU-second per 10 minutes; P7 resident memory <= 250 MB.

    python bench/p5_restart.py [--notes 10000] [--small-notes 1000] [--seed 1] [--restarts 3]
                               [--idle-seconds 60] [--no-write] [--keep] [--py-spy DIR]

For each vault size (`--small-notes` first, for issue 5's "bytes exchanged by a reconnect
with nothing changed on a 1,000-note vault"; then `--notes`), with real daemons on
temporary homes:

1. generate the seeded vault, `stet init` it on A, start A;
2. start B, `stet join` it into an empty folder and wait until B's folder is
   byte-identical (tree digest): this is the first full sync, P4's figure (Syncthing is not
   run here, so there is no P4 comparison);
3. measure both daemons' resident memory (VmRSS, and the peak VmHWM, from /proc);
4. `--restarts` times: stop B (SIGTERM, clean), start it again with nothing changed, and
   measure (a) process spawn -> ready (daemon.json names the pid and GET /v1/status answers,
   polled every 10 ms), (b) the reconnect: the link's first and last byte, the sync counted
   as done when the link has carried no byte for 1 s after both sides list each other in
   `peers`, and (c) the bytes of that reconnect;
5. (largest size only) idle CPU of both daemons, linked to each other, over
   `--idle-seconds`: utime + stime from /proc/PID/stat, extrapolated to 10 minutes.

Bytes are counted twice. B dials A through a counting TCP relay in this process (the
invite names the relay's address): its figures are TCP payload, so they include the TLS
handshake and records and the websocket framing; only TCP/IP headers are left out. The
daemons' own `peers[].bytesSent/bytesReceived` (GET /v1/status) count the protocol frames
only, so the difference is the TLS + websocket overhead. B only ever dials A (A never
learns B's address: no mDNS), so the relay sees every link.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_vault import generate_vault, tree_digest  # noqa: E402
from machine_info import append_results  # noqa: E402
from peer_bench import (  # noqa: E402
    CountingProxy,
    Daemons,
    cpu_seconds,
    device_id,
    fmt_bytes,
    init_vault,
    install_sigterm_exit,
    linked,
    load_average,
    pair,
    peer_port,
    rss_bytes,
    wait_for,
    wait_synced,
    work_dir,
)

QUIET_S = 1.0  # the reconnect is over when the link has been silent this long
MB = 1e6


@dataclass
class Restart:
    ready_s: float  # spawn -> ready
    connect_s: float  # spawn -> first byte on the new link
    last_byte_s: float  # spawn -> last byte of the reconnect exchange
    linked_s: float  # spawn -> both sides list each other (as polled)
    wire_up: int  # B -> A, TCP payload
    wire_down: int  # A -> B
    conns: int  # TCP connections opened for the reconnect
    a_sent: int  # A's peers[] counters for B
    a_recv: int
    b_sent: int  # B's peers[] counters for A
    b_recv: int
    stop_s: float  # SIGTERM -> exit of the previous B

    @property
    def sync_after_ready_s(self) -> float:
        return max(0.0, self.last_byte_s - self.ready_s)

    @property
    def wire(self) -> int:
        return self.wire_up + self.wire_down


@dataclass
class Scenario:
    notes: int
    total_bytes: int
    init_s: float = 0.0
    a_first_ready_s: float = 0.0
    b_empty_ready_s: float = 0.0
    first_sync_s: float = 0.0
    first_sync_wire: int = 0
    rss: dict[str, tuple[int, int]] = field(default_factory=dict)  # label -> (VmRSS, VmHWM)
    rss_series: list[tuple[float, int, int]] = field(default_factory=list)  # (s after sync, A, B)
    restarts: list[Restart] = field(default_factory=list)
    idle_s: float = 0.0
    idle_cpu: dict[str, float] = field(default_factory=dict)
    idle_wire: int = 0
    intact_after: bool = False
    load: dict[str, str] = field(default_factory=dict)  # when -> 1/5/15-min load average


def restart_b(daemons: Daemons, a: Any, b: Any, proxy: CountingProxy, dev_a: str, dev_b: str
              ) -> tuple[Any, Restart]:
    t = time.perf_counter()
    daemons.stop(b)
    stop_s = time.perf_counter() - t
    wait_for(lambda: not linked(a, dev_b), timeout=30, what="A to notice B has gone")
    before = len(proxy.snapshot())
    t0 = time.perf_counter()
    b, ready_s = daemons.start(b.home)
    wait_for(lambda: linked(a, dev_b) and linked(b, dev_a), timeout=60, what="the link after restart",
             interval=0.01)
    linked_s = time.perf_counter() - t0

    def quiet() -> list[Any] | None:
        new = proxy.snapshot()[before:]
        if not new or any(c.last is None for c in new):
            return None
        last = max(c.last for c in new if c.last is not None)
        return new if time.perf_counter() - last >= QUIET_S else None

    conns = wait_for(quiet, timeout=120, what="the reconnect exchange to finish", interval=0.05)
    pa, pb = linked(a, dev_b), linked(b, dev_a)
    if pa is None or pb is None:
        raise RuntimeError("the link dropped during the measurement")
    first = min(c.first for c in conns if c.first is not None)
    last = max(c.last for c in conns if c.last is not None)
    r = Restart(
        ready_s=ready_s, connect_s=first - t0, last_byte_s=last - t0, linked_s=linked_s,
        wire_up=sum(c.up for c in conns), wire_down=sum(c.down for c in conns), conns=len(conns),
        a_sent=pa["bytesSent"], a_recv=pa["bytesReceived"],
        b_sent=pb["bytesSent"], b_recv=pb["bytesReceived"],
        stop_s=stop_s,
    )
    print(f"  restart: ready {r.ready_s:.2f} s, link first byte {r.connect_s:.2f} s, last byte "
          f"{r.last_byte_s:.2f} s, wire {r.wire_up:,} B up + {r.wire_down:,} B down in {r.conns} conn(s); "
          f"counters A sent/recv {r.a_sent:,}/{r.a_recv:,}, B sent/recv {r.b_sent:,}/{r.b_recv:,}",
          flush=True)
    return b, r


def _spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", "100",
                             "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_scenario(work: Path, notes: int, seed: int, restarts: int, idle_seconds: float,
                 profile_dir: Path | None = None) -> Scenario:
    print(f"== {notes:,} notes", flush=True)
    folder_a, folder_b = work / "a", work / "b"
    gen = generate_vault(folder_a, notes=notes, seed=seed)
    digest = tree_digest(folder_a)
    sc = Scenario(notes, gen.total_bytes)
    sc.load["start"] = load_average()
    sc.init_s = init_vault(work / "home-a", folder_a)
    print(f"  stet init {sc.init_s:.1f} s", flush=True)
    with Daemons() as daemons:
        a, sc.a_first_ready_s = daemons.start(work / "home-a")
        proxy = CountingProxy(("127.0.0.1", peer_port(a)))
        try:
            b, sc.b_empty_ready_s = daemons.start(work / "home-b")
            spies = []
            if profile_dir is not None:  # both daemons, during the first sync only
                spies = [_spy(a.proc.pid, profile_dir / f"p4-a-{notes}.txt"),
                         _spy(b.proc.pid, profile_dir / f"p4-b-{notes}.txt")]
                time.sleep(1.0)  # let py-spy attach before the clock starts
            t = time.perf_counter()
            sync_cpu0 = {"A": cpu_seconds(a.proc.pid), "B": cpu_seconds(b.proc.pid)}
            pair(a, b, folder_b, address=proxy.address)
            wait_synced(b, folder_b, notes, digest, timeout=900)
            sc.first_sync_s = time.perf_counter() - t
            sync_cpu = {k: cpu_seconds(d.proc.pid) - sync_cpu0[k] for k, d in (("A", a), ("B", b))}
            print(f"  first sync CPU (user + system, all threads): A {sync_cpu['A']:.1f} s, "
                  f"B {sync_cpu['B']:.1f} s; load average {load_average()}", flush=True)
            for spy in spies:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
            sc.first_sync_wire = sum(c.up + c.down for c in proxy.snapshot())
            dev_a, dev_b = device_id(a), device_id(b)
            wait_for(lambda: linked(a, dev_b) and linked(b, dev_a), timeout=60, what="the link")
            print(f"  A ready {sc.a_first_ready_s:.2f} s; join + first sync {sc.first_sync_s:.1f} s, "
                  f"{fmt_bytes(sc.first_sync_wire)} on the wire", flush=True)
            # The figure: 2 s after B's folder is byte-identical (both finish writing and
            # indexing what the sync brought); sampled every 0.5 s to +6 s for the series.
            t_synced = time.perf_counter()
            for i in range(13):
                time.sleep(max(0.0, t_synced + 0.5 * i - time.perf_counter()))
                ra, rb = rss_bytes(a.proc.pid), rss_bytes(b.proc.pid)
                sc.rss_series.append((0.5 * i, ra[0], rb[0]))
                if i == 4:
                    sc.rss["A after first sync"], sc.rss["B after first sync"] = ra, rb
            print("  VmRSS after the sync (s: A / B MB): " + ", ".join(
                f"+{s:.1f}: {ra / MB:.0f}/{rb / MB:.0f}" for s, ra, rb in sc.rss_series), flush=True)
            for _ in range(restarts):
                b, r = restart_b(daemons, a, b, proxy, dev_a, dev_b)
                sc.restarts.append(r)
            sc.load["after the restarts"] = load_average()
            sc.rss["A after B's restarts"] = rss_bytes(a.proc.pid)
            sc.rss["B after a restart"] = rss_bytes(b.proc.pid)
            if idle_seconds > 0:
                time.sleep(2)
                wire0 = sum(c.up + c.down for c in proxy.snapshot())
                cpu0 = {"A": cpu_seconds(a.proc.pid), "B": cpu_seconds(b.proc.pid)}
                t = time.perf_counter()
                time.sleep(idle_seconds)
                sc.idle_s = time.perf_counter() - t
                sc.idle_cpu = {"A": cpu_seconds(a.proc.pid) - cpu0["A"],
                               "B": cpu_seconds(b.proc.pid) - cpu0["B"]}
                sc.idle_wire = sum(c.up + c.down for c in proxy.snapshot()) - wire0
                sc.load["after idle"] = load_average()
                if not (linked(a, dev_b) and linked(b, dev_a)):
                    raise RuntimeError("the link dropped while idle")
                print(f"  idle {sc.idle_s:.0f} s: CPU A {sc.idle_cpu['A']:.2f} s, B {sc.idle_cpu['B']:.2f} s",
                      flush=True)
            sc.intact_after = tree_digest(folder_b) == digest and tree_digest(folder_a) == digest
        finally:
            proxy.close()
    return sc


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(scs: list[Scenario], seed: int, idle_seconds: float) -> str:
    big = scs[-1]
    out = [
        f"P5 restart of B with nothing changed (plus P6 idle CPU, P7 memory, P4's first-sync time), "
        f"seed {seed}, two daemons on loopback; B dials A through a counting TCP relay. "
        "Wire = TCP payload both ways (TLS handshake + records + websocket framing + frames; no "
        "TCP/IP headers). Counters = the daemons' `peers[].bytesSent/bytesReceived` (protocol frames "
        f"only, no TLS or websocket overhead). Reconnect done = the link silent for {QUIET_S:.0f} s. "
        "Times from B's process spawn; medians over the restarts, [min-max] after.\n",
        "| notes | vault | restarts | ready | link first byte | last byte | sync after ready | "
        "wire, reconnect | "
        "counters A recv / B recv | counters A sent / B sent |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for sc in scs:
        rs = sc.restarts
        if not rs:
            continue

        def span(xs: list[float], unit: str = "s", digits: int = 2) -> str:
            return f"{_med(xs):.{digits}f} {unit} [{min(xs):.{digits}f}-{max(xs):.{digits}f}]"

        out.append(
            f"| {sc.notes:,} | {sc.total_bytes / MB:.1f} MB | {len(rs)} | {span([r.ready_s for r in rs])} | "
            f"{span([r.connect_s for r in rs])} | {span([r.last_byte_s for r in rs])} | "
            f"{span([r.sync_after_ready_s for r in rs])} | "
            f"{fmt_bytes(_med([r.wire for r in rs]))} ({fmt_bytes(_med([r.wire_up for r in rs]))} B->A, "
            f"{fmt_bytes(_med([r.wire_down for r in rs]))} A->B) | "
            f"{_med([r.a_recv for r in rs]):,.0f} / {_med([r.b_recv for r in rs]):,.0f} B | "
            f"{_med([r.a_sent for r in rs]):,.0f} / {_med([r.b_sent for r in rs]):,.0f} B |"
        )
    out.append("")
    rs = big.restarts
    out += [
        f"Against the targets ({big.notes:,} notes):\n",
        "| id | metric | measured | target |",
        "|---|---|---|---|",
    ]
    if rs:
        ready, sync, wire = _med([r.ready_s for r in rs]), _med([r.sync_after_ready_s for r in rs]), \
            _med([r.wire for r in rs])
        out += [
            f"| P5 | B spawn -> ready (median of {len(rs)}) | {ready:.2f} s | "
            f"<= 3 s ({_verdict(ready <= 3)}) |",
            f"| P5 | reconnect sync, B ready -> last byte (median) | {sync:.2f} s (link's own exchange: "
            f"first -> last byte {_med([r.last_byte_s - r.connect_s for r in rs]):.2f} s) | "
            f"<= 1 s ({_verdict(sync <= 1)}) |",
            f"| P5 | reconnect bytes on the wire (median) | {fmt_bytes(wire)} ({wire:,.0f} B) | "
            f"<= 200 KB ({_verdict(wire <= 200_000)}) |",
        ]
    for label, (rss, hwm) in big.rss.items():
        out.append(f"| P7 | VmRSS {label} (peak VmHWM) | {rss / MB:.0f} MB ({hwm / MB:.0f} MB) | "
                   f"<= 250 MB ({_verdict(rss <= 250 * MB)}) |")
    if big.idle_cpu:
        for name, cpu in big.idle_cpu.items():
            per10 = cpu * 600 / big.idle_s
            out.append(f"| P6 | idle CPU of {name}, {big.idle_s:.0f} s measured, x{600 / big.idle_s:.0f} "
                       f"to 10 min | {cpu:.2f} s -> {per10:.1f} CPU-s / 10 min | <= 1 CPU-s / 10 min "
                       f"({_verdict(per10 <= 1)}) |")
    out += [
        "",
        "Setup figures (not targets here):\n",
        "| notes | `stet init` on A | A's first start after init (ready) | B empty start (ready) | "
        "`stet join` + first full sync to B (P4) | first sync on the wire | B's stop (SIGTERM -> exit) | "
        "vaults intact after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for sc in scs:
        stop = _med([r.stop_s for r in sc.restarts]) if sc.restarts else 0.0
        out.append(
            f"| {sc.notes:,} | {sc.init_s:.1f} s | {sc.a_first_ready_s:.2f} s | {sc.b_empty_ready_s:.2f} s | "
            f"{sc.first_sync_s:.1f} s | {fmt_bytes(sc.first_sync_wire)} "
            f"(vault {sc.total_bytes / MB:.1f} MB) | "
            f"{stop:.2f} s | {'yes' if sc.intact_after else 'NO'} |"
        )
    notes = []
    if big.idle_cpu:
        notes.append(f"P6 is measured with the two daemons linked to each other (each has 1 peer), over "
                     f"{big.idle_s:.0f} s and extrapolated x{600 / big.idle_s:.0f}; the link carried "
                     f"{big.idle_wire:,} B meanwhile (websocket heartbeats).")
    for sc in scs:
        if sc.rss_series:
            notes.append(f"VmRSS after the first sync, {sc.notes:,} notes (seconds after B's folder was "
                         "byte-identical: A / B MB; the P7 figure is the +2.0 s sample): " + ", ".join(
                             f"+{t:.1f} {ra / MB:.0f}/{rb / MB:.0f}" for t, ra, rb in sc.rss_series) + ".")
        notes.append(f"Load average (1/5/15 min), {sc.notes:,} notes: " +
                     "; ".join(f"{k} {v}" for k, v in sc.load.items()) +
                     " (2 daemons + this script; well above 1 means other work shared the 2 CPUs).")
    for sc in scs:
        for r in sc.restarts[:1]:
            if r.b_recv and r.a_sent != r.b_recv:
                notes.append(f"Counters disagree ({sc.notes:,} notes): A's bytesSent {r.a_sent:,} vs B's "
                             f"bytesReceived {r.b_recv:,} for the same link (x{r.a_sent / r.b_recv:.2f}).")
    notes.append("Syncthing is not run by this benchmark (a separate task installs it): no P4/P7 comparison.")
    out += ["", *notes]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--notes", type=int, default=10_000)
    ap.add_argument("--small-notes", type=int, default=1000, help="0 to skip the small vault")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--idle-seconds", type=float, default=60.0, help="0 to skip P6")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories (debugging)")
    ap.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                    help="record both daemons with py-spy (raw stacks) into DIR during the first sync")
    args = ap.parse_args()
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    install_sigterm_exit()
    started = time.perf_counter()
    scs = []
    sizes = ([args.small_notes] if args.small_notes else []) + [args.notes]
    for i, n in enumerate(sizes):
        with work_dir(f"stet-p5-{n}-", keep=args.keep) as work:
            scs.append(run_scenario(work, n, args.seed, args.restarts,
                                    args.idle_seconds if i == len(sizes) - 1 else 0, args.py_spy))
    table = report(scs, args.seed, args.idle_seconds)
    print(table)
    print(f"(total {time.perf_counter() - started:.0f} s)")
    if not args.no_write:
        append_results(table, title=f"P5 restart, nothing changed, {args.notes:,} notes (with P4, P6, P7)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
