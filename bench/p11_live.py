#!/usr/bin/env python3
"""P11: live editing. A keystroke in a Yjs client on A -> bytes on B's disk; fan-out to 50 clients.

    python bench/p11_live.py [--keystrokes 500] [--gap-ms 20] [--clients 50]
                             [--fanout-keystrokes 200] [--no-write]

Two real daemons on loopback, paired with `stet invite` / `stet join`, sharing a small
vault. A stock Yjs client (Node's `yjs` + `y-websocket` `WebsocketProvider` over `ws`,
the driver in tests/js/live_client.mjs; run `npm ci --prefix tests/js` first) joins
`live.md` on A's `/v1/vaults/notes/yjs` endpoint with the owner token.

1. Keystroke -> B's disk: the client types one character at the end of the note, one at
   a time; the clock starts just before the bench tells the client to type and stops
   when B's file holds exactly the expected bytes (B's folder watched with inotify, the
   file read on every event and every 5 ms). So it covers the client, A's write path
   (store commit), the peer link, B's write path and B's coalesced disk write.
   A gap (`--gap-ms`) separates one arrival from the next keystroke. The time until A's
   own file holds the keystroke is recorded too: the difference is the peer's share.
2. Fan-out: `--clients` clients on A's `live.md`; one types `--fanout-keystrokes`
   characters, one at a time; per keystroke, the time until the last of the other
   clients has it, and the mean over them (measured in the Node process, which hosts all
   the clients: its own work is in the figures). A's CPU time (/proc) over that phase.

Bounded: every wait has a deadline; a keystroke that does not arrive in `--timeout` s is
counted lost (10 lost: the phase stops).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_info import append_results  # noqa: E402
from peer_bench import (  # noqa: E402
    Daemons,
    Inotify,
    cpu_seconds,
    device_id,
    init_vault,
    install_sigterm_exit,
    linked,
    load_average,
    pair,
    percentile,
    wait_for,
    work_dir,
)

from tests.integration.live_support import JsClients, js_clients, live_url, owner_token  # noqa: E402

SEED_TEXT = "# Live\n\nTyped here: "


def stats_row(name: str, ms: list[float], lost: int, attempted: int) -> str:
    if not ms:
        return f"| {name} | 0 of {attempted} | | | | | |"
    p50, p95, p99 = percentile(ms, 50), percentile(ms, 95), percentile(ms, 99)
    return (f"| {name} | {len(ms)} (+{lost} lost of {attempted}) | {p50:.1f} | {p95:.1f} | {p99:.1f} | "
            f"{max(ms):.1f} | {statistics.fmean(ms):.1f} |")


def keystrokes_to_disks(js: JsClients, folder_a: Path, folder_b: Path, count: int, gap_s: float,
                        timeout_s: float) -> tuple[list[float], list[float], int, int]:
    """(ms to A's own disk, ms to B's disk, lost, attempted) per keystroke."""
    targets = (folder_a / "live.md", folder_b / "live.md")
    ino = Inotify()
    ino.watch(folder_a)
    ino.watch(folder_b)
    expected = SEED_TEXT
    lat_a: list[float] = []
    lat_b: list[float] = []
    lost = attempted = 0
    try:
        for i in range(count):
            ch = chr(ord("a") + i % 26)
            expected += ch
            data = expected.encode()
            ino.wait(0)
            attempted += 1
            t0 = time.perf_counter()
            js.insert("typist", -1, ch)
            arrived: list[float | None] = [None, None]
            while None in arrived:
                for k, target in enumerate(targets):
                    if arrived[k] is None:
                        try:
                            if target.read_bytes() == data:
                                arrived[k] = time.perf_counter()
                        except FileNotFoundError:
                            pass
                left = t0 + timeout_s - time.perf_counter()
                if left <= 0 or None not in arrived:
                    break
                ino.wait(min(left, 0.005))
            if arrived[1] is None:
                lost += 1
                print(f"keystroke {i} did not reach B's disk within {timeout_s} s", flush=True)
                if lost >= 10:
                    break
                # Later keystrokes are compared with the whole text: wait for it to catch up.
                wait_for(lambda d=data: targets[1].read_bytes() == d, timeout=60, what="B to catch up")
            else:
                lat_b.append((arrived[1] - t0) * 1000)
            if arrived[0] is not None:
                lat_a.append((arrived[0] - t0) * 1000)
            if (i + 1) % 100 == 0:
                print(f"{i + 1} keystrokes", flush=True)
            time.sleep(gap_s)
    finally:
        ino.close()
    return lat_a, lat_b, lost, attempted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--keystrokes", type=int, default=500)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--fanout-keystrokes", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    install_sigterm_exit()
    load_start = load_average()

    with work_dir("stet-p11-", keep=args.keep) as work, Daemons() as daemons, js_clients() as js:
        folder_a, folder_b = work / "a", work / "b"
        folder_a.mkdir()
        (folder_a / "live.md").write_text(SEED_TEXT, encoding="utf-8")
        for i in range(20):
            (folder_a / f"other-{i}.md").write_text(f"# Other {i}\n\nsome text\n", encoding="utf-8")
        init_vault(work / "home-a", folder_a)
        a, _ = daemons.start(work / "home-a")
        b, _ = daemons.start(work / "home-b")
        pair(a, b, folder_b)
        dev_a, dev_b = device_id(a), device_id(b)
        wait_for(lambda: linked(a, dev_b) and linked(b, dev_a), timeout=60, what="the link")
        wait_for(lambda: (folder_b / "live.md").exists()
                 and (folder_b / "live.md").read_text(encoding="utf-8") == SEED_TEXT,
                 timeout=60, what="live.md on B")

        url, token = live_url(a), owner_token(a)
        js.connect("typist", url, "live.md", token)
        js.wait_synced("typist")
        lat_a, lat, lost, attempted = keystrokes_to_disks(js, folder_a, folder_b, args.keystrokes,
                                                          args.gap_ms / 1000, args.timeout)

        watchers = [f"w{i}" for i in range(args.clients - 1)]
        for w in watchers:
            js.connect(w, url, "live.md", token)
        for w in watchers:
            js.wait_synced(w, timeout=60)
        assert a.proc is not None
        cpu0, t0 = cpu_seconds(a.proc.pid), time.perf_counter()
        fan = js.call("fanout", "typist", watchers=watchers, count=args.fanout_keystrokes,
                      gapMs=args.gap_ms, timeout=int(args.timeout * 1000),
                      deadline_s=args.fanout_keystrokes * (args.timeout + 1) + 30)
        cpu1, t1 = cpu_seconds(a.proc.pid), time.perf_counter()
        final_a = a.content("live.md")
        final_ok = final_a is not None and js.text("w0") == final_a
        load_end = load_average()

    cpu = cpu1 - cpu0
    node_version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    wall = t1 - t0
    n = args.fanout_keystrokes
    table = (
        f"P11 live editing over y-websocket: two daemons paired on loopback (a 21-note vault); "
        f"stock Yjs clients (yjs + y-websocket WebsocketProvider over ws, Node {node_version}) "
        f"on A's `/v1/vaults/notes/yjs/live.md` with the owner token.\n\n"
        f"Keystroke -> B's disk: one character typed at the end of the note, one at a time, "
        f"{args.gap_ms:.0f} ms after the previous one arrived; from the bench telling the client to "
        f"type to B's file holding exactly the expected bytes (inotify-woken reads).\n\n"
        "| measure | keystrokes | p50 ms | p95 ms | p99 ms | max ms | mean ms |\n"
        "|---|---|---|---|---|---|---|\n"
        f"{stats_row('keystroke on A -> bytes on B', lat, lost, attempted)}\n"
        f"{stats_row('(same keystrokes) -> bytes on A', lat_a, attempted - len(lat_a), attempted)}\n"
        f"{stats_row(f'fan-out to the last of {args.clients - 1} clients', fan['last'], 0, n)}\n"
        f"{stats_row(f'fan-out, mean over the {args.clients - 1} clients', fan['mean'], 0, n)}\n\n"
        f"Fan-out: {args.clients} clients on one note, one typing {n} keystrokes ({args.gap_ms:.0f} ms "
        f"after each reached everyone); all clients in one Node process (its work is in the "
        f"figures). Daemon A's CPU over that phase: {cpu:.2f} s in {wall:.1f} s "
        f"({100 * cpu / wall:.0f}% of one core; {1000 * cpu / n:.2f} ms per keystroke, for "
        f"{args.clients - 1} sends + the write path + the peer link). Final text on A equals "
        f"the clients': {'yes' if final_ok else 'NO'}. Load average (1/5/15 min) at the start: "
        f"{load_start}, at the end: {load_end} (the machine is shared with other work).\n"
    )
    print(table)
    if not args.no_write:
        append_results(table, title="P11 live editing (Yjs keystroke to peer disk; 50-client fan-out)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
