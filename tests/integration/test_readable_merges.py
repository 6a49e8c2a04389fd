"""Merges a person can read (issue 32), through the real faces of a real daemon: agents
through the official MCP SDK and REST, a person saving the file on disk, the owner's CLI
for promotion, the SSE stream. Each reproduction of the issue is checked on the whole text:
both values whole, each once, never a mix of their characters (``1060``, ``doneone``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.agent_support import Agent, event_stream, owner_agent
from tests.integration.test_mcp import call, make_token, mcp_url, refused, session


@pytest.fixture
def owner(daemon: DaemonProcess) -> Iterator[Agent]:
    agent = owner_agent(daemon)
    yield agent
    agent.close()


NOTE = "rate_limit = 50 rpm\nStatus: draft\n"
MIXED = ("1060", "10100", "875", "6100", "doneone")


def _whole(text: str, *lines: str) -> None:
    for line in lines:
        assert text.count(line + "\n") == 1, (line, text)
    for mixed in MIXED:
        assert mixed not in text, text


async def test_two_agents_same_change_lands_once_and_different_values_stay_whole(
        daemon: DaemonProcess, owner: Agent, vault_dir: Path) -> None:
    owner.ok(owner.create("same.md", NOTE))
    owner.ok(owner.create("diff.md", NOTE))
    a_token, b_token = make_token(daemon, "agent-a"), make_token(daemon, "agent-b")
    async with session(mcp_url(daemon), a_token) as a, session(mcp_url(daemon), b_token) as b:
        same = (await call(a, "read_note", path="same.md"))["revision"]
        diff = (await call(a, "read_note", path="diff.md"))["revision"]
        done = "rate_limit = 100 rpm\nStatus: done\n"
        await call(a, "update_note", path="same.md", content=done, baseRevision=same)
        again = await call(b, "update_note", path="same.md", content=done, baseRevision=same)
        assert again["changed"] is False
        await call(a, "update_note", path="diff.md", content=done, baseRevision=diff)
        await call(b, "update_note", path="diff.md", content=done.replace("100", "60"), baseRevision=diff)
        assert (await call(a, "read_note", path="same.md"))["content"] == done
        merged = (await call(a, "read_note", path="diff.md"))["content"]
    assert merged == "rate_limit = 100 rpm\nrate_limit = 60 rpm\nStatus: done\n"
    _whole(merged, "rate_limit = 100 rpm", "rate_limit = 60 rpm", "Status: done")
    # The file a person opens says the same.
    wait_until(lambda: (vault_dir / "diff.md").read_text(encoding="utf-8") == merged,
               what="the merged text on disk")
    listed = owner.ok(owner.request("GET", owner.url("conflicts")))["conflicts"]
    assert [(c["code"], c["path"]) for c in listed] == [("merged", "diff.md")]
    versions = owner.ok(owner.request("GET", owner.note("diff.md", "/versions")))["versions"]
    kept = [v for v in versions if v["kind"] == "concurrent"]
    assert len(kept) == 2


async def test_a_stale_expected_revision_with_the_same_text_is_a_no_op_not_a_conflict(
        daemon: DaemonProcess, owner: Agent) -> None:
    owner.ok(owner.create("cfg.md", NOTE))
    a_token, b_token = make_token(daemon, "agent-a"), make_token(daemon, "agent-b")
    done = "rate_limit = 100 rpm\nStatus: done\n"
    async with session(mcp_url(daemon), a_token) as a, session(mcp_url(daemon), b_token) as b:
        read = (await call(a, "read_note", path="cfg.md"))["revision"]
        won = await call(a, "update_note", path="cfg.md", content=done, expectedRevision=read)
        same = await call(b, "update_note", path="cfg.md", content=done, expectedRevision=read)
        assert same == {"path": "cfg.md", "revision": won["revision"], "changed": False, "unchanged": True}
        await refused(b, "update_note", {"path": "cfg.md", "content": "other\n", "expectedRevision": read},
                      "revision_mismatch")
    listed = owner.ok(owner.request("GET", owner.url("conflicts")))["conflicts"]
    assert [c["code"] for c in listed] == ["revision_mismatch"]  # only the different one


async def test_a_person_on_disk_and_an_agent_from_the_older_text_keep_both_lines(
        daemon: DaemonProcess, owner: Agent, vault_dir: Path) -> None:
    owner.ok(owner.create("cfg.md", NOTE))
    vault = vault_dir
    wait_until(lambda: (vault / "cfg.md").exists(), what="the note's file")
    token = make_token(daemon, "agent-a")
    async with session(mcp_url(daemon), token) as a:
        base = (await call(a, "read_note", path="cfg.md"))["revision"]
        (vault / "cfg.md").write_text(NOTE.replace("50", "75"), encoding="utf-8")  # the person saves
        wait_until(lambda: "75 rpm" in owner.ok(owner.read("cfg.md"))["content"], what="the save taken in")
        await call(a, "update_note", path="cfg.md", content=NOTE.replace("50", "80"), baseRevision=base)
        text = (await call(a, "read_note", path="cfg.md"))["content"]
    assert text == "rate_limit = 75 rpm\nrate_limit = 80 rpm\nStatus: draft\n"


async def test_promotion_previews_and_applies_by_the_merge_rule(daemon: DaemonProcess, owner: Agent) -> None:
    owner.ok(owner.create("cfg.md", NOTE))
    a_token, b_token = make_token(daemon, "agent-a"), make_token(daemon, "agent-b")
    async with session(mcp_url(daemon), a_token) as a, session(mcp_url(daemon), b_token) as b:
        read = (await call(a, "read_note", path="cfg.md"))["revision"]
        await call(a, "update_note", path="cfg.md", content=NOTE.replace("50", "100"), expectedRevision=read)
        await refused(b, "update_note", {"path": "cfg.md", "content": NOTE.replace("50", "60"),
                                         "expectedRevision": read}, "revision_mismatch")
    [conflict] = owner.ok(owner.request("GET", owner.url("conflicts")))["conflicts"]
    expected = "rate_limit = 100 rpm\nrate_limit = 60 rpm\nStatus: draft\n"
    shown = run_stet(daemon.home, "conflicts", "show", str(conflict["id"])).stdout.decode()
    assert "after apply" in shown
    assert expected in shown
    shown_json = json.loads(run_stet(daemon.home, "conflicts", "show", str(conflict["id"]), "--json").stdout)
    assert shown_json["resultText"] == expected
    with event_stream(daemon, daemon.client.token) as events:
        run_stet(daemon.home, "conflicts", "apply", str(conflict["id"]))
        merged_event = events.wait_for("note.merged", path="cfg.md")
    assert merged_event.data["overlaps"] == 1
    text = owner.ok(owner.read("cfg.md"))["content"]
    assert text == expected
    _whole(text, "rate_limit = 100 rpm", "rate_limit = 60 rpm", "Status: draft")



async def test_a_naive_rewrite_without_a_revision_keeps_what_another_agent_appended(
        daemon: DaemonProcess, owner: Agent) -> None:
    """Issue 32 item 5: the race of an append against a revision-less rewrite, a few times;
    the rewrite is taken as made on what its token read, so every append survives."""
    owner.ok(owner.create("log.md", "# Log\n\nfirst entry\n"))
    writer_token, appender_token = make_token(daemon, "rewriter"), make_token(daemon, "appender")
    async with session(mcp_url(daemon), writer_token) as w, session(mcp_url(daemon), appender_token) as a:
        for i in range(5):
            read = await call(w, "read_note", path="log.md")
            await call(a, "append_note", path="log.md", text=f"appended {i}\n")
            answer = await call(w, "update_note", path="log.md",
                                content=read["content"].replace("first entry", f"first entry (edit {i})"))
            assert answer["mergedFrom"] == read["revision"]
        text = (await call(w, "read_note", path="log.md"))["content"]
        for i in range(5):
            assert text.count(f"appended {i}\n") == 1, text
        assert text.count("first entry (edit 4)") == 1, text
        forced = await call(w, "update_note", path="log.md", content="# Log\n\nreplaced\n", force=True)
        assert "mergedFrom" not in forced
        assert (await call(w, "read_note", path="log.md"))["content"] == "# Log\n\nreplaced\n"
