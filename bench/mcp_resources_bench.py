#!/usr/bin/env python3
"""MCP resources on 10,000 notes (issue 34 item 2): the time of each ``resources/list`` page
over the whole vault (10,000 notes and 1,000 attachments by default), and of
``resources/read``, ``tools/call read_note`` and
``server/discover`` at 2026-07-28 -- raw POSTs on one keep-alive connection to a real daemon
(``tests.harness.DaemonProcess``: its own home, port 0, no mDNS), so the figure is the
daemon's answer, not a client library's.

    flock /tmp/stet-bench.lock python bench/mcp_resources_bench.py [--notes 10000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.harness import DaemonProcess, run_stet, wait_until  # noqa: E402

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--notes", type=int, default=10_000)
    ap.add_argument("--attachments", type=int, default=1000)
    ap.add_argument("--reads", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stet-mcp-bench-") as tmp:
        home, vault = Path(tmp) / "home", Path(tmp) / "vault"
        home.mkdir()
        for i in range(args.notes):  # 100 folders of 100 notes, a few hundred bytes each
            d = vault / f"folder{i // 100:03}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"note {i:05}.md").write_text(f"# Note {i}\n\n" + "Some words of a note. " * 12 + "\n")
        for i in range(args.attachments):  # small images beside the notes
            d = vault / f"img{i // 100:03}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"pic {i:05}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + i.to_bytes(4, "big"))
        run_stet(home, "init", str(vault), "--name", "notes", "--json")
        daemon = DaemonProcess(home).start(timeout=300)
        try:
            wait_until(lambda: len(daemon.client.request("GET", "/v1/vaults/notes/notes",
                                                         query={"limit": 10000})["notes"]) >= args.notes,
                       timeout=600, what="the import")
            report(daemon, args)
        finally:
            daemon.stop()


def report(daemon: DaemonProcess, args: argparse.Namespace) -> None:
    url = urllib.parse.urlsplit(daemon.api_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=60)
    token = daemon.client.token

    def post(method: str, params: dict[str, Any], name: str | None = None) -> tuple[float, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN,
                   "Mcp-Method": method}
        if name is not None:
            headers["Mcp-Name"] = name
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": META, **params}})
        t0 = time.perf_counter()
        conn.request("POST", "/mcp", body=body, headers=headers)
        resp = conn.getresponse()
        data = json.loads(resp.read())
        return (time.perf_counter() - t0) * 1000, data

    def timed(method: str, params: dict[str, Any], name: str | None = None) -> list[float]:
        return [post(method, params, name)[0] for _ in range(args.reads)]

    pages: list[float] = []
    cursor, count = None, 0
    for _ in range(1000):
        ms, data = post("resources/list", {"cursor": cursor} if cursor else {})
        pages.append(ms)
        count += len(data["result"]["resources"])
        cursor = data["result"].get("nextCursor")
        if not cursor:
            break
    uri = "stet://notes/" + urllib.parse.quote("folder042/note 04200.md", safe="/")
    read = timed("resources/read", {"uri": uri}, uri)
    tool = timed("tools/call", {"name": "read_note", "arguments": {"path": "folder042/note 04200.md"}},
                 "read_note")
    discover = timed("server/discover", {})

    def line(what: str, xs: list[float]) -> str:
        xs = sorted(xs)
        p95 = xs[int(len(xs) * 0.95) - 1]
        p50 = statistics.median(xs)
        return f"{what}: n={len(xs)} p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {xs[-1]:.1f} ms"

    print(f"{args.notes} notes: resources/list gave {count} resources in {len(pages)} pages")
    print(line("resources/list page", pages))
    print(line("resources/read (a note)", read))
    print(line("tools/call read_note", tool))
    print(line("server/discover", discover))


if __name__ == "__main__":
    main()
