"""Full-text search over the live notes (SQLite FTS5), kept current by the service."""

from __future__ import annotations

import re
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from .errors import StetError
from .store import VaultStore


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


class SearchIndex:
    def __init__(self, store: VaultStore) -> None:
        self.store = store

    def _rowid(self, note_id: str) -> int | None:
        # The notes table's rowid: stable as long as the database is never VACUUMed
        # (Stet never does; a VACUUM would need the index rebuilt, as migration 4 does).
        row = self.store.db.execute("SELECT rowid FROM notes WHERE id = ?", (note_id,)).fetchone()
        return None if row is None else int(row[0])

    def _writing(self) -> AbstractContextManager[None]:
        """A transaction of its own only when none is open. Inside one (a batch of notes
        indexed, ``stet init``) no SAVEPOINT: FTS5 writes its pending terms out as a new
        segment at every SAVEPOINT and RELEASE, so a savepoint per note made a segment per
        note (and their merges) -- most of the indexing time of a bulk intake (P8's
        profile: RELEASE 18 % of the loop). A failed statement still fails the caller's
        transaction, as any error inside it does."""
        return nullcontext() if self.store.in_transaction else self.store.transaction()

    def put(self, note_id: str, path: str, text: str) -> None:
        """Index a note's text (its notes row must exist: its rowid keys the entry)."""
        rowid = self._rowid(note_id)
        if rowid is None:
            return
        with self._writing():
            self.store.db.execute("DELETE FROM notes_fts WHERE rowid = ?", (rowid,))
            self.store.db.execute(
                "INSERT INTO notes_fts (rowid, note_id, path, content) VALUES (?, ?, ?, ?)",
                (rowid, note_id, path, text),
            )

    def remove(self, note_id: str) -> None:
        rowid = self._rowid(note_id)
        if rowid is None:
            return
        with self._writing():
            self.store.db.execute("DELETE FROM notes_fts WHERE rowid = ?", (rowid,))

    def count(self) -> int:
        return int(self.store.db.execute("SELECT count(*) FROM notes_fts").fetchone()[0])

    def search(self, q: str, *, limit: int = 20) -> list[SearchHit]:
        query = fts_query(q)
        rows = self.store.db.execute(
            "SELECT path, content FROM notes_fts WHERE notes_fts MATCH ? ORDER BY rank LIMIT ?",
            (query, limit),
        ).fetchall()
        words = [w.lower() for w in re.findall(r"\w+", q, flags=re.UNICODE)]
        hits = []
        for path, content in rows:
            line_no, line_text = _best_line(content, words)
            hits.append(SearchHit(path, line_no, _snippet(line_text, words)))
        return hits


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
