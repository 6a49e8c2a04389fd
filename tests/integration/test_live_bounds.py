"""Live editing bounded (issue 33, findings 2, 3, 6, 7, 10), through a real daemon.

- Sockets per token, per note and in total have limits (``[live] max_sockets*``): the
  next socket is closed 4429 with a reason naming the key.
- An update may only carry the note's ``content`` text: another shared type, keys on the
  text type, formatting or embeds are refused (4415) and nothing is stored.
- An update over ``[live] max_update_bytes`` is refused (4413) before it is decoded; a
  token that may not change the note has its edits refused without decoding them.
- A close reason never names a path the token may not read.
- An awareness update changes only the sender's own client ids.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pycrdt
import pytest

from stet.sync.yjs_protocol import parse
from tests.harness import DaemonProcess, wait_until
from tests.integration.agent_support import Agent, make_token, owner_agent
from tests.integration.bridge_support import start_daemon
from tests.integration.live_support import JsClients, js_clients, live_url, owner_token
from tests.integration.live_wire import RawLive, awareness, update_message

NOTE = "a 31-character note, no more.\n"


@pytest.fixture
def js() -> Iterator[JsClients]:
    with js_clients() as clients:
        yield clients


def _edit(base: RawLive, change: Any) -> bytes:
    """The update ``change(doc)`` makes on a copy of what the socket has synced."""
    doc: pycrdt.Doc[Any] = pycrdt.Doc()
    doc.apply_update(base.doc.get_update())
    before = doc.get_state()
    change(doc)
    return bytes(doc.get_update(before))


async def _fresh_step2_bytes(d: DaemonProcess, path: str) -> tuple[str, int]:
    """What a new client of the note downloads: (its text, the step 2's size)."""
    client = await RawLive.open(d, path, owner_token(d))
    try:
        text = await client.join()
        return text, client.step2_bytes
    finally:
        await client.close()


# -- finding 3: only the note's text --------------------------------------------------------


def test_an_update_carrying_anything_but_the_notes_text_is_refused(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    (vault_dir / "a.md").write_text(NOTE, encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    appender = make_token(home, "appender", read=("**",), append=("a.md",))
    writer = make_token(home, "writer", read=("**",), write=("**",))
    blob = "y" * 300_000

    def one_char_and_a_map(doc: pycrdt.Doc[Any]) -> None:
        with doc.transaction():
            doc.get("content", type=pycrdt.Text).insert(len(NOTE), "!")
            doc.get("meta", type=pycrdt.Map)["blob"] = blob

    def unchanged_text_and_a_map(doc: pycrdt.Doc[Any]) -> None:
        doc.get("extra", type=pycrdt.Map)["blob"] = blob

    def bold(doc: pycrdt.Doc[Any]) -> None:
        doc.get("content", type=pycrdt.Text).format(0, 5, {"bold": blob})

    def embed(doc: pycrdt.Doc[Any]) -> None:
        doc.get("content", type=pycrdt.Text).insert_embed(3, {"image": blob})

    def keys_on_the_text_type() -> bytes:
        # Keys under the root "content" (parentSub items): invisible in the text.
        other: pycrdt.Doc[Any] = pycrdt.Doc()
        other.get("content", type=pycrdt.Map)["hidden"] = blob
        return bytes(other.get_update())

    async def attempts() -> list[tuple[str, int | None, str]]:
        out = []
        cases: list[tuple[str, str, Any]] = [
            ("append token: one character plus a Y.Map", appender, one_char_and_a_map),
            ("write token: unchanged text plus a Y.Map", writer, unchanged_text_and_a_map),
            ("write token: formatting", writer, bold),
            ("write token: an embed", writer, embed),
            ("write token: keys on the text type", writer, None),
        ]
        for what, token, change in cases:
            client = await RawLive.open(d, "a.md", token)
            try:
                assert await client.join() == NOTE
                update = keys_on_the_text_type() if change is None else _edit(client, change)
                assert len(update) > 100_000, what
                await client.send(update_message(update))
                code, reason = await client.closed()
                out.append((what, code, reason))
            finally:
                await client.close()
        return out

    for what, code, reason in asyncio.run(attempts()):
        assert code == 4415, (what, code, reason)
        assert "content" in reason, (what, reason)
        assert "text" in reason, (what, reason)
    assert d.content("a.md") == NOTE
    text, downloaded = asyncio.run(_fresh_step2_bytes(d, "a.md"))
    assert text == NOTE
    assert downloaded < 4096, f"a new client of a {len(NOTE)}-character note downloads {downloaded} bytes"

    async def plain_edit_still_works() -> None:
        client = await RawLive.open(d, "a.md", writer)
        try:
            await client.join()
            await client.send(update_message(_edit(
                client, lambda doc: doc.get("content", type=pycrdt.Text).insert(0, "ok "))))
        finally:
            await client.close()

    asyncio.run(plain_edit_still_works())
    d.wait_content("a.md", "ok " + NOTE)


# -- finding 7 and the size cap: refused before decoding ------------------------------------


def _many_items(base: RawLive, items: int) -> bytes:
    """One update of ``items`` one-character insertions that cannot merge: each is put
    before the last (at 0), so none continues another. (Alternating ends gave the same
    update but cost the test 33 s of pycrdt searching for the end: it timed out under load.)"""
    def change(doc: pycrdt.Doc[Any]) -> None:
        text = doc.get("content", type=pycrdt.Text)
        with doc.transaction():
            for _ in range(items):
                text.insert(0, "x")
    return _edit(base, change)


def _holds(folder: Path) -> list[dict[str, Any]]:
    out = []
    for f in folder.glob("holds-*.jsonl"):
        for line in f.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if "ms" in entry and "samples" in entry:
                out.append(entry)
    return out


def test_a_read_only_tokens_large_update_is_refused_without_being_decoded(
        home: Path, vault_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        daemon_factory: list[DaemonProcess]) -> None:
    holds = tmp_path / "holds"
    monkeypatch.setenv("STET_LOOP_HOLDS", str(holds))
    monkeypatch.setenv("STET_LOOP_HOLDS_MS", "40")
    (vault_dir / "a.md").write_text(NOTE, encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    reader = make_token(home, "reader", read=("**",))

    async def attempts() -> list[tuple[int | None, str, int]]:
        out = []
        update = b""
        for _ in range(3):
            client = await RawLive.open(d, "a.md", reader)
            try:
                await client.join()
                update = update or _many_items(client, 100_000)  # the note is the same each time
                await client.send(update_message(update))
                code, reason = await client.closed()
                out.append((code, reason, len(update)))
            finally:
                await client.close()
        return out

    results = asyncio.run(attempts())
    for code, reason, _ in results:
        assert code == 4403, (code, reason)
        assert "may not write" in reason, reason
    assert d.content("a.md") == NOTE
    assert d.stop() == 0  # the holds file is complete after a clean stop
    decoding = [h for h in _holds(holds)
                if any("preview_update" in frame or "apply_update" in frame
                       for sample in h["samples"] for frame in sample)]
    longest = max((h["ms"] for h in _holds(holds)), default=0.0)
    print(f"3 refused read-only updates of {results[0][2]} bytes; longest loop hold {longest} ms; "
          f"holds in a CRDT decode: {[h['ms'] for h in decoding]}")
    assert decoding == [], decoding[0]


def test_a_read_only_tokens_sync_step_2_is_checked_when_small_and_ignored_when_large(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    """A read-only client reconnecting with an edit of its own in its document: refused
    (4403) as before when its step 2 is small; a step 2 over 64 KiB is not decoded, and
    nothing of it is applied (the socket stays open and keeps receiving the note)."""
    (vault_dir / "a.md").write_text(NOTE, encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    reader = make_token(home, "reader", read=("**",))

    async def attempt(text: str) -> tuple[int | None, str]:
        """(the close code and reason, or None and the text still synced after the step 2)."""
        client = await RawLive.open(d, "a.md", reader)
        try:
            await client.join()
            update = _edit(client, lambda doc: doc.get("content", type=pycrdt.Text).insert(0, text))
            await client.send(update_message(update, step2=True))
            await client.send(bytes([0, 0]) + pycrdt.write_message(b"\x00"))  # answered after it
            for _ in range(1000):
                msg = await client.receive()
                if msg.type != aiohttp.WSMsgType.BINARY:
                    return client.ws.close_code, str(msg.extra or "")
                if bytes(msg.data)[:2] == b"\x00\x01":
                    fresh: pycrdt.Doc[Any] = pycrdt.Doc()
                    fresh.apply_update(parse(bytes(msg.data)).payload)
                    return None, str(fresh.get("content", type=pycrdt.Text))
            raise AssertionError("no answer to a sync step 1")
        finally:
            await client.close()

    code, reason = asyncio.run(attempt("offline edit "))
    assert code == 4403, (code, reason)
    assert "may not write" in reason, reason
    assert asyncio.run(attempt("z" * 100_000)) == (None, NOTE)  # open, and nothing applied
    assert d.content("a.md") == NOTE


def test_an_update_over_max_update_bytes_is_refused_and_says_so(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    (vault_dir / "a.md").write_text(NOTE, encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory, config="[live]\nmax_update_bytes = 100000\n")
    writer = make_token(home, "writer", read=("**",), write=("**",))

    async def attempt() -> tuple[int | None, str]:
        client = await RawLive.open(d, "a.md", writer)
        try:
            await client.join()
            update = _edit(client, lambda doc: doc.get("content", type=pycrdt.Text).insert(0, "z" * 150_000))
            await client.send(update_message(update))
            return await client.closed()
        finally:
            await client.close()

    code, reason = asyncio.run(attempt())
    assert code == 4413, (code, reason)
    assert "max_update_bytes" in reason, reason
    assert "100000" in reason, reason
    assert d.content("a.md") == NOTE


# -- finding 2: sockets bounded --------------------------------------------------------------


def test_live_sockets_are_bounded_per_token_per_note_and_in_total(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    for name in ("a", "b", "c", "d"):
        (vault_dir / f"{name}.md").write_text(f"{name}\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory, config=(
        "[live]\nmax_sockets = 6\nmax_sockets_per_token = 3\nmax_sockets_per_note = 4\n"))
    t1, t2, t3 = (make_token(home, f"t{i}", read=("**",)) for i in (1, 2, 3))

    async def scenario() -> None:
        held: list[RawLive] = []

        async def accepted(path: str, token: str) -> RawLive:
            client = await RawLive.open(d, path, token)
            assert await client.join() == path[0] + "\n"
            held.append(client)
            return client

        async def refused(path: str, token: str, key: str) -> None:
            client = await RawLive.open(d, path, token)
            try:
                code, reason = await client.closed()
            finally:
                await client.close()
            assert code == 4429, (path, key, code, reason)
            assert key in reason, reason

        try:
            for _ in range(3):
                await accepted("a.md", t1)
            await refused("b.md", t1, "max_sockets_per_token")  # t1's fourth
            await accepted("a.md", t2)
            await refused("a.md", t3, "max_sockets_per_note")  # a.md's fifth
            await accepted("b.md", t3)
            await accepted("c.md", t3)  # six in all
            await refused("d.md", t2, "max_sockets")  # the seventh
            # A socket closed is a place free again.
            first = held.pop(0)
            await first.close()
            # The daemon lets it go just after its close reply: wait until it has.
            await asyncio.to_thread(wait_until, lambda: d.client.status()["liveSockets"] == 5,
                                    what="the closed socket's place freed")
            await accepted("d.md", t2)
        finally:
            for client in held:
                await client.close()

    asyncio.run(scenario())


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_the_maximum_of_live_sockets_is_cheap_and_the_next_is_refused(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    """Every socket the default limits allow, at once: the next is refused (4429), the
    daemon's memory and its API's latency are measured (printed, loosely bounded)."""
    from stet.sync.config import LiveConfig

    limits = LiveConfig()
    notes = -(-limits.max_sockets // limits.max_sockets_per_note)
    tokens = -(-limits.max_sockets // limits.max_sockets_per_token)
    for i in range(notes + 1):
        (vault_dir / f"n{i}.md").write_text(f"note {i}\n" * 20, encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    made = [make_token(home, f"r{i}", read=("**",)) for i in range(tokens + 1)]
    agent: Agent = owner_agent(d)
    assert d.proc is not None
    pid = d.proc.pid

    def latencies(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            assert agent.request("GET", "/v1/status").status == 200
            out.append((time.perf_counter() - t0) * 1000)
        return sorted(out)

    idle_ms = latencies(40)
    rss_before = _rss_kb(pid)

    async def fill() -> dict[str, Any]:
        held: list[RawLive] = []
        try:
            for i in range(limits.max_sockets):
                client = await RawLive.open(d, f"n{i // limits.max_sockets_per_note}.md",
                                            made[i // limits.max_sockets_per_token])
                await client.join()
                held.append(client)
            extra = await RawLive.open(d, f"n{notes}.md", made[-1])  # only the total is over
            code, reason = await extra.closed()
            await extra.close()
            # Every client announces itself (an awareness state of a cursor and a name):
            # each is relayed to the note's other clients.
            for n, client in enumerate(held):
                await client.send(awareness([(10_000 + n, 1, {"user": f"u{n}", "cursor": n})]))
            last = held[-1]
            for _ in range(10_000):
                if any(e.client_id == 10_000 + len(held) - 2 for e in last.awareness):
                    break
                await last.receive()
            rss = _rss_kb(pid)
            busy_ms = await asyncio.to_thread(latencies, 40)
            return {"code": code, "reason": reason, "rss": rss, "busy_ms": busy_ms}
        finally:
            for client in held:
                await client.close()

    got = asyncio.run(fill())
    agent.close()
    grew_mb = (got["rss"] - rss_before) / 1024
    p50, worst = got["busy_ms"][len(got["busy_ms"]) // 2], got["busy_ms"][-1]
    print(f"{limits.max_sockets} live sockets ({notes} notes, {tokens} tokens): daemon RSS "
          f"{rss_before / 1024:.1f} -> {got['rss'] / 1024:.1f} MB (+{grew_mb:.1f} MB); /v1/status "
          f"p50 {idle_ms[len(idle_ms) // 2]:.1f} -> {p50:.1f} ms, max {idle_ms[-1]:.1f} -> {worst:.1f} ms; "
          f"test process maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB; "
          f"load {os.getloadavg()[0]:.1f}")
    assert got["code"] == 4429, got
    assert "max_sockets" in got["reason"], got["reason"]
    assert grew_mb < 150, f"{limits.max_sockets} sockets cost {grew_mb:.0f} MB"
    assert worst < 2000, got["busy_ms"]


# -- finding 6: close reasons ------------------------------------------------------------------


def test_a_close_reason_never_names_a_path_the_token_cannot_read(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients) -> None:
    (vault_dir / "public").mkdir()
    (vault_dir / "public" / "p.md").write_text("public\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    reader = make_token(home, "reader", read=("public/**",))
    js.connect("reader", live_url(d), "public/p.md", reader)
    js.connect("owner", live_url(d), "public/p.md", owner_token(d))
    js.wait_synced("reader")
    js.wait_synced("owner")
    owner = owner_agent(d)
    try:
        owner.ok(owner.move("public/p.md", "secret/hidden-name-Q7.md"))
    finally:
        owner.close()
    code, reason = js.wait_closed("reader")
    assert code == 4410, (code, reason)
    assert "secret" not in reason, reason
    assert "hidden-name-Q7" not in reason, reason
    assert reason == "the note was moved where this token may not read it", reason
    assert js.wait_closed("owner") == (4410, "moved to secret/hidden-name-Q7.md")


# -- finding 10: awareness is the sender's own -------------------------------------------------


def test_an_awareness_update_changes_only_the_senders_own_client_ids(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients) -> None:
    (vault_dir / "a.md").write_text("x\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    token = owner_token(d)
    reader = make_token(home, "mallory", read=("**",))
    for c in ("ann", "bob"):
        js.connect(c, live_url(d), "a.md", token)
        js.wait_synced(c)
    js.awareness("ann", {"user": "ann", "cursor": 1})
    js.wait_peer_awareness("bob", "user", "ann")

    async def spoof() -> None:
        mallory = await RawLive.open(d, "a.md", reader)
        try:
            await mallory.join()
            for _ in range(1000):  # the states the server knows: ann's among them
                if any('"ann"' in e.state for e in mallory.awareness):
                    break
                await mallory.receive()
            ann = next(e for e in mallory.awareness if '"ann"' in e.state)
            await mallory.send(awareness([(ann.client_id, ann.clock + 10, {"user": "spoofed", "cursor": 0})]))
            await mallory.send(awareness([(ann.client_id, ann.clock + 20, None)]))
            await mallory.send(awareness([(424242, 1, {"user": "mallory-own"})]))
            # Bob hears of mallory's own state: the spoofs before it were handled.
            states = await asyncio.to_thread(js.wait_peer_awareness, "bob", "user", "mallory-own")
            users = sorted(s.get("user") for s in states if s)
            assert users == ["ann", "mallory-own"], users
        finally:
            await mallory.close()

    asyncio.run(spoof())
    states = js.wait_peer_awareness("bob", "user", "ann")
    assert all(s.get("user") != "spoofed" for s in states if s), states


def test_awareness_state_size_and_rate_are_bounded(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess], js: JsClients) -> None:
    (vault_dir / "a.md").write_text("x\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory, config=(
        "[live]\nmax_awareness_state_bytes = 1000\nawareness_per_second = 5\n"))
    token = owner_token(d)
    js.connect("bob", live_url(d), "a.md", token)
    js.wait_synced("bob")

    async def attempts() -> tuple[tuple[int | None, str], tuple[int | None, str], int]:
        big = await RawLive.open(d, "a.md", token)
        try:
            await big.join()
            await big.send(awareness([(5001, 1, {"user": "big", "pad": "p" * 2000})]))
            too_big = await big.closed()
        finally:
            await big.close()
        fast = await RawLive.open(d, "a.md", token)
        sent = 0
        try:
            await fast.join()
            for clock in range(1, 41):  # 40 at once: past the burst of 10
                if fast.ws.closed:
                    break
                try:
                    await fast.send(awareness([(5002, clock, {"user": "fast", "n": clock})]))
                except (aiohttp.ClientConnectionResetError, ConnectionResetError):
                    break  # the daemon closed it meanwhile (a loaded machine)
                sent += 1
            too_fast = await fast.closed()
        finally:
            await fast.close()
        return too_big, too_fast, sent

    too_big, too_fast, _ = asyncio.run(attempts())
    assert too_big[0] == 4413, too_big
    assert "max_awareness_state_bytes" in too_big[1], too_big
    assert too_fast[0] == 4429, too_fast
    assert "awareness_per_second" in too_fast[1], too_fast
    # The oversized state never reached the others; a normal one still does.
    js.connect("ann", live_url(d), "a.md", token)
    js.awareness("ann", {"user": "ann"})
    try:
        states = js.wait_peer_awareness("bob", "user", "ann")
    except AssertionError as exc:  # seen once on a loaded CI machine: say what the daemon saw
        raise AssertionError(f"{exc}\n--- daemon log ---\n{d.log_tail(40)}") from exc
    assert all(s.get("user") != "big" for s in states if s), states


# -- the live protocol, fuzzed -----------------------------------------------------------------

FUZZ_SEED = 20261203
FUZZ_MESSAGES = int(os.environ.get("STET_FUZZ_LIVE", "200"))


def _mutate(rng: Any, data: bytes) -> bytes:
    out = bytearray(data)
    how = rng.randrange(6)
    if how == 0 and out:  # bit flips
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(out))
            out[i] ^= 1 << rng.randrange(8)
    elif how == 1 and len(out) > 1:  # cut short
        del out[rng.randrange(1, len(out)):]
    elif how == 2:  # bytes inserted
        i = rng.randrange(len(out) + 1)
        out[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    elif how == 3 and len(out) > 2:  # a length prefix made huge (varuint 2^32 and more)
        out[2:3] = b"\xff\xff\xff\xff\x0f"
    elif how == 4:  # an integer past 2^63 where the message type or a client id goes
        out[0:1] = b"\xff" * 10 + b"\x01"
    else:  # two messages spliced
        i = rng.randrange(len(out) + 1)
        out = out[:i] + bytearray(data[rng.randrange(len(data) + 1):])
    return bytes(out)


def test_fuzzed_live_messages_close_with_a_code_and_leave_the_daemon_clean(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    """Seeded mutations of real messages (an update, a step 1, a step 2, awareness) from a
    write token: every socket either takes the message or closes with a 4xxx code (never
    1011, "internal"); the daemon stays up, its log has no traceback, other notes intact."""
    import random

    (vault_dir / "fuzz.md").write_text("fuzz me\n", encoding="utf-8")
    (vault_dir / "keep.md").write_text("keep me\n", encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    writer = make_token(home, "fuzzer", read=("**",), write=("fuzz.md",))
    rng = random.Random(FUZZ_SEED)

    async def run() -> dict[int | None, int]:
        codes: dict[int | None, int] = {}
        client = await RawLive.open(d, "fuzz.md", writer)
        await client.join()
        update = _edit(client, lambda doc: doc.get("content", type=pycrdt.Text).insert(0, "typed "))
        bases = [update_message(update), update_message(update, step2=True),
                 bytes([0, 0]) + pycrdt.write_message(client.doc.get_state()),
                 awareness([(777, 1, {"user": "fuzz", "cursor": {"anchor": 1, "head": 2}})])]
        try:
            for _ in range(FUZZ_MESSAGES):
                if client.ws.closed:
                    await client.close()
                    client = await RawLive.open(d, "fuzz.md", writer)
                    await client.join()
                await client.send(_mutate(rng, rng.choice(bases)))
                # A message the daemon takes may be answered by nothing: a sync step 1 of
                # an empty document is always answered (step 2), so it was handled.
                await client.send(bytes([0, 0]) + pycrdt.write_message(b"\x00"))
                for _ in range(1000):
                    msg = await client.receive()
                    if msg.type != aiohttp.WSMsgType.BINARY:
                        codes[client.ws.close_code] = codes.get(client.ws.close_code, 0) + 1
                        break
                    if bytes(msg.data)[:2] == b"\x00\x01":
                        codes[0] = codes.get(0, 0) + 1  # taken (0: still open)
                        break
                else:
                    raise AssertionError("no answer to a sync step 1")
        finally:
            await client.close()
        return codes

    codes = asyncio.run(run())
    outcomes = sorted(codes.items(), key=str)
    print(f"{FUZZ_MESSAGES} fuzzed live messages (seed {FUZZ_SEED}): outcomes {outcomes}")
    assert 1011 not in codes, codes
    assert all(code in (0, 1009) or (code is not None and 4400 <= code < 4600) for code in codes), codes
    assert d.proc is not None
    assert d.proc.poll() is None
    assert d.content("keep.md") == "keep me\n"
    assert d.content("fuzz.md") is not None
    log = (home / "logs" / "daemon.log").read_text(errors="replace")
    assert "Traceback" not in log, log[log.index("Traceback") - 300:][:3000]
