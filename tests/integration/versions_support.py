"""Helpers for the versions and brake integration tests (SPEC §5): the CLI as JSON,
an editor's atomic save, agent tokens, and the REST routes of versions and held changes."""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stet.client.daemon_link import DaemonClient, quote_path
from stet.sync.home import HomeLayout, HomeRegistry
from tests.harness import DaemonProcess, run_stet, wait_until

FORTY_LINES = "".join(f"line {i:02d}: a sentence somebody wrote and wants to keep\n" for i in range(40))
FOUR_LINES = "".join(f"line {i:02d}: a sentence somebody wrote and wants to keep\n" for i in range(4))


def stet_json(home: Path, *args: str) -> Any:
    return json.loads(run_stet(home, *args, "--json").stdout)


def editor_save(path: Path, text: str) -> None:
    """Save as editors do: write a temp file beside the note, rename it over the note."""
    tmp = path.with_name(f".{path.name}.save-tmp")
    tmp.write_bytes(text.encode("utf-8"))
    os.replace(tmp, path)


def vault_id(daemon: DaemonProcess) -> str:
    (vault,) = daemon.client.request("GET", "/v1/vaults")["vaults"]
    return str(vault["id"])


def agent_client(daemon: DaemonProcess, name: str,
                 scopes: dict[str, list[str]] | None = None) -> DaemonClient:
    """A client holding a new agent token (created in home.db, as `stet token create` does)."""
    registry = HomeRegistry(HomeLayout(daemon.home))
    try:
        token = registry.create_token(name, vault_id(daemon),
                                      scopes or {"read": ["**"], "append": [], "write": ["**"]})
    finally:
        registry.close()
    return DaemonClient(daemon.api_url, token)


def note_url(path: str, vault: str = "notes") -> str:
    return f"/v1/vaults/{vault}/notes/{quote_path(path)}"


def versions_of(client: DaemonClient, path: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = client.request("GET", note_url(path) + "/versions")["versions"]
    return result


def wait_versions(daemon: DaemonProcess, path: str, count: int, *,
                  timeout: float = 10.0) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        versions = versions_of(daemon.client, path)
        return versions if len(versions) == count else None

    return wait_until(check, timeout=timeout, what=f"{count} version(s) of {path}")


def held(home: Path) -> dict[str, Any]:
    result: dict[str, Any] = stet_json(home, "held")
    return result


def wait_held(home: Path, count: int, *, timeout: float = 15.0) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        rows: list[dict[str, Any]] = held(home)["held"]
        return rows if len(rows) == count else None

    return wait_until(check, timeout=timeout, what=f"{count} held change(s)", interval=0.05)


def wait_file(path: Path, data: bytes, *, timeout: float = 10.0) -> None:
    wait_until(lambda: path.exists() and path.read_bytes() == data, timeout=timeout,
               what=f"{path.name} to hold {data[:60]!r}")


def sse_events(daemon: DaemonProcess, until: Callable[[list[tuple[str, Any]]], bool], *,
               timeout: float = 10.0) -> list[tuple[str, Any]]:
    """Read the vault's event stream from the start of its replay buffer until ``until``
    holds for the (type, data) pairs seen (or the deadline passes); returns them."""
    url = urllib.parse.urlsplit(daemon.api_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=timeout)
    seen: list[tuple[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        conn.request("GET", "/v1/vaults/notes/events", headers={
            "Authorization": f"Bearer {daemon.client.token}", "Last-Event-ID": "0"})
        resp = conn.getresponse()
        assert resp.status == 200
        kind = None
        while not until(seen) and time.monotonic() < deadline:
            line = resp.fp.readline().decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind is not None:
                seen.append((kind, json.loads(line[6:])))
    finally:
        conn.close()
    return seen
