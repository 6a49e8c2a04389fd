"""Shared pieces for the benchmarks that run real, paired daemons (P1, P5-P7).

Not a benchmark itself. It drives the product only from outside, as a user would: the real
``stet`` CLI (`init`, `invite`, `join`) and real daemon processes (``tests.harness.
DaemonProcess``: ``python -m stet.daemon`` on its own home, API and peer port 0, no mDNS).

* :class:`Daemons`: starts, stops and always kills the daemons of a run (``with``).
* :func:`init_vault`, :func:`pair`, :func:`wait_synced`: the setup of a synced pair.
* :class:`CountingProxy`: a loopback TCP relay that counts the bytes of each connection in
  each direction, with the time of each byte burst. Put between a dialer and a listener
  (the invite names the proxy's address), it measures what really crosses the socket:
  TLS handshake and records, websocket framing and the application frames, all
  included; only TCP/IP headers are not (the daemons' own counters see frames only).
* :class:`Inotify`: Linux inotify through ctypes (standard library only), to learn about
  a file landing on disk without a CPU-burning poll loop.
* :func:`rss_bytes`, :func:`cpu_seconds`: ``/proc/PID/status`` and ``/proc/PID/stat``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.harness import DaemonProcess, run_stet  # noqa: E402

__all__ = [
    "CountingProxy", "Daemons", "Inotify", "cpu_seconds", "device_id", "fmt_bytes",
    "init_vault", "install_sigterm_exit", "linked", "load_average", "pair", "percentile", "peer_port",
    "rss_bytes", "vault_status", "wait_for", "wait_synced", "wait_synced_at", "work_dir",
]


# -- small utilities -----------------------------------------------------------------------


def wait_for(predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until truthy; raise ``TimeoutError`` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the daemon may be busy or restarting
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last!r})")
        time.sleep(interval)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))  # ceil(q/100 * n) - 1
    return s[k]


def fmt_bytes(n: float) -> str:
    if n < 10 * 1024:
        return f"{n:,.0f} B"
    if n < 10 * 1024 * 1024:
        return f"{n / 1024:,.1f} KiB"
    return f"{n / 1024 / 1024:,.1f} MiB"


def load_average() -> str:
    """The 1/5/15-minute load averages, e.g. ``"0.12 0.30 0.25"``: a run on a machine busy
    with other work is not comparable to one on an idle machine, so tables print it."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def install_sigterm_exit() -> None:
    """Turn SIGTERM into SystemExit, so ``finally`` blocks stop the daemons and clean up."""
    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


# -- /proc ------------------------------------------------------------------------------------


def rss_bytes(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in bytes."""
    rss = hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return rss, hwm


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # fields 14 and 15 of stat(5)


# -- daemons ----------------------------------------------------------------------------------


class Daemons:
    """The daemons of one run: ``start`` returns (daemon, seconds from spawn to ready);
    leaving the ``with`` block stops every one still running (SIGTERM, then SIGKILL)."""

    def __init__(self) -> None:
        self.all: list[DaemonProcess] = []

    def __enter__(self) -> Daemons:
        return self

    def __exit__(self, *exc: object) -> None:
        for d in self.all:
            self.stop(d)

    def start(self, home: Path, timeout: float = 120.0) -> tuple[DaemonProcess, float]:
        d = DaemonProcess(home)
        self.all.append(d)
        started = time.perf_counter()
        # ready = daemon.json names this pid and GET /v1/status answers (polled every 10 ms)
        d.start(timeout=timeout)
        return d, time.perf_counter() - started

    @staticmethod
    def stop(d: DaemonProcess, timeout: float = 30.0) -> None:
        if d.proc is None or d.proc.poll() is not None:
            return
        try:
            d.stop(timeout=timeout)
        except Exception:
            with contextlib.suppress(Exception):
                d.proc.kill()
                d.proc.wait(timeout=10)


def _daemon_json(d: DaemonProcess) -> dict[str, Any]:
    return json.loads(d.layout.daemon_json.read_text())


def peer_port(d: DaemonProcess) -> int:
    return int(_daemon_json(d)["peer_port"])


def device_id(d: DaemonProcess) -> str:
    return str(_daemon_json(d)["device_id"])


def init_vault(home: Path, folder: Path, name: str = "notes") -> float:
    """``stet init FOLDER`` on a home (before its daemon starts); returns its wall time."""
    started = time.perf_counter()
    run_stet(home, "init", str(folder), "--name", name, "--json", timeout=600)
    return time.perf_counter() - started


def pair(a: DaemonProcess, b: DaemonProcess, folder_b: Path, *, address: str | None = None,
         vault: str = "notes") -> None:
    """Invite from A (naming ``address``, default A's own peer port) and join on B."""
    join_with(b, invite_from(a, address=address, vault=vault), folder_b)


def invite_from(a: DaemonProcess, *, address: str | None = None, vault: str = "notes") -> str:
    """``stet invite`` on A, naming ``address`` (default A's own peer port)."""
    address = address or f"127.0.0.1:{peer_port(a)}"
    out = run_stet(a.home, "invite", vault, "--address", address, "--json")
    return str(json.loads(out.stdout)["invite"])


def join_with(b: DaemonProcess, invite: str, folder_b: Path) -> None:
    """``stet join`` on B with an invite."""
    out = run_stet(b.home, "join", invite, str(folder_b), "--json", timeout=300)
    result = json.loads(out.stdout)
    if not result.get("joined"):
        raise RuntimeError(f"join failed: {result}")


def linked(d: DaemonProcess, other_device: str) -> dict[str, Any] | None:
    """The ``peers[]`` entry of ``d``'s status for ``other_device``, if linked."""
    for p in d.client.status()["peers"]:
        if p["device"] == other_device:
            return dict(p)
    return None


def vault_status(d: DaemonProcess, name: str = "notes") -> dict[str, Any]:
    for v in d.client.status()["vaults"]:
        if v["name"] == name:
            return dict(v)
    raise KeyError(name)


def _count_files(root: Path) -> int:
    n = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [x for x in dirnames if not x.startswith(".stet")]
        n += sum(1 for f in filenames if not f.startswith(".stet"))
    return n


def wait_synced(d: DaemonProcess, folder: Path, notes: int, digest: str, *, timeout: float,
                interval: float = 0.25) -> float:
    """Wait until ``folder`` holds ``notes`` files whose tree digest is ``digest`` (checked in
    full only once the file count and the daemon's note count are right and its writes are
    done, so the poll stays cheap); returns the time it took."""
    started = time.perf_counter()
    wait_synced_at(d, folder, notes, digest, timeout=timeout, interval=interval)
    return time.perf_counter() - started


def wait_synced_at(d: DaemonProcess, folder: Path, notes: int, digest: str, *, timeout: float,
                   interval: float = 0.25) -> float:
    """``wait_synced``, returning when (``time.monotonic()``) the check that found the folder
    identical began: the folder was identical then, and the bench's own hashing of 10,000
    files after that moment (~0.5-1 s of a core) is not counted as the daemon's time."""
    from generate_vault import tree_digest

    began: list[float] = []

    def done() -> bool:
        began[:] = [time.monotonic()]
        v = vault_status(d)
        if v["notes"] != notes or v["pendingWrites"] or _count_files(folder) != notes:
            return False
        return bool(tree_digest(folder) == digest)

    wait_for(done, timeout=timeout, what=f"{notes} notes byte-identical in {folder}", interval=interval)
    return began[0]


# -- a counting TCP relay ---------------------------------------------------------------------


@dataclass
class ConnCount:
    """One relayed connection: bytes each way and when traffic was seen."""

    opened: float
    up: int = 0  # dialer -> listener
    down: int = 0  # listener -> dialer
    first: float | None = None
    last: float | None = None
    closed: float | None = None
    bursts: list[tuple[float, str, int]] = field(default_factory=list)  # (time, "up"/"down", n)


class CountingProxy:
    """Relay 127.0.0.1:<port> -> ``target``; count every connection's bytes both ways.

    One thread, ``select`` over all sockets, 256 KiB reads: it adds a little latency and
    CPU to the relayed link, which is why the latency benchmark (P1) does not use it.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.conns: list[ConnCount] = []
        self._lock = threading.Lock()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="counting-proxy", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=5)
        self.listener.close()

    def snapshot(self) -> list[ConnCount]:
        with self._lock:
            return [ConnCount(c.opened, c.up, c.down, c.first, c.last, c.closed, list(c.bursts))
                    for c in self.conns]

    def _run(self) -> None:
        peers: dict[socket.socket, tuple[socket.socket, ConnCount, str]] = {}
        pending: dict[socket.socket, bytes] = {}
        while not self._stop:
            # a socket is read only when what it sent last has been passed on (back-pressure)
            rlist = [self.listener, *(s for s, (other, _c, _d) in peers.items() if not pending.get(other))]
            wlist = [s for s, data in pending.items() if data]
            try:
                readable, writable, _ = select.select(rlist, wlist, [], 0.1)
            except (OSError, ValueError):
                readable, writable = [], []
                for s in list(peers):
                    if s.fileno() < 0:
                        peers.pop(s, None)
                        pending.pop(s, None)
                continue
            for s in writable:
                data = pending.get(s)
                if not data or s.fileno() < 0:
                    continue
                try:
                    n = s.send(data)
                    pending[s] = data[n:]
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    self._drop(s, peers, pending)
            for s in readable:
                if s is self.listener:
                    self._accept(peers, pending)
                    continue
                if s not in peers:
                    continue
                other, count, direction = peers[s]
                try:
                    data = s.recv(256 * 1024)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._drop(s, peers, pending)
                    continue
                now = time.perf_counter()
                with self._lock:
                    if direction == "up":
                        count.up += len(data)
                    else:
                        count.down += len(data)
                    count.first = count.first if count.first is not None else now
                    count.last = now
                    if len(count.bursts) < 100_000:
                        count.bursts.append((now, direction, len(data)))
                try:
                    n = other.send(data)
                except (BlockingIOError, InterruptedError):
                    n = 0
                except OSError:
                    self._drop(s, peers, pending)
                    continue
                if n < len(data):
                    pending[other] = data[n:]
        for s in list(peers):
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self, peers: dict[socket.socket, Any], pending: dict[socket.socket, bytes]) -> None:
        try:
            client, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        for s in (client, upstream):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        count = ConnCount(opened=time.perf_counter())
        with self._lock:
            self.conns.append(count)
        peers[client] = (upstream, count, "up")
        peers[upstream] = (client, count, "down")
        pending[client] = b""
        pending[upstream] = b""

    def _drop(self, s: socket.socket, peers: dict[socket.socket, Any],
              pending: dict[socket.socket, bytes]) -> None:
        entry = peers.pop(s, None)
        pending.pop(s, None)
        with contextlib.suppress(OSError):
            s.close()
        if entry is None:
            return
        other, count, _ = entry
        with self._lock:
            count.closed = count.closed or time.perf_counter()
        if other in peers:
            # flush what is queued for the other side, then close it too
            data = pending.pop(other, b"")
            with contextlib.suppress(OSError):
                other.setblocking(True)
                other.settimeout(1)
                if data:
                    other.sendall(data)
            peers.pop(other, None)
            with contextlib.suppress(OSError):
                other.close()


# -- inotify ----------------------------------------------------------------------------------

IN_MODIFY = 0x002
IN_CLOSE_WRITE = 0x008
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")


class Inotify:
    """Watch directories for files being written or renamed into place (Linux)."""

    MASK = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE

    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        self._watched: dict[str, int] = {}

    def watch(self, directory: Path) -> None:
        key = os.fsencode(directory)
        if key in self._watched:
            return
        wd = self._add(self.fd, key, self.MASK)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory} failed")
        self._watched[key] = wd  # type: ignore[index]

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` s for events; drain them; True if there were any."""
        r, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not r:
            return False
        got = False
        with contextlib.suppress(BlockingIOError):
            while True:
                try:
                    data = os.read(self.fd, 65536)
                except OSError as exc:
                    if exc.errno == errno.EAGAIN:
                        break
                    raise
                if not data:
                    break
                got = True
        return got

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


@contextlib.contextmanager
def work_dir(prefix: str, keep: bool = False) -> Iterator[Path]:
    with work_dir_in(None, prefix, keep) as path:
        yield path


@contextlib.contextmanager
def work_dir_in(parent: Path | None, prefix: str, keep: bool = False) -> Iterator[Path]:
    """A new folder under ``parent`` (None: the system's temp folder), removed unless ``keep``."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU-seconds (utime + stime) of each thread of ``pid`` so far, by native thread id."""
    out: dict[int, float] = {}
    hz = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            st = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            fields = st[st.rindex(")") + 2:].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / hz
    return out


def py_spy() -> str | None:
    """The ``py-spy`` command: on PATH, or beside this interpreter (a venv not activated)."""
    found = shutil.which("py-spy")
    if found is None:
        beside = Path(sys.executable).parent / "py-spy"
        found = str(beside) if beside.exists() else None
    return found


class ThreadCpu:
    """``--threads``: each Python thread's CPU while the clock runs (native ids named by
    ``py-spy dump`` at the end), to tell which stage of the pipeline is the busy one.
    ``mark(label)`` keeps a cheap snapshot (``/proc`` only) to report beside the end."""

    def __init__(self, on: bool, pids: dict[str, int]) -> None:
        self.pids = pids if on else {}
        self.t0 = time.perf_counter()
        self.cpu0 = {k: thread_cpu(p) for k, p in self.pids.items()}
        self.marks: list[tuple[str, float, dict[str, dict[int, float]]]] = []

    def mark(self, label: str) -> None:
        if self.pids:
            self.marks.append((label, time.perf_counter() - self.t0,
                               {k: thread_cpu(p) for k, p in self.pids.items()}))

    def report(self) -> str:
        self.mark("end")
        lines = []
        spy = py_spy()
        if spy is None:
            lines.append("(no py-spy here: threads are shown by native id only, as ?)")
        for k, pid in self.pids.items():
            dump = "" if spy is None else subprocess.run(
                [spy, "dump", "--pid", str(pid)], capture_output=True, text=True, check=False).stdout
            names = {int(m.group(1)): m.group(2)
                     for m in re.finditer(r'Thread (\d+) \(\w+\): "([^"]*)"', dump)}
            for label, wall, snaps in self.marks:
                by: dict[str, float] = {}
                for tid, c in snaps[k].items():
                    name = re.sub(r"_\d+$", "", names.get(tid, "?"))
                    by[name] = by.get(name, 0.0) + c - self.cpu0[k].get(tid, 0.0)
                shown = label if label == "end" else f"at {label}"
                lines.append(f"threads {k}, {shown} (CPU-s in {wall:.2f} s): " + ", ".join(
                    f"{n} {c:.2f}" for n, c in sorted(by.items(), key=lambda x: -x[1]) if c >= 0.01))
        return "\n".join(lines)


def cpu_busy() -> dict[int, tuple[int, int]]:
    """Each CPU's (busy, total) jiffies so far (``/proc/stat``): busy is all but idle and iowait."""
    out: dict[int, tuple[int, int]] = {}
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu":
                values = [int(x) for x in fields]
                idle = values[3] + (values[4] if len(values) > 4 else 0)
                out[int(name[3:])] = (sum(values) - idle, sum(values))
    return out


def busy_between(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> str:
    """How busy each CPU was between two ``cpu_busy`` readings, as "cpu0 93%, cpu1 71%"."""
    parts = []
    for cpu, (busy, total) in sorted(after.items()):
        b0, t0 = before.get(cpu, (0, 0))
        parts.append(f"cpu{cpu} {100 * (busy - b0) / max(1, total - t0):.0f}%")
    return ", ".join(parts)

