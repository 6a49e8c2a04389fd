"""Issue 33 (hardening round 3), findings 1, 4, 9 and 11, through a real daemon.

1. Revoking a token (`stet token revoke`, or the web page's Revoke) or signing out of the
   page closes that credential's open streams within a second: its SSE event stream ends
   and its live sockets close with 4401 and a reason a person can read; other tokens'
   streams go on.
4. One path decoding: a ``%2F`` inside a path segment is refused (400) before the router
   and the guard could read the path differently; no route answers without a principal.
9. A token learns nothing about vaults it cannot use: another vault and a vault that does
   not exist get the same answer on REST, MCP (``?vault=``) and the live socket (4404).
11. Ids beyond 2^63 are 400 ``bad_request`` (held changes, versions, conflicts; REST, MCP
    and the page's forms), and a malformed multipart form is a 400 page, never a 500.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.harness import DaemonProcess, run_stet
from tests.integration.agent_support import Agent, event_stream, make_token, owner_agent
from tests.integration.bridge_support import start_daemon
from tests.integration.live_support import JsClients, js_clients, live_url, owner_token
from tests.integration.test_mcp import connect_error, mcp_url, session
from tests.integration.ui_support import browser

__all__ = ["browser"]  # the module-scoped fixture, used by name

CLOSE_WITHIN_S = 1.0  # finding 1: a revoked credential's streams are gone within a second
BEYOND_2_63 = 2**64 + 5


@pytest.fixture
def js() -> Iterator[JsClients]:
    with js_clients() as clients:
        yield clients


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    made: list[Agent] = []
    yield made
    for a in made:
        a.close()


def _owner(d: DaemonProcess, agents: list[Agent]) -> Agent:
    a = owner_agent(d)
    agents.append(a)
    return a


def _port(d: DaemonProcess) -> int:
    port = urllib.parse.urlsplit(d.api_url).port
    assert port is not None
    return port


def _read_to_end(resp: http.client.HTTPResponse, conn: http.client.HTTPConnection,
                 deadline: float) -> tuple[bool, str]:
    """What an SSE stream says until it ends (True) or the deadline passes (False)."""
    lines: list[str] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False, "".join(lines)
        assert conn.sock is not None
        conn.sock.settimeout(remaining)
        try:
            line = resp.readline()
        except TimeoutError:
            return False, "".join(lines)
        if not line:
            return True, "".join(lines)
        lines.append(line.decode("utf-8", "replace"))


# -- finding 1: revocation and sign-out close the open streams ---------------------------------


def test_revoking_a_token_ends_its_event_stream_within_a_second(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], agents: list[Agent]) -> None:
    d = start_daemon(home, vault_dir, daemon_factory)
    goes = make_token(home, "watcher", read=("**",))
    stays = make_token(home, "stays", read=("**",))
    owner = _owner(d, agents)
    with event_stream(d, goes) as gone, event_stream(d, stays) as kept:
        owner.ok(owner.create("before.md", "before\n"))
        gone.wait_for("note.changed", path="before.md")
        kept.wait_for("note.changed", path="before.md")
        run_stet(home, "token", "revoke", "watcher")  # on home.db directly, as a person does
        revoked = time.monotonic()
        ended, said = _read_to_end(gone.resp, gone.conn, revoked + CLOSE_WITHIN_S)
        took = time.monotonic() - revoked
        assert ended, f"the revoked token's stream was still open {took:.2f}s after the revoke: {said!r}"
        assert "the token was revoked" in said, said
        # What happens afterwards reaches the other token's stream, and the revoked one is refused.
        owner.ok(owner.create("secret/live.md", "after\n"))
        kept.wait_for("note.changed", path="secret/live.md")
    refused = Agent(d.api_url, goes)
    agents.append(refused)
    assert refused.request("GET", refused.url("notes")).status == 401


def test_revoking_a_token_closes_its_live_sockets_within_a_second(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], agents: list[Agent],
        js: JsClients) -> None:
    (vault_dir / "secret").mkdir()
    (vault_dir / "secret" / "a.md").write_text("a\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    goes = make_token(home, "reader", read=("**",))
    js.connect("r1", live_url(d), "secret/a.md", goes)
    js.connect("r2", live_url(d), "secret/a.md", goes)  # two sockets of one token
    js.connect("o", live_url(d), "secret/a.md", owner_token(d))
    for c in ("r1", "r2", "o"):
        js.wait_synced(c)
    run_stet(home, "token", "revoke", "reader")
    revoked = time.monotonic()
    for c in ("r1", "r2"):
        code, reason = js.wait_closed(c, timeout=CLOSE_WITHIN_S * 3)
        assert (code, reason) == (4401, "the token was revoked")
    took = time.monotonic() - revoked
    assert took < CLOSE_WITHIN_S + 0.5, f"the sockets closed {took:.2f}s after the revoke"
    owner = _owner(d, agents)
    owner.ok(owner.append("secret/a.md", "new secret\n"))
    assert js.wait_text("o", includes=["new secret"]).endswith("new secret\n")  # the owner's stays
    assert "new secret" not in js.text("r1")
    assert "new secret" not in js.text("r2")


def _cookie_header(context: Any) -> str:
    return "; ".join(f"{c['name']}={c['value']}" for c in context.cookies())


# -- finding 4: one path decoding ----------------------------------------------------------------


def _raw(d: DaemonProcess, method: str, target: str, headers: dict[str, str] | None = None,
         body: bytes | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", _port(d), timeout=30)
    try:
        conn.request(method, target, body=body, headers={"Host": f"127.0.0.1:{_port(d)}", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


@pytest.mark.parametrize(("target", "status"), [
    # The guard once split the decoded path, read ".../yjs/..." and skipped the token check,
    # while the router (%2F kept in its segment) sent it to a token route: a 500 then.
    ("/v1/vaults/notes%2Fyjs%2Fx/notes", 401),
    ("/v1/vaults/notes%2fyjs%2fx/search?q=a", 401),
    ("/v1/vaults/notes%2Fyjs%2Fx/notes/a.md", 401),
    ("/v1/vaults/notes%2Fyjs%2Fx/events", 401),
    ("/v1/vaults/notes/notes/a%2Fyjs%2Fb.md", 401),
    ("/ui%2F..%2Fv1/status", 401),  # matches no route: not a page route, so the token is asked
])
def test_the_guard_reads_the_path_as_the_router_does(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], target: str, status: int) -> None:
    d = start_daemon(home, vault_dir, daemon_factory)
    got, body = _raw(d, "GET", target)  # no token at all
    assert got == status, (got, body)
    error = json.loads(body)["error"]
    assert error["code"] == {401: "unauthorized", 404: "not_found"}[status], error
    assert "unhandled error" not in (home / "logs" / "daemon.log").read_text(errors="replace")


def test_an_encoded_slash_in_a_note_path_still_reads_the_note(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], agents: list[Agent]) -> None:
    (vault_dir / "yjs").mkdir()
    (vault_dir / "yjs" / "b.md").write_text("b\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    owner = _owner(d, agents)
    assert owner.ok(owner.request("GET", "/v1/vaults/notes/notes/yjs%2Fb.md"))["content"] == "b\n"
    reader = Agent(d.api_url, make_token(home, "narrow", read=("other/**",)))
    agents.append(reader)
    assert reader.request("GET", "/v1/vaults/notes/notes/yjs%2Fb.md").code == "forbidden"


def test_every_route_has_a_principal_or_authenticates_itself(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    """Without a token, every API route of the app is refused (401) or is one of the few that
    authenticate themselves (the page's routes, the live socket) -- none is a 500."""
    d = start_daemon(home, vault_dir, daemon_factory)
    for target in ("/v1/status", "/v1/vaults", "/v1/vaults/notes/notes", "/v1/vaults/notes/events",
                   "/v1/vaults/notes/held", "/v1/vaults/notes/files", "/v1/vaults/notes/devices",
                   "/v1/vaults/notes/notes/a.md/versions", "/v1/vaults/notes/snapshots"):
        for method in ("GET", "POST"):
            status, body = _raw(d, method, target)
            assert status in (401, 404, 405), (method, target, status, body)
            if status == 401:
                assert json.loads(body)["error"]["code"] == "unauthorized"


# -- finding 9: one "not found" for every vault a token cannot use ------------------------------


@pytest.fixture
def two_vaults(tmp_path: Path, home: Path, vault_dir: Path,
               daemon_factory: list[DaemonProcess]) -> tuple[DaemonProcess, str]:
    (vault_dir / "a.md").write_text("a\n", encoding="utf-8")
    private = tmp_path / "private"
    private.mkdir()
    (private / "a.md").write_text("private\n", encoding="utf-8")
    home.mkdir(parents=True, exist_ok=True)
    run_stet(home, "init", str(private), "--name", "private", "--json")
    d = start_daemon(home, vault_dir, daemon_factory)
    return d, make_token(home, "nosy", read=("**",))


def _same_apart_from_name(a: str, b: str, name_a: str, name_b: str) -> None:
    assert a.replace(name_a, "VAULT") == b.replace(name_b, "VAULT"), (a, b)


def test_a_token_cannot_tell_another_vault_from_none_over_rest(
        two_vaults: tuple[DaemonProcess, str]) -> None:
    d, token = two_vaults
    for tail in ("notes", "notes/a.md", "events", "search?q=a", "log", "files"):
        answers = [_raw(d, "GET", f"/v1/vaults/{name}/{tail}", {"Authorization": f"Bearer {token}"})
                   for name in ("private", "nosuchvault")]
        assert answers[0][0] == answers[1][0] == 404, (tail, answers)
        _same_apart_from_name(answers[0][1], answers[1][1], "private", "nosuchvault")
        assert "no vault named" in answers[0][1]


async def test_a_token_cannot_tell_another_vault_from_none_over_mcp(
        two_vaults: tuple[DaemonProcess, str]) -> None:
    d, token = two_vaults
    other = await connect_error(mcp_url(d, "private"), token)
    none = await connect_error(mcp_url(d, "nosuchvault"), token)
    _same_apart_from_name(other, none, "private", "nosuchvault")
    assert "no vault named" in other
    async with session(mcp_url(d), token) as client:  # its own vault still works
        result = await client.call_tool("read_note", {"path": "a.md"})
        assert not result.is_error, result


async def test_a_token_cannot_tell_another_vault_from_none_over_a_live_socket(
        two_vaults: tuple[DaemonProcess, str]) -> None:
    d, token = two_vaults
    closes = []
    async with aiohttp.ClientSession() as http_session:
        for name in ("private", "nosuchvault"):
            ws = await http_session.ws_connect(f"{live_url(d, name)}/a.md?token={token}")
            msg = await ws.receive(timeout=10)
            assert msg.type == aiohttp.WSMsgType.CLOSE, msg
            closes.append((msg.data, msg.extra))
    assert closes[0][0] == closes[1][0] == 4404, closes
    _same_apart_from_name(closes[0][1], closes[1][1], "private", "nosuchvault")


# -- finding 11: integers bounded at the edge, multipart errors are 400 ----------------------


def test_ids_beyond_2_63_are_bad_requests_over_rest(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], agents: list[Agent]) -> None:
    (vault_dir / "a.md").write_text("a\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    owner = _owner(d, agents)
    for tail, body in (("held/release", {"ids": [BEYOND_2_63]}), ("held/revert", {"ids": [1, BEYOND_2_63]}),
                       ("notes/a.md/versions/" + "9" * 30 + "/restore", {})):
        answer = owner.request("POST", owner.url(tail), body)
        assert (answer.status, answer.code) == (400, "bad_request"), (tail, answer.body)
        assert "2^63" in answer.error["message"] or "whole number" in answer.error["message"], answer.body
    for tail in ("notes/a.md?version=" + str(10**23), "notes/a.md/versions/" + "9" * 30):
        answer = owner.request("GET", owner.url(tail))
        assert (answer.status, answer.code) == (400, "bad_request"), (tail, answer.body)
    assert "unhandled error" not in (home / "logs" / "daemon.log").read_text(errors="replace")


async def test_ids_beyond_2_63_are_bad_requests_over_mcp(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    (vault_dir / "a.md").write_text("a\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    async with session(mcp_url(d), owner_token(d)) as client:
        for tool, args in (("read_note", {"path": "a.md", "version": 10**23}),
                           ("read_version", {"path": "a.md", "id": 10**23}),
                           ("read_version", {"path": "a.md", "id": BEYOND_2_63}),
                           ("restore_version", {"path": "a.md", "id": 10**23}),
                           ("read_version", {"path": "a.md", "id": "9" * 30})):
            result = await client.call_tool(tool, args)
            assert result.is_error, (tool, args, result)
            error = result.structured_content["error"]  # type: ignore[index]
            assert error["code"] == "bad_request", (tool, args, error)
    assert "unhandled error" not in (home / "logs" / "daemon.log").read_text(errors="replace")


async def test_owner_close_reason_still_names_its_own_vault(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    """The owner (every vault is its own) is still told which name it mistyped."""
    d = start_daemon(home, vault_dir, daemon_factory)

    async def close_of() -> tuple[int, str]:
        async with aiohttp.ClientSession() as s:
            ws = await s.ws_connect(f"{live_url(d, 'nosuchvault')}/a.md?token={owner_token(d)}")
            msg = await ws.receive(timeout=10)
            return int(msg.data), str(msg.extra)

    code, reason = await close_of()
    assert code == 4404
    assert "nosuchvault" in reason
