"""The search query language and index forms (sync/search_query.py) and the index schema
change (sync/search_index.py), over a real SQLite FTS5 index: what parses, what is a clear
error, ranking of the word itself above longer words, snippets found through folding, the
snapshot scan reading queries the way the index does, an index of schema 1 emptied and
rebuilt, and a search during a rebuild saying so."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from stet.daemon.notes import search_indexer
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import OWNER, NoteOperations
from stet.sync.errors import StetError
from stet.sync.search_index import INDEX_SCHEMA, SearchIndex
from stet.sync.search_query import best_line, grams_form, parse_query, snippet
from stet.sync.store import VaultStore


@pytest.mark.parametrize(("q", "says"), [
    ('"open', "unclosed quote"), ("a OR", "OR needs"), ("OR a", "OR needs"), ("a OR OR b", "OR needs"),
    ("a OR -b", "not excluded"), ("-a -b", "only excludes"), ("... !!!", "no words"), ("", "no words"),
])
def test_a_query_that_cannot_be_read_says_why(q: str, says: str) -> None:
    with pytest.raises(StetError) as caught:
        parse_query(q)
    assert caught.value.code == "bad_request"
    assert says in str(caught.value)


def test_what_a_query_means() -> None:
    q = parse_query('alpha "beta gamma" delta OR 数据库 -omega -"two words"')
    assert [[t.text for t in g] for g in q.groups] == [["alpha"], ["beta gamma"], ["delta", "数据库"]]
    assert [t.text for t in q.excluded] == ["omega", "two words"]
    assert parse_query("or and not").groups[2][0].text == "not"  # lower case: plain words
    assert q.matches("Alpha, then beta gamma; and 我们的数据库")
    assert not q.matches("alpha beta gamma delta omega")
    assert not q.matches("alpha gamma beta delta")  # the phrase in its order
    assert parse_query("kube autosc").matches("kubernetes autoscaling")
    assert not parse_query("ube").matches("kubernetes")  # a prefix of a word, not inside it
    assert parse_query("ประชุม").matches("วันนี้เรามีประชุมทีม")  # inside a run
    assert parse_query("cafe").matches("un CAFÉ noir")


def test_runs_become_bigrams_with_a_filler_between_runs() -> None:
    assert grams_form("zh/会议.md", "数据库 and 库存") == "会议 议 x 数据 据库 库 x 库存 存"
    assert grams_form("a.md", "plain ascii") == ""


def _index(tmp_path: Path, notes: dict[str, str]) -> SearchIndex:
    index = SearchIndex(tmp_path / "x.search.sqlite")
    index.put_many([(p, p, "r", t) for p, t in notes.items()])
    return index


def test_the_word_itself_ranks_above_longer_words_it_begins(tmp_path: Path) -> None:
    index = _index(tmp_path, {f"n{i}.md": f"numbat{i} here\n" for i in (70, 71, 7, 72)})
    assert [h.path for h in index.search("numbat7")][0] == "n7.md"
    assert len(index.search("numbat7")) == 4
    assert [h.path for h in index.search('"numbat7"')] == ["n7.md"]


def test_a_folded_hit_in_a_long_line_shows_the_word_as_written(tmp_path: Path) -> None:
    line = "word " * 60 + "nous avons pris un café près de la gare " + "word " * 60
    index = _index(tmp_path, {"fr.md": f"# Titre\n{line}\n",
                              "zh.md": "前言\n" + "文" * 300 + "数据库" + "文" * 50})
    [hit] = index.search("cafe")
    assert hit.line == 2
    assert "un café près" in hit.snippet
    assert hit.snippet.startswith("…")
    assert len(hit.snippet) <= 162
    [hit] = index.search("数据库")
    assert hit.line == 2
    assert "数据库" in hit.snippet
    q = parse_query("gare")
    assert best_line("a\nb gare\n", q) == (2, "b gare")
    assert snippet("short gare line", q) == "short gare line"


def test_an_index_of_schema_1_is_emptied_for_the_rebuild(tmp_path: Path) -> None:
    path = tmp_path / "x.search.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE docs (rowid INTEGER PRIMARY KEY, note_id TEXT NOT NULL UNIQUE, "
               "path TEXT NOT NULL, revision TEXT NOT NULL)")
    db.execute("CREATE VIRTUAL TABLE fts USING fts5(path, content, "
               "tokenize = 'unicode61 remove_diacritics 2')")
    db.execute("INSERT INTO docs VALUES (1, 'n1', 'a.md', 'r1')")
    db.execute("INSERT INTO fts (rowid, path, content) VALUES (1, 'a.md', '我们讨论了数据库')")
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    index = SearchIndex(path)
    assert index.indexed() == {}  # every note is missing: the catch-up indexes them all again
    assert int(index.db.execute("PRAGMA user_version").fetchone()[0]) == INDEX_SCHEMA
    index.put("n1", "a.md", "r1", "我们讨论了数据库")
    assert [h.path for h in index.search("数据库")] == ["a.md"]
    index.close()


def test_a_search_during_a_rebuild_answers_and_says_the_index_is_still_being_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    keeper = RecordsKeeper(service, EventBus())
    service.write_text("a.md", "numbat here\n", "cli")
    keeper.flush_index()
    release = threading.Event()
    real_compare = search_indexer.SearchIndexer._compare

    def slow_compare(self: search_indexer.SearchIndexer, *args: object) -> None:
        release.wait(30)  # the rebuild in progress (a big vault), held until the search has answered
        real_compare(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(search_indexer.SearchIndexer, "_compare", slow_compare)
    monkeypatch.setattr(search_indexer, "WAIT_S", 0.2)
    keeper.index.start()
    ops = NoteOperations(service, EventBus(), OWNER, extensions=(".md",), max_bytes=1 << 20,
                         search=keeper.index)

    async def search() -> dict[str, object]:
        await ops.index_caught_up()
        return ops.search_notes("numbat")

    try:
        answer = asyncio.run(search())
        assert [h["path"] for h in answer["results"]] == ["a.md"]  # type: ignore[union-attr]
        assert "still being built" in str(answer["indexing"])
    finally:
        release.set()
    keeper.flush_index()
    ops = NoteOperations(service, EventBus(), OWNER, extensions=(".md",), max_bytes=1 << 20,
                         search=keeper.index)
    answer = asyncio.run(search())
    assert "indexing" not in answer
    keeper.close()
    store.close()
