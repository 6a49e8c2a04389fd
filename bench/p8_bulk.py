#!/usr/bin/env python3
"""P8: a bulk intake never freezes the daemon (issue 11, SPEC §3.15).

    python bench/p8_bulk.py [--notes 10000] [--changed 2000] [--seed 8] [--no-write] [--py-spy DIR] [--pin]

Two real daemons on loopback, paired (`stet invite` / `stet join`), each with a client
asking `GET /v1/status` every 20 ms throughout. Then:

1. **Unzip**: a zip of ``--notes`` generated notes (bench/generate_vault.py) is extracted
   into A's folder as fast as `zipfile` writes (``python -m zipfile -e``, a process of its
   own as a person's unzip is: not a thread sharing the interpreter lock with the bench's
   pollers). Reported: the status latencies on A and B (p50, p99, worst), and the time
   from the start of the extraction until all are notes on A and until B's folder is
   byte-identical (tree digest; the time the confirming check began, so the bench's own
   hashing of the 10,000 files is not counted; the digest expected is made from the
   staged files before the clock starts, and checked against A's folder afterwards).
2. **git checkout**: the vault's files are committed on a branch (the git directory is
   outside the vault: ``--git-dir``), ``--changed`` of them get a new line on a second
   branch, and A's folder is switched between the two: same figures (``--changed 0``
   skips this phase).

For the comparison with P3, ``stet init`` of the same notes on a fresh home is timed too
(the target: the intake takes at most twice that, on A and on B).

``--pin`` models the two machines the issue names with one CPU each: A, its poller, the
unzip and P3's ``stet init`` run on CPU 0; B, its poller and the bench's waits on CPU 1
(``sched_setaffinity``, inherited by every thread they start). Without it every process
shares both CPUs, so A's intake and B's apply take cores from each other, which two
laptops do not.

``--folders DIR`` puts the vault folders (the staged files, P3's, A's and B's) in a new
folder under DIR, the homes (SQLite, blobs) staying in the work folder: e.g. ``/dev/shm``
takes the file system's cost of making a file out of the figures, where it dwarfs the
daemons' own (this VM's ext4: ~840 us of CPU to create an empty file, ~10 us on tmpfs;
bench/history/rounds.md, P8 round 9). Both daemons and P3 read and write their folders there,
so the ratio stays like for like.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generate_vault import generate_vault, tree_digest  # noqa: E402
from machine_info import append_results  # noqa: E402
from peer_bench import (  # noqa: E402
    Daemons,
    ThreadCpu,
    busy_between,
    cpu_busy,
    device_id,
    init_vault,
    install_sigterm_exit,
    linked,
    load_average,
    pair,
    percentile,
    py_spy,
    vault_status,
    wait_for,
    wait_synced,
    wait_synced_at,
    work_dir,
    work_dir_in,
)

from tests.harness import DaemonProcess  # noqa: E402
from tests.integration.agent_support import owner_agent  # noqa: E402

POLL_S = 0.02
A_CPU, B_CPU = {0}, {1}  # --pin: "machine" A and "machine" B


@contextlib.contextmanager
def on_cpus(cpus: set[int] | None) -> Iterator[None]:
    """Run the calling thread (and what it starts meanwhile: processes and threads inherit
    it) on ``cpus``; None: unchanged."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


class Poller:
    """Asks ``GET /v1/status`` every 20 ms (after each answer) and keeps the latencies,
    each with the time it was asked."""

    def __init__(self, daemon: DaemonProcess, cpus: set[int] | None = None) -> None:
        self.agent = owner_agent(daemon)
        self.cpus = cpus
        self.samples: list[tuple[float, float]] = []
        self.notes: list[tuple[float, int]] = []  # (asked at, the vaults' note count then)
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def _run(self) -> None:
        if self.cpus is not None:
            os.sched_setaffinity(0, self.cpus)  # this thread only
        deadline = time.monotonic() + 3600
        while not self._stop.is_set() and time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                answer = self.agent.request("GET", "/v1/status")
                ok = answer.status == 200
            except OSError:
                ok = False
            self.samples.append((t0, time.monotonic() - t0))
            if ok and isinstance(answer.body, dict):
                self.notes.append((t0, sum(int(v.get("notes", 0)) for v in answer.body.get("vaults", []))))
            if not ok:
                self.failures += 1
            self._stop.wait(POLL_S)

    def between(self, start: float, end: float) -> list[float]:
        return [lat for t0, lat in self.samples if start <= t0 <= end]

    def notes_at(self, t: float) -> int:
        """The note count of the last answer asked at or before ``t``."""
        seen = [n for t0, n in self.notes if t0 <= t]
        return seen[-1] if seen else 0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.agent.close()


def lat_row(name: str, lat: list[float]) -> str:
    if not lat:
        return f"| {name} | 0 | | | | |"
    ms = [x * 1000 for x in lat]
    p99, worst = percentile(ms, 99), max(ms)
    verdict = f"p99 <= 100 ms: {'met' if p99 <= 100 else 'MISSED'}; worst <= 500 ms: " \
              f"{'met' if worst <= 500 else 'MISSED'}"
    return f"| {name} | {len(ms)} | {percentile(ms, 50):.1f} | {p99:.1f} | {worst:.1f} | {verdict} |"


def git(repo: Path, work: Path, *args: str) -> None:
    subprocess.run(["git", f"--git-dir={repo}", f"--work-tree={work}", "-c", "user.name=bench",
                    "-c", "user.email=bench@localhost", *args], check=True, capture_output=True, timeout=600)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def folders_dir(under: Path | None, work: Path, keep: bool) -> Iterator[Path]:
    """Where the vault folders go: ``work`` itself, or a new folder under ``under``."""
    if under is None:
        yield work
        return
    with work_dir_in(under, "stet-p8-folders-", keep) as path:
        yield path


def _spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    spy = py_spy()
    if spy is None:
        raise SystemExit("--py-spy: no py-spy on PATH or beside this interpreter")
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "100",
                             "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--notes", type=int, default=10_000)
    ap.add_argument("--changed", type=int, default=2_000, help="notes that differ between the branches")
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=900.0, help="per phase (s)")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (debugging)")
    ap.add_argument("--pin", action="store_true",
                    help="A (with the unzip and P3) on CPU 0, B on CPU 1: two one-CPU machines")
    ap.add_argument("--threads", action="store_true",
                    help="print each daemon thread's CPU at A done and at B done (the unzip's phase)")
    ap.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                    help="record both daemons with py-spy (raw stacks) into DIR during the unzip's intake")
    ap.add_argument("--folders", type=Path, default=None, metavar="DIR",
                    help="the vault folders in a new folder under DIR (e.g. /dev/shm); the homes stay")
    ap.add_argument("--loop-holds", type=Path, default=None, metavar="DIR",
                    help="both daemons write every step that held their loop >= 50 ms into DIR "
                         "(daemon/base/loop_holds.py; summarise with bench/loop_holds_report.py DIR)")
    args = ap.parse_args()
    if args.pin and not {0, 1} <= os.sched_getaffinity(0):
        ap.error("--pin needs CPUs 0 and 1")
    cpu_a, cpu_b = (A_CPU, B_CPU) if args.pin else (None, None)
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    phases: dict[str, Any] = {}
    if args.loop_holds is not None:
        args.loop_holds.mkdir(parents=True, exist_ok=True)
        os.environ["STET_LOOP_HOLDS"] = str(args.loop_holds.resolve())
    install_sigterm_exit()
    load_start = load_average()

    with work_dir("stet-p8-", keep=args.keep) as work, \
            folders_dir(args.folders, work, args.keep) as folders, Daemons() as daemons:
        staging = folders / "staging"
        gen = generate_vault(staging / "unzipped", notes=args.notes, seed=args.seed)
        archive = work / "notes.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as z:
            for p in sorted((staging / "unzipped").rglob("*")):
                if p.is_file():
                    z.write(p, p.relative_to(staging).as_posix())
        # P3 for comparison: `stet init` of the same notes on a fresh home.
        p3_folder = folders / "p3"
        shutil.copytree(staging, p3_folder)
        with on_cpus(cpu_a):
            init_s = init_vault(work / "home-p3", p3_folder)
        shutil.rmtree(p3_folder)
        print(f"stet init of {args.notes} notes: {init_s:.2f} s", flush=True)

        folder_a, folder_b = folders / "a", folders / "b"
        folder_a.mkdir()
        (folder_a / "README.md").write_text("# Vault\n", encoding="utf-8")
        init_vault(work / "home-a", folder_a)
        with on_cpus(cpu_a):
            a, _ = daemons.start(work / "home-a")
        with on_cpus(cpu_b):
            b, _ = daemons.start(work / "home-b")
        pair(a, b, folder_b)
        wait_synced(b, folder_b, 1, tree_digest(folder_a), timeout=120)
        dev_a, dev_b = device_id(a), device_id(b)
        wait_for(lambda: linked(a, dev_b) and linked(b, dev_a), timeout=60, what="the link")
        pa, pb = Poller(a, cpu_a).start(), Poller(b, cpu_b).start()
        # What A's folder will hold: the staged files and the README (hashed now, not while
        # the clock runs; checked against A's folder once B is done).
        shutil.copy2(folder_a / "README.md", staging / "README.md")
        expected = tree_digest(staging)
        total = args.notes + 1
        spies = []
        if args.py_spy is not None:  # both daemons, during the unzip's intake only
            spies = [_spy(a.proc.pid, args.py_spy / "p8-a.txt"), _spy(b.proc.pid, args.py_spy / "p8-b.txt")]
            time.sleep(1.0)  # let py-spy attach before the clock starts

        phases["daemons"] = {"A": a.proc.pid, "B": b.proc.pid}
        # 1. the unzip
        cpu0 = (cpu_seconds(a.proc.pid), cpu_seconds(b.proc.pid))
        threads = ThreadCpu(args.threads, {"A": a.proc.pid, "B": b.proc.pid})
        busy0 = cpu_busy()
        t0 = time.monotonic()
        phases["unzip"] = [time.time()]
        with on_cpus(cpu_a):
            subprocess.run([sys.executable, "-m", "zipfile", "-e", str(archive), str(folder_a)],
                           check=True, timeout=args.timeout)
        written_s = time.monotonic() - t0
        with on_cpus(cpu_b):  # the bench's waits: on B's "machine" (they mostly look at B)
            wait_for(lambda: vault_status(a)["notes"] == total, timeout=args.timeout,
                     what="all notes on A", interval=0.1)
            on_a_s = time.monotonic() - t0
            threads.mark("A done")
            busy_a = cpu_busy()
            at_a_done = vault_status(b)
            # A 0.1 s poll: B's time is known to within 0.1 s (the check is a status call
            # until B's note count is right and its writes are done).
            on_b_s = wait_synced_at(b, folder_b, total, expected, timeout=args.timeout, interval=0.1) - t0
            threads.mark("B done")
            busy_b = cpu_busy()
        unzip = (pa.between(t0, time.monotonic()), pb.between(t0, time.monotonic()))
        unzip_cpu = (cpu_seconds(a.proc.pid) - cpu0[0], cpu_seconds(b.proc.pid) - cpu0[1])
        phases["unzip"].append(time.time())
        for spy in spies:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        if tree_digest(folder_a) != expected:
            raise SystemExit("A's folder is not the unzipped files: B was checked against a wrong digest")
        print(f"unzip: written {written_s:.2f} s, notes on A {on_a_s:.1f} s, on B {on_b_s:.1f} s; "
              f"at A done B had {at_a_done['notes']} notes, {at_a_done['pendingWrites']} writes pending",
              flush=True)
        if args.threads:
            print(threads.report(), flush=True)
            print(f"CPUs busy until A done: {busy_between(busy0, busy_a)}; "
                  f"from A done until B done: {busy_between(busy_a, busy_b)}", flush=True)
            seconds = range(1, int(on_b_s) + 2)
            print("notes on A / B, each second: " + ", ".join(
                f"{s}s {pa.notes_at(t0 + s)}/{pb.notes_at(t0 + s)}" for s in seconds), flush=True)

        switch_s = checkout_b_s = 0.0
        checkout: tuple[list[float], list[float]] = ([], [])
        if args.changed:  # 2. git checkout between branches differing in --changed notes
            repo = work / "repo.git"
            subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True, timeout=60)
            git(repo, folder_a, "checkout", "-q", "-b", "main")
            git(repo, folder_a, "add", "-A")
            git(repo, folder_a, "commit", "-q", "-m", "notes")
            git(repo, folder_a, "checkout", "-q", "-b", "other")
            changed = sorted(gen.paths)[: args.changed]
            for rel in changed:
                with open(folder_a / "unzipped" / rel, "a", encoding="utf-8") as f:
                    f.write("\n- changed on the other branch\n")
            git(repo, folder_a, "commit", "-q", "-am", "changed")
            other_digest = tree_digest(folder_a)  # hashed before the clock, as for the unzip
            wait_synced(b, folder_b, total, other_digest, timeout=args.timeout, interval=0.5)
            git(repo, folder_a, "checkout", "-q", "main")  # the measured switch: --changed files rewritten
            main_digest = tree_digest(folder_a)
            assert other_digest != main_digest
            wait_synced(b, folder_b, total, main_digest, timeout=args.timeout, interval=0.5)
            t1 = time.monotonic()
            phases["checkout"] = [time.time()]
            with on_cpus(cpu_a):
                git(repo, folder_a, "checkout", "-q", "other")
            switch_s = time.monotonic() - t1
            with on_cpus(cpu_b):
                checkout_b_s = wait_synced_at(b, folder_b, total, other_digest, timeout=args.timeout,
                                              interval=0.1) - t1
            if tree_digest(folder_a) != other_digest:
                raise SystemExit("A's folder is not the other branch: B was checked against a wrong digest")
            checkout = (pa.between(t1, time.monotonic()), pb.between(t1, time.monotonic()))
            phases["checkout"].append(time.time())
            print(f"git checkout of {args.changed} changed notes: {switch_s:.2f} s, "
                  f"on B {checkout_b_s:.1f} s", flush=True)
        pa.stop()
        pb.stop()
        if args.loop_holds is not None:
            (args.loop_holds / "phases.json").write_text(json.dumps(phases), encoding="utf-8")
        failures = pa.failures + pb.failures
        load_end = load_average()

    ratio = on_a_s / init_s if init_s else float("nan")
    ratio_b = on_b_s / init_s if init_s else float("nan")
    body = (
        f"P8 bulk intake: {args.notes:,} generated notes ({gen.total_bytes / 1e6:.1f} MB, seed {args.seed}) "
        f"extracted from a zip into a running daemon's folder (A) with a paired peer (B); a client asks "
        f"`GET /v1/status` of each daemon every 20 ms throughout ({failures} failed answers).\n\n"
        "| phase, daemon | answers | p50 ms | p99 ms | worst ms | target (issue 11) |\n"
        "|---|---|---|---|---|---|\n"
        f"{lat_row('unzip, A (intake)', unzip[0])}\n"
        f"{lat_row('unzip, B (receiving)', unzip[1])}\n"
        + (f"{lat_row(f'git checkout of {args.changed:,} changed notes, A', checkout[0])}\n"
           f"{lat_row(f'git checkout of {args.changed:,} changed notes, B', checkout[1])}\n"
           if args.changed else "")
        + "\n"
        f"Unzip: files written in {written_s:.2f} s; all {args.notes:,} notes on A after {on_a_s:.1f} s; "
        f"B byte-identical after {on_b_s:.1f} s. `stet init` of the same notes (P3): {init_s:.2f} s, "
        f"so the intake took {ratio:.2f}x P3 on A, {ratio_b:.2f}x on B (target <= 2x: "
        f"{'met' if ratio <= 2 else 'MISSED'} on A, {'met' if ratio_b <= 2 else 'MISSED'} on B). "
        + ("Pinned (`--pin`): A, its poller, the unzip and P3 on CPU 0; B, its poller and the "
           "bench's waits on CPU 1. " if args.pin else "")
        + (f"Vault folders (staged, P3's, A's, B's) under {args.folders} (`--folders`), homes in the "
           "work folder. " if args.folders else "")
        +
        f"CPU (user + system, all threads) from the unzip's start until B was identical: "
        f"A {unzip_cpu[0]:.1f} s, B {unzip_cpu[1]:.1f} s.\n"
        + (f"git checkout (git dir outside the vault): {switch_s:.2f} s to switch; B byte-identical "
           f"{checkout_b_s:.1f} s after it began.\n" if args.changed else "")
        +
        f"Load average (1/5/15 min) at the start: {load_start}, at the end: {load_end} (a shared machine: "
        "other work ran beside this).\n"
    )
    print(body)
    if not args.no_write:
        path = append_results(body, title="P8 bulk intake (issue 11)")
        print(f"appended to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
