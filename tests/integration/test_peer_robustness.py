"""R3, the peer half (SPEC §4.3): bad input from an authenticated peer closes that link only.

Three real daemons on temp homes, loopback only: A (the target), C (a real paired peer
that must keep being served) and B, paired with A and then stopped so that the test can
speak as B: its identity comes from its home, and a hand-made TLS + websocket client
(``peer_wire``) sends whatever the case needs. Each case must close THAT link (observed
on the socket: an ERROR frame and/or a websocket close, then EOF; and A's status stops
listing B) with a logged reason, while A stays up, keeps serving C (an edit on C reaches
A within a deadline) and its store stays intact (``PRAGMA integrity_check``, every note
readable through the API, texts unchanged, A and C byte-identical).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stet.daemon.identity.device_identity import DeviceIdentity, load_or_create_identity
from stet.sync import peer_protocol as pp
from stet.sync.errors import CrdtError
from stet.sync.home import HomeLayout
from stet.sync.note_doc import NoteDoc
from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.bridge_support import api_notes, open_store
from tests.integration.peer_support import (
    device_id,
    invite,
    join,
    peer_port,
    start_daemon,
    stored_texts,
    wait_linked,
    wait_same_tree,
)
from tests.integration.peer_wire import (
    EMPTY_SV,
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_TEXT,
    WireClient,
    errors_in,
    fetch_everything,
    note_updates,
    open_member_session,
    peer_cert_of,
)

NOTES = {
    "alpha.md": "# Alpha\nfirst line of alpha\nsecond line of alpha\n",
    "projects/beta.md": "# Beta\n" + "".join(f"- item {i} of beta\n" for i in range(30)),
    "gamma.md": "gamma, a short one\n",
}


def assert_store_matches_api(d: DaemonProcess) -> None:
    """What the daemon shows is what its store holds (nothing shown that was never stored)."""
    shown = api_notes(d)
    assert stored_texts(d.home) == shown


def peers_of(d: DaemonProcess) -> set[str]:
    return {p["device"] for p in d.client.status()["peers"]}


@dataclass
class Rig:
    a: DaemonProcess
    c: DaemonProcess
    va: Path
    vc: Path
    me: DeviceIdentity  # B's identity: a paired member whose daemon is stopped
    a_cert: bytes
    vault_id: str
    updates: dict[str, bytes]  # note id -> A's full update of it, as A sent it to "B"
    ids: dict[str, str]  # path -> note id
    expected: dict[str, str] = field(default_factory=dict)  # path -> the text every note must hold
    controls: int = 0

    def session(self) -> WireClient:
        return open_member_session(peer_port(self.a), self.me, self.a_cert, self.vault_id)

    def control_edit(self) -> float:
        """An edit on C must still reach A; returns how long it took."""
        self.controls += 1
        line = f"control {self.controls} from C\n"
        with (self.vc / "control.md").open("a") as f:
            f.write(line)
        self.expected["control.md"] = self.expected.get("control.md", "") + line
        started = time.monotonic()
        self.a.wait_content("control.md", self.expected["control.md"], timeout=10)
        return time.monotonic() - started

    def assert_intact(self) -> None:
        assert self.a.proc is not None
        assert self.a.proc.poll() is None, "daemon A died"
        assert_store_matches_api(self.a)
        assert api_notes(self.a) == self.expected
        assert wait_same_tree(self.va, self.vc) == {p: t.encode() for p, t in self.expected.items()}


@pytest.fixture
def rig(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> Rig:
    va, vb, vc = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    va.mkdir()
    for rel, text in NOTES.items():
        (va / rel).parent.mkdir(parents=True, exist_ok=True)
        (va / rel).write_text(text)
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    c = start_daemon(tmp_path / "hc", daemon_factory)
    join(b, invite(a), vb)
    join(c, invite(a), vc)
    wait_linked(a, b)
    wait_linked(a, c)
    wait_same_tree(va, vb, vc)
    b_id = device_id(b)
    assert b.stop() == 0
    wait_until(lambda: b_id not in peers_of(a), what="A to see B go")
    me = load_or_create_identity(HomeLayout(b.home))
    assert me.device_id == b_id
    vault_id = a.client.status()["vaults"][0]["id"]
    with open_store(a.home) as db:
        ids = {p: i for i, p in db.execute("SELECT id, path FROM notes WHERE deleted = 0")}
    r = Rig(a, c, va, vc, me, peer_cert_of(a.home), vault_id, {}, ids, dict(NOTES))
    with r.session() as s:
        r.updates = {i.note_id: i.update for i in note_updates(fetch_everything(s, vault_id))}
    assert set(r.updates) >= set(ids.values())
    return r


def rejected_mutation(update: bytes, rng: random.Random, *, budget: int = 2000) -> bytes:
    """``update`` with bytes flipped, chosen so that applying it to the note fails to decode."""
    for _ in range(budget):  # bounded search, seeded: the same mutation every run
        m = bytearray(update)
        for _flip in range(rng.randint(1, 3)):
            m[rng.randrange(len(m))] ^= rng.choice((0x01, 0x40, 0x80, 0xFF))
        target = NoteDoc.from_updates([update])
        try:
            target.apply_update(bytes(m))
        except CrdtError:
            return bytes(m)
    raise AssertionError("no rejected mutation found")


def new_edit(update: bytes, text: str) -> bytes:
    """A real update A lacks: the note as A has it, with ``text`` appended by another client."""
    doc = NoteDoc.from_updates([update])
    change = doc.set_text(doc.text + text)
    assert change is not None
    return change


@dataclass(frozen=True)
class Case:
    name: str
    send: Callable[[WireClient, Rig], object]
    logged: str  # what A's log must give as the reason
    close_code: int | None = None


def _stet(type_: int, header: dict[str, object], payload: bytes = b"") -> Callable[[WireClient, Rig], object]:
    return lambda s, r: s.send_binary(pp.encode(type_, {k: (r.vault_id if v == "VAULT" else v)
                                                        for k, v in header.items()}, payload))


def _updates_frame(r: Rig, items: list[tuple[str, bytes]], vault: str | None = None) -> bytes:
    batch = pp.UpdateBatch(vault or r.vault_id,
                           [pp.UpdateItem(n, u, "sync", r.me.device_id) for n, u in items])
    return pp.encode_updates(batch)


def _truncated_frame(s: WireClient, r: Rig) -> None:
    frame = _updates_frame(r, [(r.ids["projects/beta.md"], r.updates[r.ids["projects/beta.md"]])])
    s.send_binary(frame[: len(frame) - 40])


def _truncated_update(s: WireClient, r: Rig) -> None:
    full = r.updates[r.ids["projects/beta.md"]]
    cut = full[: len(full) // 2]
    with pytest.raises(CrdtError):
        NoteDoc.from_updates([full]).apply_update(cut)
    s.send_binary(_updates_frame(r, [(r.ids["projects/beta.md"], cut)]))


def _mutated_update(s: WireClient, r: Rig) -> None:
    note = r.ids["alpha.md"]
    s.send_binary(_updates_frame(r, [(note, rejected_mutation(r.updates[note], random.Random(7)))]))


GOOD_LINE = "a line in a batch that also holds a bad update\n"


def _good_then_mutated(s: WireClient, r: Rig) -> None:
    """One batch: a valid new edit, then a bad update. The link closes; the valid edit (from
    a member) is kept, and kept once: what A announced is what A stored."""
    good = new_edit(r.updates[r.ids["gamma.md"]], GOOD_LINE)
    bad = rejected_mutation(r.updates[r.ids["alpha.md"]], random.Random(11))
    s.send_binary(_updates_frame(r, [(r.ids["gamma.md"], good), (r.ids["alpha.md"], bad)]))
    r.expected["gamma.md"] += GOOD_LINE


def _oversized(s: WireClient, r: Rig) -> None:
    # The header declares MAX_FRAME + 1 bytes; aiohttp must refuse before buffering them.
    head = WireClient.frame_bytes(OP_BINARY, b"", declared=pp.MAX_FRAME + 1)[:-4]
    s.send_raw(head + b"\0\0\0\0" + pp.encode(pp.SYNCED, {"vault": r.vault_id}) + bytes(64 * 1024))


def _oversized_in_fragments(s: WireClient, r: Rig) -> None:
    chunk = bytes(16 * 1024 * 1024)
    s.send_frame(OP_BINARY, b"S1" + bytes([pp.SYNCED]) + chunk[3:], fin=False)
    s.send_frame(OP_CONT, chunk, fin=False)
    s.send_frame(OP_CONT, chunk + bytes(1024), fin=True)


def _unknown_vault(s: WireClient, r: Rig) -> None:
    note = r.ids["alpha.md"]
    s.send_binary(_updates_frame(r, [(note, new_edit(r.updates[note], "never\n"))], vault="f" * 20))


def _bad_state_vector(s: WireClient, r: Rig) -> None:
    s.send_stet(pp.NOTE_SVS, {"vault": r.vault_id, "notes": [[r.ids["alpha.md"], base64.b64encode(
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01").decode()]]})


def _bad_index_update(s: WireClient, r: Rig) -> None:
    s.send_stet(pp.INDEX_UPDATE, {"vault": r.vault_id}, b"\x01\xff\xff\xff\xff\x0f\x07garbage")


CASES = [
    Case("garbage", lambda s, r: s.send_binary(random.Random(1).randbytes(300)), "not a Stet frame"),
    Case("bad magic", lambda s, r: s.send_binary(b"X1" + pp.encode(pp.SYNCED, {"vault": r.vault_id})[2:]),
         "not a Stet frame"),
    Case("unknown type", lambda s, r: s.send_binary(b"S1\x63\0\0\0\x02{}"), "unknown frame type"),
    Case("header not JSON", lambda s, r: s.send_binary(b"S1\x05\0\0\0\x05{nope"), "header is not JSON"),
    Case("header length past the end", lambda s, r: s.send_binary(b"S1\x05\x7f\0\0\0{}"),
         "bad header length"),
    Case("text websocket message", lambda s, r: s.send_frame(OP_TEXT, b'{"hello": 1}'),
         "unexpected websocket message type"),
    Case("hello naming another device", _stet(pp.HELLO, {"device": "C" * 56, "vaults": ["VAULT"]}),
         "hello names another device"),
    Case("truncated NOTE_UPDATES frame", _truncated_frame, "update item runs past the payload"),
    Case("NOTE_UPDATES item lengths that lie", _stet(pp.NOTE_UPDATES, {
        "vault": "VAULT", "items": [["x" * 32, -5, "sync", "d"]]}), "bad update item"),
    Case("truncated update", _truncated_update, "bad update"),
    Case("mutated CRDT update", _mutated_update, "bad update"),
    Case("valid edit then mutated update, one batch", _good_then_mutated, "bad update"),
    Case("bad state vector", _bad_state_vector, "bad state vector"),
    Case("bad index update", _bad_index_update, "bad update"),
    Case("NOTE_UPDATES for an unknown vault", _unknown_vault, "message for a vault this link does not share"),
    Case("frame over MAX_FRAME", _oversized, "exceeds limit", close_code=1009),
    Case("fragments over MAX_FRAME", _oversized_in_fragments, "exceeds limit", close_code=1009),
]


def test_bad_frames_from_an_authenticated_peer_close_that_link_only(rig: Rig) -> None:
    b7 = rig.me.device_id[:7]
    log_file = rig.a.layout.log_dir / "daemon.log"
    rig.control_edit()
    rig.assert_intact()
    report = []
    sse = EventCollector(rig.a)
    try:
        run_cases(rig, log_file, b7, sse, report)
    finally:
        sse.close()
    print("\n".join(report))


class EventCollector:
    """A's event stream (SSE), read by a thread into ``events`` for as long as it is open."""

    def __init__(self, d: DaemonProcess) -> None:
        port = urllib.parse.urlsplit(d.api_url).port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(f"GET /v1/vaults/notes/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                          f"Authorization: Bearer {d.client.token}\r\nAccept: text/event-stream\r\n"
                          "Last-Event-ID: 0\r\n\r\n"  # every event A still holds, not only from now
                          .encode())
        self.sock.settimeout(None)
        self.events: list[dict[str, str]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        buf = b""
        for _ in range(1_000_000):  # bounded; ends when the socket closes
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                fields = dict(line.split(": ", 1) for line in block.decode().split("\n")
                              if ": " in line and not line.startswith(":"))
                if "data" in fields:
                    self.events.append(fields)

    def changed(self, path: str) -> list[tuple[str, str]]:
        out = []
        for e in list(self.events):
            data = json.loads(e["data"])
            if e.get("event") == "note.changed" and data.get("path") == path and not data.get("created"):
                out.append((data["revisionBefore"], data["revision"]))
        return out

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=10)


def run_cases(rig: Rig, log_file: Path, b7: str, sse: EventCollector, report: list[str]) -> None:
    for case in CASES:
        ended = f"link with {b7} ended"
        logged_before = log_file.read_text().count(ended)
        with rig.session() as s:
            wait_until(lambda: {rig.me.device_id, device_id(rig.c)} <= peers_of(rig.a),
                       what=f"{case.name}: A to list the link")
            started = time.monotonic()
            case.send(s, rig)
            code, messages = s.until_closed(timeout=15)
            took = time.monotonic() - started
        errors = errors_in(messages)
        assert s.ended is not None, f"{case.name}: the link stayed open"
        if case.close_code is not None:
            assert code == case.close_code, f"{case.name}: close code {code}"
        else:
            assert errors, f"{case.name}: no ERROR frame before the close ({code}, {s.ended})"
            assert errors[-1]["code"] == "protocol", errors
            assert case.logged in errors[-1]["message"], errors
        wait_until(lambda: rig.me.device_id not in peers_of(rig.a), what=f"{case.name}: A to drop the link")
        wait_until(lambda n=logged_before, e=ended: log_file.read_text().count(e) > n,  # type: ignore[misc]
                   what=f"{case.name}: A to log the end of the link")
        log = log_file.read_text()
        assert case.logged in log, f"{case.name}: the reason is not in A's log"
        control = rig.control_edit()
        rig.assert_intact()
        changes = rig.a.client.request("GET", "/v1/vaults/notes/log", query={"path": "gamma.md"})["changes"]
        stored = sorted((c["id"], c["revisionBefore"], c["revisionAfter"]) for c in changes
                        if c["kind"] == "changed")
        stored = [(before, after) for _id, before, after in stored]
        # Every change A announced (its event stream) is one it stored (its log), once.
        count = len(stored)
        wait_until(lambda n=count: len(sse.changed("gamma.md")) >= n,  # type: ignore[misc]
                   what="A's events to catch up with its log")
        announced = sse.changed("gamma.md")
        assert announced == stored, f"{case.name}: A announced {announced} but stored {stored}"
        report.append(f"{case.name}: closed in {took * 1000:.0f} ms (code {code}), "
                      f"C->A {control * 1000:.0f} ms")


# 200 frames in the default run; STET_FUZZ_FRAMES / STET_FUZZ_SEED for the long run recorded
# in docs/reliability.md (the time bound grows with the count).
FUZZ_FRAMES = int(os.environ.get("STET_FUZZ_FRAMES", "200"))
FUZZ_SECONDS = max(60.0, FUZZ_FRAMES * 0.3)
FUZZ_SEED = int(os.environ.get("STET_FUZZ_SEED", "20261129"))


def _mutate(rng: random.Random, frame: bytes) -> tuple[str, bytes]:
    """One mutation of a real frame, weighted towards the CRDT payload (the update path)."""
    data = bytearray(frame)
    hlen = int.from_bytes(frame[3:7], "big")
    payload_at = 7 + hlen
    kind = rng.choices(["payload flip", "flip", "truncate", "insert", "splice", "header value"],
                       weights=[5, 2, 2, 1, 1, 2])[0]
    if kind == "payload flip" and len(data) > payload_at:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(payload_at, len(data))] ^= 1 << rng.randrange(8)
    elif kind == "flip":
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "insert":
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.randbytes(rng.randint(1, 16))
    elif kind == "splice":
        at = rng.randrange(len(data))
        data[at:] = frame[rng.randrange(len(frame)):]
    else:
        decoded = pp.decode(frame)
        header = dict(decoded.header)
        key = rng.choice(sorted(header) or ["vault"])
        header[key] = rng.choice([None, -1, 2**64, 1.5, "", "x" * 5000, [], {}, [["a", 1, "s", "d"]],
                                  [[k, -1, "s", "d"] for k in header], True])
        return kind, pp.encode(decoded.type, header, decoded.payload)
    return kind, bytes(data)


def test_fuzzed_frames_close_links_never_the_daemon(rig: Rig) -> None:
    """A seeded fuzz of real frames (bounded: FUZZ_FRAMES frames, FUZZ_SECONDS)."""
    rng = random.Random(FUZZ_SEED)
    corpus: list[bytes] = []
    with rig.session() as s:
        messages = fetch_everything(s, rig.vault_id)
    # Every frame type A sends, but INDEX_UPDATE: a mutated index update that still decodes is
    # a member's legitimate edit of the member list (one run deleted C's entry: C was then
    # rightly cut off, which says nothing about robustness). The "bad index update" case above
    # covers undecodable ones.
    corpus += [m.data for m in messages if m.opcode == OP_BINARY and m.data[2] != pp.INDEX_UPDATE]
    for note in sorted(rig.ids.values()):
        corpus.append(_updates_frame(rig, [(note, rig.updates[note])]))
        corpus.append(_updates_frame(rig, [(note, new_edit(rig.updates[note], "\n"))]))
    svs = [[n, base64.b64encode(NoteDoc.from_updates([u]).state_vector()).decode()]
           for n, u in rig.updates.items()]
    corpus.append(pp.encode(pp.NOTE_SVS, {"vault": rig.vault_id, "notes": svs}))
    probe = pp.encode(pp.INDEX_SYNC, {"vault": rig.vault_id, "sv": EMPTY_SV, "digest": "probe"})
    before = {p: t for p, t in api_notes(rig.a).items()}
    outcomes: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    deadline = time.monotonic() + FUZZ_SECONDS
    session: WireClient | None = None
    sent = 0
    try:
        for _ in range(FUZZ_FRAMES):  # bounded in count, and in time below
            if time.monotonic() > deadline:
                break
            if session is None:
                session = rig.session()
            kind, frame = _mutate(rng, rng.choice(corpus))
            session.send_binary(frame)
            session.send_binary(probe)
            sent += 1
            msg, seen = session.until({pp.NOTE_SVS}, timeout=10)
            for e in errors_in(seen):
                reasons[str(e.get("message"))[:40]] += 1
            if msg is not None and msg.opcode == OP_BINARY:
                outcomes[f"{kind}: link kept"] += 1
                continue
            assert msg is not None or session.ended is not None, f"A stopped answering after a {kind} frame"
            assert msg is None or msg.opcode == OP_CLOSE
            outcomes[f"{kind}: link closed"] += 1
            session.close()
            session = None
            assert rig.a.proc is not None
            assert rig.a.proc.poll() is None, "daemon A died"
    finally:
        if session is not None:
            session.close()
    assert sent >= min(FUZZ_FRAMES, 50), f"only {sent} frames in {FUZZ_SECONDS}s"
    closed = sum(n for k, n in outcomes.items() if k.endswith("closed"))
    print(f"\nfuzz: seed {FUZZ_SEED}, {sent} frames, {closed} links closed, {sent - closed} frames accepted")
    for k, n in sorted(outcomes.items()):
        print(f"  {k}: {n}")
    for k, n in reasons.most_common():
        print(f"  reason {k!r}: {n}")
    # The daemon is up, serves C, and its store is whole. Frames that decoded to valid
    # updates (a flipped client id makes new, legitimate items) may have changed texts:
    # an authenticated peer may edit. Whatever they did, A and C agree and every note reads.
    assert rig.a.proc is not None
    assert rig.a.proc.poll() is None
    members = rig.a.client.request("GET", "/v1/vaults/notes/devices")["devices"]
    assert any(m["device"] == device_id(rig.c) and not m["removed"] for m in members), members
    rig.expected = api_notes(rig.a)
    rig.control_edit()
    assert_store_matches_api(rig.a)
    final = wait_same_tree(rig.va, rig.vc)
    notes = api_notes(rig.a)
    assert {p: t.encode() for p, t in notes.items()} == final
    changed = sorted(p for p in before if notes.get(p) != before[p] and p != "control.md")
    print(f"  notes whose text an accepted fuzz frame changed: {changed}")
