#!/usr/bin/env python3
"""P9: first sync of attachments, Stet beside Syncthing in the same run (SPEC §9).

    python bench/p9_attachments.py [--images 200] [--image-mb 5] [--big-mb 1024]
        [--only images|big] [--no-syncthing] [--no-p1] [--no-write] [--keep] [--profile DIR]
        [--no-channel]

Two workloads, each on a fresh pair: ``images`` (200 files of 5 MB of incompressible bytes,
as photos are) and ``big`` (one 1 GB file); each folder also holds 20 small notes. For each:

* Stet: A's daemon ingests the folder (clock not running: Syncthing's initial scan is not
  timed either); B starts; the clock starts just before ``stet join`` and stops when B's
  folder holds every file at its size (a file appears only complete: renamed into place
  after its hash was verified). Then every file's hash is checked (not timed).
* Syncthing (bench/syncthing_ref.py, Debian package): A scans (not timed); B has A paused;
  the clock starts at the un-pause and stops when B's folder holds every file at its size
  (its temp files aside; Syncthing too renames a file into place when complete).
* Both: peak RSS growth over the value just before the clock started (VmRSS sampled every
  50 ms, of the sending and of the receiving process), and CPU-seconds (utime + stime) of
  both processes while the clock ran.

P1 while the 1 GB file transfers (``big``, Stet): once the notes are on B and while the big
file is still on its way, editor-style saves of a note on A (temp + fsync + rename, one at
a time, 50 ms apart) are timed until the same bytes are read on B's disk (inotify); then
the same number of saves with nothing else going on, for comparison.

``--profile DIR``: py-spy (``pip install py-spy``) samples Stet's A and B while the clock
runs (``--native``, 100 Hz: it pauses them to sample, so a profiled run's
times are not results); DIR gets each one's collapsed stacks
(``<workload>-A.txt``, ``-B.txt``) and the run prints their top frames (own samples, and
samples under each of the daemon's own functions).

The machine is shared (2 cores, several engineers' test runs): the table records the load
average at the start and the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from machine_info import append_results  # noqa: E402
from peer_bench import (  # noqa: E402
    REPO_ROOT,
    Daemons,
    Inotify,
    ThreadCpu,
    cpu_seconds,
    init_vault,
    install_sigterm_exit,
    invite_from,
    join_with,
    load_average,
    percentile,
    work_dir,
)
from save_latency import editor_save, new_bytes  # noqa: E402

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.integration.attachment_support import live  # noqa: E402

MiB = 1024 * 1024
NOTES = 20
Manifest = dict[str, tuple[int, str]]  # relative path -> (size, sha256)


# -- workloads --------------------------------------------------------------------------------


def write_random(path: Path, size: int, rng: random.Random) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for i in range(0, size, MiB):
            data = rng.randbytes(min(MiB, size - i))
            h.update(data)
            f.write(data)
    return h.hexdigest()


def generate(folder: Path, workload: str, args: argparse.Namespace) -> Manifest:
    rng = random.Random(f"p9-{workload}")
    out: Manifest = {}
    if workload == "images":
        for i in range(args.images):
            rel = f"photos/{i // 50:02d}/IMG_{i:04d}.jpg"
            size = args.image_mb * MiB
            out[rel] = (size, write_random(folder / rel, size, rng))
    else:
        rel = "video/big.mov"
        size = args.big_mb * MiB
        out[rel] = (size, write_random(folder / rel, size, rng))
    for i in range(NOTES):
        rel = f"notes/note-{i:02d}.md"
        text = f"# note {i}\n\n" + "".join(f"- line {j} of note {i}\n" for j in range(40))
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
        data = text.encode()
        out[rel] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def link_tree(src: Path, dst: Path) -> None:
    """The same files for the other tool, as hard links (both only read the sender's folder)."""
    for p in sorted(src.rglob("*")):
        if p.is_file():
            target = dst / p.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(p, target)


def arrived(folder: Path, manifest: Manifest) -> bool:
    for rel, (size, _sha) in manifest.items():
        try:
            if os.stat(folder / rel).st_size != size:
                return False
        except FileNotFoundError:
            return False
    return True


def identical(folder: Path, manifest: Manifest) -> bool:
    for rel, (_size, sha) in manifest.items():
        with open(folder / rel, "rb") as f:
            if hashlib.file_digest(f, "sha256").hexdigest() != sha:
                return False
    return True


def wait(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# -- sampling ---------------------------------------------------------------------------------


def vm_rss(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Sampler:
    """VmRSS of some processes every 50 ms in a thread: the peak over each one's start."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.base = {k: vm_rss(p) for k, p in pids.items()}
        self.peak = dict(self.base)
        self.cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
        self.cpu: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for k, p in self.pids.items():
                self.peak[k] = max(self.peak[k], vm_rss(p))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.cpu = {k: cpu_seconds(p) - self.cpu0[k] for k, p in self.pids.items()}

    def growth(self, k: str) -> int:
        return self.peak[k] - self.base[k]


THREADS = False  # --threads


class Profiler:
    """py-spy on some processes while the clock runs (``--profile``)."""

    def __init__(self, out: Path | None, workload: str, pids: dict[str, int]) -> None:
        self.files: dict[str, Path] = {}
        self.procs: list[subprocess.Popen[bytes]] = []
        if out is None:
            return
        out.mkdir(parents=True, exist_ok=True)
        for k, pid in pids.items():
            f = out / f"{workload}-{k}.txt"
            self.files[k] = f
            self.procs.append(subprocess.Popen(
                ["py-spy", "record", "--pid", str(pid), "--format", "raw", "--output", str(f),
                 "--native", "--rate", "100"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop(self) -> None:
        for proc in self.procs:
            proc.send_signal(2)  # SIGINT: py-spy writes what it has
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for k, f in self.files.items():
            if f.exists():
                print(f"py-spy {k} ({f}):\n{top_frames(f)}", flush=True)


IDLE_FRAMES = ("PyThread_acquire_lock_timed", "epoll_wait", "poll (libc", "select_poll_poll",
               "pthread_cond_timedwait", "take_gil")  # waiting, not working
OWN_FRAME = re.compile(r"\((sync|daemon|client)/[a-z_]+\.py:")


def top_frames(path: Path, n: int = 12) -> str:
    """The frames with the most samples of their own, and Stet's functions with the most
    samples under them, from py-spy's collapsed stacks (idle waits left out)."""
    own: dict[str, int] = {}
    under: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        named = [f for f in frames if not f.startswith("0x")]  # unresolved libc (memcpy...): its caller
        leaf = (named[-1] if named else frames[-1]) + (" > libc" if frames[-1].startswith("0x") else "")
        if any(w in stack for w in IDLE_FRAMES):
            continue
        c = int(count)
        total += c
        own[leaf] = own.get(leaf, 0) + c
        for name in {f.rsplit(":", 1)[0] + ")" for f in frames if OWN_FRAME.search(f)}:
            under[name] = under.get(name, 0) + c
    if not total:
        return "  (no samples)"
    lines = [f"  busy samples: {total}", "  own:"]
    lines += [f"    {c / total:6.1%}  {f}" for f, c in sorted(own.items(), key=lambda x: -x[1])[:n]]
    lines.append("  under (Stet's functions):")
    lines += [f"    {c / total:6.1%}  {f}" for f, c in sorted(under.items(), key=lambda x: -x[1])[:n]]
    return "\n".join(lines)


# -- P1 while a transfer runs -------------------------------------------------------------------


def p1_saves(src: Path, dst: Path, paths: list[str], *, until: Any, max_saves: int,
             label: str) -> list[float]:
    """Saves on ``src`` one at a time until ``until()`` (or ``max_saves``); latencies in s."""
    rng = random.Random(f"p9-p1-{label}")
    ino = Inotify()
    lat: list[float] = []
    try:
        for i in range(max_saves):
            if until():
                break
            rel = rng.choice(paths)
            ino.watch((dst / rel).parent)
            ino.wait(0)
            data = new_bytes((src / rel).read_bytes(), f"{label}-{i}")
            t0 = editor_save(src / rel, data, i)
            deadline = t0 + 10.0
            while True:
                with contextlib.suppress(FileNotFoundError):
                    if (dst / rel).read_bytes() == data:
                        lat.append(time.perf_counter() - t0)
                        break
                if time.perf_counter() > deadline:
                    print(f"  {label}: save {i} not on B within 10 s", flush=True)
                    break
                ino.wait(0.005)
            time.sleep(0.05)
    finally:
        ino.close()
    return lat


def p1_row(name: str, lat: list[float]) -> str:
    if not lat:
        return f"| {name} | 0 | | | |"
    ms = [x * 1000 for x in lat]
    return (f"| {name} | {len(ms)} | {percentile(ms, 50):.1f} | {percentile(ms, 99):.1f} | "
            f"{max(ms):.1f} |")


# -- the two tools ----------------------------------------------------------------------------


def run_stet(work: Path, folder_a: Path, manifest: Manifest, *, p1: bool,
             profile: Path | None = None, workload: str = "") -> dict[str, Any]:
    folder_b = work / "stet-b"
    files = sum(1 for rel in manifest if not rel.endswith(".md"))
    with Daemons() as daemons:
        init_vault(work / "stet-ha", folder_a)
        t = time.perf_counter()
        a, _ = daemons.start(work / "stet-ha")
        wait(lambda: len(live(a.home)) >= files, 1800, "A to ingest the attachments", 0.25)
        ingest = time.perf_counter() - t
        os.sync()  # nothing of the set-up left dirty for the clock's fsyncs to wait on (as for Syncthing)
        b, _ = daemons.start(work / "stet-hb")
        assert a.proc is not None
        assert b.proc is not None
        sampler = Sampler({"A": a.proc.pid, "B": b.proc.pid})
        profiler = Profiler(profile, workload, {"A": a.proc.pid, "B": b.proc.pid})
        threads = ThreadCpu(THREADS, {"A": a.proc.pid, "B": b.proc.pid})
        # The invite made before the clock, as Syncthing's devices are configured before its
        # clock (the un-pause): the clock starts just before `stet join` (the method above).
        # Its time is printed (``invite``): before 2026-12-01 17:30 UTC the clock included it.
        t_invite = time.perf_counter()
        invite = invite_from(a)
        invited = time.perf_counter() - t_invite
        t0 = time.perf_counter()
        join_with(b, invite, folder_b)
        busy: list[float] = []
        big_left = 0
        notes = {rel: v for rel, v in manifest.items() if rel.endswith(".md")}
        blobs = {rel: v for rel, v in manifest.items() if rel not in notes}
        if p1:
            # The notes first (as they were), then saves to them while the big file travels.
            wait(lambda: arrived(folder_b, notes), 300, "the notes on B", 0.01)
            big_left = sum(1 for rel in blobs if not (folder_b / rel).exists())
            busy = p1_saves(folder_a, folder_b, sorted(notes), until=lambda: arrived(folder_b, blobs),
                            max_saves=5000, label="during")
        wait(lambda: arrived(folder_b, blobs if p1 else manifest), 3600, "every file on B", 0.02)
        elapsed = time.perf_counter() - t0
        tail = time.time() - last_landed(work / "stet-hb")
        if THREADS:
            print(threads.report(), flush=True)
        sampler.stop()
        profiler.stop()
        quiet: list[float] = []
        if p1:
            quiet = p1_saves(folder_a, folder_b, sorted(notes), until=lambda: False,
                             max_saves=min(200, max(20, len(busy))), label="quiet")
        same = identical(folder_b, blobs if p1 else manifest)
    return {"time": elapsed, "ingest": ingest, "rssA": sampler.growth("A"), "rssB": sampler.growth("B"),
            "cpuA": sampler.cpu["A"], "cpuB": sampler.cpu["B"], "identical": same, "p1_busy": busy,
            "p1_quiet": quiet, "big_left_at_p1": big_left, "tail": tail, "invite": invited}


def last_landed(home: Path) -> float:
    """When B's log last said a blob landed (verified, in the store): the rest of the time
    to every file at its path is the folder side's (``tail`` in the results)."""
    last = ""
    with contextlib.suppress(OSError):
        for line in (home / "logs" / "daemon.log").read_text(errors="replace").splitlines():
            if "blob_transfer: blob " in line and " landed (" in line:
                last = line[:23]
    if not last:
        return float("nan")
    return datetime.datetime.strptime(last, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # the log's local time


def run_syncthing(work: Path, folder_a: Path, manifest: Manifest) -> dict[str, Any]:
    from syncthing_ref import SyncthingPair

    folder_b = work / "st-b"
    folder_b.mkdir()
    with SyncthingPair(work, folder_a, folder_b, b_paused=True) as st:
        t = time.perf_counter()
        st.wait_scanned(st.a, len(manifest), timeout=1800)
        scan = time.perf_counter() - t
        os.sync()  # as for Stet: nothing of the set-up left dirty when the clock starts
        sampler = Sampler({"A": st.a.syncthing_pid(), "B": st.b.syncthing_pid()})
        t0 = time.perf_counter()
        st.unpause()
        wait(lambda: arrived(folder_b, manifest), 3600, "every file on Syncthing's B", 0.02)
        elapsed = time.perf_counter() - t0
        sampler.stop()
        same = identical(folder_b, manifest)
    return {"time": elapsed, "ingest": scan, "rssA": sampler.growth("A"), "rssB": sampler.growth("B"),
            "cpuA": sampler.cpu["A"], "cpuB": sampler.cpu["B"], "identical": same}


def row(tool: str, workload: str, r: dict[str, Any]) -> str:
    return (f"| {workload} | {tool} | {r['time']:.1f} | {r['rssA'] / MiB:.1f} | {r['rssB'] / MiB:.1f} | "
            f"{r['cpuA']:.1f} + {r['cpuB']:.1f} | {r['ingest']:.1f} | {'yes' if r['identical'] else 'NO'} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--image-mb", type=int, default=5)
    ap.add_argument("--big-mb", type=int, default=1024)
    ap.add_argument("--only", choices=("images", "big"))
    ap.add_argument("--no-syncthing", action="store_true")
    ap.add_argument("--no-p1", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--threads", action="store_true",
                    help="print each daemon thread's CPU-seconds while the clock ran (py-spy names them)")
    ap.add_argument("--no-channel", action="store_true",
                    help="Stet's chunks on the main link, not its blob channel (STET_BLOB_CHANNEL=0)")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="py-spy Stet's A and B while the clock runs; collapsed stacks into DIR")
    args = ap.parse_args()
    global THREADS
    THREADS = args.threads
    install_sigterm_exit()
    if args.no_channel:
        os.environ["STET_BLOB_CHANNEL"] = "0"  # the daemons inherit it
    load_start = load_average()
    rows: list[str] = []
    p1_lines: list[str] = []
    for workload in ("images", "big"):
        if args.only and args.only != workload:
            continue
        with work_dir(f"stet-p9-{workload}-", keep=args.keep) as work:
            folder_a = work / "stet-a"
            manifest = generate(folder_a, workload, args)
            total = sum(size for size, _ in manifest.values())
            label = (f"{args.images} × {args.image_mb} MB" if workload == "images"
                     else f"1 × {args.big_mb} MB") + f" (+{NOTES} notes), {total / 1e9:.2f} GB"
            if not args.no_syncthing:
                st_a = work / "st-a"
                link_tree(folder_a, st_a)
                r = run_syncthing(work, st_a, manifest)
                print(f"{workload}: Syncthing {r}", flush=True)
                rows.append(row("Syncthing", label, r))
            p1 = workload == "big" and not args.no_p1
            r = run_stet(work, folder_a, manifest, p1=p1, profile=args.profile, workload=workload)
            print(f"{workload}: Stet { {k: v for k, v in r.items() if not k.startswith('p1')} }", flush=True)
            rows.append(row("Stet", label, r))
            if p1:
                p1_lines = [
                    p1_row("while the file transfers", r["p1_busy"]),
                    p1_row("afterwards, nothing else going on", r["p1_quiet"]),
                ]
    load_end = load_average()
    body = (
        "P9 first sync of attachments, two instances on loopback, the same files for both tools "
        "(hard links of one generated folder; incompressible bytes). Time: Stet from `stet join`, "
        "Syncthing from un-pausing the peer (both include connecting), until every file is at its size "
        "on B; then every hash checked. RSS growth: peak VmRSS (sampled every 50 ms) over the value "
        "before the clock, sender A / receiver B. CPU: utime + stime of A + B while the clock ran. "
        "Ingest/scan (not in the time): Stet's A copying the files into its blob store while hashing; "
        "Syncthing's A scanning. Before either clock starts, `os.sync()`: nothing the set-up wrote "
        "is left dirty for the transfer's fsyncs (or a note's) to wait behind.\n\n"
        "| workload | tool | first sync s | RSS growth A MiB | RSS growth B MiB | CPU s A + B | "
        "ingest/scan s | identical |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        "Targets (SPEC §9 P9): Stet's time ≤ Syncthing's; RSS growth ≤ 50 MB.\n"
    )
    if p1_lines:
        body += (
            "\nP1 while the 1 GB file transfers (Stet; 20-note vault, not P1's 1,000 notes): editor "
            "saves of a note on A, 50 ms apart, to the same bytes on B's disk.\n\n"
            "| when | saves | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|\n" + "\n".join(p1_lines)
            + "\n\nTargets (SPEC §9 P1): p50 ≤ 30 ms, p99 ≤ 150 ms.\n"
        )
    if args.no_channel:
        body += "\nStet ran with its blob channel off (`--no-channel`: chunks on the main link).\n"
    body += (f"\nLoad average (1/5/15 min) at the start: {load_start}; at the end: {load_end} (2 cores: "
             "well above ~1 means other work ran beside; both tools ran in the same conditions).\n")
    print(body)
    if not args.no_write:
        append_results(body, title="P9 attachments, Stet beside Syncthing")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
