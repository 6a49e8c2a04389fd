"""Joins on the peer port bounded (issue 33, finding 5), with raw TLS sockets on a real daemon.

The port listens on every interface, and a join socket needs no certificate: a stranger
may open as many as it likes. A pairing check runs in a child process
(``python -m stet.daemon.peers.invite_crypto``); these tests watch the daemon's children
in ``/proc`` while strangers knock:

- no child for a socket that has not sent a well-formed join request, none at all while
  no invite is open;
- at most ``[peer] max_concurrent_joins`` (2) at once, the others told "busy";
- ``[peer] join_attempts_per_minute`` per address, then HTTP 429 before any upgrade.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stet.daemon.identity.device_identity import DeviceIdentity, generate_identity
from stet.daemon.peers.tls import JOIN_SERVER_NAME
from stet.sync import peer_protocol as pp
from stet.sync.invites import decode_invite, proof_for_secret
from tests.harness import DaemonProcess, run_stet
from tests.integration.peer_support import PEER_TEST_CONFIG, invite, join, peer_port, wait_linked
from tests.integration.peer_wire import WireClient, errors_in, no_cert_context, peer_cert_of

REFUSED = {"code": "join_refused", "message": "join refused"}


def crypto_children(pid: int) -> set[int]:
    """The daemon's ``invite_crypto`` children alive now."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), "")
        if ppid == str(pid) and b"invite_crypto" in cmdline:
            found.add(int(entry.name))
    return found


class ChildWatch:
    """Samples the daemon's crypto children every few ms: how many ever, how many at once."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seen: set[int] = set()
        self.most_at_once = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for _ in range(200_000):  # bounded: ~15 minutes at most
            now = crypto_children(self.pid)
            self.seen |= now
            self.most_at_once = max(self.most_at_once, len(now))
            if self._stop.wait(0.004):
                return

    def __enter__(self) -> ChildWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@contextmanager
def watching(d: DaemonProcess) -> Iterator[ChildWatch]:
    assert d.proc is not None
    with ChildWatch(d.proc.pid) as watch:
        yield watch


def start(home: Path, vault: Path, factory: list[DaemonProcess], config: str = "") -> DaemonProcess:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(PEER_TEST_CONFIG + config)
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    d = DaemonProcess(home)
    factory.append(d)
    return d.start()


def join_socket(d: DaemonProcess) -> tuple[WireClient, int | None]:
    client = WireClient(peer_port(d), no_cert_context(), JOIN_SERVER_NAME).connect()
    return client, client.upgrade("/stet/join")


def send_join(client: WireClient, d: DaemonProcess, vault_id: str, secret: str,
              identity: DeviceIdentity) -> None:
    server_der = client.sock.getpeercert(binary_form=True)
    assert server_der == peer_cert_of(d.home)
    proof = proof_for_secret(secret, vault_id, server_der, identity.cert_der)
    client.send_stet(pp.JOIN, {"vault": vault_id, "device": identity.device_id, "proof": proof,
                               "cert_pem": identity.cert_pem.decode(), "name": "mallory"})


def answer_of(client: WireClient) -> list[dict[str, object]]:
    _, messages = client.until_closed(timeout=30)
    return errors_in(messages)


def _wrong(secret: str) -> str:
    return ("B" if secret.startswith("A") else "A") + secret[1:]


def test_join_sockets_start_no_child_until_a_request_and_two_at_once_at_most(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "n.md").write_text("hello\n")
    a = start(tmp_path / "ha", tmp_path / "a", daemon_factory, "join_attempts_per_minute = 100\n")
    vault_id = a.client.status()["vaults"][0]["id"]
    real = decode_invite(invite(a))  # an invite is open
    mallory = generate_identity(tmp_path)
    sockets = []
    try:
        with watching(a) as watch:
            for _ in range(15):
                client, status = join_socket(a)
                assert status == 101, status
                sockets.append(client)
            a.client.status()  # a turn of the daemon's loop after every upgrade
            assert crypto_children(watch.pid) == set(), "children started for sockets that sent nothing"
            assert watch.seen == set(), watch.seen
            for client in sockets:  # all at once: wrong proofs for the real vault
                send_join(client, a, vault_id, _wrong(real.secret), mallory)
            answers = [answer_of(client) for client in sockets]
        print(f"15 join requests at once: {len(watch.seen)} children, at most {watch.most_at_once} at once; "
              f"answers {sorted(str(x) for x in answers)}")
        assert 1 <= watch.most_at_once <= 2, watch.most_at_once
        busy = [x for x in answers if x != [REFUSED]]
        assert all(x == [{"code": "join_busy", "message": "busy with other joins: try again"}]
                   for x in busy), busy
        assert len(answers) - len(busy) >= 2
    finally:
        for client in sockets:
            client.close()
    # The real invite was not burnt, and a real join still works.
    hb = tmp_path / "hb"
    hb.mkdir()
    (hb / "config.toml").write_text(PEER_TEST_CONFIG)
    joiner = DaemonProcess(hb)
    daemon_factory.append(joiner)
    joiner.start()
    join(joiner, real.encode(), tmp_path / "b")
    wait_linked(a, joiner)


def test_no_invite_open_starts_no_child_at_all(tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    (tmp_path / "a").mkdir()
    a = start(tmp_path / "ha", tmp_path / "a", daemon_factory, "join_attempts_per_minute = 100\n")
    vault_id = a.client.status()["vaults"][0]["id"]
    mallory = generate_identity(tmp_path)
    with watching(a) as watch:
        for _ in range(5):
            client, status = join_socket(a)
            try:
                assert status == 101, status
                send_join(client, a, vault_id, "A" * 43, mallory)
                assert answer_of(client) == [REFUSED]
            finally:
                client.close()
    assert watch.seen == set(), f"{len(watch.seen)} crypto children with no invite open"


def test_join_attempts_per_address_are_rate_limited(tmp_path: Path,
                                                    daemon_factory: list[DaemonProcess]) -> None:
    (tmp_path / "a").mkdir()
    a = start(tmp_path / "ha", tmp_path / "a", daemon_factory, "join_attempts_per_minute = 3\n")
    vault_id = a.client.status()["vaults"][0]["id"]
    real = decode_invite(invite(a))
    mallory = generate_identity(tmp_path)
    for _ in range(3):
        client, status = join_socket(a)
        try:
            assert status == 101, status
            send_join(client, a, vault_id, _wrong(real.secret), mallory)
            assert answer_of(client) == [REFUSED]
        finally:
            client.close()
    with watching(a) as watch:
        for _ in range(5):
            client, status = join_socket(a)
            try:
                assert status == 429, status
                client.drain(timeout=5)  # the body, then the daemon closes
                assert b"too many join attempts" in bytes(client.received), bytes(client.received)
            finally:
                client.close()
    assert watch.seen == set()
