"""The vault store: one SQLite database per vault, WAL mode, our own small schema.

Why not pycrdt-store's ``SQLiteYStore``: measured here
(docs/decisions/0105-our-own-store-not-pycrdt-store.md) it opens a
connection per document, commits each write without WAL (1.13 ms/write), filters
updates by wall-clock time and drops history on squash unless compression callbacks
are registered. This store keeps every note's updates in one table ordered by an
integer sequence (never by clock), compacts them with ``pycrdt.merge_updates`` (which
keeps every item and the delete set, i.e. all of the CRDT's history), and migrates its
schema step by step, refusing a newer schema instead of starting empty.

Durability: every public write commits before it returns. With ``synchronous=NORMAL``
in WAL mode a committed transaction survives the process being killed (kill -9);
``synchronous=FULL`` adds survival of power loss at some cost per write.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pycrdt

from .errors import StoreError
from .home import create_private
from .note_rows import NOTE_COLUMNS, DiskState, NoteRow, note_row, note_values
from .store_schema import MIGRATIONS, NON_ASCII_LIVE, SCHEMA_VERSION

logger = logging.getLogger(__name__)


class VaultStore:
    """Notes, their CRDT updates and skipped files of one vault."""

    def __init__(self, path: Path, *, synchronous: str = "NORMAL", compact_after: int = 200,
                 auto_checkpoint: bool = True):
        """``auto_checkpoint=False``: commits never checkpoint the WAL (an fsync, now and
        then, inside a commit -- a latency spike for whoever waits on it); the owner calls
        ``checkpoint`` instead, off its write path (the daemon, from a worker thread)."""
        self.path = path
        self.compact_after = compact_after
        self._depth = 0
        self._after_commit: list[Callable[[], object]] = []
        self._on_rollback: list[Callable[[], None]] = []
        self.commits = 0  # commits made through this store (for a checkpointer to notice)
        # count_live as this connection sees it, with the database's data_version then
        # (another connection's commit changes it): kept up by ``insert_new_notes``,
        # dropped by ``put_note`` and any rollback (counted again when next asked).
        self._live_count: tuple[int, int] | None = None
        # live_path_list's answer, with data_version and our commits then (either changes it)
        self._live_paths: tuple[int, int, list[str]] | None = None
        try:
            if path.parent.is_dir():
                create_private(path)  # 0600 (SPEC R4); its -wal/-shm files take the same mode
            self._db = sqlite3.connect(path, timeout=10, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            if not auto_checkpoint:
                self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._migrate()
            # Search moved to a database of its own (search_index.py): the old FTS table
            # goes (it held every note's text once more). Idempotent, so no schema version.
            if self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'notes_fts'").fetchone():
                self._db.execute("DROP TABLE notes_fts")
            # Renames are recognised by inode (``FileBridge``): asked for every new file of
            # a bulk intake, a full scan of the notes made that quadratic. Idempotent, so no
            # schema version: an older Stet opening this store ignores it.
            self._db.execute(
                "CREATE INDEX IF NOT EXISTS notes_by_disk_ino ON notes(disk_ino) WHERE deleted = 0")
            # And case clashes (``FileBridge``): by ASCII-lowercased path, and the few paths
            # with other characters (which only a casefold comparison can tell).
            self._db.execute(
                "CREATE INDEX IF NOT EXISTS notes_by_lower_path ON notes(lower(path)) WHERE deleted = 0")
            self._db.execute(
                f"CREATE INDEX IF NOT EXISTS notes_non_ascii ON notes(path) WHERE {NON_ASCII_LIVE}")
            # No index on ``deleted`` alone: the planner took one (``notes_live``, tried for
            # ``count_live``) for the rename and case-clash look-ups above, which then read
            # every live row: a 10,000-file intake went from 30 s to 240 s
            # (tests/unit/test_intake_holds.py checks those plans).
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the store {path}: {exc}") from None

    def close(self) -> None:
        self._db.close()

    # -- transactions -------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes into one commit; nests (only the outermost commits).

        A nested transaction is a SAVEPOINT: an error raised through it undoes its writes
        only (the caller may catch it and go on), drops what it queued with
        ``after_commit`` and runs what it registered with ``on_rollback``. What was queued
        with ``after_commit`` runs once the outermost transaction has committed -- the
        outbox of the unit of work: nothing is announced that a rollback could make untrue.
        """
        depth = self._depth
        marks = (len(self._after_commit), len(self._on_rollback))
        self._db.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT sp{depth}")
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            self._undo(depth, marks)
            raise
        self._depth -= 1
        if depth > 0:
            self._db.execute(f"RELEASE sp{depth}")
            return
        try:
            self._db.execute("COMMIT")
        except BaseException:
            self._undo(0, (0, 0))
            raise
        self.commits += 1
        self._on_rollback.clear()
        todo, self._after_commit = self._after_commit, []
        for fn in todo:
            try:
                fn()
            except Exception:
                logger.exception("after-commit callback failed")

    def _undo(self, depth: int, marks: tuple[int, int]) -> None:
        self._live_count = None  # counted again after a rollback
        try:
            if depth == 0:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
            else:
                self._db.execute(f"ROLLBACK TO sp{depth}")
                self._db.execute(f"RELEASE sp{depth}")
        finally:
            del self._after_commit[marks[0]:]
            undo = self._on_rollback[marks[1]:]
            del self._on_rollback[marks[1]:]
            for fn in reversed(undo):
                try:
                    fn()
                except Exception:
                    logger.exception("rollback callback failed")

    def write_one(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        """One write statement, atomic: in the open transaction as it is (a statement is
        atomic by itself; a SAVEPOINT around it would cost two more statements per write,
        measured as a third of an append's SQLite calls), else in a transaction of its own."""
        if self._depth > 0:
            return self._db.execute(sql, params)
        with self.transaction():
            return self._db.execute(sql, params)

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    def after_commit(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` once the current transaction has committed (now, if none is open);
        never if it rolls back."""
        if self._depth == 0:
            fn()
        else:
            self._after_commit.append(fn)

    def on_rollback(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` if the current (nested) transaction rolls back; no-op outside one."""
        if self._depth > 0:
            self._on_rollback.append(fn)

    def checkpoint(self) -> None:
        """Copy the WAL into the database (PASSIVE: waits for nobody), on a connection of
        its own so that it may run in another thread while this one goes on writing."""
        db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            db.close()

    def _migrate(self) -> None:
        with self.transaction():
            current = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer Stet (schema {current}, this one "
                    f"knows {SCHEMA_VERSION}); upgrade Stet instead of losing history"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version]:
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version={version}")

    @property
    def db(self) -> sqlite3.Connection:
        """The connection, for the record modules beside this one (same transactions)."""
        return self._db

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    # -- meta -----------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.write_one(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    # -- notes ----------------------------------------------------------------------

    def note(self, note_id: str) -> NoteRow | None:
        r = self._db.execute(f"SELECT {NOTE_COLUMNS} FROM notes WHERE id = ?", (note_id,)).fetchone()
        return None if r is None else note_row(r)

    def note_at(self, path: str) -> NoteRow | None:
        """The live note at ``path``, if any."""
        r = self._db.execute(
            f"SELECT {NOTE_COLUMNS} FROM notes WHERE path = ? AND deleted = 0", (path,)
        ).fetchone()
        return None if r is None else note_row(r)

    def live_notes(self, *, prefix: str = "", after: str = "", limit: int = -1) -> list[NoteRow]:
        """Live notes ordered by path; ``after`` is an exclusive cursor."""
        rows = self._db.execute(
            f"SELECT {NOTE_COLUMNS} FROM notes WHERE deleted = 0 AND path > ? "
            "AND substr(path, 1, ?) = ? ORDER BY path LIMIT ?",
            (after, len(prefix), prefix, limit),
        ).fetchall()
        return [note_row(r) for r in rows]

    def live_path_list(self) -> list[str]:
        """Every live note's path, read again only once the database changed (``stet
        status`` asks it of a vault with a member that cannot hold every name)."""
        version = int(self._db.execute("PRAGMA data_version").fetchone()[0])
        cached = self._live_paths
        if cached is not None and cached[0] == version and cached[1] == self.commits:
            return cached[2]
        paths = [r[0] for r in self._db.execute("SELECT path FROM notes WHERE deleted = 0")]
        self._live_paths = (version, self.commits, paths)
        return paths

    def deleted_notes(self) -> list[NoteRow]:
        rows = self._db.execute(
            f"SELECT {NOTE_COLUMNS} FROM notes WHERE deleted = 1 ORDER BY updated_at DESC"
        ).fetchall()
        return [note_row(r) for r in rows]

    def count_live(self) -> int:
        """Live notes: counted once, then kept up by ``insert_new_notes`` (a bulk intake's
        and a first sync's new notes) -- counting 10,000 rows took ~1 ms of every
        ``GET /v1/status`` polled every 20 ms during P8 (half of the answer's time)."""
        version = int(self._db.execute("PRAGMA data_version").fetchone()[0])
        cached = self._live_count
        if cached is not None and cached[0] == version:
            return cached[1]
        # By the live-path index (the smallest holding exactly the live rows): the planner
        # chose ``notes_by_lower_path``, twice the work.
        count = int(self._db.execute(
            "SELECT count(*) FROM notes INDEXED BY notes_live_path WHERE deleted = 0").fetchone()[0])
        self._live_count = (version, count)
        return count

    def put_note(self, row: NoteRow) -> None:
        """Insert or update a note's index row (by id)."""
        self._live_count = None  # an upsert: live or not before is not known here
        disk = row.disk
        # An upsert on id only: a second live note at the same path is an
        # IntegrityError, never a silent replacement of the first one's row.
        self.write_one(
            f"INSERT INTO notes ({NOTE_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in NOTE_COLUMNS.split(", ")[1:]),
            (
                row.id,
                row.path,
                int(row.deleted),
                row.revision,
                row.size,
                row.created_at,
                row.updated_at,
                row.updated_by,
                disk.revision if disk else None,
                disk.mtime_ns if disk else None,
                disk.size if disk else None,
                disk.ino if disk else None,
                disk.snapshot if disk else None,
                row.update_count,
            ),
        )

    def clear_skipped_many(self, paths: Sequence[str]) -> None:
        if paths:
            self.write_many("DELETE FROM skipped WHERE path = ?", [(p,) for p in paths])

    def set_disk_state(self, note_id: str, disk: DiskState | None) -> None:
        self.write_one(
            "UPDATE notes SET disk_revision = ?, disk_mtime_ns = ?, disk_size = ?, "
            "disk_ino = ?, disk_snapshot = ? WHERE id = ?",
            (
                disk.revision if disk else None,
                disk.mtime_ns if disk else None,
                disk.size if disk else None,
                disk.ino if disk else None,
                disk.snapshot if disk else None,
                note_id,
            ),
        )

    # -- updates --------------------------------------------------------------------

    def append_update(self, note_id: str, data: bytes, source: str) -> int:
        """Persist one CRDT update of a note; returns its sequence number.

        The caller keeps ``notes.update_count`` (it writes the row in the same transaction).
        """
        cur = self.write_one(
            "INSERT INTO updates (note_id, data, source, created_at) VALUES (?, ?, ?, ?)",
            (note_id, data, source, time.time()),
        )
        seq = cur.lastrowid
        assert seq is not None
        return seq

    def updates(self, note_id: str) -> list[bytes]:
        """Every stored update of a note, in the order they were written (by sequence)."""
        rows = self._db.execute(
            "SELECT data FROM updates WHERE note_id = ? ORDER BY seq", (note_id,)
        ).fetchall()
        return [bytes(r[0]) for r in rows]

    def held_notes(self, note_ids: Sequence[str]) -> set[str]:
        """Which of ``note_ids`` this store holds anything of (a row or an update): one
        indexed lookup per 500 ids, instead of two queries per note (a peer's index
        update naming 10,000 notes new here, which hold nothing yet)."""
        held: set[str] = set()
        for start in range(0, len(note_ids), 500):
            chunk = list(note_ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            held.update(r[0] for r in self._db.execute(
                f"SELECT id FROM notes WHERE id IN ({marks}) "
                f"UNION SELECT DISTINCT note_id FROM updates WHERE note_id IN ({marks})", chunk + chunk))
        return held

    def notes(self, note_ids: Sequence[str]) -> dict[str, NoteRow]:
        """The rows of ``note_ids`` that exist: one lookup per 500 ids (the writer plans a
        batch of 256 notes' files)."""
        found: dict[str, NoteRow] = {}
        for start in range(0, len(note_ids), 500):
            chunk = list(note_ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for r in self._db.execute(f"SELECT {NOTE_COLUMNS} FROM notes WHERE id IN ({marks})", chunk):
                row = note_row(r)
                found[row.id] = row
        return found

    def set_disk_states(self, states: Sequence[tuple[str, DiskState | None]]) -> None:
        """``set_disk_state`` for many notes: one ``executemany`` (a batch of files written)."""
        self.write_many(
            "UPDATE notes SET disk_revision = ?, disk_mtime_ns = ?, disk_size = ?, "
            "disk_ino = ?, disk_snapshot = ? WHERE id = ?",
            [(d.revision if d else None, d.mtime_ns if d else None, d.size if d else None,
              d.ino if d else None, d.snapshot if d else None, note_id) for note_id, d in states],
        )

    def write_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One ``executemany``, atomic: in the open transaction as it is, else in its own."""
        if not rows:
            return
        if self._depth > 0:
            self._db.executemany(sql, rows)
            return
        with self.transaction():
            self._db.executemany(sql, rows)

    def live_note_paths(self, note_ids: Sequence[str]) -> dict[str, str]:
        """The path of each of ``note_ids`` that is a live note: one narrow lookup per 500
        ids (the writer's check, at each rename, that a note is still where it planned to
        write it: a whole row each was a quarter of the cost of a rename on the loop)."""
        found: dict[str, str] = {}
        for start in range(0, len(note_ids), 500):
            chunk = list(note_ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            found.update(self._db.execute(
                f"SELECT id, path FROM notes WHERE deleted = 0 AND id IN ({marks})", chunk))
        return found

    def live_paths(self, paths: Sequence[str]) -> set[str]:
        """Which of ``paths`` a live note holds: one lookup per 500 paths (a peer's slice
        of new notes asks whether each one's path is free)."""
        taken: set[str] = set()
        for start in range(0, len(paths), 500):
            chunk = list(paths[start : start + 500])
            marks = ",".join("?" * len(chunk))
            taken.update(r[0] for r in self._db.execute(
                f"SELECT path FROM notes WHERE deleted = 0 AND path IN ({marks})", chunk))
        return taken

    def insert_new_notes(self, rows: Sequence[NoteRow], updates: Sequence[tuple[str, bytes, str]]) -> None:
        """Notes this store has never held, each with its first updates (note id, data,
        source): two ``executemany`` statements in the open transaction (a peer's slice of
        a first sync), not two upserts and a count per note. A plain INSERT: a row that
        exists after all (or a second live note at a path) is an IntegrityError, never an
        overwrite; the caller's unit rolls back and takes the careful path."""
        now = time.time()
        with self.transaction():  # both or neither (a SAVEPOINT per slice inside a unit)
            self._db.executemany(
                "INSERT INTO updates (note_id, data, source, created_at) VALUES (?, ?, ?, ?)",
                [(note_id, data, source, now) for note_id, data, source in updates])
            self._db.executemany(
                f"INSERT INTO notes ({NOTE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [note_values(row) for row in rows])
            if self._live_count is not None:  # new rows only: the live ones add up
                version, count = self._live_count
                self._live_count = (version, count + sum(1 for row in rows if not row.deleted))

    def update_rows(self, note_id: str) -> int:
        return int(
            self._db.execute("SELECT count(*) FROM updates WHERE note_id = ?", (note_id,)).fetchone()[0]
        )

    def compact(self, note_id: str) -> bool:
        """Replace a note's updates by as few updates as hold the same CRDT state.

        Nothing of the history a peer may still need is lost (see ``compact_updates``);
        only the per-write rows go. A live snapshot reads a note as the rows up to its
        position (``snapshots.update_seq``), so rows are merged only between snapshot
        positions, each merged row keeping the sequence number of the last row it holds:
        what any snapshot sees is unchanged.
        """
        with self.transaction():
            rows = self._db.execute(
                "SELECT seq, data, source, created_at FROM updates WHERE note_id = ? ORDER BY seq", (note_id,)
            ).fetchall()
            if len(rows) < 2:
                return False
            bounds = sorted(int(r[0]) for r in self._db.execute("SELECT DISTINCT update_seq FROM snapshots"))
            segments: list[list[Any]] = [[]]
            b = 0
            for row in rows:
                while b < len(bounds) and row[0] > bounds[b]:
                    b += 1
                    if segments[-1]:
                        segments.append([])
                segments[-1].append(row)
            if len(segments) == len(rows):
                return False  # every row sits alone between two snapshots: nothing to merge
            for n, segment in enumerate(segments):
                if len(segment) < 2:
                    continue
                # Only the first segment starts from the note's beginning; a later one's
                # structs depend on earlier rows, which a document built from it alone
                # would hold as pending (and drop): those are merged as updates.
                datas = [bytes(r[1]) for r in segment]
                merged = compact_updates(datas) if n == 0 else bytes(pycrdt.merge_updates(*datas))
                last_seq = segment[-1][0]
                self._db.execute(
                    "DELETE FROM updates WHERE note_id = ? AND seq >= ? AND seq <= ?",
                    (note_id, segment[0][0], last_seq),
                )
                self._db.execute(
                    "INSERT INTO updates (seq, note_id, data, source, created_at) VALUES (?, ?, ?, ?, ?)",
                    (last_seq, note_id, merged, segment[-1][2], segment[-1][3]),
                )
            self._db.execute("UPDATE notes SET update_count = ? WHERE id = ?", (len(segments), note_id))
        return True

    def needs_compaction(self, row: NoteRow) -> bool:
        return row.update_count >= self.compact_after

    # -- skipped files ------------------------------------------------------------------

    def set_skipped(self, path: str, reason: str) -> None:
        self.write_one(
            "INSERT INTO skipped (path, reason, seen_at) VALUES (?, ?, ?) "
            "ON CONFLICT(path) DO UPDATE SET reason = excluded.reason, seen_at = excluded.seen_at",
            (path, reason, time.time()),
        )

    def clear_skipped(self, path: str) -> None:
        # One statement (no SAVEPOINT around it): every file the intake takes in clears
        # its path, and each statement lets go of the interpreter lock -- a chance for the
        # watcher's threads to keep the loop waiting (P8).
        self.write_one("DELETE FROM skipped WHERE path = ?", (path,))

    def replace_skipped(self, skipped: dict[str, str]) -> None:
        now = time.time()
        with self.transaction():
            self._db.execute("DELETE FROM skipped")
            self._db.executemany(
                "INSERT INTO skipped (path, reason, seen_at) VALUES (?, ?, ?)",
                [(p, r, now) for p, r in sorted(skipped.items())],
            )

    def skipped(self) -> dict[str, str]:
        rows = self._db.execute("SELECT path, reason FROM skipped ORDER BY path").fetchall()
        return {r[0]: r[1] for r in rows}

    def integrity_check(self) -> str:
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])


def compact_updates(updates: list[bytes]) -> bytes:
    """One update equivalent to ``updates``.

    The state encoded from a ``skip_gc`` document (deleted text kept) is small and
    applies in microseconds; ``merge_updates`` output is larger and applies as slowly
    as the rows it merged (measured in bench/store_compare.py). The document form is
    used only if it rebuilds exactly the same state vector and text as the rows do
    (an update still waiting for a missing dependency would not survive it); else the
    lossless ``merge_updates`` is used.
    """
    merged = bytes(pycrdt.merge_updates(*updates))
    doc: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(skip_gc=True)
    doc.apply_update(merged)
    encoded = bytes(doc.get_update())
    # get_state of an update covers every struct in it, pending ones included.
    return encoded if pycrdt.get_state(encoded) == pycrdt.get_state(merged) else merged
