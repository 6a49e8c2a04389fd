"""The MCP Inspector's CLI (npm ``@modelcontextprotocol/inspector``) against a real daemon
(SPEC §6.11: "must work with ... the MCP Inspector").

The Inspector is installed once per machine into ``~/.cache/stet-test-inspector/<version>``
(outside the repo; a file lock keeps parallel runs from installing it twice). Its version
is pinned: on Node 20 a bare ``npx @modelcontextprotocol/inspector`` resolves to 0.15.0
(npm prefers releases whose ``engines`` match, and 0.16+ ask for Node 22), whose CLI has
no ``--header`` and so cannot send a bearer token; 2.12.0 runs fine on Node 20 for the CLI.
Skipped only when node or npm is not installed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stet.sync.home import HomeLayout, HomeRegistry
from tests.harness import DaemonProcess

INSPECTOR_VERSION = "2.12.0"
SPEC_TOOLS = {"list_notes", "read_note", "search_notes", "create_note", "append_note", "edit_note",
              "update_note", "delete_note", "move_note", "list_versions", "read_version",
              "restore_version", "recent_changes", "open_snapshot", "list_files", "read_file",
              "edit_section", "edit_frontmatter", "tick_task", "note_links", "build_context"}


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stet-test-inspector"


def inspector_command() -> list[str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run the MCP Inspector CLI")
    prefix = _cache_root() / INSPECTOR_VERSION
    manifest = prefix / "node_modules" / "@modelcontextprotocol" / "inspector" / "package.json"
    prefix.mkdir(parents=True, exist_ok=True)
    with open(_cache_root() / "install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held by at most one bounded npm install
        if not manifest.exists() or json.loads(manifest.read_text())["version"] != INSPECTOR_VERSION:
            proc = subprocess.run(
                [npm, "install", "--prefix", str(prefix), "--no-save", "--no-audit", "--no-fund",
                 f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"],
                capture_output=True, text=True, timeout=100,
            )
            assert proc.returncode == 0, f"npm install of the MCP Inspector failed:\n{proc.stderr[-3000:]}"
    launcher = (prefix / "node_modules" / ".bin" / "mcp-inspector").resolve()
    assert launcher.exists(), launcher
    return [node, str(launcher), "--cli"]


def run_inspector(tmp_path: Path, url: str, token: str, *args: str) -> tuple[int, Any, str]:
    env = dict(os.environ)
    env["HOME"] = str(tmp_path / "inspector-home")  # its catalog and storage stay in the test's dir
    env["MCP_AUTO_OPEN_ENABLED"] = "false"
    proc = subprocess.run(
        [*inspector_command(), url, "--transport", "http", "--header", f"Authorization: Bearer {token}",
         *args],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )
    try:
        output = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"the Inspector printed no JSON (exit {proc.returncode}):\n"
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}") from None
    return proc.returncode, output, proc.stderr


def test_mcp_inspector_cli_lists_and_calls_tools(daemon: DaemonProcess, tmp_path: Path) -> None:
    registry = HomeRegistry(HomeLayout(daemon.home))
    try:
        token = registry.create_token("inspector", registry.find("notes").id, {"write": ["**"]})
    finally:
        registry.close()
    url = f"{daemon.api_url}/mcp"

    code, listed, err = run_inspector(tmp_path, url, token, "--method", "tools/list", "--strict")
    assert code == 0, err
    assert {t["name"] for t in listed["tools"]} == SPEC_TOOLS

    code, result, err = run_inspector(
        tmp_path, url, token, "--method", "tools/call", "--tool-name", "append_note",
        "--tool-arg", "path=inbox/from inspector.md", "text=hello from the Inspector",
        "idempotencyKey=inspector-1",
    )
    assert code == 0, err
    assert result["isError"] is False
    assert result["structuredContent"]["created"] is True
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    # a note append_note makes ends with a newline (issue 34)
    assert daemon.content("inbox/from inspector.md") == "hello from the Inspector\n"

    call = ("--method", "tools/call", "--tool-name")
    code, result, _ = run_inspector(tmp_path, url, token, *call, "list_notes", "--tool-arg", "limit=1")
    assert result["isError"] is False, result
    assert [n["path"] for n in result["structuredContent"]["notes"]] == ["inbox/from inspector.md"]

    code, result, _ = run_inspector(tmp_path, url, token, *call, "read_note", "--tool-arg", "path=missing.md")
    assert result["isError"] is True  # the Inspector shows the SPEC's error object
    assert result["structuredContent"]["error"]["code"] == "not_found"
