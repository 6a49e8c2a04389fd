"""MCP at /mcp (SPEC §6.4, §6.7, §6.11) against a real daemon, driven by the official ``mcp``
SDK client over Streamable HTTP: the handshake (``mode="auto"``, which probes
``server/discover`` first, and ``mode="legacy"``), the tool list with the SPEC's names and
argument names, every tool, every error code as an ``isError`` result carrying the SPEC's
error object, the vault choice, and the protocol/HTTP edges with raw requests.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from stet.client.daemon_link import read_owner_token
from stet.sync.home import HomeLayout, HomeRegistry
from tests.harness import DaemonProcess, run_stet

MAX_BYTES = 100_000  # [notes] max_bytes for these daemons: makes too_large cheap to reach
FULL = {"read": ["**"], "write": ["**"], "append": ["**"]}

# SPEC §6.4: tool -> (argument names, required ones).
SPEC_TOOLS: dict[str, tuple[set[str], set[str]]] = {
    "list_notes": ({"prefix", "limit", "cursor", "snapshot"}, set()),
    "read_note": ({"path", "version", "snapshot", "atRevision", "include"}, {"path"}),
    "search_notes": ({"q", "limit", "snapshot"}, {"q"}),
    "open_snapshot": (set(), set()),
    "create_note": ({"path", "content", "idempotencyKey"}, {"path"}),
    "append_note": ({"path", "text", "idempotencyKey"}, {"path", "text"}),
    "edit_note": ({"path", "edits", "expectedRevision", "idempotencyKey"}, {"path", "edits"}),
    "update_note": ({"path", "content", "expectedRevision", "baseRevision", "idempotencyKey",
                    "force"},
                    {"path", "content"}),
    "delete_note": ({"path", "expectedRevision", "idempotencyKey"}, {"path"}),
    "move_note": ({"path", "newPath", "expectedRevision", "idempotencyKey"}, {"path", "newPath"}),
    "list_versions": ({"path"}, {"path"}),
    "read_version": ({"path", "id"}, {"path", "id"}),
    "restore_version": ({"path", "id", "idempotencyKey"}, {"path", "id"}),
    "recent_changes": ({"path", "since", "limit"}, set()),
    # SPEC §6.12 (tests/integration/test_files_api.py)
    "list_files": ({"prefix", "limit", "cursor"}, set()),
    "read_file": ({"path"}, {"path"}),
    # issue 34 item 4 (tests/integration/test_structure_tools.py)
    "edit_section": ({"path", "heading", "mode", "text", "expectedRevision", "idempotencyKey"},
                     {"path", "heading", "text"}),
    "edit_frontmatter": ({"path", "set", "delete", "addTags", "removeTags", "expectedRevision",
                          "idempotencyKey"}, {"path"}),
    "tick_task": ({"path", "task", "done", "expectedRevision", "idempotencyKey"}, {"path", "task"}),
    "note_links": ({"path"}, {"path"}),
    "build_context": ({"path", "depth", "limit"}, {"path"}),
}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The conftest home, with a small note size limit (the ``daemon`` fixture uses it)."""
    h = tmp_path / "home"
    h.mkdir()
    (h / "config.toml").write_text(f"[notes]\nmax_bytes = {MAX_BYTES}\n")
    return h


def make_token(daemon: DaemonProcess, name: str, scopes: dict[str, list[str]] = FULL,
               vault: str = "notes") -> str:
    registry = HomeRegistry(HomeLayout(daemon.home))
    try:
        return registry.create_token(name, registry.find(vault).id, scopes)
    finally:
        registry.close()


def mcp_url(daemon: DaemonProcess, vault: str | None = None) -> str:
    query = f"?{urllib.parse.urlencode({'vault': vault})}" if vault is not None else ""
    return f"{daemon.api_url}/mcp{query}"


@contextlib.asynccontextmanager
async def session(url: str, token: str, *, mode: str = "auto") -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


@pytest.fixture
def token(daemon: DaemonProcess) -> str:
    return make_token(daemon, "agent1")


def ok(result: CallToolResult) -> dict[str, Any]:
    """A successful tool result: its structured content, which its text content repeats."""
    assert not result.is_error, result
    structured = result.structured_content
    assert isinstance(structured, dict)
    assert json.loads(result.content[0].text) == structured  # type: ignore[union-attr]
    return structured


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    return ok(await client.call_tool(tool, args))


async def refused(client: Client, tool: str, args: dict[str, Any], code: str) -> dict[str, Any]:
    """An isError result carrying the SPEC's error object (as text and as structured content)."""
    result = await client.call_tool(tool, args)
    assert result.is_error, result
    body = result.structured_content
    assert isinstance(body, dict)
    assert set(body) == {"error"}, body
    assert json.loads(result.content[0].text) == body  # type: ignore[union-attr]
    error: dict[str, Any] = body["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


# -- handshake and tool list ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_handshake_and_tool_list_follow_the_spec(daemon: DaemonProcess, token: str, mode: str) -> None:
    async with session(mcp_url(daemon), token, mode=mode) as client:
        # auto: server/discover answers, so the stateless 2026-07-28 (test_mcp_modern.py)
        assert client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        assert client.server_info is not None
        assert client.server_info.name == "stet"
        assert client.server_capabilities.tools is not None
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == set(SPEC_TOOLS)
    for name, (args, required) in SPEC_TOOLS.items():
        schema = tools[name].input_schema
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert set(schema["properties"]) == args, name
        assert set(schema.get("required", [])) == required, name
        assert tools[name].description
        assert len(tools[name].description or "") > 60, name  # written for an agent, not a stub
    edit_item = tools["edit_note"].input_schema["properties"]["edits"]["items"]
    assert set(edit_item["properties"]) == {"oldText", "newText"}
    assert tools["read_note"].annotations is not None
    assert tools["read_note"].annotations.read_only_hint is True
    assert "idempotencyKey" in (tools["append_note"].description or "")


# -- every tool -------------------------------------------------------------------------------


async def test_every_note_tool_works(daemon: DaemonProcess, token: str) -> None:
    async with session(mcp_url(daemon), token) as c:
        created = ok(await c.call_tool("create_note", {"path": "plan.md", "content": "alpha\nbeta\n"}))
        assert created["created"] is True
        r1 = created["revision"]
        note = ok(await c.call_tool("read_note", {"path": "plan.md"}))
        assert note == {"path": "plan.md", "content": "alpha\nbeta\n", "revision": r1}

        # append: creates, appends, and a retry with the same key applies nothing
        key = str(uuid.uuid4())
        first = await call(c, "append_note", path="log.md", text="found A\n", idempotencyKey=key)
        assert first["created"] is True
        again = await call(c, "append_note", path="log.md", text="found A\n", idempotencyKey=key)
        assert again["revision"] == first["revision"]
        assert again.get("replayed") is True
        ok(await c.call_tool("append_note", {"path": "log.md", "text": "found B"}))
        assert ok(await c.call_tool("read_note", {"path": "log.md"}))["content"] == "found A\nfound B"

        # edit by anchor, then a rewrite based on the older revision keeps the edit
        edited = ok(await c.call_tool("edit_note", {"path": "plan.md", "expectedRevision": r1,
                                                    "edits": [{"oldText": "beta", "newText": "BETA"}]}))
        assert edited["revision"] != r1
        merged = ok(await c.call_tool("update_note", {"path": "plan.md", "content": "alpha\nbeta\ngamma\n",
                                                      "baseRevision": r1}))
        assert ok(await c.call_tool("read_note", {"path": "plan.md"}))["content"] == "alpha\nBETA\ngamma\n"
        text = "alpha\nBETA\ngamma\ndelta\n"
        final = await call(c, "update_note", path="plan.md", content=text,
                           expectedRevision=merged["revision"])
        same = await call(c, "update_note", path="plan.md", content=text)
        assert same["changed"] is False
        assert same["revision"] == final["revision"]

        hits = ok(await c.call_tool("search_notes", {"q": "gamma"}))["results"]
        assert [h["path"] for h in hits] == ["plan.md"]
        assert hits[0]["line"] == 3

        page1 = ok(await c.call_tool("list_notes", {"limit": 1}))
        assert [n["path"] for n in page1["notes"]] == ["log.md"]
        assert page1["notes"][0]["updatedBy"] == "agent:agent1"
        page2 = ok(await c.call_tool("list_notes", {"limit": 1, "cursor": page1["nextCursor"]}))
        assert [n["path"] for n in page2["notes"]] == ["plan.md"]
        assert page2["nextCursor"] is None
        assert ok(await c.call_tool("list_notes", {"prefix": "pl"}))["notes"][0]["path"] == "plan.md"

        moved = ok(await c.call_tool("move_note", {"path": "plan.md", "newPath": "projects/plan.md",
                                                   "expectedRevision": final["revision"]}))
        assert moved["path"] == "projects/plan.md"
        changes = ok(await c.call_tool("recent_changes", {}))["changes"]
        assert changes
        assert {ch["source"] for ch in changes} == {"agent:agent1"}
        of_log = ok(await c.call_tool("recent_changes", {"path": "log.md", "since": "2000-01-01T00:00:00Z"}))
        assert {ch["path"] for ch in of_log["changes"]} == {"log.md"}

        gone = ok(await c.call_tool("delete_note", {"path": "projects/plan.md"}))
        assert gone["deleted"] is True
        await refused(c, "read_note", {"path": "projects/plan.md"}, "not_found")
    assert daemon.content("log.md") == "found A\nfound B"


async def test_version_tools_work(daemon: DaemonProcess, token: str) -> None:
    original = "".join(f"line {i}: the text an overwrite must not lose\n" for i in range(10))
    async with session(mcp_url(daemon), token) as c:
        ok(await c.call_tool("create_note", {"path": "keep.md", "content": original}))
        ok(await c.call_tool("update_note", {"path": "keep.md", "content": "oops\n"}))  # a large deletion
        versions = ok(await c.call_tool("list_versions", {"path": "keep.md"}))["versions"]
        assert versions
        assert versions[0]["kind"] == "before-large-deletion"
        vid = versions[0]["id"]
        old = ok(await c.call_tool("read_version", {"path": "keep.md", "id": vid}))
        assert old["content"] == original  # read_note(version=) answers with read_version's result
        via_read = ok(await c.call_tool("read_note", {"path": "keep.md", "version": str(vid)}))
        assert via_read["content"] == original
        restored = ok(await c.call_tool("restore_version", {"path": "keep.md", "id": vid,
                                                            "idempotencyKey": "restore-1"}))
        assert restored["revision"]
        assert ok(await c.call_tool("read_note", {"path": "keep.md"}))["content"] == original


# -- errors -----------------------------------------------------------------------------------


async def test_every_error_code_is_a_tool_error_with_the_spec_object(daemon: DaemonProcess,
                                                                     token: str) -> None:
    scoped = make_token(daemon, "scoped",
                        {"read": ["**"], "append": ["shared/log.md"], "write": ["agents/**"]})
    async with session(mcp_url(daemon), token) as c:
        r1 = await call(c, "create_note", path="n.md", content="one two three\nx x x\nabcde\n")
        ok(await c.call_tool("append_note", {"path": "n.md", "text": "four\n"}))
        current = ok(await c.call_tool("read_note", {"path": "n.md"}))

        await refused(c, "read_note", {"path": "missing.md"}, "not_found")
        await refused(c, "create_note", {"path": "n.md", "content": "again"}, "already_exists")
        err = await refused(c, "update_note", {"path": "n.md", "content": "mine",
                                               "expectedRevision": r1["revision"]}, "revision_mismatch")
        assert err["currentRevision"] == current["revision"]
        assert err["currentContent"] == current["content"]
        await refused(c, "edit_note", {"path": "n.md", "expectedRevision": r1["revision"],
                                       "edits": [{"oldText": "one", "newText": "1"}]}, "revision_mismatch")
        await refused(c, "update_note", {"path": "n.md", "content": "mine", "baseRevision": "f" * 64},
                      "revision_unknown")
        await refused(c, "edit_note", {"path": "n.md", "edits": [{"oldText": "zebra", "newText": "z"}]},
                      "anchor_not_found")
        err = await refused(c, "edit_note", {"path": "n.md", "edits": [{"oldText": "x", "newText": "y"}]},
                            "anchor_ambiguous")
        assert err["matches"] == 3
        await refused(c, "edit_note", {"path": "n.md", "edits": [{"oldText": "abc", "newText": "1"},
                                                                 {"oldText": "bcd", "newText": "2"}]},
                      "anchors_overlap")
        await refused(c, "create_note", {"path": "../escape.md", "content": "x"}, "invalid_path")
        await refused(c, "move_note", {"path": "n.md", "newPath": "/etc/passwd.md"}, "invalid_path")
        await refused(c, "create_note", {"path": "big.md", "content": "x" * (MAX_BYTES + 1)}, "too_large")
        ok(await c.call_tool("append_note", {"path": "l.md", "text": "a", "idempotencyKey": "k1"}))
        await refused(c, "append_note", {"path": "l.md", "text": "b", "idempotencyKey": "k1"},
                      "idempotency_key_reused")
        # bad requests: a wrong type, an unknown argument, a missing one, an out-of-range limit
        await refused(c, "list_notes", {"limit": "ten"}, "bad_request")
        await refused(c, "list_notes", {"limit": 0}, "bad_request")
        err = await refused(c, "read_note", {"path": "n.md", "revision": "r"}, "bad_request")
        assert "revision" in err["message"]
        await refused(c, "append_note", {"path": "n.md"}, "bad_request")
        await refused(c, "edit_note", {"path": "n.md", "edits": []}, "bad_request")
        await refused(c, "edit_note", {"path": "n.md", "edits": [{"oldText": "one"}]}, "bad_request")
        await refused(c, "update_note", {"path": "n.md", "content": "c", "expectedRevision": "a",
                                         "baseRevision": "b"}, "bad_request")
        # nothing refused above was written
        assert ok(await c.call_tool("read_note", {"path": "n.md"}))["content"] == current["content"]
        # an unknown tool is a protocol error, not a tool result
        with pytest.raises(MCPError, match="unknown tool"):
            await c.call_tool("drop_all_notes", {})

    async with session(mcp_url(daemon), scoped) as c:
        err = await refused(c, "update_note", {"path": "n.md", "content": "mine"}, "forbidden")
        assert err["path"] == "n.md"
        await refused(c, "append_note", {"path": "n.md", "text": "mine"}, "forbidden")
        ok(await c.call_tool("append_note", {"path": "shared/log.md", "text": "allowed"}))
        ok(await c.call_tool("create_note", {"path": "agents/me.md", "content": "mine"}))
        assert ok(await c.call_tool("read_note", {"path": "n.md"}))["content"] == current["content"]


# -- which vault ------------------------------------------------------------------------------


async def connect_error(url: str, token: str) -> str:
    """The message of a refused connection (the SDK may wrap it in an exception group)."""
    with pytest.raises(BaseException) as info:  # noqa: PT011 - unwrapped and checked below
        async with session(url, token):
            pass
    exc: BaseException = info.value
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    assert isinstance(exc, MCPError), repr(exc)
    return str(exc)


async def test_vault_is_the_tokens_or_the_owners_choice(daemon: DaemonProcess, token: str,
                                                        tmp_path: Path) -> None:
    owner = read_owner_token(daemon.layout)
    assert owner is not None
    async with session(mcp_url(daemon), owner) as c:  # one vault: the owner needs no ?vault
        ok(await c.call_tool("create_note", {"path": "a.md", "content": "in notes"}))
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.md").write_text("in other")
    run_stet(daemon.home, "init", str(other), "--name", "other")  # the running daemon takes it up
    assert "several vaults" in await connect_error(mcp_url(daemon), owner)
    assert "no vault named" in await connect_error(mcp_url(daemon, "nope"), owner)
    async with session(mcp_url(daemon, "other"), owner) as c:
        assert [n["path"] for n in ok(await c.call_tool("list_notes", {}))["notes"]] == ["b.md"]
        assert c.server_info is not None
        assert c.server_info.title == "Stet notes (other)"
    # an agent token needs no ?vault, and another vault does not exist for it
    async with session(mcp_url(daemon), token) as c:
        assert [n["path"] for n in ok(await c.call_tool("list_notes", {}))["notes"]] == ["a.md"]
    assert "no vault named 'other'" in await connect_error(mcp_url(daemon, "other"), token)  # as if none


# -- stet mcp-config ---------------------------------------------------------------------------


async def test_mcp_config_prints_a_snippet_that_connects(daemon: DaemonProcess) -> None:
    proc = run_stet(daemon.home, "mcp-config", "claude", "--json")
    snippet = json.loads(proc.stdout)
    server = snippet["mcpServers"]["stet-notes"]
    assert server["type"] == "http"
    assert server["url"] == f"{daemon.api_url}/mcp"
    scheme, secret = server["headers"]["Authorization"].split(" ")
    assert scheme == "Bearer"
    assert "shown only here" in proc.stderr.decode()
    async with session(server["url"], secret) as c:
        assert ok(await c.call_tool("append_note", {"path": "by-claude.md", "text": "hi"}))["created"]
    # the secret is not stored: asking again without it is refused, with it the same snippet
    again = run_stet(daemon.home, "mcp-config", "claude", check=False)
    assert again.returncode == 1
    assert "--token" in again.stderr.decode()
    assert "Traceback" not in again.stderr.decode()
    same = run_stet(daemon.home, "mcp-config", "claude", "--token", secret, "--json")
    assert json.loads(same.stdout) == snippet
    human = run_stet(daemon.home, "mcp-config", "reader", "--read", "**").stdout.decode()
    assert "claude mcp add --transport http stet-notes" in human
    reader = human.split("Bearer ")[1].split('"')[0]
    async with session(server["url"], reader) as c:
        # made by append_note: it ends its last line (issue 34)
        assert ok(await c.call_tool("read_note", {"path": "by-claude.md"}))["content"] == "hi\n"
        await refused(c, "append_note", {"path": "by-claude.md", "text": "no"}, "forbidden")


# -- HTTP and JSON-RPC edges (raw requests) ---------------------------------------------------


def post(daemon: DaemonProcess, body: Any, *, token: str | None, method: str = "POST",
         headers: dict[str, str] | None = None, raw: bytes | None = None) -> tuple[int, Any, dict[str, str]]:
    url = urllib.parse.urlsplit(daemon.api_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    try:
        conn.request(method, "/mcp", body=data, headers=sent)
        resp = conn.getresponse()
        payload = resp.read()
        answer_headers = {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()
    assert resp.status != 500
    assert "access-control-allow-origin" not in answer_headers
    return resp.status, (json.loads(payload) if payload else None), answer_headers


def rpc(method: str, params: Any = None, msg_id: Any = 1) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": msg_id}
    if params is not None:
        msg["params"] = params
    return msg


def test_browser_safety_and_auth_on_mcp(daemon: DaemonProcess, token: str) -> None:
    init = rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "t", "version": "0"}})
    port = urllib.parse.urlsplit(daemon.api_url).port
    status, body, _ = post(daemon, init, token=token, headers={"Origin": "http://evil.example"})
    assert (status, body["error"]["code"]) == (403, "forbidden")
    status, _, _ = post(daemon, init, token=token, headers={"Origin": f"http://localhost:{port + 1}"})
    assert status == 403
    status, body, _ = post(daemon, init, token=token, headers={"Host": f"evil.example:{port}"})
    assert status == 421
    status, body, _ = post(daemon, init, token=None)
    assert (status, body["error"]["code"]) == (401, "unauthorized")
    status, body, _ = post(daemon, init, token="stet_not-a-token")
    assert status == 401
    # a session id is never a credential: none is issued, and one sent does not replace the token
    status, body, headers = post(daemon, init, token=token, headers={"Origin": f"http://127.0.0.1:{port}"})
    assert status == 200
    assert body["result"]["protocolVersion"] == "2025-06-18"
    assert "mcp-session-id" not in headers
    status, _, _ = post(daemon, rpc("tools/list"), token=None, headers={"Mcp-Session-Id": "anything"})
    assert status == 401


def test_json_rpc_edges(daemon: DaemonProcess, token: str) -> None:
    def call(body: Any, **kw: Any) -> tuple[int, Any]:
        status, answer, _ = post(daemon, body, token=token, **kw)
        return status, answer

    status, body = call(rpc("initialize", {"protocolVersion": "1999-01-01", "capabilities": {},
                                           "clientInfo": {"name": "t", "version": "0"}}))
    assert body["result"]["protocolVersion"] == "2025-11-25"  # ours, when the client's is unknown
    assert call(rpc("ping", msg_id="p1")) == (200, {"jsonrpc": "2.0", "id": "p1", "result": {}})
    assert call({"jsonrpc": "2.0", "method": "notifications/initialized"}) == (202, None)
    status, body = call(rpc("server/discover", {"_meta": {}}), headers={"MCP-Protocol-Version": "2026-07-28"})
    assert (status, body["error"]["code"]) == (400, -32602)  # the 2026-07-28 envelope needs its _meta
    status, body = call(rpc("resources/subscribe", {"uri": "stet://notes/a.md"}))
    assert (body["id"], body["error"]["code"]) == (1, -32601)  # no sessions: subscriptions/listen only
    status, body = call(None, raw=b"{not json")
    assert (status, body["error"]["code"], body["id"]) == (400, -32700, None)
    status, body = call({"method": "ping", "id": 1})
    assert (status, body["error"]["code"]) == (400, -32600)
    status, body = call(rpc("tools/list"), headers={"MCP-Protocol-Version": "2030-01-01"})
    assert (status, body["error"]["code"]) == (400, -32600)
    status, body = call(rpc("tools/call", {"name": "list_notes", "arguments": "nope"}))
    assert body["result"]["isError"] is True
    assert body["result"]["structuredContent"]["error"]["code"] == "bad_request"
    status, body = call(rpc("tools/call", ["not", "an", "object"]))
    assert body["error"]["code"] == -32602
    status, body = call(None, raw=b'{"jsonrpc": "2.0", "method": "ping", "id": 1}',
                        headers={"Content-Type": "text/plain"})
    assert status == 415
    status, body = call([rpc("ping", msg_id=1), {"jsonrpc": "2.0", "method": "notifications/x"},
                         rpc("tools/list", msg_id=2)])
    assert status == 200
    assert [m["id"] for m in body] == [1, 2]
    assert len(body[1]["result"]["tools"]) == len(SPEC_TOOLS)
    # malformed input of every shape: a 4xx or a JSON-RPC/tool error, never a 500 (checked in post())
    for raw in (b"[" * 100_000, b"\xff\xfe{", b"null", b'"text"', b"[[]]", b"[]", b"{}", b"1e999999"):
        status, body = call(None, raw=raw)
        assert 400 <= status < 500 or status == 200, (raw[:20], status, body)
    for weird in ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}, rpc("ping", msg_id=True),
                  rpc("tools/call", {"name": 7}), rpc("tools/call", {"name": "edit_note",
                                                                     "arguments": {"path": 5, "edits": [1]}}),
                  rpc("tools/call", {"name": "edit_note", "arguments": {"path": "a.md", "edits": [1]}}),
                  rpc("tools/call", {"name": "list_notes", "arguments": {"limit": 1e400, "prefix": ["x"]}}),
                  rpc("initialize", {"protocolVersion": 2025}), rpc("initialize", None)):
        status, body = call(weird)
        assert status < 500, (weird, body)
    for method in ("GET", "DELETE"):
        status, body, headers = post(daemon, None, token=token, method=method)
        assert status == 405
        assert headers["allow"] == "POST"
