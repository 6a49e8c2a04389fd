"""What a snapshot costs (SPEC §6.4 snapshot reads), in-process on the real write path.

A vault of N notes (default 10,000, ~1 KB each); a snapshot is opened; then C notes
(default 200) are rewritten, and a tenth of those are moved or deleted. Measured: the
bytes a snapshot adds to the store, the time to open one, to read a changed and an
unchanged note under it, a page of 1,000 notes under it vs without, and a search under
it vs without. Prints a markdown table.

    python bench/snapshot_reads.py [--notes 10000] [--changed 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops import snapshot_reads
from stet.daemon.ops.notes import OWNER, NoteOperations
from stet.sync.store import VaultStore


def timed(fn: Callable[[], object], runs: int = 5) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1000


def cold(fn: Callable[[], object]) -> object:
    """Run ``fn`` with the cache of texts-as-of-a-snapshot empty (a first read)."""
    snapshot_reads._THEN.clear()
    snapshot_reads._then_bytes[0] = 0
    return fn()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = VaultStore(Path(tmp) / "v.db")
        service = NotesService("bench", store)
        events = EventBus()
        records = RecordsKeeper(service, events)
        ops = NoteOperations(service, events, OWNER, extensions=(".md",), max_bytes=10_000_000,
                             search=records.index)
        body = "".join(f"line {j} of a note about topic{j % 17} and more words\n" for j in range(20))
        with store.transaction():
            for i in range(args.notes):
                service.write_text(f"folder{i % 50}/note{i:05d}.md", f"# Note {i}\n{body}", "bench")
        records.flush_index()
        pages = store.db.execute("PRAGMA page_count").fetchone()[0]
        open_ms = timed(lambda: ops.open_snapshot())
        snap = ops.open_snapshot()["snapshot"]
        grown = store.db.execute("PRAGMA page_count").fetchone()[0] - pages
        changed = [f"folder{i % 50}/note{i:05d}.md" for i in range(0, args.notes, args.notes // args.changed)]
        for n, path in enumerate(changed):
            ops.update_note(path, f"# Rewritten {n}\n{body}uniqueword{n}\n")
        for path in changed[: len(changed) // 20]:
            ops.delete_note(path)
        for path in changed[len(changed) // 20 : len(changed) // 10]:
            ops.move_note(path, "moved/" + path)
        history = store.db.execute("SELECT count(*) FROM note_history").fetchone()[0]
        records.flush_index()
        victim, steady = changed[-1], "folder1/note00001.md"
        rows = [
            ("open a snapshot", f"{open_ms:.2f} ms", "-"),
            ("store pages added by 6 snapshots", f"{grown} (4 KiB each)", "-"),
            ("note_history rows after the moves/deletes", str(history), "-"),
            ("read a changed note (cold: rebuilt)",
             f"{timed(lambda: cold(lambda: ops.read_note(victim, snapshot=snap))):.2f} ms", "-"),
            ("read a changed note (again)", f"{timed(lambda: ops.read_note(victim, snapshot=snap)):.2f} ms",
             f"{timed(lambda: ops.read_note(victim)):.2f} ms"),
            ("read an unchanged note", f"{timed(lambda: ops.read_note(steady, snapshot=snap)):.2f} ms",
             f"{timed(lambda: ops.read_note(steady)):.2f} ms"),
            ("list 1,000 notes (first page)",
             f"{timed(lambda: ops.list_notes(limit=1000, snapshot=snap)):.1f} ms",
             f"{timed(lambda: ops.list_notes(limit=1000)):.1f} ms"),
            ("list folder7/ (200 notes, 4 changed)",
             f"{timed(lambda: ops.list_notes(prefix='folder7/', snapshot=snap)):.1f} ms",
             f"{timed(lambda: ops.list_notes(prefix='folder7/')):.1f} ms"),
            ("search 'topic3 line' (limit 20)",
             f"{timed(lambda: ops.search_notes('topic3 line', snapshot=snap)):.1f} ms",
             f"{timed(lambda: ops.search_notes('topic3 line')):.1f} ms"),
            ("search 'uniqueword7' (only in changed texts), cold",
             f"{timed(lambda: cold(lambda: ops.search_notes('uniqueword7', snapshot=snap))):.1f} ms", "-"),
            ("search 'uniqueword7' (only in changed texts), again",
             f"{timed(lambda: ops.search_notes('uniqueword7', snapshot=snap)):.1f} ms",
             f"{timed(lambda: ops.search_notes('uniqueword7')):.1f} ms"),
        ]
        print(f"{args.notes} notes, {len(changed)} rewritten after the snapshot "
              f"({len(changed) // 20} then deleted, {len(changed) // 10 - len(changed) // 20} moved); "
              "median of 5")
        print()
        print("| operation | under the snapshot | without |")
        print("|---|---|---|")
        for name, a, b in rows:
            print(f"| {name} | {a} | {b} |")
        store.close()


if __name__ == "__main__":
    main()
