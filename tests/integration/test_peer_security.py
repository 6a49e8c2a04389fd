"""R4, the peer half (SPEC §4.2, §4.3): outsiders learn nothing and change nothing.

Real daemons on temp homes, loopback only. The outsider is a hand-made TLS + websocket
client (``peer_wire.WireClient``) that records every TLS-decrypted byte the daemon sends
it -- the HTTP response and any websocket frames -- so the assertions are on what
actually crossed the socket: none of the vault id, the vault name, a note path, a note
id or a line of a note's text may appear in it (raw, JSON-escaped or base64). "Changed
nothing" is the folder byte for byte, the API's listing with every text, and the store's
update count.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stet.daemon.identity.device_identity import (
    DeviceIdentity,
    generate_identity,
    load_or_create_identity,
)
from stet.daemon.peers.tls import JOIN_SERVER_NAME, client_context
from stet.sync import peer_protocol as pp
from stet.sync.home import HomeLayout
from stet.sync.invites import decode_invite, proof_for_secret
from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.bridge_support import api_notes, open_store
from tests.integration.peer_support import (
    device_id,
    invite,
    join,
    linked,
    peer_port,
    start_daemon,
    tree,
    wait_linked,
    wait_same_tree,
)
from tests.integration.peer_wire import (
    WireClient,
    errors_in,
    fetch_everything,
    leaks,
    no_cert_context,
    open_member_session,
    peer_cert_of,
)

VAULT = "zephyr-ledger-q7"
NOTES = {
    "plans/orion-merger-x41.md": "# Orion merger\nThe ORION deal closes on 14 March (k7f2).\n",
    "kestrel-diary-b9.md": "Kestrel diary\nmet the auditor, quietly (w3m8)\n",
}


def make_vault(root: Path) -> None:
    for rel, text in NOTES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def secrets_of(d: DaemonProcess) -> list[str]:
    """Everything an outsider must not learn: vault id and name, note paths, ids and lines."""
    vault = d.client.status()["vaults"][0]
    out = [vault["id"], vault["name"]]
    for path, text in api_notes(d).items():
        out.append(path)
        out += [line for line in text.splitlines() if len(line) >= 6]
    with open_store(d.home) as db:
        out += [r[0] for r in db.execute("SELECT id FROM notes")]
    assert VAULT in out
    assert all(p in out for p in NOTES)
    return out


@dataclass(frozen=True)
class Snapshot:
    files: dict[str, bytes]
    notes: dict[str, str]
    updates: int
    peers: frozenset[str]


def snapshot(d: DaemonProcess, root: Path) -> Snapshot:
    with open_store(d.home) as db:
        updates = int(db.execute("SELECT COUNT(*) FROM updates").fetchone()[0])
    peers = frozenset(p["device"] for p in d.client.status()["peers"])
    return Snapshot(tree(root), api_notes(d), updates, peers)


def assert_learned_nothing(client: WireClient, secrets: list[str], what: str) -> None:
    found = leaks(bytes(client.received), secrets)
    assert not found, f"{what}: the outsider received {found} ({bytes(client.received)[:300]!r})"


def outsider_attempts(port: int, a_cert: bytes,
                      identity: DeviceIdentity | None) -> list[tuple[str, WireClient]]:
    """Every way in an outsider has: its certificate or none, each SNI, each route."""
    out = []
    for path in ("/stet/peer", "/stet/join", "/"):
        if identity is not None:
            out.append((f"own certificate, {path}", WireClient(port, client_context(identity, [a_cert]))))
        out.append((f"no certificate, {path}", WireClient(port, no_cert_context())))
    out.append(("join name, /stet/peer", WireClient(port, no_cert_context(), JOIN_SERVER_NAME)))
    out.append(("join name, /", WireClient(port, no_cert_context(), JOIN_SERVER_NAME)))
    return out


def try_everything(port: int, a_cert: bytes, identity: DeviceIdentity | None, vault_id: str,
                   claimed_device: str, secrets: list[str]) -> int:
    """Knock on every door; assert no websocket session and no secret. Returns bytes received."""
    total = 0
    for what, client in outsider_attempts(port, a_cert, identity):
        path = what.rsplit(", ", 1)[1]
        with client:
            status = client.upgrade(path, timeout=5)
            # Whatever happened, act as a peer would next: say hello, ask for the vault.
            client.send_stet(pp.HELLO, {"device": claimed_device, "vaults": [vault_id]})
            client.send_stet(pp.INDEX_SYNC, {"vault": vault_id, "sv": "AA==", "digest": "x"})
            client.drain(timeout=2)
        assert status != 101, f"{what}: the daemon opened a websocket session"
        assert status is None, f"{what}: expected no HTTP answer at all, got {status}"
        assert client.ended is not None, f"{what}: the daemon kept the connection open"
        assert_learned_nothing(client, secrets, what)
        total += len(client.received)
    return total


@pytest.fixture
def paired(tmp_path: Path,
           daemon_factory: list[DaemonProcess]) -> tuple[DaemonProcess, DaemonProcess, Path, Path]:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    make_vault(va)
    run_stet(tmp_path / "ha", "init", str(va), "--name", VAULT)
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a, VAULT), vb)
    wait_linked(a, b)
    wait_same_tree(va, vb)
    return a, b, va, vb


def test_a_device_that_never_joined_gets_no_session_and_learns_nothing(
    tmp_path: Path, paired: tuple[DaemonProcess, DaemonProcess, Path, Path]
) -> None:
    a, b, va, _vb = paired
    secrets = secrets_of(a)
    vault_id = secrets[0]
    before = snapshot(a, va)
    stranger = generate_identity(tmp_path)
    # It even claims to be B (a paired device) in its hello: the certificate decides.
    got = try_everything(peer_port(a), peer_cert_of(a.home), stranger, vault_id, device_id(b), secrets)
    assert got == 0, f"an outsider received {got} bytes"
    assert snapshot(a, va) == before
    assert linked(a, b), "the real peer's link survived the outsider's attempts"
    log = (a.layout.log_dir / "daemon.log").read_text()
    assert "refused a peer connection" in log

    # The control: the same hand-made client with B's certificate (B stopped) gets a session
    # and sees everything, so the detector above is not blind.
    assert b.stop() == 0
    member = load_or_create_identity(HomeLayout(b.home))
    with open_member_session(peer_port(a), member, peer_cert_of(a.home), vault_id) as client:
        fetch_everything(client, vault_id)
    assert set(leaks(bytes(client.received), secrets)) == set(secrets) - {VAULT}  # names stay local


def test_a_removed_device_is_cut_off_learns_nothing_and_changes_nothing(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    va, vb, vc = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    va.mkdir()
    make_vault(va)
    run_stet(tmp_path / "ha", "init", str(va), "--name", VAULT)
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    c = start_daemon(tmp_path / "hc", daemon_factory)
    join(b, invite(a, VAULT), vb)
    join(c, invite(a, VAULT), vc)
    wait_linked(a, b)
    wait_linked(a, c)
    wait_same_tree(va, vb, vc)
    b_id = device_id(b)

    run_stet(a.home, "devices", "remove", b_id)
    wait_until(lambda: not linked(a, b) and not linked(b, a), what="A to drop its link with B")

    def c_knows() -> bool:
        devices = c.client.request("GET", f"/v1/vaults/{VAULT}/devices")["devices"]
        return any(d["device"] == b_id and d["removed"] for d in devices)

    wait_until(c_knows, what="C to hear of B's removal")
    assert "is no longer a member: disconnecting" in (a.layout.log_dir / "daemon.log").read_text()

    # B keeps editing and keeps dialing; nothing of it reaches A or C.
    (vb / "from-removed-b.md").write_text("written after the removal\n")
    with (vb / "kestrel-diary-b9.md").open("a") as f:
        f.write("appended by B after its removal\n")
    b.wait_content("from-removed-b.md", "written after the removal\n")
    (vc / "from-c.md").write_text("C is still a member\n")
    a.wait_content("from-c.md", "C is still a member\n")
    time.sleep(3)  # scenario pause: B's dialer keeps retrying (backoff 0.5 s, 1 s, 2 s)
    for root in (va, vc):
        files = tree(root)
        assert "from-removed-b.md" not in files
        assert b"after its removal" not in files["kestrel-diary-b9.md"]
    assert not linked(a, b)
    assert not linked(c, b)

    # B's own certificate, from its home, at A's and at C's door.
    assert b.stop() == 0
    identity = load_or_create_identity(HomeLayout(b.home))
    assert identity.device_id == b_id
    for d, root in ((a, va), (c, vc)):
        secrets = secrets_of(d)
        before = snapshot(d, root)
        got = try_everything(peer_port(d), peer_cert_of(d.home), identity, secrets[0], b_id, secrets)
        assert got == 0, f"the removed device received {got} bytes"
        assert snapshot(d, root) == before


# -- joins: wrong secret, used invite, expired invite --------------------------------------


def raw_join(d: DaemonProcess, vault_id: str, secret: str, identity: DeviceIdentity,
             secrets: list[str], what: str) -> tuple[list[dict[str, Any]], bytes]:
    """A join attempt by hand on the join path; asserts it is refused and leaks nothing."""
    with WireClient(peer_port(d), no_cert_context(), JOIN_SERVER_NAME) as client:
        status = client.upgrade("/stet/join")
        assert status == 101, f"{what}: the join path answered {status}"
        server_der = client.sock.getpeercert(binary_form=True)
        assert server_der == peer_cert_of(d.home)
        proof = proof_for_secret(secret, vault_id, server_der, identity.cert_der)
        client.send_stet(pp.JOIN, {"vault": vault_id, "device": identity.device_id, "proof": proof,
                                   "cert_pem": identity.cert_pem.decode(), "name": "mallory"})
        code, messages = client.until_closed(timeout=10)
    frames = [m.frame for m in messages]
    assert [f.type for f in frames] == [pp.ERROR], f"{what}: {frames}"
    assert errors_in(messages) == [{"code": "join_refused", "message": "join refused"}], what
    assert_learned_nothing(client, [s for s in secrets if s != vault_id], what)  # the id was ours to send
    return errors_in(messages), bytes(client.received)[bytes(client.received).index(b"\r\n\r\n") + 4:]


def assert_cli_join_refused(d: DaemonProcess, invite_text: str, path: Path, secrets: list[str],
                            expect: str) -> None:
    out = run_stet(d.home, "join", invite_text, str(path), check=False)
    said = (out.stdout + out.stderr).decode()
    assert out.returncode != 0, said
    assert expect in said, said
    # The inviter's answer (relayed in the message) names neither the vault nor a note.
    assert not leaks(said.encode(), secrets), said
    assert d.client.status()["vaults"] == []
    assert not path.exists() or not any(path.iterdir())


def test_wrong_secret_used_and_expired_invites_are_refused_and_reveal_nothing(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    va = tmp_path / "a"
    va.mkdir()
    make_vault(va)
    run_stet(tmp_path / "ha", "init", str(va), "--name", VAULT)
    a = start_daemon(tmp_path / "ha", daemon_factory)
    d = start_daemon(tmp_path / "hd", daemon_factory)
    secrets = secrets_of(a)
    vault_id = secrets[0]
    before = snapshot(a, va)
    mallory = generate_identity(tmp_path)

    real = decode_invite(invite(a, VAULT))
    wrong = "A" + real.secret[1:] if not real.secret.startswith("A") else "B" + real.secret[1:]
    forged = dataclasses.replace(real, secret=wrong).encode()
    # The CLI on a real daemon: refused, and the daemon registered no vault and wrote nothing.
    not_in_invite = [s for s in secrets if s not in (VAULT, vault_id)]  # the invite itself names those
    assert_cli_join_refused(d, forged, tmp_path / "d", not_in_invite, "refused")
    # By hand: the refusal is the same bytes as for a vault that does not exist.
    wrong_answer = raw_join(a, vault_id, wrong, mallory, secrets, "wrong secret")
    no_vault = raw_join(a, "f" * len(vault_id), wrong, mallory, secrets, "no such vault")
    assert wrong_answer == no_vault
    assert snapshot(a, va) == before

    # The failed attempts did not burn the invite: the real one still works, once.
    join(d, real.encode(), tmp_path / "d")
    wait_linked(a, d)
    wait_same_tree(va, tmp_path / "d")
    before = snapshot(a, va)
    e = start_daemon(tmp_path / "he", daemon_factory)
    assert_cli_join_refused(e, real.encode(), tmp_path / "e", not_in_invite, "refused")
    raw_join(a, vault_id, real.secret, mallory, secrets, "a used invite")

    # An expired invite: refused by the joiner's CLI, and by the inviter even when the
    # invite text is edited to claim a later expiry.
    out = run_stet(a.home, "invite", VAULT, "--hours", "0.0003", "--address", f"127.0.0.1:{peer_port(a)}",
                   "--json")
    short = decode_invite(json.loads(out.stdout)["invite"])
    time.sleep(max(0.0, short.expires_at + 0.5 - time.time()))  # scenario pause: let the invite expire
    assert_cli_join_refused(e, short.encode(), tmp_path / "e", not_in_invite, "expired")
    relabelled = dataclasses.replace(short, expires_at=time.time() + 3600).encode()
    assert_cli_join_refused(e, relabelled, tmp_path / "e", not_in_invite, "refused")
    raw_join(a, vault_id, short.secret, mallory, secrets, "an expired invite")
    assert snapshot(a, va) == before
    assert device_id(e) not in {m["device"] for m in a.client.request(
        "GET", f"/v1/vaults/{VAULT}/devices")["devices"]}
