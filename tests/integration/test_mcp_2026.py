"""Issue 34 items 1-2 against a real daemon, through the official ``mcp`` SDK client: MCP
2026-07-28 (``server/discover``, the ``_meta`` envelope, ``resultType``/``ttlMs``) pinned and
in ``auto`` mode beside the handshake era; resources (notes and attachments, non-ASCII
paths, paged, scoped), ``subscriptions/listen``, prompts and completions; and the HTTP
edges with raw requests: ``WWW-Authenticate`` on a 401, batches only where the version has
them, the 2026-07-28 error codes.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.subscriptions import ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference, ResourceTemplateReference

from tests.harness import DaemonProcess, wait_until
from tests.integration.test_mcp import call, make_token, mcp_url, post, rpc, session

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
                       "AAAABJRU5ErkJggg==")
ODD_NOTES = {  # a path in each script the issue names, and spaces
    "项目/数据库迁移计划.md": "我们讨论了数据库迁移计划\n",
    "заметки/план работ.md": "План работ на неделю\n",
    "ملاحظات/خطة.md": "خطة العمل\n",
    "with spaces/a note #1.md": "spaces and a hash\n",
}
BULK = 620  # more than one resources/list page (500)
MODERN = "2026-07-28"
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {}}


@pytest.fixture
def vault_dir(tmp_path: Path) -> Path:
    """The vault, filled before the daemon starts (it imports them): odd names, an
    attachment, and enough notes for several pages."""
    v = tmp_path / "vault"
    for rel, text in ODD_NOTES.items():
        (v / rel).parent.mkdir(parents=True, exist_ok=True)
        (v / rel).write_text(text)
    (v / "bulk").mkdir(parents=True)
    for i in range(BULK):
        (v / "bulk" / f"n{i:04}.md").write_text(f"note {i}\n")
    (v / "img").mkdir()
    (v / "img" / "пиксель.png").write_bytes(PNG)
    (v / "secret").mkdir()
    (v / "secret" / "plan.md").write_text("the secret plan\n")
    return v


def wait_imported(daemon: DaemonProcess, count: int) -> None:
    def imported() -> bool:
        notes = daemon.client.request("GET", "/v1/vaults/notes/notes", query={"limit": 10000})["notes"]
        return len(notes) >= count

    wait_until(imported, timeout=60, what=f"the import of {count} notes")


def uri(path: str) -> str:
    return "stet://notes/" + urllib.parse.quote(path, safe="/")


async def all_resources(client: Any) -> tuple[list[Any], int]:
    found, cursor = [], None
    for pages in range(1, 101):
        page = await client.list_resources(cursor=cursor)
        found += page.resources
        cursor = page.next_cursor
        if not cursor:
            return found, pages
    raise AssertionError("resources/list never ended")


# -- the era: 2026-07-28 pinned and in auto mode, the handshake still served ---------------------


@pytest.mark.parametrize("mode", [MODERN, "auto", "legacy"])
async def test_each_mode_connects_at_its_version_and_works(daemon: DaemonProcess, mode: str) -> None:
    token = make_token(daemon, "agent")
    async with session(mcp_url(daemon), token, mode=mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else MODERN)
        # pinned, the SDK skips the probe: ask server/discover for what the server declares
        caps = client.server_capabilities
        if mode == MODERN:
            discovered = await client.session.send_discover(MODERN)
            caps = types.DiscoverResult.model_validate(discovered).capabilities
        assert caps.tools is not None
        assert caps.prompts is not None
        assert caps.completions is not None
        assert caps.resources is not None
        # change notifications only where a stream carries them (subscriptions/listen)
        assert caps.resources.subscribe is (mode != "legacy")
        await call(client, "append_note", path="log.md", text="- one\n", idempotencyKey=f"k-{mode}")
        read = await call(client, "read_note", path="log.md")
        assert read["content"] == "- one\n"
        assert {t.name for t in (await client.list_tools()).tools} >= {"read_note", "append_note"}


def test_discover_and_2026_results_carry_what_the_spec_requires(daemon: DaemonProcess) -> None:
    token = make_token(daemon, "agent")
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover"}
    status, body, _ = post(daemon, rpc("server/discover", {"_meta": ENVELOPE}), token=token, headers=headers)
    assert status == 200, body
    result = body["result"]
    assert result["supportedVersions"][0] == MODERN
    assert "2025-11-25" in result["supportedVersions"]
    assert (result["resultType"], result["cacheScope"]) == ("complete", "private")
    assert isinstance(result["ttlMs"], int)
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "stet"
    assert result["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}
    # every result says its resultType; lists and reads their time to live
    headers["Mcp-Method"] = "tools/list"
    _, body, _ = post(daemon, rpc("tools/list", {"_meta": ENVELOPE}), token=token, headers=headers)
    assert body["result"]["resultType"] == "complete"
    assert "ttlMs" in body["result"]
    # the envelope's faults, each with the spec's code and status
    cases = [
        ({"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}, rpc("tools/list", {}), 400, -32602),
        ({"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"}, rpc("tools/list", {"_meta": ENVELOPE}),
         400, -32020),
        ({"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"},
         rpc("tools/list", {"_meta": {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2025-11-25"}}),
         400, -32020),
        ({"MCP-Protocol-Version": MODERN, "Mcp-Method": "initialize"},
         rpc("initialize", {"_meta": ENVELOPE, "protocolVersion": MODERN}), 404, -32601),
        ({"MCP-Protocol-Version": MODERN, "Mcp-Method": "resources/read", "Mcp-Name": "stet://notes/other.md"},
         rpc("resources/read", {"_meta": ENVELOPE, "uri": "stet://notes/log.md"}), 400, -32020),
    ]
    for sent, message, want_status, want_code in cases:
        status, body, _ = post(daemon, message, token=token, headers=sent)
        assert (status, body["error"]["code"]) == (want_status, want_code), (sent, message, body)
    status, body, _ = post(daemon, rpc("tools/list"), token=token,
                           headers={"MCP-Protocol-Version": "2030-01-01"})
    assert (status, body["error"]["code"]) == (400, -32022)
    assert MODERN in body["error"]["data"]["supported"]


def test_batches_only_where_the_version_has_them(daemon: DaemonProcess) -> None:
    token = make_token(daemon, "agent")
    batch = [rpc("ping", msg_id=1), rpc("tools/list", msg_id=2)]
    for version in (None, "2025-03-26", "2024-11-05"):
        status, body, _ = post(daemon, batch, token=token,
                               headers={"MCP-Protocol-Version": version} if version else {})
        assert status == 200, (version, body)
        assert [m["id"] for m in body] == [1, 2]
    for version in ("2025-06-18", "2025-11-25", MODERN):
        status, body, _ = post(daemon, batch, token=token, headers={"MCP-Protocol-Version": version})
        assert status == 400, (version, body)
        assert body["error"]["code"] == -32600
        assert "batch" in body["error"]["message"].lower()


def test_a_401_names_the_bearer_scheme_on_mcp_and_rest(daemon: DaemonProcess) -> None:
    status, body, headers = post(daemon, rpc("tools/list"), token=None)
    assert status == 401
    assert headers["www-authenticate"] == 'Bearer realm="stet"'
    status, body, headers = post(daemon, rpc("tools/list"), token="stet_not-a-token")
    assert status == 401
    assert headers["www-authenticate"].startswith('Bearer realm="stet", error="invalid_token"')
    import http.client

    url = urllib.parse.urlsplit(daemon.api_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    try:
        conn.request("GET", "/v1/vaults/notes/notes")
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 401
        assert resp.getheader("WWW-Authenticate") == 'Bearer realm="stet"'
    finally:
        conn.close()


# -- resources ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [MODERN, "legacy"])
async def test_every_note_and_attachment_is_a_resource_by_a_percent_encoded_uri(daemon: DaemonProcess,
                                                                               mode: str) -> None:
    total = len(ODD_NOTES) + BULK + 1
    wait_imported(daemon, total)
    token = make_token(daemon, "agent")
    async with session(mcp_url(daemon), token, mode=mode) as client:
        found, pages = await all_resources(client)
        assert pages >= 2  # paged: 620+ resources do not come in one answer
        uris = [r.uri for r in found]
        assert len(uris) == len(set(uris)) == total + 1  # every note and the attachment, once
        for path in ODD_NOTES:
            assert uri(path) in uris, path
            assert all(ord(c) < 128 for c in uri(path))  # percent-encoded
        assert uri("img/пиксель.png") in uris
        by_uri = {r.uri: r for r in found}
        assert by_uri[uri("项目/数据库迁移计划.md")].name == "项目/数据库迁移计划.md"
        assert by_uri[uri("img/пиксель.png")].mime_type == "image/png"
        for path, text in ODD_NOTES.items():
            read = await client.read_resource(uri(path))
            assert read.contents[0].text == text  # type: ignore[union-attr]
            assert read.contents[0].uri == uri(path)
        blob = (await client.read_resource(uri("img/пиксель.png"))).contents[0]
        assert base64.b64decode(blob.blob) == PNG  # type: ignore[union-attr]
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["stet://notes/{+path}"]
        with pytest.raises(MCPError) as missing:
            await client.read_resource(uri("nowhere.md"))
        assert "nowhere.md" in missing.value.error.message
        with pytest.raises(MCPError) as other_vault:
            await client.read_resource("stet://elsewhere/a.md")
        assert "notes" in other_vault.value.error.message


async def test_a_scoped_token_lists_reads_and_hears_nothing_outside_its_scope(daemon: DaemonProcess) -> None:
    wait_imported(daemon, len(ODD_NOTES) + BULK + 1)
    owner = make_token(daemon, "owner-agent")
    scoped = make_token(daemon, "scoped", {"read": ["bulk/**", "项目/**"], "write": [], "append": []})
    async with session(mcp_url(daemon), scoped, mode=MODERN) as client:
        found, _ = await all_resources(client)
        paths = {r.name for r in found}
        assert paths == {f"bulk/n{i:04}.md" for i in range(BULK)} | {"项目/数据库迁移计划.md"}
        with pytest.raises(MCPError) as refused:
            await client.read_resource(uri("secret/plan.md"))
        assert refused.value.error.data["error"]["code"] == "forbidden"  # type: ignore[index]
        completions = await client.complete(ResourceTemplateReference(type="ref/resource",
                                                                      uri="stet://notes/{+path}"),
                                            {"name": "path", "value": "se"})
        assert completions.completion.values == []
        async with client.listen(resource_subscriptions=[uri("secret/plan.md"), uri("bulk/n0001.md")],
                                 resources_list_changed=True) as sub:
            assert sub.honored is not None
            assert sub.honored.resource_subscriptions == [uri("bulk/n0001.md")]
            async with session(mcp_url(daemon), owner, mode=MODERN) as writer:
                await call(writer, "append_note", path="secret/plan.md", text="more\n")
                await call(writer, "append_note", path="bulk/n0001.md", text="more\n")
            with anyio.fail_after(10):
                event = await sub.__anext__()
            assert event == ResourceUpdated(uri=uri("bulk/n0001.md"))  # the secret write came first, unheard


async def test_listen_hears_updates_of_a_note_and_of_a_folder(daemon: DaemonProcess) -> None:
    token = make_token(daemon, "agent")
    watched = [uri("项目/数据库迁移计划.md"), "stet://notes/заметки/"]
    async with session(mcp_url(daemon), token, mode=MODERN) as client, \
            client.listen(resource_subscriptions=watched) as sub:
        await call(client, "append_note", path="项目/数据库迁移计划.md", text="第二行\n")
        with anyio.fail_after(10):
            assert await sub.__anext__() == ResourceUpdated(uri=uri("项目/数据库迁移计划.md"))
        await call(client, "create_note", path="заметки/новая.md", content="x\n")
        with anyio.fail_after(10):
            assert await sub.__anext__() == ResourceUpdated(uri=uri("заметки/новая.md"))


async def test_subscribing_is_refused_cleanly_in_the_handshake_era(daemon: DaemonProcess) -> None:
    token = make_token(daemon, "agent")
    status, body, _ = post(daemon, rpc("resources/subscribe", {"uri": uri("bulk/n0001.md")}), token=token,
                           headers={"MCP-Protocol-Version": "2025-11-25"})
    assert body["error"]["code"] == -32601
    assert "subscriptions/listen" in body["error"]["message"]


# -- prompts and completions -------------------------------------------------------------------


async def test_prompts_follow_the_layout_and_completions_offer_readable_paths(daemon: DaemonProcess) -> None:
    token = make_token(daemon, "agent")
    async with session(mcp_url(daemon), token, mode=MODERN) as client:
        await call(client, "create_note", path="decisions.md", content="# Decisions\n- use SQLite\n")
        names = {p.name for p in (await client.list_prompts()).prompts}
        assert names == {"record_finding", "summarise_changes", "propose_decision_edit"}
        finding = await client.get_prompt("record_finding", {"topic": "latency", "finding": "p50 is 2 ms"})
        text = finding.messages[0].content.text  # type: ignore[union-attr]
        assert "append_note" in text
        assert "idempotencyKey" in text
        assert "p50 is 2 ms" in text
        changes = await client.get_prompt("summarise_changes", {"since": "2000-01-01T00:00:00Z"})
        assert "decisions.md" in changes.messages[0].content.text  # type: ignore[union-attr]
        proposal = await client.get_prompt("propose_decision_edit", {"change": "use Postgres"})
        embedded = proposal.messages[0].content.resource  # type: ignore[union-attr]
        assert embedded.text == "# Decisions\n- use SQLite\n"
        assert "do not change it yourself" in proposal.messages[1].content.text  # type: ignore[union-attr]
        with pytest.raises(MCPError):
            await client.get_prompt("summarise_changes", {"since": "not a time"})
        done = await client.complete(ResourceTemplateReference(type="ref/resource", uri="stet://notes/{+path}"),
                                     {"name": "path", "value": "项目/"})
        assert done.completion.values == ["项目/数据库迁移计划.md"]
        done = await client.complete(PromptReference(type="ref/prompt", name="propose_decision_edit"),
                                     {"name": "path", "value": "dec"})
        assert done.completion.values == ["decisions.md"]
        many = await client.complete(ResourceTemplateReference(type="ref/resource", uri="stet://notes/{+path}"),
                                     {"name": "path", "value": "bulk/"})
        assert len(many.completion.values) == 100
        assert many.completion.has_more


def test_raw_2026_read_of_a_non_ascii_uri_with_the_name_header(daemon: DaemonProcess) -> None:
    token = make_token(daemon, "agent")
    raw_uri = "stet://notes/ملاحظات/خطة.md"  # not percent-encoded: decoded the same
    name = "=?base64?" + base64.b64encode(raw_uri.encode()).decode() + "?="
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "resources/read", "Mcp-Name": name}
    status, body, _ = post(daemon, rpc("resources/read", {"_meta": ENVELOPE, "uri": raw_uri}), token=token,
                           headers=headers)
    assert status == 200, body
    assert body["result"]["contents"][0]["text"] == "خطة العمل\n"
    assert body["result"]["resultType"] == "complete"
    assert json.dumps(body)  # plain JSON all through
