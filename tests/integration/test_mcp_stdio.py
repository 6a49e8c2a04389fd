"""``stet mcp --stdio`` (SPEC §6.11): the official MCP SDK's *stdio* client spawns the real
command, which proxies to a real daemon's ``/mcp``. And ``stet mcp-config --client``: each
client's own configuration shape, the Claude Desktop one spawned exactly as printed.

Issue 13 item 9: clients that only spawn stdio servers (Claude Desktop) could not use the
daemon, and ``stet mcp-config`` printed one shape for every client.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.harness import DaemonProcess, env_for, run_stet
from tests.integration.test_mcp import SPEC_TOOLS, call, make_token, ok, refused


def messages(exc: BaseException) -> str:
    """Every MCPError message inside ``exc`` (which may be an exception group)."""
    if isinstance(exc, BaseExceptionGroup):
        return " | ".join(messages(e) for e in exc.exceptions)
    return str(exc) if isinstance(exc, MCPError) else ""


def bridge(home: Path, *extra: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "stet.client", "--home", str(home), "mcp", "--stdio", *extra],
                                 env=env or env_for(home))


async def test_the_sdk_stdio_client_lists_reads_appends_and_is_refused(daemon: DaemonProcess,
                                                                       tmp_path: Path) -> None:
    daemon.client.request("POST", "/v1/vaults/notes/notes/shared/plan.md", {"content": "# Plan\n"})
    secret = make_token(daemon, "desk", {"read": ["**"], "append": ["shared/**"], "write": ["agents/**"]})
    token_file = tmp_path / "token"
    token_file.write_text(secret + "\n")
    async with Client(bridge(daemon.home, "--token-file", str(token_file))) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools == set(SPEC_TOOLS)
        note = await call(client, "read_note", path="shared/plan.md")
        assert note["content"] == "# Plan\n"
        first = await call(client, "append_note", path="shared/plan.md", text="- found X",
                           idempotencyKey="k-1")
        again = await call(client, "append_note", path="shared/plan.md", text="- found X",
                           idempotencyKey="k-1")
        assert again["revision"] == first["revision"]
        assert again.get("replayed") is True
        assert (await call(client, "read_note", path="shared/plan.md"))["content"] == "# Plan\n- found X"
        await refused(client, "create_note", {"path": "shared/new.md", "content": "x"}, "forbidden")
        await refused(client, "update_note", {"path": "shared/plan.md", "content": "gone"}, "forbidden")
        ok(await client.call_tool("create_note", {"path": "agents/desk/a.md", "content": "mine\n"}))
    assert daemon.client.read_note("notes", "shared/plan.md")["content"] == "# Plan\n- found X"
    assert daemon.client.read_note("notes", "agents/desk/a.md")["content"] == "mine\n"


async def test_a_bad_token_and_a_stopped_daemon_are_errors_not_a_dead_bridge(daemon: DaemonProcess) -> None:
    env = dict(env_for(daemon.home), STET_TOKEN="stet_not-a-real-token")
    # The SDK raises it inside an exception group.
    with pytest.raises(BaseException, match=".") as info:  # noqa: PT011
        async with Client(bridge(daemon.home, env=env)):
            pass
    assert "the token is not valid" in messages(info.value)
    env["STET_TOKEN"] = make_token(daemon, "desk", {"read": ["**"], "write": ["**"]})
    async with Client(bridge(daemon.home, env=env)) as client:
        await call(client, "create_note", path="a.md", content="a\n")
        daemon.stop()
        with pytest.raises(MCPError, match="stet start"):
            await client.call_tool("read_note", {"path": "a.md"})
        daemon.start()  # on a new port: the bridge finds it again
        assert (await call(client, "read_note", path="a.md"))["content"] == "a\n"


def test_stdio_needs_a_token_and_says_how(daemon: DaemonProcess, tmp_path: Path) -> None:
    proc = run_stet(daemon.home, "mcp", "--stdio", check=False)
    assert proc.returncode == 1
    assert "--token-file" in proc.stderr.decode()
    assert "STET_TOKEN" in proc.stderr.decode()
    empty = tmp_path / "empty"
    empty.write_text("\n")
    proc = run_stet(daemon.home, "mcp", "--stdio", "--token-file", str(empty), check=False)
    assert "is empty" in proc.stderr.decode()
    assert "--stdio" in run_stet(daemon.home, "mcp", check=False).stderr.decode()


async def test_the_claude_desktop_config_runs_as_printed(daemon: DaemonProcess) -> None:
    proc = run_stet(daemon.home, "mcp-config", "desk", "--client", "claude-desktop")
    config = json.loads(proc.stdout)
    (name, server), = config["mcpServers"].items()
    assert name == "stet-notes"
    assert set(server) == {"command", "args", "env"}
    assert Path(server["command"]).is_absolute()
    assert server["args"][-2:] == ["mcp", "--stdio"]
    assert "claude_desktop_config.json" in proc.stderr.decode()
    env = dict(env_for(daemon.home), **server["env"])
    spawn = StdioServerParameters(command=server["command"], args=server["args"], env=env)
    async with Client(spawn) as client:
        ok(await client.call_tool("create_note", {"path": "from-desktop.md", "content": "hi\n"}))
    assert daemon.client.read_note("notes", "from-desktop.md")["content"] == "hi\n"


def test_each_client_gets_its_own_shape(daemon: DaemonProcess) -> None:
    url = f"{daemon.api_url}/mcp"

    def config(client: str, name: str) -> tuple[dict[str, object], str]:
        proc = run_stet(daemon.home, "mcp-config", name, "--client", client)
        return json.loads(proc.stdout), proc.stderr.decode()

    code, hint = config("claude-code", "cc")
    entry = code["mcpServers"]["stet-notes"]  # type: ignore[index]
    assert entry["type"] == "http"
    assert entry["url"] == url
    assert entry["headers"]["Authorization"].startswith("Bearer stet_")
    assert "claude mcp add --transport http stet-notes" in hint

    cursor, hint = config("cursor", "cur")
    entry = cursor["mcpServers"]["stet-notes"]  # type: ignore[index]
    assert set(entry) == {"url", "headers"}
    assert entry["url"] == url
    assert ".cursor/mcp.json" in hint

    vscode, hint = config("vscode", "vs")
    assert set(vscode) == {"inputs", "servers"}
    entry = vscode["servers"]["stet-notes"]  # type: ignore[index]
    assert entry["type"] == "http"
    assert entry["headers"]["Authorization"] == "Bearer ${input:stet-notes-token}"
    (prompt,) = vscode["inputs"]  # type: ignore[misc]
    assert prompt == {"type": "promptString", "id": "stet-notes-token", "password": True,
                      "description": "Stet agent token for stet-notes"}
    assert "stet_" in hint  # the secret to paste when VS Code asks, shown once

    plain, _ = config("json", "js")
    assert plain["mcpServers"]["stet-notes"]["type"] == "http"  # type: ignore[index]
    bad = run_stet(daemon.home, "mcp-config", "x", "--client", "emacs", check=False)
    assert bad.returncode == 2
    assert "claude-desktop" in bad.stderr.decode()
