"""Stock Yjs clients from pytest (SPEC §6.13): Node's ``yjs`` + ``y-websocket`` + ``ws``.

``tests/js/live_client.mjs`` holds any number of ``WebsocketProvider`` clients; ``JsClients``
drives it over stdin/stdout, one JSON request and answer per line. The npm packages are
pinned by ``tests/js/package-lock.json`` and installed by ``npm ci`` (``.ci/run``, or here
on first use). ``ReferenceServer`` runs the y-websocket reference server
(``@y/websocket-server``) so the same client script can be checked against it.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import select
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonProcess, wait_until

JS_DIR = Path(__file__).resolve().parents[1] / "js"


def node_modules() -> Path:
    """``tests/js/node_modules``, installed from the lock file if missing (``npm ci``)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are needed for the live-editing tests (.ci/run installs them)")
    modules = JS_DIR / "node_modules"
    with open(JS_DIR / "package.json", "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one npm ci at a time (pytest-xdist, parallel runs)
        if not (modules / "y-websocket" / "package.json").exists():
            proc = subprocess.run([npm, "ci", "--prefix", str(JS_DIR), "--no-audit", "--no-fund"],
                                  capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, f"npm ci in tests/js failed:\n{proc.stderr[-3000:]}"
    return modules


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class JsClients:
    """One Node process holding named Yjs clients."""

    def __init__(self) -> None:
        node_modules()
        self.proc = subprocess.Popen(
            ["node", str(JS_DIR / "live_client.mjs")], cwd=JS_DIR, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self._seq = itertools.count(1)
        self._buffer = b""
        self._answers: dict[int, dict[str, Any]] = {}

    def call(self, op: str, id: str, *, deadline_s: float = 30.0, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        seq = next(self._seq)
        self.proc.stdin.write((json.dumps({"seq": seq, "op": op, "id": id, **args}) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + deadline_s
        fd = self.proc.stdout.fileno()
        while seq not in self._answers:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"node did not answer {op} within {deadline_s}s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"node exited ({self.proc.wait()}): {self._stderr()}")
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                answer = json.loads(line)
                self._answers[answer["seq"]] = answer
        answer = self._answers.pop(seq)
        if not answer.get("ok"):
            raise AssertionError(f"{op} {id}: {answer.get('error')}")
        return answer

    def _stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")[-3000:]

    # -- the ops --------------------------------------------------------------------

    def connect(self, id: str, url: str, room: str, token: str | None = None, *,
                headers: dict[str, str] | None = None, initial: str | None = None) -> None:
        self.call("connect", id, url=url, room=room, token=token, headers=headers or {}, initial=initial)

    def reconnect(self, id: str) -> None:
        self.call("reconnect", id)

    def wait_synced(self, id: str, timeout: float = 20.0) -> str:
        return str(self.call("wait_synced", id, timeout=int(timeout * 1000), deadline_s=timeout + 10)["text"])

    def wait_text(self, id: str, equals: str | None = None, *, includes: list[str] | None = None,
                  timeout: float = 20.0) -> str:
        args: dict[str, Any] = {"timeout": int(timeout * 1000)}
        if equals is not None:
            args["equals"] = equals
        if includes is not None:
            args["includes"] = includes
        return str(self.call("wait_text", id, deadline_s=timeout + 10, **args)["text"])

    def wait_closed(self, id: str, timeout: float = 20.0) -> tuple[int, str]:
        answer = self.call("wait_closed", id, timeout=int(timeout * 1000), deadline_s=timeout + 10)
        return int(answer["code"]), str(answer["reason"])

    def text(self, id: str) -> str:
        return str(self.call("text", id)["text"])

    def insert(self, id: str, index: int, text: str) -> None:
        self.call("insert", id, index=index, text=text)

    def type(self, id: str, index: int, text: str) -> None:
        self.call("type", id, index=index, text=text)

    def type_together(self, *typings: tuple[str, str, str | None]) -> None:
        """Clients type at once, none seeing the others' keystrokes first: (id, text, before)."""
        self.call("type_together", "", typings=[
            {"id": i, "text": t, **({"before": b} if b is not None else {})} for i, t, b in typings])

    def delete(self, id: str, index: int, length: int) -> None:
        self.call("delete", id, index=index, length=length)

    def awareness(self, id: str, state: dict[str, Any] | None) -> None:
        self.call("awareness", id, state=state)

    def wait_peer_awareness(self, id: str, key: str, value: Any, timeout: float = 20.0) -> list[Any]:
        answer = self.call("wait_peer_awareness", id, key=key, value=value, timeout=int(timeout * 1000),
                           deadline_s=timeout + 10)
        return list(answer["states"])

    def wait_no_peer_awareness(self, id: str, key: str, value: Any, timeout: float = 20.0) -> None:
        self.call("wait_no_peer_awareness", id, key=key, value=value, timeout=int(timeout * 1000),
                  deadline_s=timeout + 10)

    def disconnect(self, id: str) -> None:
        self.call("disconnect", id)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@contextlib.contextmanager
def js_clients() -> Iterator[JsClients]:
    clients = JsClients()
    try:
        yield clients
    finally:
        clients.close()


class ReferenceServer:
    """``@y/websocket-server`` (in memory) on a free loopback port."""

    def __init__(self) -> None:
        modules = node_modules()
        self.port = free_port()
        env = dict(os.environ, HOST="127.0.0.1", PORT=str(self.port))
        self.proc = subprocess.Popen(
            ["node", str(modules / "@y" / "websocket-server" / "src" / "server.js")], cwd=JS_DIR, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the reference server exited with {self.proc.returncode}")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        wait_until(listening, timeout=20, what="the reference y-websocket server")

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def live_url(daemon: DaemonProcess, vault: str = "notes") -> str:
    """What a stock ``WebsocketProvider`` is given as its server URL (the room is the path)."""
    return daemon.api_url.replace("http://", "ws://") + f"/v1/vaults/{vault}/yjs"


def owner_token(daemon: DaemonProcess) -> str:
    from stet.client.daemon_link import read_owner_token

    token = read_owner_token(daemon.layout)
    assert token is not None
    return token
