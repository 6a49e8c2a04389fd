#!/usr/bin/env python3
"""P13: an aged vault -- 1,000 notes each edited 1,000 times, versions and the log at their caps.

Target (SPEC §9 P13): store <= 3x (text + versions); note read p50 <= 5 ms; restart ready <= 3 s.
Also reported: peer reconnect bytes (B restarted with nothing changed, after a first sync of
the aged vault).

    python bench/aged_vault.py [--notes 1000] [--edits 1000] [--seed 1] [--restarts 3]
                               [--reads 2000] [--no-peer] [--no-write] [--keep]

1. Generate ``--notes`` notes (bench/generate_vault.py, 1-12 KB, seed) and ``stet init`` them.
2. Age the vault **in process** (the daemon stopped): the daemon's own write path on the
   vault's real store -- ``NotesService`` with ``NoteOperations`` (what REST's handlers call:
   revision memory, idempotency, the change log via ``RecordsKeeper``, versions and the
   brake), and ``FileBridge.ingest_path`` on real files for disk edits, the bridge writing
   agents' changes back to disk. A million edits through the HTTP face and watchdog would
   take hours on this machine; the in-process path runs the same code below the HTTP layer.
   Each round edits every note once, by one of: an agent append (REST ``append_note``), an
   agent rewrite of one line (``update_note`` with ``baseRevision`` = the revision it read),
   a disk rewrite of one line, and -- once a note has grown past twice its first size -- a
   disk trim of its oldest lines (a rolling log: text stays bounded, deleted text keeps
   coming). The injected clock moves 11 minutes a round, so every note gets an idle version
   each round (kept: 50) and revision states older than an hour are pruned once a round, as
   the daemon's minute task does.
3. Measure the store: file sizes (vault db + WAL after a checkpoint, search index), bytes per
   table (``dbstat``), against the notes' text and their versions' text (UTF-8 bytes).
4. Start the real daemon on that home: ready time (``--restarts`` starts), read p50 through
   REST (``GET /v1/vaults/notes/notes/{path}``, one keep-alive connection) and in process.
5. Unless ``--no-peer``: a peer B joins (first sync of the aged vault), then B is restarted
   ``--restarts`` times with nothing changed: the reconnect's bytes on the wire
   (bench/p5_restart.py's counting relay).
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sqlite3
import statistics
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generate_vault import generate_vault, tree_digest  # noqa: E402
from machine_info import append_results  # noqa: E402
from p5_restart import Restart, restart_b  # noqa: E402
from peer_bench import (  # noqa: E402
    CountingProxy,
    Daemons,
    device_id,
    fmt_bytes,
    init_vault,
    install_sigterm_exit,
    linked,
    load_average,
    pair,
    peer_port,
    percentile,
    wait_for,
    wait_synced,
    work_dir,
)

MB = 1e6
ROUND_S = 11 * 60.0  # each round: past the idle-version delay (10 min)
EXT = (".md", ".markdown", ".txt")


@dataclass
class Aging:
    edits: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    rounds_s: list[float] = field(default_factory=list)


@dataclass
class StoreSize:
    files: dict[str, int]
    tables: dict[str, int]
    text_bytes: int
    versions_bytes: int
    versions: int
    log_rows: int
    update_rows: int
    revision_states: int
    crdt_bytes: int = 0  # every note's state as one update, deleted text kept (skip_gc)
    crdt_gc_bytes: int = 0  # the same with deleted text dropped (what a GC compaction would keep)
    free_bytes: int = 0  # free pages inside the db file

    @property
    def store_bytes(self) -> int:
        return sum(self.files.values())


def _vault_id(home: Path) -> str:
    db = sqlite3.connect(home / "home.db")
    try:
        return str(db.execute("SELECT id FROM vaults").fetchone()[0])
    finally:
        db.close()


def _line_edit(rng: random.Random, text: str, tag: str) -> str:
    """``text`` with one of its lines rewritten (a word changed, a clause added)."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return f"{tag}\n"
    i = rng.randrange(len(lines))
    words = lines[i].rstrip("\n").split(" ")
    j = rng.randrange(len(words))
    words[j] = f"{words[j]}-{tag}"
    lines[i] = " ".join(words) + "\n"
    return "".join(lines)


def age_vault(home: Path, folder: Path, notes: list[str], edits: int, seed: int) -> Aging:
    from stet.daemon.folder.bridge import FileBridge
    from stet.daemon.notes.event_bus import EventBus
    from stet.daemon.notes.records import RecordsKeeper
    from stet.daemon.notes.service import NotesService
    from stet.daemon.ops.notes import NoteOperations, Principal
    from stet.daemon.safety.brake import Brake
    from stet.daemon.safety.versions_keeper import VersionsKeeper
    from stet.sync.brake import BrakePolicy
    from stet.sync.home_layout import HomeLayout
    from stet.sync.idempotency import IdempotencyKeys
    from stet.sync.snapshots import Snapshots
    from stet.sync.store import VaultStore
    from stet.sync.versions import VersionPolicy

    rng = random.Random(seed)
    clock_t = [time.time()]

    def clock() -> float:
        return clock_t[0]

    store = VaultStore(HomeLayout(home).vault_db(_vault_id(home)))
    service = NotesService("aged", store, clock=clock)
    bridge = FileBridge(folder, service, extensions=EXT, max_bytes=10 << 20)
    events = EventBus()
    records = RecordsKeeper(service, events)
    records.index.start()
    keeper = VersionsKeeper(service, events, VersionPolicy())
    brake = Brake(service, events, keeper, BrakePolicy())
    agent = NoteOperations(service, events, Principal("agent", "bench"), extensions=EXT,
                           max_bytes=10 << 20, clock=clock, search=records.index, versions=keeper,
                           brake=brake)
    first_size = {p: (folder / p).stat().st_size for p in notes}
    aging = Aging()
    started = time.perf_counter()
    try:
        for r in range(edits):
            t_round = time.perf_counter()
            for n, path in enumerate(notes):
                clock_t[0] += 0.05
                tag = f"r{r}n{n}"
                kind = rng.choices(("append", "agent-rewrite", "disk-rewrite"), (4, 3, 3))[0]
                if kind == "disk-rewrite" and (folder / path).stat().st_size > 2 * first_size[path]:
                    kind = "disk-trim"
                if kind == "append":
                    agent.append_note(path, f"- {clock_t[0]:.0f} {tag} appended by the agent\n")
                elif kind == "agent-rewrite":
                    read = agent.read_note(path)
                    agent.update_note(path, _line_edit(rng, read["content"], tag),
                                      baseRevision=read["revision"])
                else:
                    text = (folder / path).read_text(encoding="utf-8")
                    if kind == "disk-trim":
                        lines = text.splitlines(keepends=True)
                        text = "".join(lines[: 3] + lines[3 + max(1, len(lines) // 3):])
                    text = _line_edit(rng, text, tag)
                    (folder / path).write_text(text, encoding="utf-8")
                    bridge.ingest_path(path)
                aging.by_kind[kind] = aging.by_kind.get(kind, 0) + 1
                aging.edits += 1
                if kind != "disk-rewrite" and kind != "disk-trim":
                    bridge.flush_writes()  # the agent's change reaches the file before the next edit
            clock_t[0] += ROUND_S
            keeper.tick(clock_t[0])
            keeper.sweep(clock_t[0])
            # The daemon's minute task (daemon/app/runtime.py): revision states past the
            # hour, idempotency keys past their life, expired snapshots.
            service.revisions.prune(clock_t[0])
            IdempotencyKeys(store).prune(clock_t[0])
            Snapshots(store).prune(clock_t[0])
            service.shrink_documents(64)  # the daemon keeps a bounded set of documents
            aging.rounds_s.append(time.perf_counter() - t_round)
            if r % max(1, edits // 20) == 0 or r == edits - 1:
                print(f"  round {r + 1}/{edits}: {aging.rounds_s[-1]:.2f} s, {aging.edits:,} edits, "
                      f"load {load_average()}", flush=True)
        bridge.flush_writes()
    finally:
        aging.seconds = time.perf_counter() - started
        records.index.close()
        bridge.close()
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store.close()
    return aging


def measure_store(home: Path, *, an_hour_later: bool = False) -> StoreSize:
    """The store's sizes; ``an_hour_later``: first drop the revision states the daemon's
    minute task prunes an hour after the last edit (SPEC §6.4 keeps them at least 1 h),
    as the store stands at rest (freed pages stay in the file, reused by later writes)."""
    from stet.sync.home_layout import HomeLayout

    db_path = HomeLayout(home).vault_db(_vault_id(home))
    db = sqlite3.connect(db_path)
    try:
        if an_hour_later:
            db.execute("DELETE FROM revision_states")
            db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        free_pages = int(db.execute("PRAGMA freelist_count").fetchone()[0])
        page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
        tables: dict[str, int] = {}
        try:
            for name, size in db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
                tables[str(name)] = int(size)
        except sqlite3.OperationalError:
            pass  # SQLite built without dbstat: file sizes only
        text_bytes = 0
        for (blob,) in db.execute("SELECT size FROM notes WHERE deleted = 0"):
            text_bytes += int(blob)
        vb, vn = db.execute(
            "SELECT coalesce(sum(length(CAST(text AS BLOB))), 0), count(*) FROM versions").fetchone()
        log_rows = int(db.execute("SELECT count(*) FROM change_log").fetchone()[0])
        update_rows = int(db.execute("SELECT count(*) FROM updates").fetchone()[0])
        states = int(db.execute("SELECT count(*) FROM revision_states").fetchone()[0])
        crdt, crdt_gc = _crdt_history(db)
    finally:
        db.close()
    files = {p.name: p.stat().st_size for p in db_path.parent.iterdir()
             if p.name.startswith(db_path.stem) and p.is_file()}
    return StoreSize(files, tables, text_bytes, int(vb), int(vn), log_rows, update_rows, states,
                     crdt, crdt_gc, free_pages * page_size)


def _crdt_history(db: sqlite3.Connection) -> tuple[int, int]:
    """Sum over live notes of (the note's state as one update, the same loaded into a
    garbage-collecting document): how much of the CRDT store is deleted text."""
    import pycrdt

    full = gc_total = 0
    ids = [r[0] for r in db.execute("SELECT id FROM notes WHERE deleted = 0")]
    for note_id in ids:
        rows = [bytes(r[0]) for r in db.execute("SELECT data FROM updates WHERE note_id = ? ORDER BY seq",
                                                (note_id,))]
        if not rows:
            continue
        kept: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(skip_gc=True)
        collected: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(skip_gc=False)
        for data in rows:
            kept.apply_update(data)
        merged = kept.get_update()
        collected.apply_update(merged)
        full += len(merged)
        gc_total += len(collected.get_update())
    return full, gc_total


def read_p50(api_url: str, token: str, paths: list[str], reads: int, seed: int) -> list[float]:
    """``reads`` GETs of random notes over one keep-alive connection: seconds each."""
    u = urllib.parse.urlsplit(api_url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=30)
    rng = random.Random(seed)
    times: list[float] = []
    try:
        for _ in range(reads):
            path = urllib.parse.quote(rng.choice(paths))
            t = time.perf_counter()
            conn.request("GET", f"/v1/vaults/notes/notes/{path}",
                         headers={"Authorization": f"Bearer {token}"})
            resp = conn.getresponse()
            body = resp.read()
            times.append(time.perf_counter() - t)
            if resp.status != 200:
                raise RuntimeError(f"read {path}: {resp.status} {body[:200]!r}")
    finally:
        conn.close()
    return times


@dataclass
class Run:
    notes: int
    edits: int
    vault_bytes: int
    aging: Aging | None = None
    size: StoreSize | None = None
    at_rest: StoreSize | None = None
    ready_s: list[float] = field(default_factory=list)
    reads_s: list[float] = field(default_factory=list)
    first_sync_s: float = 0.0
    first_sync_wire: int = 0
    restarts: list[Restart] = field(default_factory=list)
    load: dict[str, str] = field(default_factory=dict)


def run(work: Path, args: argparse.Namespace) -> Run:
    from stet.client.daemon_link import read_owner_token
    from stet.sync.home_layout import HomeLayout

    folder_a, folder_b, home_a = work / "a", work / "b", work / "home-a"
    gen = generate_vault(folder_a, notes=args.notes, seed=args.seed, min_bytes=1024, max_bytes=12 * 1024)
    paths = sorted(p.relative_to(folder_a).as_posix() for p in folder_a.rglob("*.md"))
    out = Run(args.notes, args.edits, gen.total_bytes)
    out.load["start"] = load_average()
    init_s = init_vault(home_a, folder_a)
    print(f"== {args.notes:,} notes ({gen.total_bytes / MB:.1f} MB), stet init {init_s:.1f} s", flush=True)
    out.aging = age_vault(home_a, folder_a, paths, args.edits, args.seed)
    out.load["after aging"] = load_average()
    print(f"  aged: {out.aging.edits:,} edits in {out.aging.seconds:.0f} s {out.aging.by_kind}", flush=True)
    out.size = measure_store(home_a)
    out.at_rest = measure_store(home_a, an_hour_later=True)
    print(f"  store {out.size.files} tables {out.size.tables}", flush=True)
    with Daemons() as daemons:
        a = None
        for _ in range(args.restarts):
            if a is not None:
                daemons.stop(a)
            a, ready = daemons.start(home_a)
            out.ready_s.append(ready)
            print(f"  A ready {ready:.2f} s", flush=True)
        assert a is not None
        token = read_owner_token(HomeLayout(home_a))
        read_p50(a.api_url, token, paths, 50, args.seed)  # warm the connection and caches
        out.reads_s = read_p50(a.api_url, token, paths, args.reads, args.seed + 1)
        out.load["after reads"] = load_average()
        print(f"  reads p50 {statistics.median(out.reads_s) * 1e3:.2f} ms, p99 "
              f"{percentile(out.reads_s, 99) * 1e3:.2f} ms", flush=True)
        if not args.no_peer:
            digest = tree_digest(folder_a)
            proxy = CountingProxy(("127.0.0.1", peer_port(a)))
            try:
                b, _ = daemons.start(work / "home-b")
                t = time.perf_counter()
                pair(a, b, folder_b, address=proxy.address)
                wait_synced(b, folder_b, len(paths), digest, timeout=1800)
                out.first_sync_s = time.perf_counter() - t
                out.first_sync_wire = sum(c.up + c.down for c in proxy.snapshot())
                dev_a, dev_b = device_id(a), device_id(b)
                wait_for(lambda: linked(a, dev_b) and linked(b, dev_a), timeout=60, what="the link")
                print(f"  first sync to B {out.first_sync_s:.1f} s, {fmt_bytes(out.first_sync_wire)}",
                      flush=True)
                for _ in range(args.restarts):
                    b, r = restart_b(daemons, a, b, proxy, dev_a, dev_b)
                    out.restarts.append(r)
                out.load["after the peer"] = load_average()
            finally:
                proxy.close()
    return out


def report(r: Run, args: argparse.Namespace) -> str:
    assert r.size is not None
    assert r.aging is not None
    s = r.size
    content = s.text_bytes + s.versions_bytes
    ratio = s.store_bytes / content if content else float("inf")
    p50 = statistics.median(r.reads_s) * 1e3 if r.reads_s else float("nan")
    ready = statistics.median(r.ready_s) if r.ready_s else float("nan")

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(r.aging.by_kind.items()))
    pace = r.aging.edits / max(r.aging.seconds, 1e-9)
    lines = [
        f"P13 aged vault: {r.notes:,} notes ({r.vault_bytes / MB:.1f} MB generated, seed {args.seed}) x "
        f"{r.edits:,} edits each = {r.aging.edits:,} edits ({kinds}), "
        f"made in process through the daemon's write path in {r.aging.seconds:.0f} s "
        f"({pace:,.0f} edits/s; the clock injected, +11 min a round).\n",
        "| id | metric | measured | target |",
        "|---|---|---|---|",
        f"| P13 | store (vault db + WAL + search index) vs text + versions | {s.store_bytes / MB:.1f} MB vs "
        f"{s.text_bytes / MB:.1f} + {s.versions_bytes / MB:.1f} MB = {ratio:.2f}x | "
        f"<= 3x ({verdict(ratio <= 3)}) |",
    ]
    if r.at_rest is not None:
        rest = r.at_rest
        used = rest.store_bytes - rest.free_bytes
        lines.append(
            f"| P13 | the same an hour after the last edit (revision states pruned): file / pages in use | "
            f"{rest.store_bytes / MB:.1f} MB = {rest.store_bytes / content:.2f}x / {used / MB:.1f} MB = "
            f"{used / content:.2f}x | <= 3x ({verdict(rest.store_bytes <= 3 * content)}) |")
    lines += [
        f"| P13 | note read p50 through REST ({len(r.reads_s):,} reads, one keep-alive connection) | "
        f"{p50:.2f} ms (p99 {percentile(r.reads_s, 99) * 1e3:.2f} ms) | <= 5 ms ({verdict(p50 <= 5)}) |",
        f"| P13 | restart ready (spawn -> status answers), median of {len(r.ready_s)} | {ready:.2f} s "
        f"[{min(r.ready_s):.2f}-{max(r.ready_s):.2f}] | <= 3 s ({verdict(ready <= 3)}) |",
    ]
    if r.restarts:
        wire = statistics.median([x.wire for x in r.restarts])
        sync = statistics.median([x.sync_after_ready_s for x in r.restarts])
        lines.append(f"| (P5) | peer B restarted, nothing changed: reconnect on the wire, median of "
                     f"{len(r.restarts)} | {fmt_bytes(wire)} ({wire:,.0f} B), "
                     f"sync after ready {sync:.2f} s | "
                     "<= 200 KB at 10k notes (P5) |")
        lines.append(f"| - | first sync of the aged vault to an empty B | {r.first_sync_s:.1f} s, "
                     f"{fmt_bytes(r.first_sync_wire)} on the wire | - |")
    lines += [
        "",
        "Store detail: files " + ", ".join(f"{k} {v / MB:.1f} MB" for k, v in sorted(s.files.items())) +
        "; tables and indexes " + ", ".join(f"{k} {v / MB:.1f} MB" for k, v in
                                            sorted(s.tables.items(), key=lambda kv: -kv[1]) if v >= 100_000) +
        f"; rows: updates {s.update_rows:,}, versions {s.versions:,}, change_log {s.log_rows:,}, "
        f"revision_states {s.revision_states:,}. CRDT state of the live notes as one update each: "
        f"{s.crdt_bytes / MB:.1f} MB with deleted text kept (skip_gc), {s.crdt_gc_bytes / MB:.1f} MB "
        "garbage-collected (what a compaction dropping deleted text would keep).",
        "Aging round time (s, every note edited once): first " + f"{r.aging.rounds_s[0]:.2f}, median "
        f"{statistics.median(r.aging.rounds_s):.2f}, last {r.aging.rounds_s[-1]:.2f}.",
        "Load average (1/5/15 min): " + "; ".join(f"{k} {v}" for k, v in r.load.items()) +
        " (2 cores shared with other engineers' tests).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--notes", type=int, default=1000)
    ap.add_argument("--edits", type=int, default=1000, help="edits per note")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--no-peer", action="store_true", help="skip the peer's first sync and reconnects")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    args = ap.parse_args()
    install_sigterm_exit()
    with work_dir("stet-aged-", keep=args.keep) as work:
        r = run(work, args)
    table = report(r, args)
    print(table)
    if args.json is not None:
        assert r.size is not None
        args.json.write_text(json.dumps({"files": r.size.files, "tables": r.size.tables,
                                         "text": r.size.text_bytes, "versions": r.size.versions_bytes,
                                         "ready": r.ready_s,
                                         "read_p50_ms": statistics.median(r.reads_s) * 1e3,
                                         "restarts": [x.wire for x in r.restarts]}, indent=1))
    if not args.no_write:
        append_results(table, title=f"P13 aged vault, {args.notes:,} notes x {args.edits:,} edits")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
