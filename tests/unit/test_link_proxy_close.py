"""The chaos tests' TCP proxy closes every socket it accepted, even one accepted in the very
turn the proxies stop (a daemon redialing through it at a test's teardown).

Found by CI (3979770): an unclosed-socket ``ResourceWarning`` for a proxy listener's
accepted socket, raised when the garbage collector met it in a later test, which
``filterwarnings = error`` turned into that test's error. A connection accepted just
before ``close()`` had its handshake task cancelled before the task first ran, so nothing
ever owned the socket.
"""

from __future__ import annotations

import gc
import socket
import threading
import time
import warnings

from tests.integration.link_proxy import LinkProxies


def _target(stop: threading.Event) -> tuple[socket.socket, threading.Thread]:
    """The proxied "daemon": accepts each connection and hangs up."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(512)
    srv.settimeout(0.05)

    def serve() -> None:
        for _ in range(1_000_000):  # bounded; ends when the test is done
            if stop.is_set():
                return
            try:
                conn, _ = srv.accept()
            except OSError:  # the accept's timeout: look at the stop flag again
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return srv, thread


def _dial_until(port: int, stop: threading.Event, limit: int) -> None:
    """Connect to the proxy again and again (bounded), as a redialing daemon does."""
    for _ in range(limit):
        if stop.is_set():
            return
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                pass
        except OSError:
            pass


def test_close_while_connections_arrive_leaves_no_socket_open() -> None:
    done = threading.Event()
    target, server = _target(done)
    try:
        leaks: list[str] = []
        for _round in range(10):  # bounded: each round a few ms of dials, then a close
            proxies = LinkProxies()
            port = proxies.add("b", "a", lambda: int(target.getsockname()[1]))
            stop = threading.Event()
            dialers = [threading.Thread(target=_dial_until, args=(port, stop, 400)) for _ in range(4)]
            for t in dialers:
                t.start()
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always", ResourceWarning)
                deadline = time.monotonic() + 10
                while proxies.stats.connections < 5 and time.monotonic() < deadline:
                    time.sleep(0.001)  # poll the dialers' progress; close once they are dialing
                proxies.close()
                stop.set()
                for t in dialers:
                    t.join(30)
                gc.collect()
            leaks += [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
        assert not leaks, leaks[:3]
    finally:
        done.set()
        server.join(10)
        target.close()
