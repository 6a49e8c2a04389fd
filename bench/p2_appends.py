#!/usr/bin/env python3
"""P2: agent appends via HTTP, acknowledged durable (SPEC §9).
Target: >= 1,000/s from one client, >= 2,000/s from 8 clients; p99 <= 10 ms.

    python bench/p2_appends.py [--appends 3000] [--clients 1,8] [--shared | --own-notes]
                               [--line-bytes 60] [--no-keys] [--stdlib-client] [--no-write]

Starts a real daemon (``python -m stet.daemon``) on a fresh home with an empty vault,
creates one agent token per client, and lets each client (a process of its own -- threads
of one Python process would measure its interpreter lock -- with one keep-alive HTTP/1.1
connection on loopback) append ``--appends / clients`` lines of
about ``--line-bytes`` bytes, one request at a time, each waiting for its answer. Every
append carries an ``idempotencyKey`` (a fresh UUID), the shape the docs tell agents to use
and the one P2 counts (issue 18); ``--no-keys`` sends none (the shape of earlier figures). The
clients send their requests from a pre-built head over a raw socket (``RawConn``, the same
bytes); ``--stdlib-client`` uses ``http.client`` as earlier figures did. Both the daemon's and
the clients' CPU per append are reported, and each one's share of the machine. An
answer means the append is committed to the vault's SQLite store (WAL,
``synchronous=NORMAL``: it survives kill -9) -- the daemon acknowledges nothing
earlier. The file on disk follows asynchronously (batched atomic writes), as in
normal operation. By default all clients append to one shared note (the
"shared findings" case); ``--own-notes`` gives each client its own note.

Reports appends/s (all appends over the wall time from the first request to the last
answer), and p50 / p99 / max latency per request, after 100 unmeasured warm-up appends
per client. Every measured line is then checked present in the note (through the API)
and in its file. Prints a table and appends it to bench/history/rounds.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_info import append_results  # noqa: E402

WARMUP = 100


@dataclass
class Daemon:
    home: Path
    vault: Path
    proc: subprocess.Popen[bytes]
    port: int
    owner_token: str
    env: dict[str, str]


def _env(home: Path) -> dict[str, str]:
    return dict(os.environ, STET_HOME=str(home), PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring")


def start_daemon(work: Path) -> Daemon:
    home, vault = work / "home", work / "vault"
    vault.mkdir(parents=True)
    env = _env(home)
    subprocess.run([sys.executable, "-c", "from stet.client.cli import main; main()", "init", str(vault),
                    "--name", "bench", "--json"], env=env, check=True, capture_output=True)
    log = open(work / "daemon.out", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "stet.daemon", "--home", str(home), "--api-port", "0",
                             "--peer-port", "0", "--no-mdns"], env=env, stdout=log, stderr=log)
    log.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the daemon exited: {(work / 'daemon.out').read_text()[-2000:]}")
        try:
            info = json.loads((home / "daemon.json").read_text())
            token = (home / "owner.token").read_text().strip()
        except (FileNotFoundError, ValueError):
            time.sleep(0.05)  # poll for readiness, bounded by the deadline
            continue
        if info.get("pid") == proc.pid and token:
            port = urllib.parse.urlsplit(info["api_url"]).port
            assert port is not None
            return Daemon(home, vault, proc, port, token, env)
        time.sleep(0.05)  # poll for readiness, bounded by the deadline
    raise SystemExit("the daemon did not become ready within 60 s")


def stop_daemon(d: Daemon) -> None:
    d.proc.terminate()
    try:
        d.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        d.proc.kill()
        d.proc.wait()


def make_token(d: Daemon, name: str) -> str:
    from stet.sync.home import HomeLayout, HomeRegistry

    registry = HomeRegistry(HomeLayout(d.home))
    try:
        return registry.create_token(name, registry.find("bench").id, {"append": ["**"]})
    finally:
        registry.close()


class RawConn:
    """The lean client (the default): one keep-alive socket, the request head built once,
    each body a JSON object of the recommended shape (``text`` and a fresh ``idempotencyKey``)
    made by string concatenation, the answer read by its ``Content-Length``. It sends what
    ``Conn`` sends, byte for byte apart from header order; ``http.client`` spent ~3x its CPU
    per request (headers re-encoded, answers parsed by ``email``), CPU the 2-core machine
    then took from the daemon (bench/history/rounds.md, issue 18 P2)."""

    def __init__(self, port: int, token: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port, self.token = port, token
        self.heads: dict[str, bytes] = {}
        self.buf = b""

    def _head(self, path: str) -> bytes:
        head = self.heads.get(path)
        if head is None:
            head = self.heads[path] = (
                f"POST /v1/vaults/bench/notes/{urllib.parse.quote(path)}/append HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{self.port}\r\nAuthorization: Bearer {self.token}\r\n"
                "Content-Type: application/json\r\nContent-Length: ").encode()
        return head

    def append(self, path: str, text: str, keyed: bool = True) -> float:
        tail = f', "idempotencyKey": "{uuid.uuid4()}"}}' if keyed else "}"
        body = ('{"text": ' + json.dumps(text) + tail).encode()
        start = time.perf_counter()
        self.sock.sendall(self._head(path) + str(len(body)).encode() + b"\r\n\r\n" + body)
        status, payload = self._answer()
        elapsed = time.perf_counter() - start
        if status != 200:
            raise RuntimeError(f"append answered {status}: {payload[:300]!r}")
        return elapsed

    def _answer(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                raise RuntimeError("a chunked answer: this client reads Content-Length only")
        while len(self.buf) < length:
            self._more()
        payload, self.buf = self.buf[:length], self.buf[length:]
        return status, payload

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise RuntimeError("the daemon closed the connection")
        self.buf += chunk

    def close(self) -> None:
        self.sock.close()


class Conn:
    """One keep-alive connection; ``append`` returns the latency of an acknowledged append."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {token}", "Host": f"127.0.0.1:{port}",
                        "Content-Type": "application/json"}

    def append(self, path: str, text: str, keyed: bool = True) -> float:
        payload = {"text": text, "idempotencyKey": str(uuid.uuid4())} if keyed else {"text": text}
        body = json.dumps(payload).encode()
        start = time.perf_counter()
        self.conn.request("POST", f"/v1/vaults/bench/notes/{urllib.parse.quote(path)}/append", body=body,
                          headers=self.headers)
        resp = self.conn.getresponse()
        payload = resp.read()
        elapsed = time.perf_counter() - start
        if resp.status != 200:
            raise RuntimeError(f"append answered {resp.status}: {payload[:300]!r}")
        return elapsed

    def get(self, target: str) -> dict[str, object]:
        self.conn.request("GET", target, headers=self.headers)
        resp = self.conn.getresponse()
        data: dict[str, object] = json.loads(resp.read())
        return data

    def close(self) -> None:
        self.conn.close()


@dataclass
class Result:
    clients: int
    appends: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    verified: str = ""
    daemon_cpu_s: float = 0.0  # the daemon's user + system CPU time over the measured run
    client_cpu_s: float = 0.0  # all client processes' CPU time over their measured loops
    client: str = "lean"  # "lean" (RawConn) or "http.client" (Conn)

    def machine_share(self, who: str) -> float:
        """CPU seconds of the daemon or the clients over the run's wall time x CPUs."""
        cpu = self.daemon_cpu_s if who == "daemon" else self.client_cpu_s
        return cpu / (self.seconds * (os.cpu_count() or 1))

    @property
    def rate(self) -> float:
        return self.appends / self.seconds

    def pct(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] * 1000


def line_for(config: str, client: int, seq: int, width: int) -> str:
    head = f"- [{config}] client {client} append {seq:05d}: "
    return head + "x" * max(0, width - len(head) - 1) + "\n"


def client_process(port: int, token: str, path: str, tag: str, i: int, per_client: int, width: int,
                   keyed: bool, go: Any, ready: Any, done: Any, lean: bool = True) -> None:
    """One client (its own process): connect, wait for the start, append, report."""
    latencies: list[float] = []
    error = ""
    cpu = 0.0
    try:
        conn: RawConn | Conn = RawConn(port, token) if lean else Conn(port, token)
        ready.put(i)
        go.wait(timeout=120)
        cpu = time.process_time()
        for seq in range(per_client):
            latencies.append(conn.append(path, line_for(tag, i, seq, width), keyed))
        cpu = time.process_time() - cpu
        conn.close()
    except Exception as exc:  # reported by the parent
        error = repr(exc)
    done.put((i, latencies, time.monotonic(), error, cpu))


def run_config(d: Daemon, clients: int, appends: int, *, shared: bool, width: int, tag: str,
               profile_dir: Path | None = None, keyed: bool = True, lean: bool = True) -> Result:
    tokens = [make_token(d, f"bench-{tag}-{i}") for i in range(clients)]
    conns = [Conn(d.port, t) for t in tokens]
    paths = [f"bench/{tag}.md" if shared else f"bench/{tag}-client{i}.md" for i in range(clients)]
    per_client = appends // clients
    for i, conn in enumerate(conns):  # warm-up: notes created, docs cached, connections open
        for j in range(WARMUP // clients or 1):
            conn.append(paths[i], line_for(tag, i, 90000 + j, width), keyed)
    # Each client is a process of its own: eight threads of one Python process would be
    # held back by its interpreter lock, and the benchmark would measure itself.
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    ready: Any = ctx.Queue()
    done: Any = ctx.Queue()
    procs = [ctx.Process(target=client_process, daemon=True,
                         args=(d.port, tokens[i], paths[i], tag, i, per_client, width, keyed,
                               go, ready, done, lean))
             for i in range(clients)]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=60)  # every client connected and waiting
    spy = None
    if profile_dir is not None:
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(d.proc.pid), "--format", "raw",
                                "--rate", "250", "--gil", "--output", str(profile_dir / f"p2-{tag}.txt")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # let py-spy attach before the measured run starts
    cpu_before = daemon_cpu(d)
    start = time.monotonic()  # CLOCK_MONOTONIC: the same clock in every process on Linux
    go.set()
    latencies: list[list[float]] = [[] for _ in range(clients)]
    ends, errors = [], []
    client_cpu = 0.0
    for _ in procs:
        i, mine, ended, error, used = done.get(timeout=600)
        latencies[i] = mine
        client_cpu += used
        ends.append(ended)
        if error:
            errors.append(error)
    seconds = max(ends) - start
    cpu = daemon_cpu(d) - cpu_before
    for proc in procs:
        proc.join(timeout=30)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]}")
    result = Result(clients, per_client * clients, seconds, [x for lat in latencies for x in lat], "", cpu,
                    client_cpu, "lean" if lean else "http.client")
    result.verified = verify(d, conns[0], paths, tag, clients, per_client)
    for conn in conns:
        conn.close()
    return result


def daemon_cpu(d: Daemon) -> float:
    """The daemon's CPU seconds so far (user + system, /proc): a figure a loaded machine
    disturbs far less than the wall-clock rate."""
    try:
        fields = Path(f"/proc/{d.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def verify(d: Daemon, conn: Conn, paths: list[str], tag: str, clients: int, per_client: int) -> str:
    """Every measured append is in the note (API) and, once the bridge caught up, in its file."""
    owner = Conn(d.port, d.owner_token)
    wanted = {line_for(tag, i, seq, 0).split(":")[0] for i in range(clients) for seq in range(per_client)}
    try:
        api_text = "".join(str(owner.get(f"/v1/vaults/bench/notes/{urllib.parse.quote(p)}")["content"])
                           for p in sorted(set(paths)))
    finally:
        owner.close()
    api_lines = {line.split(":")[0] for line in api_text.splitlines()}
    missing = wanted - api_lines
    if missing:
        return f"MISSING {len(missing)} in the API"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        disk_text = "".join((d.vault / p).read_text() for p in sorted(set(paths)) if (d.vault / p).exists())
        if disk_text == api_text:
            return "all present (API and disk)"
        time.sleep(0.05)  # the file follows the note asynchronously
    return "all in the API; the file did not catch up within 30 s"


def measure(appends: int = 3000, client_counts: tuple[int, ...] = (1, 8), *, own_notes: bool = False,
            line_bytes: int = 60, profile_dir: Path | None = None, verbose: bool = True,
            keyed: bool = True, lean: bool = True) -> list[Result]:
    """Run P2 on a fresh daemon: one ``Result`` per client count (for ``run_all.py`` too)."""
    work = Path(tempfile.mkdtemp(prefix="stet-p2-"))
    results = []
    try:
        d = start_daemon(work)
        try:
            for n in client_counts:
                r = run_config(d, n, appends, shared=not own_notes, width=line_bytes, tag=f"c{n}",
                               profile_dir=profile_dir, keyed=keyed, lean=lean)
                results.append(r)
                if verbose:
                    print(f"{n} client(s): {r.rate:,.0f} appends/s, p50 {r.pct(50):.2f} ms, "
                          f"p99 {r.pct(99):.2f} ms, max {max(r.latencies) * 1000:.1f} ms, "
                          f"daemon CPU {r.daemon_cpu_s / r.appends * 1e6:.0f} us/append "
                          f"({100 * r.machine_share('daemon'):.0f} % of the machine), clients' CPU "
                          f"{r.client_cpu_s / r.appends * 1e6:.0f} us/append "
                          f"({100 * r.machine_share('clients'):.0f} %); {r.verified}",
                          flush=True)
        finally:
            stop_daemon(d)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def format_table(results: list[Result], *, own_notes: bool, line_bytes: int, seconds: float,
                 load: tuple[float, float], keyed: bool = True) -> str:
    targets = {1: 1000, 8: 2000}
    where = "each client its own note" if own_notes else "all clients on one shared note"
    rows = []
    for r in results:
        target = targets.get(r.clients)
        rate_ok = "" if target is None else (" (met)" if r.rate >= target else f" (MISSED: >= {target:,})")
        p99_ok = " (met)" if r.pct(99) <= 10 else " (MISSED: <= 10 ms)"
        rows.append(f"| {r.clients} | {r.appends:,} | {r.rate:,.0f}{rate_ok} | {r.pct(50):.2f} | "
                    f"{r.pct(99):.2f}{p99_ok} | {max(r.latencies) * 1000:.1f} | "
                    f"{statistics.mean(r.latencies) * 1000:.2f} | {r.daemon_cpu_s / r.appends * 1e6:.0f} | "
                    f"{r.client_cpu_s / r.appends * 1e6:.0f} ({r.client}) | "
                    f"{100 * r.machine_share('daemon'):.0f} % / {100 * r.machine_share('clients'):.0f} % | "
                    f"{r.verified} |")
    return (
        f"P2 agent appends over HTTP ({where}; ~{line_bytes} B per append; "
        f"{'an idempotencyKey on every append' if keyed else 'no idempotencyKey'}; keep-alive connection per "
        f"client; acknowledged = committed to the WAL store, synchronous=NORMAL; {WARMUP} warm-up appends "
        "not measured)\n\n"
        "| clients | appends | appends/s | p50 ms | p99 ms | max ms | mean ms | daemon CPU us/append "
        "| clients' CPU us/append | machine share daemon / clients | check |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"Targets (SPEC §9): >= 1,000/s from one client, >= 2,000/s from 8; p99 <= 10 ms. "
        f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} CPUs. "
        f"Total benchmark time {seconds:.0f} s.\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--appends", type=int, default=3000, help="measured appends per configuration")
    ap.add_argument("--clients", default="1,8", help="comma-separated client counts")
    ap.add_argument("--own-notes", action="store_true", help="each client appends to its own note")
    ap.add_argument("--line-bytes", type=int, default=60)
    ap.add_argument("--no-keys", action="store_true", help="send no idempotencyKey (the old shape)")
    ap.add_argument("--stdlib-client", action="store_true",
                    help="clients use http.client (the client of earlier figures; ~3x the CPU per request)")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    ap.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                    help="record the daemon with py-spy (raw collapsed stacks; --gil: only samples "
                         "holding the interpreter lock, i.e. CPU, not waits) into DIR during each run")
    args = ap.parse_args()
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    results = measure(args.appends, tuple(int(c) for c in args.clients.split(",")), own_notes=args.own_notes,
                      line_bytes=args.line_bytes, profile_dir=args.py_spy, keyed=not args.no_keys,
                      lean=not args.stdlib_client)
    table = format_table(results, own_notes=args.own_notes, line_bytes=args.line_bytes,
                         seconds=time.monotonic() - started, load=(load_before, os.getloadavg()[0]),
                         keyed=not args.no_keys)
    print()
    print(table)
    if not args.no_write:
        append_results(table, title="P2 agent appends")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
