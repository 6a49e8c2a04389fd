"""The files API (SPEC §6.12) through a real daemon: REST listing and streaming, and MCP
``list_files`` / ``read_file`` through the official ``mcp`` SDK client. Binary files
with NULs, an image, an executable, an empty file, a file over ``[attachments]
max_bytes``; symlinks, ignored and out-of-scope paths refused without revealing them."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import os
import struct
import urllib.parse
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ImageContent, ResourceLink, TextContent

from tests.harness import DaemonProcess, run_stet
from tests.integration.agent_support import make_token

MAX_ATTACHMENT = 4 * 1024 * 1024
AGENT_READ = ("img/**", "media/**", "data/**", "notes/**", "scripts/**", "empty.dat", "big.pdf", "linked/**")


def png(width: int = 2, height: int = 2) -> bytes:
    """A real PNG (its IDAT holds NUL bytes)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\x00\xff\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    (h / "config.toml").write_text(f"[attachments]\nmax_bytes = {MAX_ATTACHMENT}\n")
    return h


@pytest.fixture
def files(vault_dir: Path, tmp_path: Path) -> dict[str, bytes]:
    """The vault's files (written before the daemon starts), path -> bytes."""
    content = {
        "img/cat.png": png(),
        "data/blob.bin": bytes(range(256)) * 4096 * 3 + b"\x00tail",  # 3 MiB + 5, NULs throughout
        "notes/plan.md": "# Plan\n\nships friday ✓\n".encode(),
        "scripts/run.sh": b"#!/bin/sh\necho hi\n",
        "empty.dat": b"",
        "media/café ☕.jpg": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(100),
        "secret/keys.txt": b"TOP SECRET KEY MATERIAL",
        ".git/config": b"[core]\n",
        "big.pdf": b"%PDF" + b"\x00" * MAX_ATTACHMENT,
    }
    for path, data in content.items():
        full = vault_dir / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_bytes(data)
    os.chmod(vault_dir / "scripts/run.sh", 0o755)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd.txt").write_bytes(b"outside the vault")
    (vault_dir / "img" / "escape.png").symlink_to(outside / "passwd.txt")
    (vault_dir / "linked").symlink_to(outside, target_is_directory=True)
    return content


@pytest.fixture
def served(home: Path, vault_dir: Path, files: dict[str, bytes],
           daemon_factory: list[DaemonProcess]) -> DaemonProcess:
    run_stet(home, "init", str(vault_dir), "--name", "notes", "--json")
    d = DaemonProcess(home)
    daemon_factory.append(d)
    return d.start()


class Http:
    def __init__(self, daemon: DaemonProcess, token: str) -> None:
        parsed = urllib.parse.urlsplit(daemon.api_url)
        assert parsed.hostname is not None
        assert parsed.port is not None
        self.host, self.port, self.token = parsed.hostname, parsed.port, token

    def get(self, target: str) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request("GET", target, headers={"Authorization": f"Bearer {self.token}",
                                                 "Host": f"127.0.0.1:{self.port}"})
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status != 500, body[:300]
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
        finally:
            conn.close()

    def json(self, target: str) -> tuple[int, Any]:
        status, _, body = self.get(target)
        return status, json.loads(body)

    def file(self, path: str) -> tuple[int, dict[str, str], bytes]:
        return self.get(f"/v1/vaults/notes/files/{urllib.parse.quote(path)}")

    def listing(self, query: str = "") -> dict[str, Any]:
        status, body = self.json(f"/v1/vaults/notes/files{query}")
        assert status == 200, body
        assert isinstance(body, dict)
        return body


def test_rest_listing_has_every_file_with_its_hash(served: DaemonProcess, files: dict[str, bytes]) -> None:
    owner = Http(served, served.client.token)
    listed = {f["path"]: f for f in owner.listing()["files"]}
    expected = {p for p in files if not p.startswith(".git/")}
    assert set(listed) == expected  # no symlink (img/escape.png, linked/), nothing ignored
    for path in expected - {"big.pdf"}:
        entry = listed[path]
        assert entry["size"] == len(files[path]), path
        assert entry["sha256"] == hashlib.sha256(files[path]).hexdigest(), path
        assert entry["updatedAt"].endswith("Z")
        assert entry["kind"] == ("note" if path.endswith((".md", ".txt")) else "attachment")
    assert listed["scripts/run.sh"]["executable"] is True
    assert "executable" not in listed["img/cat.png"]
    assert listed["img/cat.png"]["contentType"] == "image/png"
    # over [attachments] max_bytes: listed, not hashed, said why
    assert listed["big.pdf"]["sha256"] is None
    assert "too large" in listed["big.pdf"]["skipped"]
    assert [f["path"] for f in owner.listing("?prefix=img/")["files"]] == ["img/cat.png"]
    # pages: every file exactly once
    seen, cursor = [], ""
    for _ in range(20):
        page = owner.listing(f"?limit=2&cursor={urllib.parse.quote(cursor)}")
        seen += [f["path"] for f in page["files"]]
        if page["nextCursor"] is None:
            break
        cursor = page["nextCursor"]
    assert seen == sorted(expected)
    # a changed file shows its new hash (the cache is keyed by stat)
    (served.home.parent / "vault" / "img" / "cat.png").write_bytes(png(3, 3))
    again = {f["path"]: f for f in owner.listing("?prefix=img/")["files"]}
    assert again["img/cat.png"]["sha256"] == hashlib.sha256(png(3, 3)).hexdigest()


def test_rest_streams_bytes_with_content_type(served: DaemonProcess, files: dict[str, bytes]) -> None:
    owner = Http(served, served.client.token)
    status, headers, body = owner.file("data/blob.bin")
    assert status == 200
    assert body == files["data/blob.bin"]  # byte-identical, NULs included, over several chunks
    assert headers["content-type"] == "application/octet-stream"
    assert headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in headers["content-security-policy"]
    status, headers, body = owner.file("img/cat.png")
    assert (status, headers["content-type"], body) == (200, "image/png", files["img/cat.png"])
    status, headers, body = owner.file("notes/plan.md")
    assert headers["content-type"].startswith("text/markdown")
    assert body == files["notes/plan.md"]
    status, headers, body = owner.file("media/café ☕.jpg")  # a name with a space and non-ASCII
    assert (status, headers["content-type"], body) == (200, "image/jpeg", files["media/café ☕.jpg"])
    status, headers, body = owner.file("empty.dat")
    assert (status, body, headers["content-length"]) == (200, b"", "0")


def test_rest_refusals(served: DaemonProcess, home: Path) -> None:
    owner = Http(served, served.client.token)
    for path, code in (("img/escape.png", "invalid_path"), ("linked/passwd.txt", "invalid_path"),
                       (".git/config", "invalid_path"), ("../outside/passwd.txt", "invalid_path"),
                       ("img/none.png", "not_found"), ("img", "invalid_path")):
        status, _, body = owner.file(path)
        error = json.loads(body)["error"]
        assert error["code"] == code, (path, error)
        assert b"outside the vault" not in body
    agent = Http(served, make_token(home, "reader", read=AGENT_READ))
    listed = [f["path"] for f in agent.listing()["files"]]
    assert "secret/keys.txt" not in listed
    assert "img/cat.png" in listed
    # paging never names an out-of-scope path, not even as a cursor
    cursor, cursors = "", []
    for _ in range(20):
        page = agent.listing(f"?limit=1&cursor={urllib.parse.quote(cursor)}")
        if page["nextCursor"] is None:
            break
        cursor = page["nextCursor"]
        cursors.append(cursor)
    assert cursors
    assert not any(c.startswith("secret/") for c in cursors)
    # out of scope: the same refusal whether the file exists or not
    s1, _, existing = agent.file("secret/keys.txt")
    s2, _, missing = agent.file("secret/nothing-here.txt")
    assert s1 == s2 == 403
    e1, e2 = json.loads(existing)["error"], json.loads(missing)["error"]
    assert e1["code"] == e2["code"] == "forbidden"
    assert e1["message"].replace("keys.txt", "X") == e2["message"].replace("nothing-here.txt", "X")
    assert b"TOP SECRET" not in existing
    # an agent of another vault learns nothing
    (home.parent / "other").mkdir()
    run_stet(home, "init", str(home.parent / "other"), "--name", "other", "--json")
    served.client.reload()
    stranger = Http(served, make_token(home, "stranger", vault="other", read=("**",)))
    status, _, body = stranger.file("img/cat.png")
    assert status == 404
    assert json.loads(body)["error"]["code"] == "not_found"


# -- MCP through the official SDK client ------------------------------------------------------


@contextlib.asynccontextmanager
async def mcp_session(daemon: DaemonProcess, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{daemon.api_url}/mcp", http_client=http)) as client:
        yield client


def meta_of(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result
    assert isinstance(result.structured_content, dict)
    first = result.content[0]
    assert isinstance(first, TextContent)
    assert json.loads(first.text) == result.structured_content
    return result.structured_content


async def test_mcp_list_and_read_files(served: DaemonProcess, home: Path, files: dict[str, bytes]) -> None:
    token = make_token(home, "looker", read=AGENT_READ)
    async with mcp_session(served, token) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools["list_files"].input_schema["properties"]) == {"prefix", "limit", "cursor"}
        assert tools["read_file"].input_schema["required"] == ["path"]
        assert tools["read_file"].annotations is not None
        assert tools["read_file"].annotations.read_only_hint is True

        listing = meta_of(await client.call_tool("list_files", {"prefix": "img/"}))
        assert [(f["path"], f["kind"]) for f in listing["files"]] == [("img/cat.png", "attachment")]
        everything = meta_of(await client.call_tool("list_files", {}))
        assert "secret/keys.txt" not in {f["path"] for f in everything["files"]}

        image = await client.call_tool("read_file", {"path": "img/cat.png"})
        meta = meta_of(image)
        assert meta["sha256"] == hashlib.sha256(files["img/cat.png"]).hexdigest()
        blocks = [b for b in image.content if isinstance(b, ImageContent)]
        assert len(blocks) == 1
        assert blocks[0].mime_type == "image/png"
        assert base64.b64decode(blocks[0].data) == files["img/cat.png"]

        binary = await client.call_tool("read_file", {"path": "data/blob.bin"})
        meta = meta_of(binary)
        assert meta["size"] == len(files["data/blob.bin"])
        assert meta["sha256"] == hashlib.sha256(files["data/blob.bin"]).hexdigest()
        links = [b for b in binary.content if isinstance(b, ResourceLink)]
        assert len(links) == 1
        assert links[0].mime_type == "application/octet-stream"
        assert links[0].size == len(files["data/blob.bin"])
        # the link streams the bytes to the same token
        target = urllib.parse.urlsplit(str(links[0].uri))
        status, _, body = Http(served, token).get(target.path)
        assert status == 200
        assert body == files["data/blob.bin"]

        for args, code in (({"path": "secret/keys.txt"}, "forbidden"),
                           ({"path": "img/none.png"}, "not_found"),
                           ({"path": "img/escape.png"}, "invalid_path"),
                           ({"path": 5}, "bad_request"), ({}, "bad_request")):
            result = await client.call_tool("read_file", args)
            assert result.is_error, (args, result)
            assert isinstance(result.structured_content, dict)
            assert result.structured_content["error"]["code"] == code, (args, result.structured_content)
            assert "TOP SECRET" not in json.dumps(result.structured_content)
