"""Full-text search over the live notes (SQLite FTS5), in a database of its own per vault.

The index is derived data: ``vaults/<id>.search.sqlite`` beside the vault's store, written
by one worker thread (``daemon/notes/search_indexer.py``) with its own connection, so the FTS5
tokenising of a bulk intake never runs on the event loop (it was a quarter of the
receiving peer's loop in P8). Each indexed note's path and revision are kept beside its
terms (``docs``), so an index that is missing, damaged or behind the store after a crash
is caught up by comparing the two (``stale_notes``): nothing searchable is lost.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import StetError
from .home import create_private
from .note_doc import NoteDoc

logger = logging.getLogger(__name__)

INDEX_SCHEMA = 1
_SCHEMA = (
    # One row per indexed note; its rowid keys the note's row in ``fts``.
    """CREATE TABLE IF NOT EXISTS docs (
        rowid INTEGER PRIMARY KEY,
        note_id TEXT NOT NULL UNIQUE,
        path TEXT NOT NULL,
        revision TEXT NOT NULL
    )""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(path, content,
        tokenize = 'unicode61 remove_diacritics 2')""",
)


def search_db_path(store_path: Path) -> Path:
    """Where a vault store's search index lives (``<id>.db`` -> ``<id>.search.sqlite``;
    not ``*.db``, which names the home's stores)."""
    return store_path.with_name(store_path.stem + ".search.sqlite")


@dataclass(frozen=True, slots=True)
class SearchHit:
    path: str
    line: int
    snippet: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "snippet": self.snippet}


def fts_query(q: str) -> str:
    """Turn free text into an FTS5 query: every word must match (prefix on the last)."""
    words = re.findall(r"\w+", q, flags=re.UNICODE)
    if not words:
        raise StetError("the search query has no words", code="bad_request")
    quoted = [f'"{w}"' for w in words]
    quoted[-1] += "*"
    return " AND ".join(quoted)


def _connect(path: Path) -> sqlite3.Connection:
    if path.parent.is_dir():
        create_private(path)
    db = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")  # derived data: a lost commit is caught up at start
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version not in (0, INDEX_SCHEMA):
        raise sqlite3.DatabaseError(f"search index schema {version}, expected {INDEX_SCHEMA}")
    for sql in _SCHEMA:
        db.execute(sql)
    if version == 0:
        db.execute(f"PRAGMA user_version={INDEX_SCHEMA}")
    return db


def _discard(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with suppress(FileNotFoundError):
            path.with_name(path.name + suffix).unlink()


class SearchIndex:
    """One connection to a vault's search index. Writes go through ``batch()`` (one
    transaction: FTS5 writes a segment per commit, so a batch per commit, not a note);
    a write outside a batch commits by itself."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.db = _connect(path)
        except sqlite3.DatabaseError as exc:
            # Derived data: a damaged or foreign file is replaced and rebuilt from the store.
            logger.warning("search index %s unusable (%s): rebuilding it", path, exc)
            _discard(path)
            self.db = _connect(path)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def batch(self) -> Iterator[None]:
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def put(self, note_id: str, path: str, revision: str, text: str) -> None:
        """Index a note's text (replacing what was indexed of it)."""
        with self.batch():
            row = self.db.execute("SELECT rowid FROM docs WHERE note_id = ?", (note_id,)).fetchone()
            if row is None:
                rowid = self.db.execute("INSERT INTO docs (note_id, path, revision) VALUES (?, ?, ?)",
                                        (note_id, path, revision)).lastrowid
            else:
                rowid = int(row[0])
                self.db.execute("DELETE FROM fts WHERE rowid = ?", (rowid,))
                self.db.execute("UPDATE docs SET path = ?, revision = ? WHERE rowid = ?",
                                (path, revision, rowid))
            self.db.execute("INSERT INTO fts (rowid, path, content) VALUES (?, ?, ?)", (rowid, path, text))

    def put_many(self, notes: list[tuple[str, str, str, str]]) -> None:
        """Index several notes, (note id, path, revision, text) each, in a few statements:
        the indexer's thread holds the interpreter lock less (the loop's share of it)."""
        if not notes:
            return
        with self.batch():
            ids = [n[0] for n in notes]
            known = self._rowids(ids)
            self.db.executemany("DELETE FROM fts WHERE rowid = ?", [(r,) for r in known.values()])
            self.db.executemany("UPDATE docs SET path = ?, revision = ? WHERE rowid = ?",
                                [(p, rev, known[nid]) for nid, p, rev, _t in notes if nid in known])
            self.db.executemany("INSERT INTO docs (note_id, path, revision) VALUES (?, ?, ?)",
                                [(nid, p, rev) for nid, p, rev, _t in notes if nid not in known])
            known.update(self._rowids([nid for nid in ids if nid not in known]))
            self.db.executemany("INSERT INTO fts (rowid, path, content) VALUES (?, ?, ?)",
                                [(known[nid], p, text) for nid, p, _rev, text in notes])

    def _rowids(self, note_ids: list[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for start in range(0, len(note_ids), 500):
            chunk = note_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found.update((r[1], int(r[0])) for r in self.db.execute(
                f"SELECT rowid, note_id FROM docs WHERE note_id IN ({marks})", chunk))
        return found

    def remove(self, note_id: str) -> None:
        with self.batch():
            row = self.db.execute("SELECT rowid FROM docs WHERE note_id = ?", (note_id,)).fetchone()
            if row is None:
                return
            self.db.execute("DELETE FROM fts WHERE rowid = ?", (row[0],))
            self.db.execute("DELETE FROM docs WHERE rowid = ?", (row[0],))

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM docs").fetchone()[0])

    def indexed(self) -> dict[str, tuple[str, str]]:
        """note id -> (path, revision) of every indexed note."""
        return {r[0]: (r[1], r[2]) for r in self.db.execute("SELECT note_id, path, revision FROM docs")}

    def search(self, q: str, *, limit: int = 20) -> list[SearchHit]:
        query = fts_query(q)
        rows = self.db.execute(
            "SELECT path, content FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?",
            (query, limit),
        ).fetchall()
        words = [w.lower() for w in re.findall(r"\w+", q, flags=re.UNICODE)]
        hits = []
        for path, content in rows:
            line_no, line_text = _best_line(content, words)
            hits.append(SearchHit(path, line_no, _snippet(line_text, words)))
        return hits


@dataclass(frozen=True, slots=True)
class StoredNote:
    path: str
    revision: str
    text: str


class StoreTexts:
    """A read-only connection to a vault store, for the indexer's thread: a note's path,
    revision and text as committed (the text rebuilt from its updates)."""

    def __init__(self, store_path: Path) -> None:
        self.db = sqlite3.connect(f"{store_path.resolve().as_uri()}?mode=ro", uri=True, timeout=10,
                                  isolation_level=None, check_same_thread=False)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def reading(self) -> Iterator[None]:
        """One read snapshot for several notes (their row and updates agree)."""
        self.db.execute("BEGIN")
        try:
            yield
        finally:
            self.db.execute("COMMIT")

    def live(self) -> dict[str, tuple[str, str]]:
        """note id -> (path, revision) of every live note."""
        return {r[0]: (r[1], r[2])
                for r in self.db.execute("SELECT id, path, revision FROM notes WHERE deleted = 0")}

    def note(self, note_id: str) -> StoredNote | None:
        """The live note ``note_id`` as committed; None if it is deleted or unknown."""
        row = self.db.execute("SELECT path, revision FROM notes WHERE id = ? AND deleted = 0",
                              (note_id,)).fetchone()
        if row is None:
            return None
        updates = [r[0] for r in self.db.execute(
            "SELECT data FROM updates WHERE note_id = ? ORDER BY seq", (note_id,))]
        return StoredNote(row[0], row[1], NoteDoc.from_updates(updates).text)


def stale_notes(live: dict[str, tuple[str, str]],
                indexed: dict[str, tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(notes to index again, notes to remove): what the index lacks or holds wrongly."""
    again = [nid for nid, state in live.items() if indexed.get(nid) != state]
    gone = [nid for nid in indexed if nid not in live]
    return again, gone


def _best_line(content: str, words: list[str]) -> tuple[int, str]:
    best = (0, 1, "")
    for i, line in enumerate(content.splitlines(), start=1):
        low = line.lower()
        score = sum(1 for w in words if w in low)
        if score > best[0]:
            best = (score, i, line)
            if score == len(words):
                break
    return best[1], best[2]


def _snippet(line: str, words: list[str], width: int = 160) -> str:
    if len(line) <= width:
        return line.strip()
    low = line.lower()
    pos = min((low.find(w) for w in words if w in low), default=0)
    start = max(0, pos - width // 3)
    return ("…" if start else "") + line[start : start + width].strip() + "…"
