#!/usr/bin/env python3
"""The Syncthing reference for SPEC §9: two Syncthing instances on loopback, measured.

    python bench/syncthing_ref.py [--small-notes 1000] [--notes 10000] [--seed 1]
        [--saves-default 20] [--saves-fast 100] [--idle-seconds 60] [--no-write] [--keep]
        [--strace-check]

Library (used by ``bench/run_all.py``)::

    from syncthing_ref import ensure_installed, SyncthingPair, measure_p1, run_reference

What it runs. Debian's ``syncthing`` package (installed with ``apt-get`` if missing). Two
instances, A and B, each with its own ``--home`` (``syncthing generate``), started with
``syncthing serve --no-restart --no-upgrade --no-browser`` (each instance is still two
processes: Syncthing's monitor and the real syncthing, its child), GUI/REST on
``127.0.0.1:<free port>`` with the API key from ``config.xml``, sync listener
``tcp://127.0.0.1:<free port>``. The generated
``config.xml`` is edited before the first start, and only where loopback-only operation
needs it:

* global discovery, local discovery, relays, NAT traversal (UPnP/NAT-PMP), usage
  reporting, crash reporting and automatic upgrades are off, and LAN addresses are not
  announced; no browser;
* each device knows the other by device ID at a static ``tcp://127.0.0.1:PORT`` address;
* one shared ``sendreceive`` folder per instance, built from the ``<defaults><folder>``
  element of the generated config (so every folder setting is Syncthing's default:
  ``fsWatcherEnabled`` true, ``fsWatcherDelayS`` 10, ``rescanIntervalS`` 3600, ...). The
  "fast" variant sets ``fsWatcherDelayS`` to 1, its minimum (through the REST API).

Nothing leaves loopback. A :class:`NetGuard` samples the sockets of both processes
(``/proc/PID/fd`` -> ``/proc/net/{tcp,tcp6,udp,udp6}``) every 0.2 s during the whole run
and reports any socket bound or connected to a non-loopback address; ``--strace-check``
runs both instances under ``strace -f -e trace=network`` and lists every address they
tried to reach (slower: for checking, not for figures).

Measurements (each a function returning numbers, mirroring SPEC §9):

* :func:`measure_p1`: editor-style saves on A (temp file, fsync, ``os.replace``, the same
  workload as ``p1_latency.py``) -> the same bytes on B's disk (inotify-woken reads).
* :func:`measure_first_sync` (P4): A has scanned the vault, B's folder is empty and B has A
  paused; the clock starts when B un-pauses A (REST) and stops when B's folder is
  byte-identical (file count, then a tree digest of paths and bytes).
* :func:`measure_idle_cpu` (P6): utime + stime of both processes over N seconds,
  extrapolated to 10 minutes.
* :func:`measure_rss` (P7): VmRSS (and the peak, VmHWM) of each instance.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import ipaddress
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from generate_vault import generate_vault, tree_digest  # noqa: E402

__all__ = [
    "FOLDER_ID",
    "Instance",
    "NetGuard",
    "SyncthingPair",
    "ensure_installed",
    "measure_first_sync",
    "measure_idle_cpu",
    "measure_p1",
    "measure_rss",
    "run_reference",
    "syncthing_version",
]

FOLDER_ID = "stet-bench"
DEFAULT_WATCHER_DELAY_S = 10  # Syncthing's default fsWatcherDelayS (checked against the config)
MIN_WATCHER_DELAY_S = 1  # fsWatcherDelayS is an integer number of seconds; 1 is the least


# -- installation ---------------------------------------------------------------------------


def syncthing_version(exe: str = "syncthing") -> str | None:
    path = shutil.which(exe)
    if not path:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def ensure_installed() -> str:
    """The ``syncthing`` executable's path; installs Debian's package with apt-get if missing."""
    path = shutil.which("syncthing")
    if path:
        return path
    print("syncthing not found: apt-get install -y syncthing", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, timeout=600, stdout=subprocess.DEVNULL)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", "syncthing"],
        check=True,
        env=env,
        timeout=600,
        stdout=subprocess.DEVNULL,
    )
    path = shutil.which("syncthing")
    if not path:
        raise RuntimeError("apt-get installed syncthing but it is not on PATH")
    return path


# -- small utilities ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # busy or starting
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last!r})")
        time.sleep(interval)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (the same definition as peer_bench.percentile)."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def rss_bytes(pid: int) -> tuple[int, int]:
    rss = hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return rss, hwm


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _is_tmp(name: str) -> bool:
    return name.startswith(".syncthing.") and name.endswith(".tmp")


def count_files(root: Path) -> int:
    """Files under ``root``, leaving out Syncthing's marker folder and its temporary files."""
    n = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".stfolder", ".stversions")]
        n += sum(1 for f in filenames if not _is_tmp(f))
    return n


def folder_matches(root: Path, notes: int, digest: str) -> bool:
    """Byte-identical to the generated vault: same count first (cheap), then the digest."""
    return count_files(root) == notes and tree_digest(root) == digest


# -- one Syncthing instance -----------------------------------------------------------------


def _set(options: ET.Element, tag: str, value: str) -> None:
    el = options.find(tag)
    if el is None:
        el = ET.SubElement(options, tag)
    el.text = value


@dataclass
class Instance:
    """One Syncthing: its home, folder, ports, API key, device ID and process."""

    name: str
    home: Path
    folder: Path
    exe: str = "syncthing"
    gui_port: int = 0
    listen_port: int = 0
    api_key: str = ""
    device_id: str = ""
    proc: subprocess.Popen[bytes] | None = None
    strace: bool = False
    started_at: float = 0.0
    _log: Any = None

    @property
    def config_path(self) -> Path:
        return self.home / "config.xml"

    @property
    def log_path(self) -> Path:
        return self.home / "syncthing.log"

    @property
    def strace_path(self) -> Path:
        return self.home / "strace.log"

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.listen_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def generate(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [self.exe, "generate", "--home", str(self.home), "--no-default-folder"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        root = ET.parse(self.config_path).getroot()
        dev = root.find("device")
        gui = root.find("gui")
        assert dev is not None
        assert gui is not None
        self.device_id = dev.attrib["id"]
        self.api_key = (gui.findtext("apikey") or "").strip()
        self.gui_port = free_port()
        self.listen_port = free_port()

    def configure(
        self, peer: Instance, *, watcher_delay_s: int | None = None, peer_paused: bool = False
    ) -> None:
        """Edit config.xml (before the first start): loopback only, the peer, the shared folder."""
        tree = ET.parse(self.config_path)
        root = tree.getroot()
        gui = root.find("gui")
        options = root.find("options")
        defaults = root.find("defaults")
        assert gui is not None
        assert options is not None
        assert defaults is not None
        gui.set("tls", "false")
        _set(gui, "address", f"127.0.0.1:{self.gui_port}")
        for el in options.findall("listenAddress"):
            options.remove(el)
        listen = ET.Element("listenAddress")
        listen.text = self.address
        options.insert(0, listen)
        for tag, value in [
            ("globalAnnounceEnabled", "false"),
            ("localAnnounceEnabled", "false"),
            ("relaysEnabled", "false"),
            ("natEnabled", "false"),
            ("announceLANAddresses", "false"),
            ("startBrowser", "false"),
            ("urAccepted", "-1"),  # usage reporting declined
            ("crashReportingEnabled", "false"),
            ("autoUpgradeIntervalH", "0"),
        ]:
            _set(options, tag, value)
        # the peer device: the <defaults><device> element with its ID and a static address
        dev_default = defaults.find("device")
        assert dev_default is not None
        peer_el = copy.deepcopy(dev_default)
        peer_el.set("id", peer.device_id)
        peer_el.set("name", peer.name)
        for el in peer_el.findall("address"):
            peer_el.remove(el)
        addr = ET.Element("address")
        addr.text = peer.address
        peer_el.insert(0, addr)
        _set(peer_el, "paused", "true" if peer_paused else "false")
        own = root.find("device")
        assert own is not None
        own.set("name", self.name)
        root.insert(list(root).index(own) + 1, peer_el)
        # the folder: the <defaults><folder> element, shared with both devices
        folder_default = defaults.find("folder")
        assert folder_default is not None
        self.default_watcher_delay_s = int(folder_default.get("fsWatcherDelayS", "10"))
        folder = copy.deepcopy(folder_default)
        folder.set("id", FOLDER_ID)
        folder.set("label", FOLDER_ID)
        folder.set("path", str(self.folder))
        folder.set("type", "sendreceive")
        if watcher_delay_s is not None:
            folder.set("fsWatcherDelayS", str(watcher_delay_s))
        for el in folder.findall("device"):
            folder.remove(el)
        for i, dev_id in enumerate([self.device_id, peer.device_id]):
            d = ET.Element("device", {"id": dev_id, "introducedBy": ""})
            ET.SubElement(d, "encryptionPassword").text = ""
            folder.insert(1 + i, d)
        root.insert(list(root).index(peer_el) + 1, folder)
        tree.write(self.config_path, encoding="unicode")
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / ".stfolder").mkdir(exist_ok=True)  # Syncthing's folder marker

    def start(self, timeout: float = 60.0) -> float:
        """Start ``syncthing serve``; returns seconds until the REST API answers."""
        env = dict(os.environ, STNORESTART="1", STNOUPGRADE="1", STNODEFAULTFOLDER="1")
        cmd = [
            self.exe,
            "serve",
            "--home",
            str(self.home),
            "--no-browser",
            "--no-restart",
            "--no-upgrade",
            "--no-default-folder",
            f"--gui-address=127.0.0.1:{self.gui_port}",
            "--logflags=3",
        ]
        if self.strace:
            if not shutil.which("strace"):
                raise RuntimeError("--strace-check needs strace (apt-get install strace)")
            cmd = ["strace", "-f", "-qq", "-e", "trace=network", "-o", str(self.strace_path), *cmd]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop())
        t0 = self.started_at = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        wait_for(self._ping, timeout=timeout, what=f"Syncthing {self.name}'s REST API")
        return time.perf_counter() - t0

    def pids(self) -> list[int]:
        """Every process of this instance: the started one and all its descendants.

        ``syncthing serve`` runs as two processes even with ``--no-restart``: a monitor that
        starts (and would restart) the real syncthing as its child. Under ``--strace-check``
        strace is the root of the tree."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop(0)
            out.append(pid)
            with contextlib.suppress(OSError):
                for task in os.listdir(f"/proc/{pid}/task"):
                    with contextlib.suppress(OSError):
                        todo += [
                            int(k) for k in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                        ]
        return out

    def syncthing_pid(self) -> int:
        """The pid of the syncthing process that does the work: the deepest one of the tree."""
        pids = [p for p in self.pids() if _comm(p) == "syncthing"]
        if not pids:
            raise RuntimeError(f"Syncthing {self.name} is not running")
        return pids[-1]

    def monitor_pids(self) -> list[int]:
        """The other syncthing processes of the tree (the monitor)."""
        pids = [p for p in self.pids() if _comm(p) == "syncthing"]
        return pids[:-1]

    def _ping(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"Syncthing {self.name} exited {self.proc.returncode}: {self.log_tail()}")
        return bool(self.rest("GET", "/rest/system/ping", timeout=2).get("ping") == "pong")

    def rest(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.gui_port}{path}",
            data=data,
            method=method,
            headers={"X-API-Key": self.api_key, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw.strip() else {}

    def folder_status(self) -> dict[str, Any]:
        return dict(self.rest("GET", f"/rest/db/status?folder={FOLDER_ID}"))

    def connected_to(self, other: Instance) -> bool:
        conns = self.rest("GET", "/rest/system/connections")["connections"]
        return bool(conns.get(other.device_id, {}).get("connected"))

    def set_watcher_delay(self, seconds: int) -> None:
        self.rest("PATCH", f"/rest/config/folders/{FOLDER_ID}", {"fsWatcherDelayS": seconds})
        got = self.rest("GET", f"/rest/config/folders/{FOLDER_ID}")
        if int(got["fsWatcherDelayS"]) != seconds or not got["fsWatcherEnabled"]:
            raise RuntimeError(f"watcher delay not applied on {self.name}: {got['fsWatcherDelayS']}")

    def watcher_settings(self) -> dict[str, Any]:
        got = self.rest("GET", f"/rest/config/folders/{FOLDER_ID}")
        return {k: got[k] for k in ("fsWatcherEnabled", "fsWatcherDelayS", "rescanIntervalS", "type")}

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> None:
        """Shut down through the API, then SIGTERM, then SIGKILL (the whole process group)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(Exception):
                self.rest("POST", "/rest/system/shutdown", timeout=3)
            try:
                proc.wait(timeout=timeout / 2)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout / 2)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        if proc is not None:  # strace's children, if any are left
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None


# -- loopback guard -------------------------------------------------------------------------


def _parse_addr(hexaddr: str) -> tuple[str, int]:
    ip_hex, port_hex = hexaddr.split(":")
    raw = bytes.fromhex(ip_hex)
    if len(raw) == 4:
        ip = str(ipaddress.IPv4Address(raw[::-1]))
    else:  # four little-endian 32-bit words
        ip = str(ipaddress.IPv6Address(b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))))
    return ip, int(port_hex, 16)


def _loopback_or_any(ip: str, *, remote: bool) -> bool:
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr.is_loopback:
        return True
    return remote and addr.is_unspecified  # a listener's or unconnected socket's "remote" 0.0.0.0:0


class NetGuard:
    """Sample the sockets of some pids every ``interval`` s; keep every distinct endpoint seen."""

    def __init__(self, pids: Callable[[], list[int]], interval: float = 0.2) -> None:
        self._pids = pids
        self.interval = interval
        self.seen: dict[
            tuple[str, str, int, str, int], int
        ] = {}  # (proto, lip, lport, rip, rport) -> samples
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="netguard", daemon=True)

    def __enter__(self) -> NetGuard:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        inodes: set[str] = set()
        for pid in self._pids():
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        target = os.readlink(f"/proc/{pid}/fd/{fd}")
                        if target.startswith("socket:["):
                            inodes.add(target[8:-1])
        if not inodes:
            return
        for proto in ("tcp", "tcp6", "udp", "udp6"):
            with contextlib.suppress(OSError):
                lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
                for line in lines:
                    f = line.split()
                    if len(f) > 9 and f[9] in inodes:
                        lip, lport = _parse_addr(f[1])
                        rip, rport = _parse_addr(f[2])
                        key = (proto, lip, lport, rip, rport)
                        self.seen[key] = self.seen.get(key, 0) + 1
        self.samples += 1

    def violations(self) -> list[tuple[str, str, int, str, int]]:
        return [
            k
            for k in self.seen
            if not (_loopback_or_any(k[1], remote=False) and _loopback_or_any(k[3], remote=True))
        ]

    def summary(self) -> str:
        bad = self.violations()
        peers = sorted({f"{k[3]}" for k in self.seen if k[4]})
        local = sorted({f"{k[0]} {k[1]}:{k[2]}" for k in self.seen if not k[4]})
        if bad:
            return f"NON-LOOPBACK sockets seen: {bad}"
        return (
            f"loopback only: {len(self.seen)} distinct sockets over {self.samples} samples; "
            f"remote peers {peers or ['none']}; listeners/unconnected {local}"
        )


_STRACE_ADDR = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')


def strace_addresses(path: Path) -> list[str]:
    """Every IP address that a traced process named in a network syscall (connect, sendto, ...)."""
    found: dict[str, None] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            for m in _STRACE_ADDR.finditer(line):
                found[m.group(1) or m.group(2)] = None
    return list(found)


# -- a pair ---------------------------------------------------------------------------------


class SyncthingPair:
    """Two configured Syncthing instances under ``work``; ``with`` stops both on exit.

    A holds ``folder_a`` (scanned at start); B's folder is ``folder_b``. With ``b_paused``,
    B starts with A paused, so the first sync starts only at :meth:`unpause` (P4's clock)."""

    def __init__(
        self,
        work: Path,
        folder_a: Path,
        folder_b: Path,
        *,
        watcher_delay_s: int | None = None,
        b_paused: bool = True,
        strace: bool = False,
    ) -> None:
        self.exe = ensure_installed()
        self.a = Instance("bench-a", work / "st-home-a", folder_a, exe=self.exe, strace=strace)
        self.b = Instance("bench-b", work / "st-home-b", folder_b, exe=self.exe, strace=strace)
        self.watcher_delay_s = watcher_delay_s
        self.b_paused = b_paused
        self.guard = NetGuard(lambda: [p for i in (self.a, self.b) for p in i.pids()])
        self.ready_s: dict[str, float] = {}

    def __enter__(self) -> SyncthingPair:
        try:
            self.a.generate()
            self.b.generate()
            self.a.configure(self.b, watcher_delay_s=self.watcher_delay_s)
            self.b.configure(self.a, watcher_delay_s=self.watcher_delay_s, peer_paused=self.b_paused)
            self.guard.__enter__()
            self.ready_s["A"] = self.a.start()
            self.ready_s["B"] = self.b.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for inst in (self.b, self.a):
            with contextlib.suppress(Exception):
                inst.stop()
        with contextlib.suppress(Exception):
            self.guard.__exit__()

    @property
    def instances(self) -> tuple[Instance, Instance]:
        return self.a, self.b

    def wait_scanned(self, inst: Instance, files: int, timeout: float = 600) -> float:
        """Seconds from ``inst``'s start until its folder is idle with ``files`` local files
        (the initial scan; polled every 0.1 s)."""

        def done() -> bool:
            st = inst.folder_status()
            return st.get("state") == "idle" and int(st.get("localFiles", -1)) == files

        wait_for(done, timeout=timeout, what=f"{inst.name} to scan {files} files", interval=0.1)
        return time.perf_counter() - inst.started_at

    def unpause(self) -> None:
        """B un-pauses A (and A's own entry for B, if paused): they connect and sync."""
        self.b.rest("PATCH", f"/rest/config/devices/{self.a.device_id}", {"paused": False})

    def wait_connected(self, timeout: float = 120) -> float:
        t0 = time.perf_counter()
        wait_for(
            lambda: self.a.connected_to(self.b) and self.b.connected_to(self.a),
            timeout=timeout,
            what="A and B to connect",
            interval=0.05,
        )
        return time.perf_counter() - t0

    def wait_idle(self, timeout: float = 300) -> None:
        """Both folders idle, nothing needed, both in sync with each other."""

        def done() -> bool:
            for inst in self.instances:
                st = inst.folder_status()
                if st.get("state") != "idle" or int(st.get("needFiles", 1)) or int(st.get("needBytes", 1)):
                    return False
            comp = self.a.rest("GET", f"/rest/db/completion?folder={FOLDER_ID}&device={self.b.device_id}")
            return float(comp.get("completion", 0)) >= 100.0

        wait_for(done, timeout=timeout, what="both Syncthing folders idle and in sync", interval=0.25)

    def set_watcher_delay(self, seconds: int) -> None:
        for inst in self.instances:
            inst.set_watcher_delay(seconds)
        # the folder restarts with the new setting: wait until both are idle again
        self.wait_idle(timeout=120)
        wait_for(lambda: self.a.connected_to(self.b), timeout=60, what="A and B connected", interval=0.1)


# -- measurements ---------------------------------------------------------------------------


def measure_first_sync(
    pair: SyncthingPair, folder_b: Path, notes: int, digest: str, *, timeout: float = 1200
) -> dict[str, float]:
    """P4. Call with B paused on A and A scanned: un-pause, time until B's folder is identical."""
    t0 = time.perf_counter()
    pair.unpause()
    connected = wait_for(
        lambda: pair.b.connected_to(pair.a) and time.perf_counter(),
        timeout=120,
        what="B to connect to A",
        interval=0.05,
    )
    wait_for(
        lambda: folder_matches(folder_b, notes, digest),
        timeout=timeout,
        what=f"{notes} files byte-identical in {folder_b}",
        interval=0.25,
    )
    done = time.perf_counter()
    return {"first_sync_s": done - t0, "connect_s": connected - t0}


def measure_p1(
    src: Path,
    dst: Path,
    paths: list[str],
    *,
    saves: int,
    warmup: int = 1,
    gap_s: float = 0.05,
    timeout_s: float = 60.0,
    max_seconds: float = 300.0,
    seed: int = 1,
    label: str = "A->B",
) -> dict[str, Any]:
    """P1: editor-style saves on ``src``, one at a time; latency = rename on ``src`` until the
    same bytes are read on ``dst`` (inotify-woken reads, 5 ms fallback). Bounded by
    ``saves``, ``timeout_s`` per save and ``max_seconds`` overall. Returns the latencies (s)."""
    from save_latency import measure_saves  # the procedure p1_latency.py runs on Stet

    saved = measure_saves(src, dst, paths, count=saves, warmup=warmup, gap_s=gap_s, timeout_s=timeout_s,
                          max_seconds=max_seconds, rng=random.Random(f"syncthing-p1-{seed}-{label}"),
                          label=label, give_up_after=3, progress_every=10, indent="  ")
    lat, warm, lost, attempted = saved.latencies, saved.warmup, saved.lost, saved.attempted
    out: dict[str, Any] = {
        "latencies_s": lat,
        "warmup_s": warm,
        "lost": lost,
        "attempted": attempted,
        "measured": len(lat),
    }
    if lat:
        out |= {
            "p50_s": percentile(lat, 50),
            "p95_s": percentile(lat, 95),
            "p99_s": percentile(lat, 99),
            "max_s": max(lat),
            "min_s": min(lat),
            "mean_s": statistics.fmean(lat),
        }
    return out


def measure_idle_cpu(pids: dict[str, int], seconds: float) -> dict[str, Any]:
    """P6: CPU-seconds (utime + stime) of each pid over ``seconds``, and the sum x 600/seconds."""
    c0 = {k: cpu_seconds(p) for k, p in pids.items()}
    t0 = time.perf_counter()
    time.sleep(seconds)
    elapsed = time.perf_counter() - t0
    cpu = {k: cpu_seconds(p) - c0[k] for k, p in pids.items()}
    total = sum(cpu.values())
    return {
        "seconds": elapsed,
        "cpu_s": cpu,
        "total_cpu_s": total,
        "per_10min": {k: v * 600 / elapsed for k, v in cpu.items()},
        "total_per_10min": total * 600 / elapsed,
    }


def measure_rss(pids: dict[str, int]) -> dict[str, dict[str, int]]:
    """P7: VmRSS and VmHWM (peak) of each pid, bytes."""
    out = {}
    for k, p in pids.items():
        rss, hwm = rss_bytes(p)
        out[k] = {"rss": rss, "hwm": hwm}
    return out


# -- the whole reference run ----------------------------------------------------------------


@contextlib.contextmanager
def _work_dir(prefix: str, keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        if keep:
            print(f"kept {path}", flush=True)
        else:
            shutil.rmtree(path, ignore_errors=True)


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:,.0f}"


def p1_session(
    notes: int,
    seed: int,
    *,
    saves_default: int,
    saves_fast: int,
    keep: bool = False,
    max_seconds_default: float = 330.0,
    max_seconds_fast: float = 240.0,
    strace: bool = False,
) -> dict[str, Any]:
    """P1 on a ``notes``-note vault: ``saves_default`` at the default watcher delay, then
    ``saves_fast`` with ``fsWatcherDelayS`` = 1 (same pair, delay changed through the REST API)."""
    res: dict[str, Any] = {"notes": notes}
    with _work_dir("syncthing-p1-", keep) as work:
        folder_a, folder_b = work / "a", work / "b"
        gen = generate_vault(folder_a, notes=notes, seed=seed)
        digest = tree_digest(folder_a)
        res["total_bytes"] = gen.total_bytes
        with SyncthingPair(work, folder_a, folder_b, strace=strace) as pair:
            res["ready_s"] = dict(pair.ready_s)
            res["scan_s"] = pair.wait_scanned(pair.a, notes)
            res["first_sync"] = measure_first_sync(pair, folder_b, notes, digest, timeout=600)
            pair.wait_idle()
            res["settings_default"] = pair.a.watcher_settings()
            print(
                f"  Syncthing {notes:,} notes: scan {res['scan_s']:.1f} s, first sync "
                f"{res['first_sync']['first_sync_s']:.1f} s; settings {res['settings_default']}",
                flush=True,
            )
            paths = list(gen.paths)
            delay = int(res["settings_default"]["fsWatcherDelayS"])
            if saves_default > 0:
                res["default"] = measure_p1(
                    folder_a,
                    folder_b,
                    paths,
                    saves=saves_default,
                    seed=seed,
                    timeout_s=max(30.0, 6 * delay),
                    max_seconds=max_seconds_default,
                    label=f"A->B delay {delay}s",
                )
                res["default"]["watcher_delay_s"] = delay
            if saves_fast > 0:
                pair.set_watcher_delay(MIN_WATCHER_DELAY_S)
                res["settings_fast"] = pair.a.watcher_settings()
                res["fast"] = measure_p1(
                    folder_a,
                    folder_b,
                    paths,
                    saves=saves_fast,
                    warmup=2,
                    seed=seed,
                    timeout_s=30.0,
                    max_seconds=max_seconds_fast,
                    label=f"A->B delay {MIN_WATCHER_DELAY_S}s",
                )
                res["fast"]["watcher_delay_s"] = MIN_WATCHER_DELAY_S
            pair.wait_idle()
            res["identical_after"] = tree_digest(folder_a) == tree_digest(folder_b)
        res["loopback"] = pair.guard.summary()
        res["loopback_ok"] = not pair.guard.violations()
        if strace:
            res["strace_addresses"] = sorted(
                {a for i in pair.instances for a in strace_addresses(i.strace_path)}
            )
    return res


def big_session(
    notes: int,
    seed: int,
    *,
    idle_seconds: float,
    keep: bool = False,
    strace: bool = False,
    settle_seconds: float = 10.0,
) -> dict[str, Any]:
    """P4 (first sync to an empty peer), then P7 (RSS) and P6 (idle CPU) on a ``notes``-note vault."""
    res: dict[str, Any] = {"notes": notes}
    with _work_dir("syncthing-p4-", keep) as work:
        folder_a, folder_b = work / "a", work / "b"
        gen = generate_vault(folder_a, notes=notes, seed=seed)
        digest = tree_digest(folder_a)
        res["total_bytes"] = gen.total_bytes
        with SyncthingPair(work, folder_a, folder_b, strace=strace) as pair:
            res["ready_s"] = dict(pair.ready_s)
            res["settings"] = pair.a.watcher_settings()
            res["scan_s"] = pair.wait_scanned(pair.a, notes, timeout=900)
            print(f"  Syncthing A scanned {notes:,} notes in {res['scan_s']:.1f} s", flush=True)
            res["first_sync"] = measure_first_sync(pair, folder_b, notes, digest, timeout=1200)
            print(
                f"  Syncthing first sync of {notes:,} notes to empty B: "
                f"{res['first_sync']['first_sync_s']:.1f} s",
                flush=True,
            )
            pair.wait_idle(timeout=600)
            time.sleep(settle_seconds)
            pids = {"A": pair.a.syncthing_pid(), "B": pair.b.syncthing_pid()}
            for name, inst in (("A", pair.a), ("B", pair.b)):
                for i, pid in enumerate(inst.monitor_pids()):
                    pids[f"{name} monitor" + (f" {i}" if i else "")] = pid
            res["pids"] = pids
            res["rss"] = measure_rss(pids)
            if idle_seconds > 0:
                res["idle"] = measure_idle_cpu(pids, idle_seconds)
                res["idle"]["connected_after"] = pair.a.connected_to(pair.b)
                print(
                    f"  Syncthing idle {res['idle']['seconds']:.0f} s: CPU "
                    f"{res['idle']['cpu_s']} -> {res['idle']['total_per_10min']:.2f} CPU-s / 10 min",
                    flush=True,
                )
            res["rss_after_idle"] = measure_rss(pids)
            res["identical_after"] = folder_matches(folder_b, notes, digest)
        res["loopback"] = pair.guard.summary()
        res["loopback_ok"] = not pair.guard.violations()
        if strace:
            res["strace_addresses"] = sorted(
                {a for i in pair.instances for a in strace_addresses(i.strace_path)}
            )
    return res


def run_reference(
    *,
    small_notes: int = 1000,
    notes: int = 10_000,
    seed: int = 1,
    saves_default: int = 20,
    saves_fast: int = 100,
    idle_seconds: float = 60.0,
    keep: bool = False,
    strace: bool = False,
) -> dict[str, Any]:
    """All the Syncthing figures of one run (P1 at both watcher delays, P4, P6, P7)."""
    ensure_installed()
    out: dict[str, Any] = {"version": syncthing_version(), "seed": seed}
    t0 = time.perf_counter()
    if small_notes and (saves_default or saves_fast):
        print(f"== Syncthing P1, {small_notes:,} notes", flush=True)
        out["p1"] = p1_session(
            small_notes, seed, saves_default=saves_default, saves_fast=saves_fast, keep=keep, strace=strace
        )
    if notes:
        print(f"== Syncthing P4/P6/P7, {notes:,} notes", flush=True)
        out["big"] = big_session(notes, seed, idle_seconds=idle_seconds, keep=keep, strace=strace)
    out["elapsed_s"] = time.perf_counter() - t0
    return out


def p1_row(name: str, r: dict[str, Any] | None) -> str:
    if not r:
        return f"| {name} | not run | | | | | |"
    if not r.get("measured"):
        return f"| {name} | 0 of {r.get('attempted', 0)} arrived | | | | | |"
    return (
        f"| {name} | {r['measured']} (+{r['lost']} lost of {r['attempted']}) | {_ms(r['p50_s'])} | "
        f"{_ms(r['p95_s'])} | {_ms(r['p99_s'])} | {_ms(r['max_s'])} | {_ms(r['mean_s'])} |"
    )


def report(ref: dict[str, Any]) -> str:
    """A markdown section of the Syncthing figures alone (run_all.py puts them beside Stet's)."""
    lines = [
        f"Syncthing reference: {ref.get('version')}; seed {ref.get('seed')}; two instances on loopback "
        "(own homes; `syncthing serve --no-restart`, a monitor + a syncthing process each; GUI/REST and "
        "`tcp://` listener on 127.0.0.1; global/local discovery, relays, NAT traversal, usage and crash "
        "reporting, auto-upgrade off).\n"
    ]
    p1 = ref.get("p1")
    if p1:
        lines += [
            f"P1 on {p1['notes']:,} notes ({p1['total_bytes'] / 1e6:.1f} MB): editor-style saves on A, "
            "latency = rename on A -> same bytes read on B (ms).\n",
            "| variant | saves measured | p50 | p95 | p99 | max | mean |",
            "|---|---|---|---|---|---|---|",
            p1_row(
                f"defaults (fsWatcherDelayS {p1.get('default', {}).get('watcher_delay_s', '?')})",
                p1.get("default"),
            ),
            p1_row(f"fsWatcherDelayS {MIN_WATCHER_DELAY_S} (minimum)", p1.get("fast")),
            "",
            f"Setup: scan {p1['scan_s']:.1f} s; first sync of {p1['notes']:,} notes "
            f"{p1['first_sync']['first_sync_s']:.1f} s; identical at the end: "
            f"{'yes' if p1.get('identical_after') else 'NO'}; {p1['loopback']}.\n",
        ]
    big = ref.get("big")
    if big:
        lines += [
            f"{big['notes']:,} notes ({big['total_bytes'] / 1e6:.1f} MB), "
            f"default folder settings {big['settings']}:\n",
            "| id | metric | Syncthing |",
            "|---|---|---|",
            f"| | A's initial scan | {big['scan_s']:.1f} s |",
            "| P4 | first full sync to empty B (un-pause -> byte-identical) | "
            f"{big['first_sync']['first_sync_s']:.1f} s |",
        ]
        for k, v in big["rss"].items():
            lines.append(
                f"| P7 | VmRSS {k} after the sync (peak VmHWM) | "
                f"{v['rss'] / 1e6:.0f} MB ({v['hwm'] / 1e6:.0f} MB) |"
            )
        for k, v in big.get("rss_after_idle", {}).items():
            lines.append(f"| P7 | VmRSS {k} after idle | {v['rss'] / 1e6:.0f} MB |")
        idle = big.get("idle")
        if idle:
            parts = ", ".join(f"{k} {v:.2f} s" for k, v in idle["cpu_s"].items())
            lines.append(
                f"| P6 | idle CPU of all Syncthing processes over {idle['seconds']:.0f} s ({parts}), "
                f"x{600 / idle['seconds']:.0f} to 10 min | "
                f"{idle['total_cpu_s']:.2f} s -> {idle['total_per_10min']:.1f} CPU-s / 10 min |"
            )
        lines += ["", f"Loopback guard: {big['loopback']}.\n"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--small-notes", type=int, default=1000, help="P1 vault (0: skip P1)")
    ap.add_argument("--notes", type=int, default=10_000, help="P4/P6/P7 vault (0: skip)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--saves-default", type=int, default=20, help="P1 saves at the default watcher delay")
    ap.add_argument("--saves-fast", type=int, default=100, help="P1 saves at fsWatcherDelayS=1")
    ap.add_argument("--idle-seconds", type=float, default=60.0, help="P6 window (0: skip)")
    ap.add_argument("--json", type=Path, help="also write the raw figures to this JSON file")
    ap.add_argument(
        "--strace-check",
        action="store_true",
        help="run under strace and list every address contacted (slower: not for figures)",
    )
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))
    ref = run_reference(
        small_notes=args.small_notes,
        notes=args.notes,
        seed=args.seed,
        saves_default=args.saves_default,
        saves_fast=args.saves_fast,
        idle_seconds=args.idle_seconds,
        keep=args.keep,
        strace=args.strace_check,
    )
    text = report(ref)
    if args.strace_check:
        addrs = sorted({a for k in ("p1", "big") for a in ref.get(k, {}).get("strace_addresses", [])})
        text += f"\nstrace (trace=network): addresses named in syscalls: {addrs or ['none']}\n"
    print(text)
    print(f"(total {ref['elapsed_s']:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(ref, indent=2, default=str))
    if not args.no_write:
        from machine_info import append_results

        append_results(text, title="Syncthing reference (P1, P4, P6, P7)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
