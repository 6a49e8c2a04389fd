#!/usr/bin/env python3
"""P2's write path without HTTP: CPU, commits and SQLite statements per keyed append.

    python bench/p2_write_path.py [--appends 500] [--blocks 6] [--group 8]

A real store in a temp folder and the real ``NotesService`` + ``NoteOperations``; one note
gets keyed appends (a fresh UUID each, ~60 B), in blocks alternating "one by one" and
"in groups of --group" (``daemon/notes/group_commit.py``, all of a group in one loop turn).
Prints per block: CPU us per append (process time), commits per append (the store's
counter) and SQLite statements per append (the connection's trace callback). CPU time is
far less disturbed by a loaded machine than the HTTP benchmark's rate (bench/p2_appends.py).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import OWNER, NoteOperations
from stet.sync.store import VaultStore


def line(i: int) -> str:
    return f"- client 0 append {i:06d}: " + "x" * 30 + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--appends", type=int, default=500, help="appends per block")
    ap.add_argument("--blocks", type=int, default=6, help="blocks of each kind")
    ap.add_argument("--group", type=int, default=8, help="appends per group (0: one by one only)")
    args = ap.parse_args()
    service = NotesService("v1", VaultStore(Path(tempfile.mkdtemp(prefix="stet-p2w-")) / "v.db"))
    events = EventBus()
    records = RecordsKeeper(service, events)
    ops = NoteOperations(service, events, OWNER, extensions=(".md",), max_bytes=100_000_000,
                         search=records.index)
    ops.create_note("log.md", "# log\n")
    statements = [0]
    ops.store.db.set_trace_callback(lambda _sql: statements.__setitem__(0, statements[0] + 1))
    counter = iter(range(10**9))

    def append() -> object:
        return ops.append_note("log.md", line(next(counter)), idempotencyKey=str(uuid.uuid4()))

    async def grouped(n: int) -> None:
        from stet.daemon.notes.group_commit import GroupCommit  # absent before issue 18: --group 0

        group = GroupCommit(service)
        for _ in range(0, n, args.group):
            await asyncio.gather(*(group.run(append) for _ in range(args.group)))

    for _ in range(200):  # warm-up
        append()
    figures: dict[str, list[float]] = {"one by one": [], f"groups of {args.group}": []}
    for block in range(2 * args.blocks):
        kind = list(figures)[(block + block // 2) % 2]  # one, group, group, one, ...
        if kind != "one by one" and args.group == 0:
            continue
        commits, count, cpu = ops.store.commits, statements[0], time.process_time()
        if kind == "one by one":
            for _ in range(args.appends):
                append()
        else:
            asyncio.run(grouped(args.appends))
        cpu = (time.process_time() - cpu) / args.appends * 1e6
        figures[kind].append(cpu)
        print(f"{kind}: {cpu:.0f} us CPU/append, {(ops.store.commits - commits) / args.appends:.3f} "
              f"commits/append, {(statements[0] - count) / args.appends:.1f} statements/append", flush=True)
    for kind, values in figures.items():
        if values:
            print(f"{kind}: median {statistics.median(values):.0f} us CPU/append over {len(values)} blocks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
