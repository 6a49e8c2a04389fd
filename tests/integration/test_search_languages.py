"""Search in every language, and the query syntax (issue 34 item 3), through a real daemon:
REST, and MCP with the official SDK. Words are found inside real sentences of scripts
written without spaces (Chinese, Japanese, Thai, Korean without spaces), of scripts whose
words carry attached particles or vowel marks (Korean, Arabic, Hindi), inflected Russian by
a prefix of every word, accented words by their unaccented spelling -- each hit with a
snippet showing the line it was found on. Quoted phrases, ``OR`` and ``-term``; a query
that cannot be read is a clear 400, not a 500; a scoped token sees nothing outside."""

from __future__ import annotations

import asyncio
import urllib.parse
from pathlib import Path
from typing import Any

from tests.harness import DaemonProcess
from tests.integration.agent_support import Agent, Answer, agent_for, make_token, owner_agent
from tests.integration.test_mcp import call, mcp_url, refused, session
from tests.integration.test_mcp import make_token as make_mcp_token

NOTES = {
    "zh/meeting.md": "# 周会\n我们讨论了数据库迁移计划，下周开始执行。\n",
    "zh/short.md": "今天的会议很顺利。\n",
    "ja/minutes.md": "# 議事録\n来週の打ち合わせは火曜日に決まりました。\n",
    "ko/nospace.md": "오늘회의록을정리했다\n",
    "ko/spaced.md": "오늘 회의록을 정리했다.\n",
    "th/team.md": "วันนี้เรามีประชุมทีมเรื่องแผนงาน\n",
    "ar/meeting.md": "عقدنا الاجتماع الأسبوعي أمس لمناقشة خطة قاعدة البيانات.\n",
    "ar/vowelled.md": "كَتَبَ الطَّالِبُ الدَّرْسَ\n",
    "hi/note.md": "आज हमने हिन्दी भाषा में बैठक की।\n",
    "ru/meeting.md": "Вчера мы обсудили миграцию базы данных на встрече с командой.\n",
    "fr/cafe.md": "# Notes\nNous avons pris un café près de la gare avant la réunion.\n",
    "en/fox.md": "The quick brown fox jumps over the lazy dog.\n",
    "en/kube.md": "Notes on kubernetes autoscaling and node pools.\n",
    "en/other.md": "A slow brown bear, never quick.\n",
    "en/db.md": "postgres replication lag notes\n",
}


def _hits(answer: Answer) -> dict[str, str]:
    assert answer.status == 200, (answer.status, answer.body)
    return {h["path"]: h["snippet"] for h in answer.body["results"]}


def _search(agent: Agent, q: str, **params: Any) -> Answer:
    query = urllib.parse.urlencode({"q": q, **params})
    return agent.request("GET", agent.url(f"search?{query}"))


def _seed(daemon: DaemonProcess) -> Agent:
    agent = owner_agent(daemon)
    for path, text in NOTES.items():
        agent.ok(agent.create(path, text))
    return agent


def _found(agent: Agent, q: str, path: str, in_snippet: str) -> None:
    hits = _hits(_search(agent, q))
    assert path in hits, (q, hits)
    assert in_snippet in hits[path], (q, path, hits[path])


def test_words_inside_sentences_of_every_script_are_found_with_a_snippet(daemon: DaemonProcess) -> None:
    agent = _seed(daemon)
    try:
        _found(agent, "数据库", "zh/meeting.md", "我们讨论了数据库迁移计划")
        _found(agent, "迁移计划", "zh/meeting.md", "数据库迁移计划")
        _found(agent, "会议", "zh/short.md", "今天的会议很顺利")  # two characters
        _found(agent, "打ち合わせ", "ja/minutes.md", "来週の打ち合わせは火曜日")
        _found(agent, "회의록", "ko/nospace.md", "오늘회의록을정리했다")
        _found(agent, "회의록", "ko/spaced.md", "오늘 회의록을 정리했다")
        _found(agent, "ประชุม", "th/team.md", "วันนี้เรามีประชุมทีม")
        _found(agent, "اجتماع", "ar/meeting.md", "عقدنا الاجتماع الأسبوعي")
        _found(agent, "قاعدة البيانات", "ar/meeting.md", "قاعدة البيانات")
        _found(agent, "الطالب", "ar/vowelled.md", "الطَّالِبُ")  # written with its vowel marks
        _found(agent, "हिन्दी", "hi/note.md", "हिन्दी भाषा")
        _found(agent, "обсуд миграц", "ru/meeting.md", "обсудили миграцию")  # prefixes of inflected words
        _found(agent, "встреч", "ru/meeting.md", "на встрече")
        _found(agent, "cafe", "fr/cafe.md", "un café près")  # folded hit: a snippet
        _found(agent, "reunion gare", "fr/cafe.md", "la réunion")
        # nothing spurious: a word that is not there is not found in the CJK notes
        assert _hits(_search(agent, "数据仓库")) == {}
        assert _hits(_search(agent, "会谈")) == {}
    finally:
        agent.close()


def test_phrases_or_exclusion_and_a_prefix_on_every_word(daemon: DaemonProcess) -> None:
    agent = _seed(daemon)
    try:
        assert set(_hits(_search(agent, '"quick brown"'))) == {"en/fox.md"}
        assert set(_hits(_search(agent, '"brown quick"'))) == set()  # order matters in a phrase
        assert set(_hits(_search(agent, "brown quick"))) == {"en/fox.md", "en/other.md"}  # words: any order
        assert set(_hits(_search(agent, "fox OR bear"))) == {"en/fox.md", "en/other.md"}
        assert set(_hits(_search(agent, "brown -bear"))) == {"en/fox.md"}
        assert set(_hits(_search(agent, 'brown -"lazy dog"'))) == {"en/other.md"}
        assert set(_hits(_search(agent, "kube autoscaling"))) == {"en/kube.md"}
        assert set(_hits(_search(agent, "kube autosc"))) == {"en/kube.md"}
        assert set(_hits(_search(agent, "postgres OR 数据库 -replication"))) == {"zh/meeting.md"}
        # the limit pages the ranked hits
        assert len(_hits(_search(agent, "brown", limit=1))) == 1
    finally:
        agent.close()


def test_a_query_that_cannot_be_read_is_a_clear_400(daemon: DaemonProcess) -> None:
    agent = _seed(daemon)
    try:
        for q, says in (('"quick brown', "quote"), ("fox OR", "OR"), ("OR fox", "OR"),
                        ("-fox", "exclude"), ("!!! ...", "no words")):
            answer = _search(agent, q)
            assert answer.status == 400, (q, answer.status, answer.body)
            assert answer.code == "bad_request", answer.body
            assert says in answer.error["message"], (q, answer.error["message"])
    finally:
        agent.close()


def test_a_scoped_token_finds_nothing_outside_its_scope(daemon: DaemonProcess) -> None:
    owner = _seed(daemon)
    owner.close()
    scoped = agent_for(daemon, make_token(daemon.home, "zh-only", read=("zh/**",)))
    try:
        assert set(_hits(_search(scoped, "数据库 OR 打ち合わせ OR cafe OR fox"))) == {"zh/meeting.md"}
        assert _hits(_search(scoped, "회의록")) == {}
        assert _hits(_search(scoped, '"quick brown"')) == {}
    finally:
        scoped.close()


def test_cjk_search_and_syntax_errors_through_mcp(daemon: DaemonProcess) -> None:
    _seed(daemon).close()
    token = make_mcp_token(daemon, "agent-cjk")
    scoped = make_mcp_token(daemon, "agent-ja", {"read": ["ja/**"], "write": [], "append": []})

    async def run() -> None:
        async with session(mcp_url(daemon), token) as client:
            found = await call(client, "search_notes", q="数据库")
            assert [(h["path"], h["line"]) for h in found["results"]] == [("zh/meeting.md", 2)]
            assert "我们讨论了数据库迁移计划" in found["results"][0]["snippet"]
            found = await call(client, "search_notes", q="打ち合わせ OR ประชุม")
            assert {h["path"] for h in found["results"]} == {"ja/minutes.md", "th/team.md"}
            found = await call(client, "search_notes", q="cafe")
            assert "café" in found["results"][0]["snippet"]
            error = await refused(client, "search_notes", {"q": '"数据库'}, "bad_request")
            assert "quote" in error["message"]
        async with session(mcp_url(daemon), scoped) as client:
            found = await call(client, "search_notes", q="数据库 OR 打ち合わせ")
            assert [h["path"] for h in found["results"]] == ["ja/minutes.md"]

    asyncio.run(run())


def test_an_index_of_the_old_schema_is_rebuilt_at_start(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    """A store indexed by an older daemon (schema 1: no CJK grams) is rebuilt, off the loop."""
    import sqlite3

    from tests.integration.bridge_support import restart, start_daemon

    (vault_dir / "zh.md").write_text("我们讨论了数据库迁移计划\n")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    agent = owner_agent(daemon)
    assert "zh.md" in _hits(_search(agent, "数据库"))
    agent.close()
    assert daemon.stop() == 0
    [index] = sorted((home / "vaults").glob("*.search.sqlite"))
    db = sqlite3.connect(index)  # what schema 1 looked like: one unicode61 table, no grams
    for table in [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'")]:
        db.execute(f"DROP TABLE {table}")
    db.execute("DROP TABLE docs")
    db.execute("CREATE TABLE docs (rowid INTEGER PRIMARY KEY, note_id TEXT NOT NULL UNIQUE, "
               "path TEXT NOT NULL, revision TEXT NOT NULL)")
    db.execute("CREATE VIRTUAL TABLE fts USING fts5(path, content, "
               "tokenize = 'unicode61 remove_diacritics 2')")
    store = sqlite3.connect(index.with_name(index.name.replace(".search.sqlite", ".db")))
    for note_id, path, revision in store.execute("SELECT id, path, revision FROM notes WHERE deleted = 0"):
        rowid = db.execute("INSERT INTO docs (note_id, path, revision) VALUES (?, ?, ?)",
                           (note_id, path, revision)).lastrowid
        db.execute("INSERT INTO fts (rowid, path, content) VALUES (?, ?, ?)",
                   (rowid, path, (vault_dir / path).read_text()))
    store.close()
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    daemon = restart(home, daemon_factory)
    agent = owner_agent(daemon)
    try:
        assert "zh.md" in _hits(_search(agent, "数据库"))
    finally:
        agent.close()
