"""Live editing (SPEC §6.13) with stock Yjs clients against a real daemon.

The clients are Node's ``yjs`` + ``y-websocket`` ``WebsocketProvider`` over ``ws``
(``tests/js``), exactly as an editor would use them: the note's text is
``doc.getText('content')``. Their edits must reach the file byte for byte, through the
write path (attribution, scopes, the brake); the disk's, agents' and other clients'
changes must reach them; refusals close the socket with the codes of §6.13.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.agent_support import Agent, agent_for, make_token, owner_agent
from tests.integration.bridge_support import restart, start_daemon
from tests.integration.live_support import JsClients, js_clients, live_url, owner_token

TIMEOUT = 30.0


@pytest.fixture
def js() -> Iterator[JsClients]:
    with js_clients() as clients:
        yield clients


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    """REST agents made by a test, closed after it."""
    made: list[Agent] = []
    yield made
    for a in made:
        a.close()


def _owner(d: DaemonProcess, agents: list[Agent]) -> Agent:
    agents.append(owner_agent(d))
    return agents[-1]


def _agent(d: DaemonProcess, token: str, agents: list[Agent]) -> Agent:
    agents.append(agent_for(d, token))
    return agents[-1]


def _file(vault_dir: Path, path: str) -> bytes | None:
    try:
        return (vault_dir / path).read_bytes()
    except FileNotFoundError:
        return None


def wait_file(vault_dir: Path, path: str, expected: str, timeout: float = TIMEOUT) -> None:
    data = expected.encode("utf-8")
    wait_until(lambda: _file(vault_dir, path) == data, timeout=timeout,
               what=f"{path} on disk to hold {expected!r:.120}")


def test_a_stock_client_edits_a_note_byte_for_byte_attributed(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients,
        agents: list[Agent]) -> None:
    (vault_dir / "a.md").write_text("hello\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    token = make_token(home, "editor", read=("**",), write=("**",))
    js.connect("c1", live_url(d), "a.md", token)
    assert js.wait_synced("c1") == "hello\n"
    # Emoji (a UTF-16 surrogate pair in JS, 4 UTF-8 bytes on disk), a flag (two code
    # points), CJK and a combining accent, typed one character at a time.
    js.type("c1", -1, "world 😀 🇫🇷 中文 e\u0301\n")
    js.insert("c1", 0, "# ")
    expected = "# hello\nworld 😀 🇫🇷 中文 e\u0301\n"
    wait_file(vault_dir, "a.md", expected)
    assert d.content("a.md") == expected
    owner = _owner(d, agents)
    log = owner.ok(owner.log("a.md"))["changes"]
    assert "agent:editor" in {c["source"] for c in log}


def test_disk_edits_and_agent_appends_reach_the_client(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients,
        agents: list[Agent]) -> None:
    (vault_dir / "a.md").write_text("one\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    js.connect("c1", live_url(d), "a.md", owner_token(d))
    assert js.wait_synced("c1") == "one\n"
    (vault_dir / "a.md").write_text("one\ntwo from disk 📝\n", encoding="utf-8")
    js.wait_text("c1", "one\ntwo from disk 📝\n")
    agent = _agent(d, make_token(home, "bot", append=("**",)), agents)
    agent.ok(agent.append("a.md", "three from an agent\n"))
    js.wait_text("c1", "one\ntwo from disk 📝\nthree from an agent\n")
    wait_file(vault_dir, "a.md", "one\ntwo from disk 📝\nthree from an agent\n")


def test_two_clients_typing_at_once_and_an_agent_appending_converge(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients,
        agents: list[Agent]) -> None:
    (vault_dir / "a.md").write_text("top\nmiddle\nbottom\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    token = owner_token(d)
    for c in ("c1", "c2"):
        js.connect(c, live_url(d), "a.md", token)
        js.wait_synced(c)
    agent = _agent(d, make_token(home, "bot", append=("**",)), agents)
    # Both clients type at once, neither having seen the other's keystrokes.
    js.type_together(("c1", "AAAAAAAAAAAAAAAAAAAA ", "top"), ("c2", "BBBBBBBBBBBBBBBBBBBB ", "middle"))
    for i in range(5):
        agent.ok(agent.append("a.md", f"agent {i}\n"))
    js.type_together(("c1", "ÄÖÜ😀", "AAAA"), ("c2", "end 中文\n", None))
    parts = ["ÄÖÜ😀AAAAAAAAAAAAAAAAAAAA top\n", "BBBBBBBBBBBBBBBBBBBB middle\n", "bottom\n",
             "end 中文\n", *[f"agent {i}\n" for i in range(5)]]
    text = js.wait_text("c1", includes=parts)
    js.wait_text("c2", text)
    wait_file(vault_dir, "a.md", text)
    assert d.content("a.md") == text
    assert text.startswith("ÄÖÜ😀AAAAAAAAAAAAAAAAAAAA top\nBBBBBBBBBBBBBBBBBBBB middle\nbottom\n")
    assert text.count("agent ") == 5


def test_what_a_client_was_relayed_survives_kill_9(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients) -> None:
    """A client's update is committed before it is relayed: once another client has it,
    a kill -9 of the daemon loses nothing."""
    (vault_dir / "a.md").write_text("base\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    token = owner_token(d)
    for c in ("writer", "witness"):
        js.connect(c, live_url(d), "a.md", token)
        js.wait_synced(c)
    js.type("writer", -1, "durable 😀\n")
    js.wait_text("witness", "base\ndurable 😀\n")
    d.kill9()
    d2 = restart(home, daemon_factory)
    assert d2.content("a.md") == "base\ndurable 😀\n"
    wait_file(vault_dir, "a.md", "base\ndurable 😀\n")


def test_a_large_deletion_by_a_client_keeps_a_version(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients,
        agents: list[Agent]) -> None:
    """The versions rule sees a client's edit as any other write: a large deletion keeps
    the text it destroyed, attributed to the client's token."""
    body = "".join(f"line {i}: some words worth keeping 中文\n" for i in range(20))
    (vault_dir / "big.md").write_text(body, encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    token = make_token(home, "pruner", read=("**",), write=("**",))
    js.connect("p", live_url(d), "big.md", token)
    js.wait_synced("p")
    js.delete("p", 0, len(body) - len("line 19: some words worth keeping 中文\n"))
    wait_file(vault_dir, "big.md", "line 19: some words worth keeping 中文\n")
    owner = _owner(d, agents)
    versions = owner.ok(owner.request("GET", owner.note("big.md", "/versions")))["versions"]
    kept = [v for v in versions if v["kind"] == "before-large-deletion"]
    assert kept, versions
    assert kept[0]["source"] == "agent:pruner"
    old = owner.ok(owner.request("GET", owner.note("big.md", f"/versions/{kept[0]['id']}")))
    assert old["content"] == body


def test_offsets_inside_emoji_and_cjk_are_exact(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients,
        agents: list[Agent]) -> None:
    # A path that must be percent-encoded (CJK, a space, '#'), as docs/live-editing.md says.
    path = "日本 #1.md"
    (vault_dir / path).write_text("😀😀中文\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    js.connect("c1", live_url(d), urllib.parse.quote(path, safe=""), owner_token(d))
    js.wait_synced("c1")
    js.insert("c1", 2, "X")  # UTF-16 index 2: between the two emoji
    wait_file(vault_dir, path, "😀X😀中文\n")
    owner = _owner(d, agents)
    owner.ok(owner.edit(path, [("中文", "日本語")]))
    js.wait_text("c1", "😀X😀日本語\n")
    js.delete("c1", 3, 2)  # the second emoji (two UTF-16 units)
    wait_file(vault_dir, path, "😀X日本語\n")
    assert d.content(path) == "😀X日本語\n"


def test_awareness_is_relayed_and_kept_for_late_joiners(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients) -> None:
    (vault_dir / "a.md").write_text("x\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    token = owner_token(d)
    for c in ("ann", "bob"):
        js.connect(c, live_url(d), "a.md", token)
        js.wait_synced(c)
    js.awareness("ann", {"user": "ann", "cursor": 1})
    js.awareness("bob", {"user": "bob", "cursor": 0})
    js.wait_peer_awareness("bob", "user", "ann")
    js.wait_peer_awareness("ann", "user", "bob")
    js.connect("cy", live_url(d), "a.md", token)  # joins later: told both at once
    js.wait_peer_awareness("cy", "user", "ann")
    js.wait_peer_awareness("cy", "user", "bob")
    js.disconnect("ann")
    js.wait_no_peer_awareness("bob", "user", "ann")
    js.wait_no_peer_awareness("cy", "user", "ann")


# -- refusals and their close codes -----------------------------------------------------


def test_close_codes_for_who_may_not_and_what_is_not(
        home: Path, vault_dir: Path, tmp_path: Path, daemon_factory: list[DaemonProcess],
        js: JsClients) -> None:
    (vault_dir / "public").mkdir()
    (vault_dir / "public" / "p.md").write_text("public\n", encoding="utf-8")
    (vault_dir / "secret.md").write_text("secret\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    other = tmp_path / "other"
    other.mkdir()
    run_stet(home, "init", str(other), "--name", "other", "--json")
    reader = make_token(home, "reader", read=("public/**",))
    foreign = make_token(home, "foreign", vault="other", read=("**",), write=("**",))
    url = live_url(d)
    cases = {
        "none": ("secret.md", None, 4401),
        "bad": ("secret.md", "not-a-token", 4401),
        "missing": ("nope.md", owner_token(d), 4404),
        "noread": ("secret.md", reader, 4403),
        "foreign": ("secret.md", foreign, 4404),
        "badpath": ("x" * 300 + ".md", owner_token(d), 4400),  # too long (CON.md is a Linux name now)
    }
    for name, (room, token, _) in cases.items():
        js.connect(name, url, room, token)
    for name, (_, _, code) in cases.items():
        got, reason = js.wait_closed(name)
        assert got == code, (name, got, reason)
    # Nothing the reader may not read leaks through the reason.
    js.connect("ok", url, "public/p.md", reader)
    assert js.wait_synced("ok") == "public\n"


def test_a_read_only_token_receives_but_cannot_write(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients,
        agents: list[Agent]) -> None:
    (vault_dir / "a.md").write_text("start\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    reader = make_token(home, "reader", read=("**",))
    js.connect("r", live_url(d), "a.md", reader)
    js.wait_synced("r")
    owner = _owner(d, agents)
    owner.ok(owner.append("a.md", "more\n"))
    js.wait_text("r", "start\nmore\n")
    # The owner's append reaches the disk through the writer's batch, after the
    # acknowledgement: wait for it, so the check below is about the reader's edit.
    wait_file(vault_dir, "a.md", "start\nmore\n")
    revision = d.read("a.md")["revision"]
    js.insert("r", 0, "sneaky ")
    code, reason = js.wait_closed("r")
    assert code == 4403, reason
    assert d.read("a.md")["revision"] == revision
    assert _file(vault_dir, "a.md") == b"start\nmore\n"
    conflicts = owner.ok(owner.request("GET", owner.url("conflicts")))["conflicts"]
    assert any(c["code"] == "forbidden" and c["path"] == "a.md" and c["token"] == "agent:reader"
               for c in conflicts)


def test_an_append_only_token_may_append_and_nothing_else(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients) -> None:
    (vault_dir / "log.md").write_text("log\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    token = make_token(home, "logger", read=("**",), append=("log.md",))
    js.connect("a", live_url(d), "log.md", token)
    js.wait_synced("a")
    js.insert("a", -1, "entry 1\n")
    wait_file(vault_dir, "log.md", "log\nentry 1\n")
    js.insert("a", 0, "rewritten ")
    code, _ = js.wait_closed("a")
    assert code == 4403
    assert d.content("log.md") == "log\nentry 1\n"


def test_a_note_deleted_or_moved_under_its_clients_closes_them(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients,
        agents: list[Agent]) -> None:
    (vault_dir / "gone.md").write_text("bye\n", encoding="utf-8")
    (vault_dir / "old.md").write_text("moving\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    token = owner_token(d)
    js.connect("g", live_url(d), "gone.md", token)
    js.connect("m", live_url(d), "old.md", token)
    js.wait_synced("g")
    js.wait_synced("m")
    (vault_dir / "gone.md").unlink()  # deleted on disk
    assert js.wait_closed("g") == (4410, "the note was deleted")
    owner = _owner(d, agents)
    owner.ok(owner.move("old.md", "new.md"))
    assert js.wait_closed("m") == (4410, "moved to new.md")
    js.connect("m2", live_url(d), "new.md", token)  # the same note, the same CRDT
    assert js.wait_synced("m2") == "moving\n"
    js.insert("m2", -1, "moved\n")
    wait_file(vault_dir, "new.md", "moving\nmoved\n")


def test_a_document_with_no_history_in_common_is_refused_not_doubled(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients,
        agents: list[Agent]) -> None:
    """Doubled text (DESIGN, lessons): a client that typed before its first sync, or that
    kept the document of a note since deleted and made again, shares no history with the
    note; merging it would insert its text a second time. It is refused (4409)."""
    (vault_dir / "a.md").write_text("the note\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    token = owner_token(d)
    js.connect("offline", live_url(d), "a.md", token, initial="the note\n")
    code, reason = js.wait_closed("offline")
    assert code == 4409, reason
    assert d.content("a.md") == "the note\n"

    js.connect("old", live_url(d), "a.md", token)
    assert js.wait_synced("old") == "the note\n"
    owner = _owner(d, agents)
    owner.ok(owner.delete("a.md"))
    assert js.wait_closed("old")[0] == 4410
    owner.ok(owner.create("a.md", "a new note at the same path\n"))
    js.reconnect("old")  # the app reconnects with the deleted note's document
    code, reason = js.wait_closed("old")
    assert code == 4409, reason
    assert d.content("a.md") == "a new note at the same path\n"
    wait_file(vault_dir, "a.md", "a new note at the same path\n")
    # A fresh document joins the new note as usual.
    js.connect("fresh", live_url(d), "a.md", token)
    assert js.wait_synced("fresh") == "a new note at the same path\n"


def test_the_brake_holds_for_a_live_client(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients,
        agents: list[Agent]) -> None:
    body = "A populated note with enough words to count as one.\n" * 3
    for i in range(3):
        (vault_dir / f"n{i}.md").write_text(body, encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory, config="[brake]\nnotes = 2\nwindow_seconds = 600\n")
    token = make_token(home, "wrecker", read=("**",), write=("**",))
    agent = _agent(d, token, agents)
    agent.ok(agent.delete("n0.md"))
    agent.ok(agent.delete("n1.md"))  # the second within the window: the brake engages
    assert agent.delete("n2.md").code == "brake_engaged"
    js.connect("w", live_url(d), "n2.md", token)
    js.wait_synced("w")
    js.insert("w", -1, "a harmless line\n")  # not destructive: allowed
    wait_file(vault_dir, "n2.md", body + "a harmless line\n")
    js.delete("w", 0, len(body) + len("a harmless line\n"))  # emptying it: refused
    code, reason = js.wait_closed("w")
    assert code == 4423, reason
    assert d.content("n2.md") == body + "a harmless line\n"
    assert _file(vault_dir, "n2.md") == (body + "a harmless line\n").encode()


def test_an_edit_past_the_size_limit_is_refused(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients) -> None:
    (vault_dir / "a.md").write_text("small\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory, config="[notes]\nmax_bytes = 1000\n")
    js.connect("big", live_url(d), "a.md", owner_token(d))
    js.wait_synced("big")
    js.insert("big", -1, "中" * 400)  # 1,200 bytes of UTF-8 in 400 UTF-16 units
    code, reason = js.wait_closed("big")
    assert code == 4413, reason
    assert d.content("a.md") == "small\n"
    assert _file(vault_dir, "a.md") == b"small\n"


def test_a_revoked_token_stops_writing(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients) -> None:
    (vault_dir / "a.md").write_text("a\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    token = make_token(home, "temp", read=("**",), write=("**",))
    js.connect("t", live_url(d), "a.md", token)
    js.wait_synced("t")
    run_stet(home, "token", "revoke", "temp")
    js.insert("t", 0, "after revocation ")
    code, _ = js.wait_closed("t")
    assert code == 4401
    assert d.content("a.md") == "a\n"


# -- the wire, below the stock client ---------------------------------------------------


async def _raw(d: DaemonProcess, path: str, token: str, **kw: object) -> tuple[aiohttp.ClientSession,
                                                                                 aiohttp.ClientWebSocketResponse]:
    session = aiohttp.ClientSession()
    ws = await session.ws_connect(f"{live_url(d)}/{path}?token={token}", **kw)  # type: ignore[arg-type]
    return session, ws


def test_a_foreign_origin_is_refused_and_the_own_origin_allowed(daemon: DaemonProcess,
                                                      agents: list[Agent]) -> None:
    owner = _owner(daemon, agents)
    owner.ok(owner.create("a.md", "x\n"))

    async def attempt(origin: str) -> int:
        async with aiohttp.ClientSession() as session:
            try:
                ws = await session.ws_connect(f"{live_url(daemon)}/a.md?token={owner_token(daemon)}",
                                              origin=origin)
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status
            first = await ws.receive(timeout=TIMEOUT)
            await ws.close()
            assert first.type == aiohttp.WSMsgType.BINARY
            return 101

    assert asyncio.run(attempt("http://evil.example")) == 403
    assert asyncio.run(attempt(daemon.api_url)) == 101


def test_malformed_messages_close_the_socket_and_the_note_is_intact(daemon: DaemonProcess,
                                                      agents: list[Agent]) -> None:
    owner = _owner(daemon, agents)
    owner.ok(owner.create("a.md", "keep me\n"))

    async def send(data: bytes | str) -> int | None:
        session, ws = await _raw(daemon, "a.md", owner_token(daemon))
        try:
            await ws.receive(timeout=TIMEOUT)  # sync step 1
            if isinstance(data, str):
                await ws.send_str(data)
            else:
                await ws.send_bytes(data)
            while True:
                msg = await ws.receive(timeout=TIMEOUT)
                if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    return ws.close_code
        finally:
            await ws.close()
            await session.close()

    junks: list[bytes | str] = [
        b"\xff\xff\xff", b"\x07",  # not a number; an unknown message type
        b"\x00\x02\x10abc",  # an update shorter than announced
        b"\x00\x00\x03\xff\xff\xff", b"\x00\x02\x03\xff\xff\xff",  # garbage state vector, update
        b"\x00\x02\x05\x01\x02\x03\x04\x05",
        b"\x01\x05\x01\x01\x01\x03{]",  # an awareness state that is not JSON
        "text",
    ]
    for junk in junks:
        assert asyncio.run(send(junk)) == 4400, junk
    assert daemon.content("a.md") == "keep me\n"


def test_quiet_sockets_get_keepalives(home: Path, vault_dir: Path,
                                      daemon_factory: list[DaemonProcess]) -> None:
    (vault_dir / "a.md").write_text("x\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory, config="[live]\nkeepalive_seconds = 0.5\n")

    async def quiet() -> list[bytes]:
        session, ws = await _raw(d, "a.md", owner_token(d))
        try:
            got = []
            for _ in range(3):  # step 1, then keepalives with nothing else happening
                msg = await ws.receive(timeout=TIMEOUT)
                assert msg.type == aiohttp.WSMsgType.BINARY
                got.append(bytes(msg.data))
            return got
        finally:
            await ws.close()
            await session.close()

    messages = asyncio.run(quiet())
    assert messages[0][:2] == b"\x00\x00"  # sync step 1
    assert messages[1:] == [b"\x01\x01\x00", b"\x01\x01\x00"]  # an awareness update of no clients


@pytest.mark.slow
def test_a_stock_client_stays_connected_through_a_quiet_minute(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients) -> None:
    """With the default keepalive (10 s), the JS client's 30 s no-message watchdog never fires."""
    (vault_dir / "a.md").write_text("quiet\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    js.connect("q", live_url(d), "a.md", owner_token(d))
    js.wait_synced("q")
    idle = js.call("idle", "q", ms=65_000, deadline_s=90)  # the duration is the test
    assert idle["closes"] == []
    assert idle["connected"] is True
    js.insert("q", -1, "still live\n")
    wait_file(vault_dir, "a.md", "quiet\nstill live\n")
