"""Test harness: real daemon processes on temp homes, and deadline-bounded waiting.

A ``DaemonProcess`` runs ``python -m stet.daemon`` with its own home, free ports and
no mDNS, and is ready when its ``daemon.json`` names its pid and its API answers
(Syncthing's test/syncthingprocess.go pattern). Nothing here sleeps to synchronise:
``wait_until`` polls a condition until a deadline and fails with a message; ``until`` is
the same for a test running on an event loop (it lets the loop turn while it waits).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from stet.client.daemon_link import ApiError, DaemonClient, read_owner_token
from stet.sync.home import HomeLayout

T = TypeVar("T")

KEYRING_ENV = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}


def wait_until(predicate: Callable[[], T], *, timeout: float = 10.0, what: str = "condition",
               interval: float = 0.01) -> T:
    """Poll ``predicate`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (ApiError, OSError, AssertionError) as exc:
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_exc!r})")
        time.sleep(interval)  # poll with a deadline



async def until(predicate: Callable[[], object], what: str = "condition", *, deadline_s: float = 30.0,
                interval: float = 0.01) -> None:
    """On the event loop: poll ``predicate`` until it is truthy or ``deadline_s`` passes (then
    fail naming ``what``). The interval is the poll's, not a synchronisation: the check decides."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {deadline_s}s waiting for {what}")
        await asyncio.sleep(interval)

def env_for(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(KEYRING_ENV)
    env["STET_HOME"] = str(home)
    env.pop("STET_DEBUG", None)
    return env


def run_stet(home: Path, *args: str, check: bool = True, input: bytes | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """Run the real ``stet`` CLI (as an installed console script would) on a home."""
    proc = subprocess.run(
        [sys.executable, "-c", "from stet.client.cli import main; main()", "--home", str(home), *args],
        env=env_for(home), capture_output=True, input=input, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"stet {' '.join(args)} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')}"
        )
    return proc


class DaemonProcess:
    def __init__(self, home: Path, *, extra_args: tuple[str, ...] = (), mdns: bool = False) -> None:
        self.home = home
        self.mdns = mdns
        self.layout = HomeLayout(home)
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self._client: DaemonClient | None = None

    def start(self, timeout: float = 30.0) -> DaemonProcess:
        self.layout.ensure()
        with contextlib.suppress(FileNotFoundError):
            self.layout.daemon_json.unlink()
        log = open(self.layout.log_dir / "test-daemon.out", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stet.daemon", "--home", str(self.home), "--api-port", "0",
             "--peer-port", "0", *(() if self.mdns else ("--no-mdns",)), *self.extra_args],
            env=env_for(self.home), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )
        log.close()
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {proc.returncode}:\n{self.log_tail()}")
            try:
                info = json.loads(self.layout.daemon_json.read_text())
            except (FileNotFoundError, ValueError):
                return False
            if info.get("pid") != proc.pid:
                return False
            token = read_owner_token(self.layout)
            if token is None:
                return False
            self._client = DaemonClient(info["api_url"], token, timeout=30)
            self._client.status()
            return True

        wait_until(ready, timeout=timeout, what="daemon readiness")
        return self

    @property
    def client(self) -> DaemonClient:
        assert self._client is not None, "daemon not started"
        return self._client

    @property
    def api_url(self) -> str:
        return json.loads(self.layout.daemon_json.read_text())["api_url"]

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        return self.proc.returncode

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def log_tail(self, n: int = 60) -> str:
        out = []
        for name in ("test-daemon.out",):
            p = self.layout.log_dir / name
            if p.exists():
                out += p.read_text(errors="replace").splitlines()[-n:]
        return "\n".join(out)

    # convenience ------------------------------------------------------------------

    def read(self, path: str, vault: str | None = None) -> dict[str, Any]:
        c = self.client
        return c.read_note(c.resolve_vault(vault), path)

    def content(self, path: str, vault: str | None = None) -> str | None:
        try:
            return str(self.read(path, vault)["content"])
        except ApiError as exc:
            if exc.code == "not_found":
                return None
            raise

    def wait_content(self, path: str, expected: str | None, *, timeout: float = 10.0,
                     vault: str | None = None) -> None:
        wait_until(lambda: self.content(path, vault) == expected, timeout=timeout,
                   what=f"{path} to hold {expected!r:.80}")
