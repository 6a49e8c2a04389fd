"""Structure-aware edits and reads (issue 34 item 4) through MCP with the official SDK
against a real daemon: a section by heading, a task by its text, frontmatter fields and
tags, read_note's include, links and backlinks kept current on every write (agent and
disk), a rename of a linked note, build_context, and a scoped token that must not see
links from or into notes it cannot read. The note text is checked whole after each edit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import DaemonProcess, wait_until
from tests.integration.test_mcp import call, make_token, mcp_url, refused, session


@pytest.fixture
def token(daemon: DaemonProcess) -> str:
    return make_token(daemon, "agent1")


PLAN = """---
title: План
tags: [draft]
---
# Проект
Вступление.

## Решения
- SQLite

## Tasks
- [ ] buy milk
- [ ] write the plan
- [ ] write the plan down

## 参考
See [[决定]] and [the log](logs/日志.md).
"""


async def test_sections_tasks_and_frontmatter_through_mcp(daemon: DaemonProcess, token: str) -> None:
    async with session(mcp_url(daemon), token) as c:
        first = await call(c, "create_note", path="plan.md", content=PLAN)
        appended = await call(
            c,
            "edit_section",
            path="plan.md",
            heading="Решения",
            text="- и WAL",
            expectedRevision=first["revision"],
        )
        assert appended["changed"] is True
        await call(c, "edit_section", path="plan.md", heading="参考", mode="prepend", text="Links:")
        await call(c, "tick_task", path="plan.md", task="buy milk")
        await call(
            c,
            "edit_frontmatter",
            path="plan.md",
            set={"status": "active"},
            addTags=["决策"],
            removeTags=["draft"],
        )
        text = (await call(c, "read_note", path="plan.md"))["content"]
        assert text == PLAN.replace("tags: [draft]\n", "tags: [决策]\nstatus: active\n").replace(
            "- SQLite\n", "- SQLite\n- и WAL\n"
        ).replace("- [ ] buy milk", "- [x] buy milk").replace("## 参考\n", "## 参考\nLinks:\n")
        # the refusals an agent can act on
        missing = await refused(
            c, "edit_section", {"path": "plan.md", "heading": "Итоги", "text": "x"}, "anchor_not_found"
        )
        assert "Итоги" in missing["message"]
        ambiguous = await refused(
            c, "tick_task", {"path": "plan.md", "task": "write the"}, "anchor_ambiguous"
        )
        assert ambiguous["count"] == 2
        await call(c, "tick_task", path="plan.md", task="write the plan")  # the exact text: one item
        stale = await refused(
            c,
            "edit_section",
            {"path": "plan.md", "heading": "Tasks", "text": "- [ ] z", "expectedRevision": first["revision"]},
            "revision_mismatch",
        )
        assert stale["currentRevision"] != first["revision"]
        read = await call(c, "read_note", path="plan.md", include=["headings", "frontmatter", "tasks"])
        assert [h["text"] for h in read["headings"]] == ["Проект", "Решения", "Tasks", "参考"]
        assert read["frontmatter"] == {"title": "План", "tags": ["决策"], "status": "active"}
        assert [(t["text"], t["done"]) for t in read["tasks"]] == [
            ("buy milk", True),
            ("write the plan", True),
            ("write the plan down", False),
        ]
    assert daemon.content("plan.md") == read["content"]


async def test_links_and_backlinks_follow_writes_renames_and_scope(
    daemon: DaemonProcess, token: str, vault_dir: Path
) -> None:
    async with session(mcp_url(daemon), token) as c:
        await call(c, "create_note", path="决定.md", content="# 决定\n用 SQLite。\n")
        await call(c, "create_note", path="a.md", content="Read [[决定#用法|the decision]] first.\n")
        await call(c, "create_note", path="logs/日志.md", content="log\n")
        await call(c, "create_note", path="plan.md", content=PLAN)
        links = await call(c, "note_links", path="决定.md")
        assert [b["path"] for b in links["backlinks"]] == ["a.md", "plan.md"]
        out = await call(c, "note_links", path="plan.md")
        assert [(link["target"], link["resolved"]) for link in out["links"]] == [
            ("决定", "决定.md"),
            ("logs/日志.md", "logs/日志.md"),
        ]
        # a person writes a link on disk: the next ask finds it
        (vault_dir / "diary.md").write_text("Today: [[决定]].\n", encoding="utf-8")
        wait_until(lambda: daemon.content("diary.md") == "Today: [[决定]].\n", what="diary.md taken in")
        links = await call(c, "note_links", path="决定.md")
        assert [b["path"] for b in links["backlinks"]] == ["a.md", "diary.md", "plan.md"]
        # a rename keeps its backlinks findable, by the path the links still name
        await call(c, "move_note", path="决定.md", newPath="decisions/决定-2026.md")
        moved = await call(c, "note_links", path="decisions/决定-2026.md")
        assert moved["backlinks"] == [
            {"path": p, "viaOldPath": "决定.md"} for p in ("a.md", "diary.md", "plan.md")
        ]
        assert (await call(c, "note_links", path="a.md"))["links"][0][
            "resolved"
        ] is None  # its text says 决定
        # a link removed is gone
        await call(c, "update_note", path="a.md", content="No links now.\n")
        moved = await call(c, "note_links", path="decisions/决定-2026.md")
        assert [b["path"] for b in moved["backlinks"]] == ["diary.md", "plan.md"]
        context = await call(c, "build_context", path="plan.md", depth=1)
        assert [(n["path"], n["depth"], n.get("reachedBy")) for n in context["notes"]] == [
            ("plan.md", 0, None),
            ("logs/日志.md", 1, "link"),
        ]
        assert context["notes"][1]["content"] == "log\n"


async def test_a_scoped_token_sees_no_link_from_or_into_notes_it_cannot_read(
    daemon: DaemonProcess, token: str
) -> None:
    async with session(mcp_url(daemon), token) as owner:
        await call(owner, "create_note", path="public/p.md", content="See [[secret/s]] and [[public/q]].\n")
        await call(owner, "create_note", path="public/q.md", content="q\n")
        await call(owner, "create_note", path="secret/s.md", content="Hidden, links [[public/p]].\n")
        await call(owner, "create_note", path="public/r.md", content="Also [[public/p]].\n")
    scoped = make_token(daemon, "reader", {"read": ["public/**"], "write": [], "append": []})
    async with session(mcp_url(daemon), scoped) as c:
        links = await call(c, "note_links", path="public/p.md")
        assert [(link["target"], link["resolved"]) for link in links["links"]] == [
            ("secret/s", None),
            ("public/q", "public/q.md"),
        ]
        assert links["backlinks"] == [{"path": "public/r.md"}]  # not secret/s.md
        context = await call(c, "build_context", path="public/p.md", depth=2)
        assert sorted(n["path"] for n in context["notes"]) == ["public/p.md", "public/q.md", "public/r.md"]
        assert "Hidden" not in str(context)  # secret/s.md's text (p's own text names it: p is readable)
        await refused(c, "note_links", {"path": "secret/s.md"}, "forbidden")
        await refused(c, "edit_section", {"path": "public/p.md", "heading": "x", "text": "y"}, "forbidden")
