#!/usr/bin/env python3
"""Store comparison: pycrdt-store's ``SQLiteYStore`` against Stet's ``VaultStore``, same run.

    python bench/store_compare.py [--appends 2000] [--notes 1000] [--load-reps 5]
                                  [--squash-wait 1.0] [--dir DIR] [--no-write]

Re-measures DESIGN.md's bullet "pycrdt-store 0.1.5, measured here" with the versions in
the venv:

1. Writes: one note receiving ``--appends`` small appends, each update produced by
   ``NoteDoc.set_text(text + "line i\\n")`` (the same bytes go to every store). Each call
   is durable when it returns as the store defines it: ``SQLiteYStore.write`` commits
   (``async with self._db``) on its own connection; ``VaultStore.append_update`` commits
   its own transaction. The pragmas are queried on each store's own connection. Stet is
   measured at its default ``synchronous=NORMAL`` and at ``FULL`` (pycrdt-store runs at
   SQLite's default, which is FULL with a rollback journal: the stronger guarantee).
2. Loading that note: pycrdt-store's ``apply_updates`` (latest checkpoint + the tail) and a
   full ``read()`` replay; Stet's ``updates`` before and after ``compact``.
3. ``--notes`` notes of ~5 KB (bench/generate_vault.py, seed 1): pycrdt-store needs one
   store object (one connection, one task group) per document path; Stet one store per
   vault. Open + load all of them, count open FDs (``/proc/self/fd``) with all loaded.
4. pycrdt-store's squash (``squash_after_inactivity_of``): configured, triggered by a write
   after the pause, then the note is reloaded by a fresh store object, with and without
   ``register_compression_callbacks``.
5. What a write call does when the INSERT fails (a trigger injects the failure).

Everything happens under a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager, closing, suppress
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
from pycrdt.store import SQLiteYStore, YDocNotFound

from stet.sync.folder_scan import decode_note
from stet.sync.note_doc import NoteDoc
from stet.sync.store import VaultStore
from stet.sync.vault_import import genesis_row

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from generate_vault import generate_vault  # noqa: E402
from machine_info import append_results  # noqa: E402

SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
SOURCE = "bench"


# -- small helpers -----------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def fds_on(db: Path) -> int:
    """Open FDs of this process on ``db`` or its -wal/-shm/-journal files."""
    prefix = str(db.resolve())
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        n += target.startswith(prefix)
    return n


def disk_bytes(db: Path) -> str:
    """Size of the database file, plus its -wal/-shm/-journal files if any."""
    main = db.stat().st_size
    side = sum(p.stat().st_size for p in db.parent.glob(db.name + "-*") if p.is_file())
    return f"{main / 1024:,.0f} KiB" + (f" + {side / 1024:,.0f} KiB" if side else "")


def sql_count(db: Path, sql: str, args: tuple[Any, ...] = ()) -> int:
    """A count read through a second, independent connection (sees only committed rows)."""
    with closing(sqlite3.connect(db)) as c:
        return int(c.execute(sql, args).fetchone()[0])


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def quiet_logger() -> tuple[logging.Logger, Records]:
    """The logger handed to every SQLiteYStore: keeps its error records instead of printing them."""
    log = logging.getLogger("bench.store_compare.ystore")
    log.propagate = False
    handler = Records()
    log.handlers[:] = [handler]
    return log, handler


def ystore_class(db: Path, **attrs: Any) -> type[SQLiteYStore]:
    """pycrdt-store's documented way to choose the database file: a subclass setting db_path."""
    return type("BenchYStore", (SQLiteYStore,), {"db_path": str(db), **attrs})


@asynccontextmanager
async def opened(store: SQLiteYStore) -> AsyncIterator[SQLiteYStore]:
    """``async with store`` (its own task group) and wait for ``_init_db`` to finish."""
    async with store:
        assert store.db_initialized is not None
        await store.db_initialized.wait()
        yield store


async def ystore_pragmas(store: SQLiteYStore) -> tuple[str, str]:
    # Its own connection (private attribute): synchronous is per connection.
    cur = await store._db.execute("PRAGMA journal_mode")
    jm = (await cur.fetchone() or ("?",))[0]
    cur = await store._db.execute("PRAGMA synchronous")
    sync = (await cur.fetchone() or (-1,))[0]
    return str(jm), SYNC_NAMES.get(int(sync), str(sync))


def vault_pragmas(store: VaultStore) -> tuple[str, str]:
    jm = store._db.execute("PRAGMA journal_mode").fetchone()[0]
    sync = int(store._db.execute("PRAGMA synchronous").fetchone()[0])
    return str(jm), SYNC_NAMES.get(sync, str(sync))


# -- 1 + 2: one note, many appends ----------------------------------------------------------------


@dataclass
class Workload:
    path: str
    header: str
    note_id: str
    genesis: bytes
    updates: list[bytes]
    text: str


def make_workload(appends: int) -> Workload:
    path = "bench/append-note.md"
    header = "# Append benchmark\n\nOne line per write.\n\n"
    row, genesis = genesis_row(path, header, SOURCE, time.time(), None)
    note = NoteDoc.from_updates([genesis])
    text = header
    updates: list[bytes] = []
    for i in range(appends):
        text += f"line {i}\n"
        update = note.set_text(text)
        assert update is not None
        updates.append(update)
    assert note.text == text
    return Workload(path, header, row.id, genesis, updates, text)


@dataclass
class WriteResult:
    name: str
    pragmas: tuple[str, str]
    lat: list[float]
    visible_rows: int
    extra_rows: str
    disk: str
    loads: dict[str, tuple[float, int, bool]] = field(default_factory=dict)  # label -> (s, rows, ok)
    compact_s: float | None = None


async def write_phase(work: Path, w: Workload, log: logging.Logger) -> list[WriteResult]:
    """All three stores take the same update in turn (rotating who goes first), so a noisy
    disk (fsync times here vary by 10x from one minute to the next) hits all of them alike."""
    ydb, ndb, fdb = work / "ystore-writes.db", work / "vault-normal.db", work / "vault-full.db"
    row, genesis = genesis_row(w.path, w.header, SOURCE, time.time(), None)
    assert row.id == w.note_id
    assert genesis == w.genesis
    lat: list[list[float]] = [[], [], []]
    normal, full = VaultStore(ndb, synchronous="NORMAL"), VaultStore(fdb, synchronous="FULL")
    try:
        async with opened(ystore_class(ydb)(w.path, log=log)) as ystore:
            pragmas = [await ystore_pragmas(ystore), vault_pragmas(normal), vault_pragmas(full)]
            await ystore.write(genesis)
            for vs in (normal, full):
                vs.put_note(row)
                vs.append_update(row.id, genesis, SOURCE)
            for i, update in enumerate(w.updates):
                for k in ((i + j) % 3 for j in range(3)):
                    t0 = time.perf_counter()
                    if k == 0:
                        await ystore.write(update)
                    elif k == 1:
                        normal.append_update(row.id, update, SOURCE)
                    else:
                        full.append_update(row.id, update, SOURCE)
                    lat[k].append(time.perf_counter() - t0)
            ycount = sql_count(ydb, "SELECT count(*) FROM yupdates WHERE path = ?", (w.path,))
            ckpts = sql_count(ydb, "SELECT count(*) FROM ycheckpoints WHERE path = ?", (w.path,))
        count = "SELECT count(*) FROM updates WHERE note_id = ?"
        vcount = [sql_count(db, count, (row.id,)) for db in (ndb, fdb)]
    finally:
        normal.close()
        full.close()
    return [
        WriteResult("pycrdt-store SQLiteYStore", pragmas[0], lat[0], ycount, f"+ {ckpts} checkpoint row",
                    disk_bytes(ydb)),
        WriteResult("Stet VaultStore (NORMAL)", pragmas[1], lat[1], vcount[0], "", disk_bytes(ndb)),
        WriteResult("Stet VaultStore (FULL)", pragmas[2], lat[2], vcount[1], "", disk_bytes(fdb)),
    ]


async def ystore_loads(db: Path, w: Workload, reps: int, log: logging.Logger, res: WriteResult) -> None:
    """Loads through a fresh store object each time (a restart), timing the load call only."""
    cls = ystore_class(db)
    ckpt_times: list[float] = []
    replay_times: list[float] = []
    ckpt_ok = replay_ok = True
    replay_rows = 0
    for _ in range(reps):
        async with opened(cls(w.path, log=log)) as store:
            note = NoteDoc()
            t0 = time.perf_counter()
            await store.apply_updates(note.doc)
            ckpt_times.append(time.perf_counter() - t0)
            ckpt_ok &= note.text == w.text
            note = NoteDoc()
            replay_rows = 0
            t0 = time.perf_counter()
            async for update, *_rest in store.read():
                note.apply_update(update)
                replay_rows += 1
            replay_times.append(time.perf_counter() - t0)
            replay_ok &= note.text == w.text
    tail = sql_count(
        db,
        "SELECT count(*) FROM yupdates WHERE path = ? AND timestamp >= "
        "(SELECT timestamp FROM ycheckpoints WHERE path = ?)",
        (w.path, w.path),
    )
    res.loads["apply_updates (checkpoint + tail)"] = (statistics.median(ckpt_times), 1 + tail, ckpt_ok)
    res.loads["read() replay of every row"] = (statistics.median(replay_times), replay_rows, replay_ok)


def vault_loads(db: Path, w: Workload, reps: int, res: WriteResult) -> None:
    store = VaultStore(db)
    try:

        def load(label: str) -> None:
            times: list[float] = []
            ok = True
            rows: list[bytes] = []
            for _ in range(reps):
                t0 = time.perf_counter()
                rows = store.updates(w.note_id)
                note = NoteDoc.from_updates(rows)
                times.append(time.perf_counter() - t0)
                ok &= note.text == w.text
            res.loads[label] = (statistics.median(times), len(rows), ok)

        load("updates() before compact")
        t0 = time.perf_counter()
        store.compact(w.note_id)
        res.compact_s = time.perf_counter() - t0
        load("updates() after compact")
    finally:
        store.close()


# -- 3: many notes --------------------------------------------------------------------------------


@dataclass
class ManyResult:
    populate_s: float
    open_s: float
    load_s: float
    close_s: float
    fds_before: int
    fds_after: int
    db_fds: int
    threads: int
    mismatches: int
    connections: str


def read_notes(notes: int, work: Path) -> list[tuple[str, str, bytes]]:
    vault = work / "vault"
    gen = generate_vault(vault, notes=notes, seed=1, min_bytes=4096, max_bytes=6144,
                         target_total_bytes=5120 * notes, set_mtimes=False)
    out = []
    for rel in gen.paths:
        text = decode_note((vault / rel).read_bytes())
        _row, genesis = genesis_row(rel, text, SOURCE, 0.0, None)
        out.append((rel, text, genesis))
    return out


async def ystore_many(db: Path, notes: list[tuple[str, str, bytes]], log: logging.Logger) -> ManyResult:
    cls = ystore_class(db)
    t0 = time.perf_counter()
    for path, _text, genesis in notes:
        async with opened(cls(path, log=log)) as store:
            await store.write(genesis)
    populate = time.perf_counter() - t0
    fds_before = fd_count()
    mismatches = 0
    open_s = load_s = 0.0
    async with AsyncExitStack() as stack:
        for path, text, _genesis in notes:
            t0 = time.perf_counter()
            store = await stack.enter_async_context(opened(cls(path, log=log)))
            t1 = time.perf_counter()
            note = NoteDoc()
            await store.apply_updates(note.doc)
            load_s += time.perf_counter() - t1
            open_s += t1 - t0
            mismatches += note.text != text
        fds_after, db_fds, threads = fd_count(), fds_on(db), threading.active_count()
        t0 = time.perf_counter()
    close_s = time.perf_counter() - t0
    return ManyResult(populate, open_s, load_s, close_s, fds_before, fds_after, db_fds, threads,
                      mismatches, f"{len(notes):,} (one per store object)")


def vault_many(db: Path, notes: list[tuple[str, str, bytes]]) -> ManyResult:
    t0 = time.perf_counter()
    store = VaultStore(db)
    now = time.time()
    for start in range(0, len(notes), 500):  # batches like vault_import.import_folder
        with store.transaction():
            for path, text, _genesis in notes[start : start + 500]:
                row, genesis = genesis_row(path, text, SOURCE, now, None)
                store.put_note(row)
                store.append_update(row.id, genesis, SOURCE)
    store.close()
    populate = time.perf_counter() - t0
    expected = {path: text for path, text, _g in notes}
    fds_before = fd_count()
    t0 = time.perf_counter()
    store = VaultStore(db)
    t1 = time.perf_counter()
    mismatches = 0
    rows = store.live_notes()
    for row in rows:
        note = NoteDoc.from_updates(store.updates(row.id))
        mismatches += note.text != expected.get(row.path)
    mismatches += len(notes) - len(rows)
    t2 = time.perf_counter()
    fds_after, db_fds, threads = fd_count(), fds_on(db), threading.active_count()
    store.close()
    close_s = time.perf_counter() - t2
    return ManyResult(populate, t1 - t0, t2 - t1, close_s, fds_before, fds_after, db_fds, threads,
                      mismatches, "1")


# -- 4: squash ------------------------------------------------------------------------------------


@dataclass
class SquashResult:
    label: str
    writes_before_pause: int
    rows_before: int
    rows_after: int
    checkpoints: int
    expected_chars: int
    expected_lines: int
    ckpt_chars: int
    ckpt_lines: int
    replay_chars: int
    replay_lines: int
    squashed_row_bytes: int


def _lines(text: str) -> int:
    return text.count("\n")


async def squash_case(
    db: Path, label: str, appends: int, wait: float, callbacks: bool, log: logging.Logger
) -> SquashResult:
    cls = ystore_class(db, squash_after_inactivity_of=wait)
    path = f"bench/squash-{appends}-{int(callbacks)}.md"
    header = "# Squash check\n\n"
    _row, genesis = genesis_row(path, header, SOURCE, time.time(), None)
    note = NoteDoc.from_updates([genesis])
    text = header

    def prepared(store: SQLiteYStore) -> SQLiteYStore:
        if callbacks:
            store.register_compression_callbacks(bytes, bytes)  # identity "compression"
        return store

    async with opened(prepared(cls(path, log=log))) as store:
        await store.write(genesis)
        for i in range(appends):
            text += f"line {i}\n"
            update = note.set_text(text)
            assert update is not None
            await store.write(update)
        count = "SELECT count(*) FROM yupdates WHERE path = ?"
        rows_before = sql_count(db, count, (path,))
        await anyio.sleep(wait * 1.2 + 0.1)  # longer than squash_after_inactivity_of
        text += "line written after the pause\n"
        update = note.set_text(text)
        assert update is not None
        await store.write(update)  # this write finds the note inactive and squashes first
        rows_after = sql_count(db, count, (path,))
        checkpoints = sql_count(db, "SELECT count(*) FROM ycheckpoints WHERE path = ?", (path,))
    with closing(sqlite3.connect(db)) as c:
        first = c.execute(
            "SELECT length(yupdate) FROM yupdates WHERE path = ? ORDER BY rowid LIMIT 1", (path,)
        ).fetchone()
    # Reload as after a restart: a fresh store object (same configuration) on the same file.
    async with opened(prepared(cls(path, log=log))) as store:
        via_ckpt = NoteDoc()
        with suppress(YDocNotFound):
            await store.apply_updates(via_ckpt.doc)
        via_read = NoteDoc()
        with suppress(YDocNotFound):
            async for update, *_rest in store.read():
                via_read.apply_update(update)
    return SquashResult(
        label, 1 + appends, rows_before, rows_after, checkpoints, len(text), _lines(text),
        len(via_ckpt.text), _lines(via_ckpt.text), len(via_read.text), _lines(via_read.text),
        int(first[0]) if first else -1,
    )


# -- 5: a failing INSERT --------------------------------------------------------------------------

TRIGGER = (
    "CREATE TRIGGER bench_fail BEFORE INSERT ON {table} "
    "BEGIN SELECT RAISE(ABORT, 'bench: injected'); END"
)


def add_trigger(db: Path, table: str) -> None:
    with closing(sqlite3.connect(db)) as c:
        c.execute(TRIGGER.format(table=table))
        c.commit()


async def ystore_failure(db: Path, w: Workload, log: logging.Logger, records: Records) -> str:
    cls = ystore_class(db)
    async with opened(cls(w.path, log=log)) as store:
        await store.write(w.genesis)
        add_trigger(db, "yupdates")
        before = len(records.records)
        try:
            await store.write(w.updates[0])
            outcome = "returned normally"
        except Exception as exc:  # report whatever it is
            outcome = f"raised {type(exc).__name__}"
        rows = sql_count(db, "SELECT count(*) FROM yupdates WHERE path = ?", (w.path,))
    logged = [r.getMessage() for r in records.records[before:]]
    return f"{outcome}; rows stored: {rows} of 2; logged: {logged or 'nothing'}"


def vault_failure(db: Path, w: Workload) -> str:
    store = VaultStore(db)
    try:
        store.append_update(w.note_id, w.genesis, SOURCE)
        add_trigger(db, "updates")
        try:
            store.append_update(w.note_id, w.updates[0], SOURCE)
            outcome = "returned normally"
        except Exception as exc:
            outcome = f"raised {type(exc).__name__}"
        rows = sql_count(db, "SELECT count(*) FROM updates WHERE note_id = ?", (w.note_id,))
    finally:
        store.close()
    return f"{outcome}; rows stored: {rows} of 2"


# -- report -----------------------------------------------------------------------------------------


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def write_table(results: list[WriteResult]) -> str:
    def col(f: Callable[[WriteResult], str]) -> list[str]:
        return [f(r) for r in results]

    rows = [
        ["journal_mode / synchronous", *col(lambda r: f"{r.pragmas[0]} / {r.pragmas[1]}")],
        ["mean latency", *col(lambda r: us(statistics.fmean(r.lat)))],
        ["p50 latency", *col(lambda r: us(pct(r.lat, 0.50)))],
        ["p99 latency", *col(lambda r: us(pct(r.lat, 0.99)))],
        ["max latency", *col(lambda r: us(max(r.lat)))],
        ["writes/s (1 / mean)", *col(lambda r: f"{len(r.lat) / sum(r.lat):,.0f}")],
        ["rows seen by a 2nd connection", *col(lambda r: f"{r.visible_rows:,} {r.extra_rows}".strip())],
        ["on disk: db (+ -wal/-shm files)", *col(lambda r: r.disk)],
    ]
    return table(["metric", *[r.name for r in results]], rows)


def load_table(results: list[WriteResult], text_chars: int) -> str:
    rows = []
    for r in results:
        for label, (secs, n, ok) in r.loads.items():
            rows.append([r.name, label, f"{n:,}", ms(secs), "yes" if ok else f"NO ({text_chars} expected)"])
        if r.compact_s is not None:
            rows.append([r.name, "compact() itself", "", ms(r.compact_s), ""])
    return table(["store", "load path", "rows read", "time (median)", "text correct"], rows)


def many_table(y: ManyResult, v: ManyResult, notes: int, mb: float) -> str:
    def both(f: Callable[[ManyResult], str]) -> list[str]:
        return [f(y), f(v)]

    rows = [
        ["populate (genesis update per note)", *both(lambda r: ms(r.populate_s))],
        ["open all", *both(lambda r: ms(r.open_s))],
        ["load all (NoteDoc text)", *both(lambda r: ms(r.load_s))],
        ["open + load per note", *both(lambda r: us((r.open_s + r.load_s) / notes))],
        ["close all", *both(lambda r: ms(r.close_s))],
        ["SQLite connections open", *both(lambda r: r.connections)],
        ["open FDs after loading all (before)", *both(lambda r: f"{r.fds_after:,} ({r.fds_before:,})")],
        ["  of which on the store's files", *both(lambda r: f"{r.db_fds:,}")],
        ["Python threads", *both(lambda r: str(r.threads))],
        ["texts not matching the files", *both(lambda r: str(r.mismatches))],
    ]
    return (
        f"{notes:,} notes, {mb:.1f} MB (generate_vault seed 1, 4-6 KB each), loaded sequentially\n\n"
        + table(["metric", "pycrdt-store (one store object per note)", "Stet VaultStore (one DB)"], rows)
    )


def squash_table(results: list[SquashResult], wait: float) -> str:
    rows = []
    for r in results:
        rows.append([
            r.label, str(r.writes_before_pause), f"{r.rows_before} → {r.rows_after}", str(r.checkpoints),
            f"{r.squashed_row_bytes} B",
            f"{r.expected_chars:,} / {r.expected_lines}",
            f"{r.ckpt_chars:,} / {r.ckpt_lines}",
            f"{r.replay_chars:,} / {r.replay_lines}",
        ])
    return (
        f"`squash_after_inactivity_of = {wait}` s; writes, a pause of {wait * 1.2 + 0.1:.1f} s, one more "
        "write (which squashes), then a fresh store object reloads the note\n\n"
        + table([
            "case", "writes before pause", "yupdates rows before → after", "checkpoint rows",
            "first row after squash", "expected chars / lines", "reloaded by apply_updates",
            "reloaded by read()",
        ], rows)
    )


def verdict(results: list[SquashResult]) -> str:
    lines = []
    for r in results:
        if r.ckpt_chars == r.expected_chars and r.replay_chars == r.expected_chars:
            # Only the final text is checked: this workload never deletes, and pycrdt-store's
            # squash and checkpoint docs are plain Doc() (gc on), which drops deleted content.
            what = "final text intact (append-only workload; deleted content is not tested)"
        else:
            lost = r.expected_lines - max(r.ckpt_lines, r.replay_lines)
            what = (
                f"history lost: apply_updates gives {r.ckpt_chars:,} of {r.expected_chars:,} chars, "
                f"read() {r.replay_chars:,}; at least {lost} of {r.expected_lines} lines gone"
            )
        lines.append(f"- {r.label}: {what}")
    return "\n".join(lines) + "\n"


# -- main -----------------------------------------------------------------------------------------


async def ystore_part(work: Path, w: Workload, args: argparse.Namespace, log: logging.Logger,
                      records: Records) -> dict[str, Any]:
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    out["writes"] = await write_phase(work, w, log)
    print(f"writes, all three stores interleaved: {time.perf_counter() - t0:.1f} s", flush=True)
    await ystore_loads(work / "ystore-writes.db", w, args.load_reps, log, out["writes"][0])
    out["failure"] = await ystore_failure(work / "ystore-fail.db", w, log, records)
    return out


async def squash_part(work: Path, args: argparse.Namespace, log: logging.Logger) -> list[SquashResult]:
    cases = [
        ("no callbacks, 50 appends (before any checkpoint)", 50, False),
        ("no callbacks, 150 appends (one checkpoint)", 150, False),
        ("identity compression callbacks, 150 appends", 150, True),
    ]
    results = []
    for i, (label, appends, callbacks) in enumerate(cases):
        results.append(await squash_case(work / f"ystore-squash{i}.db", label, appends, args.squash_wait,
                                         callbacks, log))
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--notes", type=int, default=1000)
    ap.add_argument("--load-reps", type=int, default=5)
    ap.add_argument("--squash-wait", type=float, default=1.0)
    ap.add_argument("--dir", type=Path, default=None, help="parent of the temporary directory")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/history/rounds.md")
    args = ap.parse_args()
    started = time.perf_counter()
    log, records = quiet_logger()
    work = Path(tempfile.mkdtemp(prefix="stet-store-compare-", dir=args.dir))
    try:
        w = make_workload(args.appends)
        sizes = [len(u) for u in w.updates]
        y = anyio.run(ystore_part, work, w, args, log, records)
        writes: list[WriteResult] = y["writes"]
        vault_loads(work / "vault-normal.db", w, args.load_reps, writes[1])
        vault_fail = vault_failure(work / "vault-fail.db", w)

        notes = read_notes(args.notes, work)
        mb = sum(len(t.encode()) for _p, t, _g in notes) / 1e6
        t0 = time.perf_counter()
        y_many = anyio.run(ystore_many, work / "ystore-many.db", notes, log)
        v_many = vault_many(work / "vault-many.db", notes)
        print(f"many notes: {time.perf_counter() - t0:.1f} s", flush=True)

        t0 = time.perf_counter()
        squash = anyio.run(squash_part, work, args, log)
        print(f"squash: {time.perf_counter() - t0:.1f} s", flush=True)

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        body = (
            f"pycrdt-store {version('pycrdt-store')}, sqlite-anyio {version('sqlite-anyio')}, "
            f"anyio {version('anyio')}, pycrdt {version('pycrdt')}, SQLite {sqlite3.sqlite_version}, "
            f"Python {platform.python_version()}; RLIMIT_NOFILE {soft}/{hard}; "
            f"work dir {work.parent}\n\n"
            f"### Writes: one note, {args.appends:,} appends (update {min(sizes)}-{max(sizes)} B, "
            f"mean {statistics.fmean(sizes):.0f} B), one commit per call\n\n"
            + write_table(writes)
            + f"\n### Load one note ({args.appends + 1:,} updates, {len(w.text):,} chars), "
            f"median of {args.load_reps}\n\n"
            + load_table(writes, len(w.text))
            + "\n### Open and load many notes\n\n"
            + many_table(y_many, v_many, args.notes, mb)
            + "\n### pycrdt-store squash\n\n"
            + squash_table(squash, args.squash_wait)
            + "\n" + verdict(squash)
            + "\n### A write whose INSERT fails (trigger RAISE(ABORT))\n\n"
            + table(["store", "what the write call did"], [
                ["pycrdt-store `write()`", y["failure"]],
                ["Stet `append_update()`", vault_fail],
            ])
            + f"\nTotal benchmark time {time.perf_counter() - started:.0f} s.\n"
        )
        print()
        print(body)
        if not args.no_write:
            path = append_results(body, title="Store: pycrdt-store SQLiteYStore vs Stet VaultStore")
            print(f"appended to {path}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
