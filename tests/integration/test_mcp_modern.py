"""MCP 2026-07-28 beside the handshake versions (issue 34 items 1 and 2), against a real
daemon, through the official ``mcp`` SDK client (pinned to 2026-07-28, ``auto``, and
``legacy``) and raw HTTP for the wire edges: ``server/discover``, the per-request envelope
and its headers, results stamped as the spec requires (checked by the SDK's schema-exact
2026-07-28 models), resources (paged, scoped, non-ASCII paths in URIs, text and blob
reads), ``subscriptions/listen`` (a scoped token hears nothing of notes it cannot read),
prompts, completions, ``WWW-Authenticate`` on a 401, and batches only where allowed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp_types import BlobResourceContents, TextResourceContents
from mcp_types.methods import validate_server_result

from stet.client.daemon_link import read_owner_token
from tests.harness import DaemonProcess, run_stet
from tests.integration.agent_support import make_token, owner_agent

MODERN = "2026-07-28"
SEEN = ("会议/数据库 迁移.md", "Заметки/план работ.md", "ملاحظات/خطة العمل.md", "with space/a b.md",
        "plain.md")
HIDDEN = ("secret/plan.md", "secret/数据库.md")
BIG = 8 * 1024 * 1024 + 2  # past resources/read's inline limit (8 MiB)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
READ_SCOPE = ("会议/**", "Заметки/**", "ملاحظات/**", "with space/**", "plain.md", "img/**", "new/**")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("mcpmodern")
    home, vault = root / "home", root / "vault"
    home.mkdir()
    vault.mkdir()
    (vault / "img").mkdir()
    (vault / "img" / "pic.png").write_bytes(PNG)
    (vault / "secret").mkdir()
    (vault / "secret" / "photo.png").write_bytes(PNG)
    (vault / "large").mkdir()  # not in the scoped token's read scope
    (vault / "large" / "video.bin").write_bytes(b"\x00\x01" * (BIG // 2))
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    d = DaemonProcess(home)
    try:
        d.start()
        owner = owner_agent(d)
        for path in (*SEEN, *HIDDEN):
            owner.ok(owner.create(path, f"# {path}\n\nText of {path}.\n"))
        for i in range(130):  # more than one resources/list page (100)
            owner.ok(owner.create(f"many/n{i:03}.md", f"note {i}\n"))
        owner.close()
        yield d
        assert d.stop() == 0, d.log_tail()
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.kill9()


@pytest.fixture(scope="module")
def scoped(daemon: DaemonProcess) -> str:
    return make_token(daemon.home, "scoped", read=READ_SCOPE, append=("**",))


@pytest.fixture(scope="module")
def owner(daemon: DaemonProcess) -> str:
    token = read_owner_token(daemon.layout)
    assert token is not None
    return token


@contextlib.asynccontextmanager
async def connect(daemon: DaemonProcess, token: str, mode: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(f"{daemon.api_url}/mcp", http_client=http),
                            mode=mode) as client:
        yield client


def uri(path: str) -> str:
    return "stet://notes/" + "/".join(urllib.parse.quote(s, safe="") for s in path.split("/"))


async def all_resources(client: Client) -> list[Any]:
    out: list[Any] = []
    cursor: str | None = None
    for _ in range(50):  # bounded: 140 resources are 2 pages
        page = await client.list_resources(cursor=cursor)
        out += page.resources
        cursor = page.next_cursor
        if cursor is None:
            return out
    raise AssertionError("resources/list never ended")


# -- the eras -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [MODERN, "auto"])
async def test_modern_client_discovers_and_works(daemon: DaemonProcess, scoped: str, mode: str) -> None:
    async with connect(daemon, scoped, mode) as client:
        assert client.protocol_version == MODERN
        if mode == "auto":  # a pinned client skips server/discover (it assumes the version)
            caps = client.server_capabilities
            assert caps.resources is not None
            assert caps.resources.subscribe is True
            assert caps.prompts is not None
            assert caps.completions is not None
            assert client.server_info is not None
            assert client.server_info.name == "stet"
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"read_note", "append_note", "list_notes"} <= tools
        result = await client.call_tool("read_note", {"path": "会议/数据库 迁移.md"})
        assert not result.is_error, result
        assert result.structured_content is not None
        assert "Text of 会议/数据库 迁移.md" in result.structured_content["content"]


async def test_legacy_client_gets_handshake_and_no_subscribe(daemon: DaemonProcess, scoped: str) -> None:
    async with connect(daemon, scoped, "legacy") as client:
        assert client.protocol_version == "2025-11-25"
        caps = client.server_capabilities
        assert caps.resources is not None
        assert not caps.resources.subscribe  # no session, no stream: only subscriptions/listen
        names = {r.name for r in await all_resources(client)}
        assert set(SEEN) <= names


# -- resources ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [MODERN, "legacy"])
async def test_resources_are_scoped_and_non_ascii_uris_round_trip(daemon: DaemonProcess, scoped: str,
                                                                  mode: str) -> None:
    async with connect(daemon, scoped, mode) as client:
        listed = await all_resources(client)
        names = [r.name for r in listed]
        assert sorted(names) == sorted([*SEEN, "img/pic.png"])  # nothing of secret/, many/
        for r in listed:
            assert str(r.uri) == uri(r.name)
            assert str(r.uri).isascii()
        for path in SEEN:
            got = await client.read_resource(uri(path))
            content = got.contents[0]
            assert isinstance(content, TextResourceContents)
            assert content.text == f"# {path}\n\nText of {path}.\n"
            assert content.mime_type == "text/markdown"
        pic = (await client.read_resource(uri("img/pic.png"))).contents[0]
        assert isinstance(pic, BlobResourceContents)
        assert base64.b64decode(pic.blob) == PNG
        assert pic.mime_type == "image/png"
        for hidden in (*HIDDEN, "secret/photo.png"):
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri(hidden))
            assert caught.value.error.message == f"this token may not read {hidden}"
        with pytest.raises(MCPError) as missing:
            await client.read_resource(uri("with space/missing.md"))
        assert missing.value.error.message == "no note or attachment at with space/missing.md"
        with pytest.raises(MCPError) as other:
            await client.read_resource("stet://other/plain.md")
        assert "serves the vault 'notes'" in other.value.error.message
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["stet://notes/{+path}"]


async def test_an_attachment_past_the_inline_limit_is_refused_with_its_size(daemon: DaemonProcess,
                                                                            owner: str) -> None:
    async with connect(daemon, owner, MODERN) as client:
        with pytest.raises(MCPError) as caught:
            await client.read_resource(uri("large/video.bin"))
    message = caught.value.error.message
    assert message == (f"large/video.bin is {BIG} bytes; resources/read returns at most {8 * 1024 * 1024} "
                       "bytes inline: read it with read_file (a link)"), message


async def test_owner_pages_through_every_note_and_attachment(daemon: DaemonProcess, owner: str) -> None:
    async with connect(daemon, owner, MODERN) as client:
        first = await client.list_resources()
        assert len(first.resources) == 100
        assert first.next_cursor is not None
        names = [r.name for r in await all_resources(client)]
    assert len(names) == len(set(names))
    notes = [n for n in names if n.endswith(".md")]
    assert len(notes) == len(SEEN) + len(HIDDEN) + 130
    assert notes == sorted(notes)
    assert {"img/pic.png", "secret/photo.png"} <= set(names)


async def test_completions_and_prompts_are_scoped(daemon: DaemonProcess, scoped: str) -> None:
    from mcp_types import PromptReference, ResourceTemplateReference

    async with connect(daemon, scoped, MODERN) as client:
        ref = ResourceTemplateReference(type="ref/resource", uri="stet://notes/{+path}")
        done = await client.complete(ref, {"name": "path", "value": "会"})
        assert done.completion.values == ["会议/数据库 迁移.md"]
        assert (await client.complete(ref, {"name": "path", "value": "secret/"})).completion.values == []
        everything = (await client.complete(ref, {"name": "path", "value": ""})).completion.values
        assert sorted(everything) == sorted(SEEN)
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert set(prompts) == {"record_finding", "summarise_changes", "propose_decision_edit"}
        prompt_ref = PromptReference(type="ref/prompt", name="propose_decision_edit")
        assert (await client.complete(prompt_ref, {"name": "path", "value": "Зам"})).completion.values \
            == ["Заметки/план работ.md"]
        got = await client.get_prompt("record_finding", {"finding": "Cache misses double at 10k notes."})
        text = got.messages[0].content.text  # type: ignore[union-attr]
        assert "append_note" in text
        assert "findings.md" in text
        assert "idempotencyKey" in text
        assert "Cache misses double at 10k notes." in text
        with pytest.raises(MCPError) as bad:
            await client.get_prompt("propose_decision_edit", {"path": "decisions/x.md"})
        assert "change is required" in bad.value.error.message


# -- change notifications (subscriptions/listen) --------------------------------------------


async def next_event(sub: Any) -> Any:
    return await asyncio.wait_for(sub.__anext__(), 10.0)


async def test_listen_hears_only_what_the_token_may_read(daemon: DaemonProcess, scoped: str) -> None:
    owner = owner_agent(daemon)
    try:
        async with connect(daemon, scoped, MODERN) as client:
            watched = [uri("plain.md"), uri("secret/plan.md")]
            async with client.listen(resource_subscriptions=watched, resources_list_changed=True) as sub:
                assert sub.honored.resources_list_changed is True
                # Hidden changes first: none may reach this token, so the first event it gets
                # is the visible one made after them.
                owner.ok(owner.append("secret/plan.md", "hidden change"))
                owner.ok(owner.create("secret/new.md", "hidden note\n"))
                owner.ok(owner.append("plain.md", "visible change"))
                event = await next_event(sub)
                assert event == ResourceUpdated(uri=uri("plain.md"))
                owner.ok(owner.create("new/дом.md", "visible note\n"))
                event = await next_event(sub)
                assert event == ResourcesListChanged()
            listed = {r.name for r in await all_resources(client)}
            assert "new/дом.md" in listed
            assert "secret/new.md" not in listed
    finally:
        owner.close()


# -- the wire, raw ----------------------------------------------------------------------------


def post(daemon: DaemonProcess, body: Any, token: str | None, headers: dict[str, str] | None = None,
         path: str = "/mcp") -> tuple[int, Any, dict[str, str]]:
    url = urllib.parse.urlsplit(daemon.api_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent.update(headers or {})
    try:
        conn.request("POST" if body is not None else "GET", path,
                     body=json.dumps(body).encode() if body is not None else None, headers=sent)
        resp = conn.getresponse()
        payload = resp.read()
        answer_headers = {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()
    assert resp.status != 500
    return resp.status, (json.loads(payload) if payload else None), answer_headers


def modern(method: str, params: dict[str, Any] | None = None, msg_id: int = 1,
           version: str = MODERN) -> tuple[dict[str, Any], dict[str, str]]:
    meta = {"io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {**(params or {}), "_meta": meta}}
    return body, {"MCP-Protocol-Version": version, "Mcp-Method": method}


def test_discover_and_results_match_the_2026_schema(daemon: DaemonProcess, scoped: str) -> None:
    body, headers = modern("server/discover")
    status, answer, _ = post(daemon, body, scoped, headers)
    assert status == 200, answer
    result = answer["result"]
    validate_server_result("server/discover", MODERN, result)
    assert result["supportedVersions"][0] == MODERN
    assert "2025-11-25" in result["supportedVersions"]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "stet"
    for method, params in (("tools/list", {}), ("resources/list", {}), ("resources/templates/list", {}),
                           ("prompts/list", {}), ("ping", {}),
                           ("resources/read", {"uri": uri("会议/数据库 迁移.md")}),
                           ("completion/complete", {"ref": {"type": "ref/resource",
                                                            "uri": "stet://notes/{+path}"},
                                                    "argument": {"name": "path", "value": "Зам"}}),
                           ("prompts/get", {"name": "summarise_changes", "arguments": {"since": "0"}}),
                           ("tools/call", {"name": "list_notes", "arguments": {"limit": 2}})):
        body, headers = modern(method, params)
        if method == "resources/read":
            headers["Mcp-Name"] = "=?base64?" + base64.b64encode(params["uri"].encode()).decode() + "?="
        elif "name" in params:
            headers["Mcp-Name"] = params["name"]
        status, answer, _ = post(daemon, body, scoped, headers)
        assert status == 200, (method, answer)
        assert answer["result"]["resultType"] == "complete", method
        if method != "ping":  # an empty result: no surface model for it
            validate_server_result(method, MODERN, answer["result"])


def test_modern_envelope_errors(daemon: DaemonProcess, scoped: str) -> None:
    body, headers = modern("tools/list")
    status, answer, _ = post(daemon, body, scoped, {**headers, "Mcp-Method": "prompts/list"})
    assert (status, answer["error"]["code"]) == (400, -32020)
    body, headers = modern("tools/list", version="2027-01-01")
    status, answer, _ = post(daemon, body, scoped, headers)
    assert (status, answer["error"]["code"]) == (400, -32022)
    assert answer["error"]["data"] == {"supported": [MODERN], "requested": "2027-01-01"}
    body, headers = modern("tools/list")
    del body["params"]["_meta"]
    status, answer, _ = post(daemon, body, scoped, headers)
    assert (status, answer["error"]["code"]) == (400, -32602)
    assert "_meta" in answer["error"]["message"]
    body, headers = modern("resources/subscribe", {"uri": uri("plain.md")})
    status, answer, _ = post(daemon, body, scoped, headers)
    assert (status, answer["error"]["code"]) == (404, -32601)
    body, headers = modern("tools/call", {"name": "read_note", "arguments": {"path": "plain.md"}})
    status, answer, _ = post(daemon, body, scoped, {**headers, "Mcp-Name": "list_notes"})
    assert (status, answer["error"]["code"]) == (400, -32020)
    body, headers = modern("subscriptions/listen", {"notifications": {"resourcesListChanged": True}})
    status, answer, _ = post(daemon, body, scoped, {**headers, "Accept": "application/json"})
    assert status == 406


def test_401_names_the_bearer_scheme_on_mcp_and_rest(daemon: DaemonProcess) -> None:
    body, headers = modern("tools/list")
    for path in ("/mcp", "/v1/vaults/notes/notes"):
        payload = body if path == "/mcp" else None
        status, answer, got = post(daemon, payload, None, headers, path=path)
        assert status == 401
        assert got["www-authenticate"] == 'Bearer realm="stet"'
        assert answer["error"]["code"] == "unauthorized"
        status, _, got = post(daemon, payload, "stet_wrong", headers, path=path)
        assert status == 401
        assert got["www-authenticate"].startswith('Bearer realm="stet", error="invalid_token"')


def test_batches_only_where_the_version_has_them(daemon: DaemonProcess, scoped: str) -> None:
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
    for version in ("2025-06-18", "2025-11-25", MODERN):
        status, answer, _ = post(daemon, batch, scoped, {"MCP-Protocol-Version": version})
        assert (status, answer["error"]["code"]) == (400, -32600), version
        assert "batches are not part of MCP" in answer["error"]["message"]
    for extra in ({"MCP-Protocol-Version": "2025-03-26"}, {}):  # no header: 2025-03-26
        status, answer, _ = post(daemon, batch, scoped, extra)
        assert status == 200
        assert [m["id"] for m in answer] == [1, 2]


def test_a_listen_stream_ends_when_its_token_is_revoked(daemon: DaemonProcess) -> None:
    """A revoked token's stream stops (its credential ended): the listen result closes it."""
    token = make_token(daemon.home, "revoked-listen", read=("**",))
    body, headers = modern("subscriptions/listen", {"notifications": {"resourcesListChanged": True}}, 7)
    url = urllib.parse.urlsplit(daemon.api_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    try:
        conn.request("POST", "/mcp", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}",
                              "Accept": "application/json, text/event-stream", **headers})
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Type") == "text/event-stream"
        first = _sse_message(resp)
        assert first["method"] == "notifications/subscriptions/acknowledged"
        assert first["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 7
        run_stet(daemon.home, "token", "revoke", "revoked-listen")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            message = _sse_message(resp)
            if "id" in message:
                assert message["result"]["resultType"] == "complete"
                break
        else:
            raise AssertionError("the stream did not end after the revoke")
    finally:
        conn.close()


def _sse_message(resp: http.client.HTTPResponse) -> dict[str, Any]:
    for _ in range(100):
        line = resp.readline()
        assert line, "the stream ended"
        if line.startswith(b"data: "):
            message: dict[str, Any] = json.loads(line[6:])
            return message
    raise AssertionError("no SSE message")
