"""Issue 12's findings on the agent API, each through a real daemon (REST and MCP):

1. ``list_notes``' cursor never names a path the token may not read;
4. deeply nested JSON and lone surrogates (``"\\ud800"``) at every string field: a 400
   ``bad_request`` with a clear message, never a 500, nothing written;
5. writes under ignored paths (``.git/``, ``.trash/``, ``.stet*``, ``.stetignore`` lines) or
   under a symlinked folder: ``invalid_path`` with the reason, nothing written;
6. every path an event or a change-log entry names is checked against the read scope
   (a hidden ``oldPath`` is blanked; a hidden attempted ``newPath`` never reaches the reader).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.agent_support import Agent, Answer, event_stream, folder_files, make_token, owner_agent

SEED = {
    "a/x.md": "x\n", "a/y.md": "y\n", "b/1.md": "one\n", "secret/creds.md": "hunter2\n",
    "secret/d.md": "d\n", "secret/e.md": "e\n", "secret/moving.md": "moving\n",
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


@dataclass
class Setup:
    daemon: DaemonProcess
    home: Path
    vault: Path
    outside: Path
    reader: str  # read + write a/** only
    writer: str  # read + write everything


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("hardening")
    home, vault, outside = root / "home", root / "vault", root / "outside"
    home.mkdir()
    outside.mkdir()
    for rel, text in SEED.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text)
    (vault / ".stetignore").write_text("drafts/\n")
    os.symlink(outside, vault / "linked")
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    daemon = DaemonProcess(home)
    try:
        daemon.start()
        yield Setup(daemon, home, vault, outside,
                    make_token(home, "reader", read=("a/**",), write=("a/**",)),
                    make_token(home, "writer", read=("**",), write=("**",)))
        assert daemon.stop() == 0, daemon.log_tail()
        log = (home / "logs" / "daemon.log").read_text(errors="replace")
        assert "unhandled error" not in log
        assert "Traceback" not in log
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill9()


def agent(s: Setup, token: str) -> Agent:
    return Agent(s.daemon.api_url, token)


def mcp_call(a: Agent, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """tools/call over raw JSON-RPC; the tool's structured result (or error object)."""
    answer = a.request("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                        "params": {"name": tool, "arguments": arguments}},
                       headers=MCP_HEADERS)
    assert answer.status == 200, (answer.status, answer.raw[:300])
    result: dict[str, Any] = answer.body["result"]
    return result


def mcp_raw(a: Agent, raw: bytes) -> Answer:
    return a.request("POST", "/mcp", raw=raw, headers=MCP_HEADERS)


# -- 1. the list_notes cursor -----------------------------------------------------------------------

def _walk_rest(a: Agent) -> tuple[list[str], list[str | None]]:
    seen: list[str] = []
    cursors: list[str | None] = []
    cursor = ""
    for _ in range(50):  # bounded: the vault holds < 20 notes
        page = a.ok(a.request("GET", a.url(f"notes?limit=1&cursor={urllib.parse.quote(cursor)}")))
        seen += [n["path"] for n in page["notes"]]
        cursors.append(page["nextCursor"])
        if page["nextCursor"] is None:
            return seen, cursors
        cursor = page["nextCursor"]
    raise AssertionError(f"the cursor never ended: {cursors}")


def test_list_notes_cursor_names_only_readable_paths_rest(setup: Setup) -> None:
    reader = agent(setup, setup.reader)
    # The reproduction: a cursor just past the last readable note.
    page = reader.ok(reader.request("GET", reader.url("notes?limit=1&cursor=a%2Fy.md")))
    assert page == {"notes": [], "nextCursor": None}
    page = reader.ok(reader.request("GET", reader.url("notes?limit=1&cursor=a%2Fzzz.md")))
    assert page["nextCursor"] is None
    seen, cursors = _walk_rest(reader)
    assert seen == ["a/x.md", "a/y.md"]
    assert all(c is None or c.startswith("a/") for c in cursors), cursors
    assert "secret" not in json.dumps(cursors)
    reader.close()


def test_list_notes_cursor_names_only_readable_paths_mcp(setup: Setup) -> None:
    reader = agent(setup, setup.reader)
    cursors = []
    seen: list[str] = []
    cursor = ""
    for _ in range(50):
        result = mcp_call(reader, "list_notes", {"limit": 1, "cursor": cursor})
        assert not result["isError"], result
        page = result["structuredContent"]
        seen += [n["path"] for n in page["notes"]]
        cursors.append(page["nextCursor"])
        if page["nextCursor"] is None:
            break
        cursor = page["nextCursor"]
    assert seen == ["a/x.md", "a/y.md"]
    result = mcp_call(reader, "list_notes", {"limit": 1, "cursor": "a/y.md"})
    assert result["structuredContent"] == {"notes": [], "nextCursor": None}
    assert "secret" not in json.dumps(cursors)
    reader.close()


# -- 4. deep nesting and lone surrogates --------------------------------------------------------------

DEEP = 100_000
SURROGATE = "\\ud800"  # as JSON text: a lone high surrogate


def _bad_request(answer: Answer) -> None:
    assert answer.status == 400, (answer.status, answer.raw[:300])
    assert answer.code == "bad_request", answer.body
    assert answer.error["message"], answer.body


@pytest.mark.parametrize(("suffix", "method", "body"), [
    ("", "POST", '{"content": "a' + SURROGATE + 'b"}'),
    ("", "PUT", '{"content": "a' + SURROGATE + 'b"}'),
    ("/append", "POST", '{"text": "' + SURROGATE + '"}'),
    ("/append", "POST", '{"text": "ok", "idempotencyKey": "k' + SURROGATE + '"}'),
    ("/edit", "POST", '{"edits": [{"oldText": "x", "newText": "' + SURROGATE + '"}]}'),
    ("/edit", "POST", '{"edits": [{"oldText": "' + SURROGATE + '", "newText": "y"}]}'),
    ("/move", "POST", '{"newPath": "a/' + SURROGATE + '.md"}'),
    ("", "POST", '{"' + SURROGATE + '": "key"}'),
    ("", "POST", '{"content": ' + "[" * DEEP + "]" * DEEP + "}"),
    ("", "POST", "[" * DEEP + "]" * DEEP),
    ("/append", "POST", '{"text": ' + '{"a": ' * 500 + "1" + "}" * 500 + "}"),
])
def test_bad_strings_and_deep_json_are_bad_requests_rest(setup: Setup, suffix: str, method: str,
                                                         body: str) -> None:
    writer = agent(setup, setup.writer)
    before = folder_files(setup.vault)
    answer = writer.request(method, writer.note("a/x.md", suffix), raw=body.encode())
    _bad_request(answer)
    assert folder_files(setup.vault) == before
    assert writer.ok(writer.read("a/x.md"))["content"] == SEED["a/x.md"]
    writer.close()


def test_surrogate_in_url_path_and_query_is_not_a_500(setup: Setup) -> None:
    writer = agent(setup, setup.writer)
    for target in (writer.url("notes/a/%ED%A0%80.md"), writer.url("notes?prefix=%ED%A0%80"),
                   writer.url("log?path=%ED%A0%80.md"), writer.url("search?q=%ED%A0%80")):
        answer = writer.request("GET", target)
        assert answer.status < 500, (target, answer.raw[:300])
    writer.close()


@pytest.mark.parametrize(("tool", "arguments"), [
    ("read_note", '{"path": "a/' + SURROGATE + '.md"}'),
    ("create_note", '{"path": "a/' + SURROGATE + '.md", "content": "x"}'),
    ("create_note", '{"path": "a/new.md", "content": "' + SURROGATE + '"}'),
    ("append_note", '{"path": "a/x.md", "text": "t", "idempotencyKey": "' + SURROGATE + '"}'),
    ("edit_note", '{"path": "a/x.md", "edits": [{"oldText": "x", "newText": "' + SURROGATE + '"}]}'),
    ("move_note", '{"path": "a/x.md", "newPath": "a/' + SURROGATE + '.md"}'),
    ("append_note", '{"path": "a/x.md", "text": ' + "[" * 900 + "]" * 900 + "}"),
])
def test_bad_strings_and_deep_json_are_bad_requests_mcp(setup: Setup, tool: str, arguments: str) -> None:
    writer = agent(setup, setup.writer)
    before = folder_files(setup.vault)
    raw = ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "' + tool
           + '", "arguments": ' + arguments + "}}").encode()
    answer = mcp_raw(writer, raw)
    assert answer.status == 400, (answer.status, answer.raw[:300])
    error = answer.body["error"]
    assert error["data"]["error"]["code"] == "bad_request", error
    assert error["message"]
    deep = mcp_raw(writer, b"[" * DEEP + b"]" * DEEP)
    assert deep.status == 400, deep.raw[:300]
    assert folder_files(setup.vault) == before
    writer.close()


# -- 5. ignored paths and symlinked folders ----------------------------------------------------------

IGNORED = [".git/notes.md", ".trash/keep.md", "notes/.stetfoo.md", "drafts/plan.md", ".stetignore.md"]


@pytest.mark.parametrize("path", [*IGNORED, "linked/inside.md", "linked/deeper/inside.md"])
def test_writes_to_ignored_or_symlinked_paths_are_refused_rest(setup: Setup, path: str) -> None:
    writer = agent(setup, setup.writer)
    before, outside_before = folder_files(setup.vault), folder_files(setup.outside)
    for answer in (writer.create(path, "kept?\n"), writer.append(path, "kept?\n"),
                   writer.move("a/y.md", path)):
        assert answer.status == 400, (path, answer.status, answer.body)
        assert answer.code == "invalid_path", answer.body
        reason = answer.error["message"]
        assert ("ignore" in reason or "symlink" in reason), reason
    assert writer.read(path).status == 404
    assert writer.ok(writer.read("a/y.md"))["content"] == SEED["a/y.md"]
    listed = [n["path"] for n in writer.ok(writer.request("GET", writer.url("notes")))["notes"]]
    assert path not in listed
    assert folder_files(setup.vault) == before
    assert folder_files(setup.outside) == outside_before
    writer.close()


@pytest.mark.parametrize("path", [".git/mcp.md", "linked/mcp.md"])
def test_writes_to_ignored_or_symlinked_paths_are_refused_mcp(setup: Setup, path: str) -> None:
    writer = agent(setup, setup.writer)
    before = folder_files(setup.vault)
    for tool, args in (("create_note", {"path": path, "content": "x"}),
                       ("append_note", {"path": path, "text": "x"}),
                       ("move_note", {"path": "a/y.md", "newPath": path})):
        result = mcp_call(writer, tool, args)
        assert result["isError"], result
        assert result["structuredContent"]["error"]["code"] == "invalid_path", result
    assert folder_files(setup.vault) == before
    writer.close()


# -- 6. paths in events and the change log ----------------------------------------------------------

def test_events_and_log_name_only_readable_paths(setup: Setup) -> None:
    owner = owner_agent(setup.daemon)
    writer = agent(setup, setup.writer)
    reader = agent(setup, setup.reader)
    with event_stream(setup.daemon, setup.reader) as events:
        # A hidden note moved into the reader's scope: the move is seen, not where it came from.
        owner.ok(owner.move("secret/moving.md", "a/moved.md"))
        moved = events.wait_for("note.moved", path="a/moved.md")
        assert moved.data["oldPath"] is None, moved.data
        # Another token's refused move towards a hidden path: never shown to the reader.
        refused = writer.move("a/x.md", "secret/attempted.md", expectedRevision="0" * 64)
        assert refused.code == "revision_mismatch", refused.body
        # Something the reader does see, after the rest: everything before it has arrived.
        writer.ok(writer.create("a/sentinel.md", "s\n"))
        events.wait_for("note.changed", path="a/sentinel.md")
        raw = json.dumps([e.data for e in events.seen])
        assert "secret/" not in raw, raw
    log = reader.ok(reader.log())
    assert "secret/" not in json.dumps(log), log
    entry = next(e for e in log["changes"] if e["path"] == "a/moved.md" and e["kind"] == "moved")
    assert entry["oldPath"] is None
    entry = reader.ok(reader.log("a/moved.md"))
    assert "secret/" not in json.dumps(entry)
    result = mcp_call(reader, "recent_changes", {})
    assert not result["isError"]
    assert "secret/" not in json.dumps(result)
    # The owner still sees everything.
    owner_log = owner.ok(owner.log("a/moved.md"))
    assert any(e["oldPath"] == "secret/moving.md" for e in owner_log["changes"])
    owner.ok(owner.move("a/moved.md", "secret/moving.md"))
    for a in (owner, writer, reader):
        a.close()


def test_errors_name_no_hidden_note(setup: Setup) -> None:
    """An append-only token (``--append 'drop/**'``: no read) is not told a hidden note's
    name by a case clash; REST and MCP. (Write scope implies read in Stet's scopes.)"""
    owner = owner_agent(setup.daemon)
    owner.ok(owner.create("drop/Box.md", "private words\n"))
    blind = agent(setup, make_token(setup.home, "blind", append=("drop/**",)))
    clash = blind.append("drop/box.md", "x")
    assert clash.code == "invalid_path", clash.body
    assert "Box" not in json.dumps(clash.body), clash.body
    result = mcp_call(blind, "append_note", {"path": "drop/BOX.md", "text": "x"})
    assert result["isError"]
    assert result["structuredContent"]["error"]["code"] == "invalid_path"
    assert "Box" not in json.dumps(result), result
    assert "private" not in json.dumps(result)
    # A token that may read it is told which note clashes.
    writer = agent(setup, setup.writer)
    assert writer.create("drop/box.md", "x").error["existing"] == "drop/Box.md"
    owner.ok(owner.delete("drop/Box.md"))
    for a in (owner, blind, writer):
        a.close()


def test_daemon_alive_after(setup: Setup) -> None:
    owner = owner_agent(setup.daemon)
    assert owner.ok(owner.request("GET", "/v1/status"))["pid"] == setup.daemon.proc.pid  # type: ignore[union-attr]
    owner.close()

    def settled() -> bool:  # the bridge idle before the stop (a shutdown race logs otherwise)
        vaults = setup.daemon.client.status()["vaults"]
        return all(v.get("pendingReads", 0) == 0 and v.get("pendingWrites", 0) == 0 for v in vaults)

    wait_until(settled, timeout=30, what="the bridge to settle")
