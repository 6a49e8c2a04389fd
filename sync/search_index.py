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
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import StetError
from .home import create_private
from .markdown_structure import link_keys, links
from .note_doc import NoteDoc
from .search_query import best_line, grams_form, parse_query, snippet, words_form

logger = logging.getLogger(__name__)

# 2 (issue 34): words and CJK/Thai/Arabic bigrams in their own columns, marks inside
# words, the original text kept beside for snippets (``sync/search_query.py``). An index of
# an older schema is emptied at start and rebuilt from the store by the worker (off the loop).
# 3 (issue 34): the links of each note (``links``), kept with its terms, for backlinks.
INDEX_SCHEMA = 3
_SCHEMA = (
    # One row per indexed note; its rowid keys the note's row in ``fts``. ``text``: the
    # note as written, kept only where it differs from what ``fts.words`` holds (an ASCII
    # note is held there as it is), for snippets.
    """CREATE TABLE IF NOT EXISTS docs (
        rowid INTEGER PRIMARY KEY,
        note_id TEXT NOT NULL UNIQUE,
        path TEXT NOT NULL,
        revision TEXT NOT NULL,
        text TEXT
    )""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(path, words, grams,
        tokenize = "unicode61 remove_diacritics 0 categories 'L* N* Co M*'")""",
    # One row per link of a note: ``key`` the path it names, lower-cased, without ``.md``
    # (``markdown_structure.link_keys``); resolved against the notes when asked.
    """CREATE TABLE IF NOT EXISTS links (source INTEGER NOT NULL, key TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS links_by_key ON links (key)",
    "CREATE INDEX IF NOT EXISTS links_by_source ON links (source)",
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


def index_row(path: str, text: str) -> tuple[str, str, str, str | None]:
    """(path, words, grams) for ``fts`` and the text for ``docs`` (None: ``words`` is it)."""
    words = words_form(text)
    return words_form(path), words, grams_form(path, text), None if words == text else text


def note_link_keys(path: str, text: str) -> list[str]:
    """The keys of a note's links, each once (what ``links`` holds of it)."""
    seen: dict[str, None] = {}
    for link in links(text):
        for key in link_keys(path, link):
            seen.setdefault(key, None)
    return list(seen)


def _connect(path: Path) -> sqlite3.Connection:
    if path.parent.is_dir():
        create_private(path)
    db = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")  # derived data: a lost commit is caught up at start
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if 0 < version < INDEX_SCHEMA:
        # Emptied here; the worker's catch-up at start finds every note missing and indexes
        # it again (in its thread), searches answering from what is indexed meanwhile.
        logger.info("search index %s: schema %d -> %d, rebuilding it", path, version, INDEX_SCHEMA)
        db.execute("DROP TABLE IF EXISTS fts")
        db.execute("DROP TABLE IF EXISTS docs")
        db.execute("DROP TABLE IF EXISTS links")
        version = 0
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
            self.put_many([(note_id, path, revision, text)])

    def put_many(self, notes: list[tuple[str, str, str, str]]) -> None:
        """Index several notes, (note id, path, revision, text) each, in a few statements:
        the indexer's thread holds the interpreter lock less (the loop's share of it)."""
        if not notes:
            return
        rows = {nid: index_row(p, text) for nid, p, _rev, text in notes}  # folded before the transaction
        keys = {nid: note_link_keys(p, text) for nid, p, _rev, text in notes}
        with self.batch():
            ids = list(rows)
            known = self._rowids(ids)
            self.db.executemany("DELETE FROM fts WHERE rowid = ?", [(r,) for r in known.values()])
            self.db.executemany(
                "UPDATE docs SET path = ?, revision = ?, text = ? WHERE rowid = ?",
                [(p, rev, rows[nid][3], known[nid]) for nid, p, rev, _t in notes if nid in known])
            self.db.executemany(
                "INSERT INTO docs (note_id, path, revision, text) VALUES (?, ?, ?, ?)",
                [(nid, p, rev, rows[nid][3]) for nid, p, rev, _t in notes if nid not in known])
            known.update(self._rowids([nid for nid in ids if nid not in known]))
            self.db.executemany("INSERT INTO fts (rowid, path, words, grams) VALUES (?, ?, ?, ?)",
                                [(known[nid], *rows[nid][:3]) for nid in ids])
            self.db.executemany("DELETE FROM links WHERE source = ?", [(known[nid],) for nid in ids])
            self.db.executemany("INSERT INTO links (source, key) VALUES (?, ?)",
                                [(known[nid], key) for nid in ids for key in keys[nid]])

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
            self.db.execute("DELETE FROM links WHERE source = ?", (row[0],))

    def linking_to(self, keys: list[str]) -> list[tuple[str, str, str]]:
        """(note id, path, key) of every indexed note with a link naming one of ``keys``."""
        out: list[tuple[str, str, str]] = []
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            out.extend((r[0], r[1], r[2]) for r in self.db.execute(
                "SELECT DISTINCT d.note_id, d.path, l.key FROM links AS l "
                f"JOIN docs AS d ON d.rowid = l.source WHERE l.key IN ({marks})", chunk))
        return out

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM docs").fetchone()[0])

    def indexed(self) -> dict[str, tuple[str, str]]:
        """note id -> (path, revision) of every indexed note."""
        return {r[0]: (r[1], r[2]) for r in self.db.execute("SELECT note_id, path, revision FROM docs")}

    def search(self, q: str, *, limit: int = 20) -> list[SearchHit]:
        """The notes matching ``q`` (``sync/search_query.py``), best first, each with the
        line it was found on."""
        query = parse_query(q)
        try:
            rows = self.db.execute(
                "SELECT f.rowid, d.path, coalesce(d.text, f.words) FROM "
                "(SELECT rowid, words, rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?) AS f "
                "JOIN docs AS d ON d.rowid = f.rowid ORDER BY f.rank",
                (query.to_fts(), limit),
            ).fetchall()
        except sqlite3.OperationalError as exc:  # what the parser let through and FTS5 refuses
            raise StetError(f"the search query could not be read ({exc})", code="bad_request") from exc
        hits = []
        for _rowid, path, content in rows:
            line_no, line_text = best_line(content, query)
            hits.append(SearchHit(path, line_no, snippet(line_text, query)))
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
