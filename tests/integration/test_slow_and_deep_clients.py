"""Issue 12, finding 7, through a real daemon: a deeply nested header on the peer join path
used to log an uncaught RecursionError traceback; clients holding half-sent HTTP headers
were never timed out (aiohttp's only limit was its one-hour keep-alive).

Now: the join frame is refused like any bad join (``join_refused``), no traceback; a
connection whose request headers are not complete within 10 s is closed, on the API port
and on the peer port (TLS), while normal requests go on being served.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
import urllib.parse
from collections.abc import Iterator

import pytest

from stet.daemon.base.slow_clients import HEADER_DEADLINE_S
from stet.daemon.peers.tls import JOIN_SERVER_NAME
from stet.sync import peer_protocol as pp
from tests.harness import DaemonProcess, run_stet
from tests.integration.agent_support import owner_agent
from tests.integration.peer_support import peer_port
from tests.integration.peer_wire import WireClient, errors_in, no_cert_context

GIVE_UP_S = HEADER_DEADLINE_S + 30  # generous: the machine is shared


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    root = tmp_path_factory.mktemp("slowdeep")
    home, vault = root / "home", root / "vault"
    home.mkdir()
    vault.mkdir()
    (vault / "a.md").write_text("a\n")
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    d = DaemonProcess(home)
    try:
        d.start()
        yield d
        assert d.stop() == 0, d.log_tail()
        log = (home / "logs" / "daemon.log").read_text(errors="replace")
        assert "Traceback" not in log
        assert "RecursionError" not in log
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.kill9()


def raw_frame(type_: int, header: bytes) -> bytes:
    return pp.MAGIC + bytes([type_]) + struct.pack(">I", len(header)) + header


@pytest.mark.parametrize("header", [
    b'{"vault": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"vault": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}",
    b'{"vault": "\\ud800", "device": "x", "proof": "00", "cert_pem": "x"}',
])
def test_a_deep_or_bad_join_header_is_refused_without_a_traceback(daemon: DaemonProcess,
                                                                 header: bytes) -> None:
    with WireClient(peer_port(daemon), no_cert_context(), JOIN_SERVER_NAME) as client:
        assert client.upgrade("/stet/join") == 101
        client.send_binary(raw_frame(pp.JOIN, header))
        _, messages = client.until_closed(timeout=30)
    assert errors_in(messages) == [{"code": "join_refused", "message": "join refused"}]
    log = (daemon.home / "logs" / "daemon.log").read_text(errors="replace")
    assert "Traceback" not in log
    assert "RecursionError" not in log


def _slow_headers(sock: socket.socket | ssl.SSLSocket, host: str, out: dict[str, float | str]) -> None:
    """Send a request line, then a header byte a second, until the server closes."""
    started = time.monotonic()
    try:
        sock.sendall(f"GET /v1/status HTTP/1.1\r\nHost: {host}\r\n".encode())
        sock.settimeout(1.0)
        while time.monotonic() - started < GIVE_UP_S:
            try:
                if sock.recv(4096) == b"":
                    out["closed_after"] = time.monotonic() - started
                    return
            except TimeoutError:
                pass
            try:
                sock.sendall(b"X")
            except OSError:
                out["closed_after"] = time.monotonic() - started
                return
        out["never_closed"] = "yes"
    except (OSError, ssl.SSLError) as exc:
        out["closed_after"] = time.monotonic() - started
        out["error"] = repr(exc)
    finally:
        sock.close()


def test_half_sent_headers_are_timed_out_on_both_ports(daemon: DaemonProcess) -> None:
    api_port = urllib.parse.urlsplit(daemon.api_url).port
    assert api_port is not None
    api_sock = socket.create_connection(("127.0.0.1", api_port), timeout=10)
    peer_raw = socket.create_connection(("127.0.0.1", peer_port(daemon)), timeout=10)
    peer_sock = no_cert_context().wrap_socket(peer_raw, server_hostname=JOIN_SERVER_NAME)
    results: list[dict[str, float | str]] = [{}, {}]
    threads = [threading.Thread(target=_slow_headers, args=(api_sock, f"127.0.0.1:{api_port}", results[0])),
               threading.Thread(target=_slow_headers, args=(peer_sock, JOIN_SERVER_NAME, results[1]))]
    for t in threads:
        t.start()
    # Meanwhile the daemon serves everyone else.
    owner = owner_agent(daemon)
    while any(t.is_alive() for t in threads):
        assert owner.ok(owner.read("a.md"))["content"] == "a\n"
        threads[0].join(timeout=0.5)
    for t in threads:
        t.join(timeout=GIVE_UP_S)
    for name, result in zip(("API", "peer"), results, strict=True):
        assert "never_closed" not in result, f"{name} port: a slow client was never timed out"
        closed = float(result["closed_after"])
        assert closed >= HEADER_DEADLINE_S - 1, f"{name} port closed too early: {result}"
    assert owner.ok(owner.read("a.md"))["content"] == "a\n"
    owner.close()


@pytest.mark.slow
def test_a_slow_body_after_complete_headers_is_still_read(daemon: DaemonProcess) -> None:
    """The deadline is for headers only: a body sent slowly after complete headers is read."""
    port = urllib.parse.urlsplit(daemon.api_url).port
    token = daemon.client.token
    body = b'{"text": "slow body\\n"}'
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        head = (f"POST /v1/vaults/notes/notes/slow.md/append HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        sock.sendall(head)
        started = time.monotonic()
        for i in range(0, len(body), 2):  # the body over more than the header deadline
            sock.sendall(body[i:i + 2])
            time.sleep((HEADER_DEADLINE_S + 2) / (len(body) / 2))  # scenario pause: a slow sender
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = sock.recv(4096)
            assert chunk, reply
            reply += chunk
        assert time.monotonic() - started > HEADER_DEADLINE_S
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    assert daemon.content("slow.md") == "slow body\n"
