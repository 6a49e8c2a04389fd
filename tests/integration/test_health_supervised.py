"""Health that tells the truth (issue 37, item 4): B's attachment pass raised every ~20 s for
minutes while `stet status` said "healthy" and `stet doctor` passed.

The real runtime (``Daemon.run``: the API on loopback, the home's ``daemon.json``, a real
folder, store and watcher), in this process so that the pass can be made to fail: the
outflow step raises (monkeypatched: no fault hook in product code) until the test lets it
work. Through the faces a person uses -- the real `stet status` (human and ``--json``) and
`stet doctor` CLIs, the vault's SSE stream -- the failure shows (what failed, since when, the
last error line), the pass is retried with a backoff, and once a pass succeeds everything
says healthy again."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from stet.client.daemon_link import read_owner_token
from stet.daemon.app.runtime import Daemon
from stet.daemon.attachments.outflow import AttachmentOutflow
from stet.sync.config import parse_config
from stet.sync.home_layout import HomeLayout
from tests.harness import KEYRING_ENV, run_stet, wait_until
from tests.integration.agent_support import event_stream
from tests.integration.attachment_support import wait_recorded

FAULT = "test fault: the outflow step raised"


class InProcessDaemon:
    """``Daemon.run`` on its own event loop in a thread of the test process."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.layout = HomeLayout(home)
        self.config = parse_config({"api": {"port": 0},
                                    "peer": {"port": 0, "host": "127.0.0.1", "mdns": False}})
        self.daemon: Daemon | None = None  # made in its thread (its stores belong to that thread)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def run() -> None:
            self.loop = asyncio.get_running_loop()
            self.daemon = Daemon(self.layout, self.config)
            await self.daemon.run()

        try:
            asyncio.run(run())
        except BaseException as exc:  # shown by the test, never lost in the thread
            self.error = exc

    def start(self) -> InProcessDaemon:
        self.thread.start()
        def ready() -> bool:
            if self.error is not None:
                return True
            return self.layout.daemon_json.exists() and self.daemon is not None and bool(self.daemon.vaults)

        wait_until(ready,
                   timeout=30, what="the in-process daemon to be ready")
        assert self.error is None, self.error
        return self

    @property
    def api_url(self) -> str:
        assert self.daemon is not None
        return f"http://127.0.0.1:{self.daemon.api_port}"

    def stop(self) -> None:
        if self.loop is not None and self.daemon is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.daemon.stop)
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the in-process daemon did not stop"


def status_json(home: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(run_stet(home, "status", "--json").stdout)
    return data


def doctor(home: Path) -> tuple[int, dict[str, Any]]:
    out = run_stet(home, "doctor", "--json", check=False)
    return out.returncode, json.loads(out.stdout)


# The API's handlers run in this process: a warning of aiohttp's is not this test's failure.
@pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")
def test_a_failing_attachment_pass_is_shown_retried_and_cleared(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in KEYRING_ENV.items():
        monkeypatch.setenv(key, value)
    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    (vault / "readme.md").write_text("a note\n")
    run_stet(home, "init", str(vault), "--name", "notes")

    broken = threading.Event()
    real_run = AttachmentOutflow.run
    failures: list[float] = []

    async def faulty_run(self: AttachmentOutflow, *args: Any, **kwargs: Any) -> bool:
        if broken.is_set():
            failures.append(time.monotonic())
            raise RuntimeError(FAULT)
        return await real_run(self, *args, **kwargs)

    monkeypatch.setattr(AttachmentOutflow, "run", faulty_run)
    d = InProcessDaemon(home).start()
    try:
        assert status_json(home)["health"] == {"ok": True, "problems": []}
        assert "Sync: healthy." in run_stet(home, "status").stdout.decode()
        token = read_owner_token(d.layout)
        assert token is not None
        with event_stream(d, token) as events:  # type: ignore[arg-type]  # has api_url, as a DaemonProcess
            broken.set()
            (vault / "a.png").write_bytes(b"\x89PNG\x00 the pass is woken by this file" * 30)
            failed = events.wait_for("health.changed", timeout=30, state="failed")
            assert failed.data["healthy"] is False
            assert failed.data["problem"]["task"] == "attachment pass"
            assert failed.data["problem"]["vault"] == "notes"
            assert failed.data["problem"]["lastError"] == f"RuntimeError: {FAULT}"

            # Retried with a backoff (1 s, 2 s, ...): a second failure, and status says so.
            wait_until(lambda: len(failures) >= 2, timeout=30, what="the pass to be tried again")
            assert 0.8 <= failures[1] - failures[0] <= 10, failures
            data = status_json(home)
            (problem,) = data["health"]["problems"]
            assert data["health"]["ok"] is False
            assert (problem["task"], problem["vault"]) == ("attachment pass", "notes")
            assert problem["failures"] >= 2
            assert problem["lastError"] == f"RuntimeError: {FAULT}"
            assert 0 <= problem["retryInSeconds"] <= 60
            assert time.time() - 60 < problem["since"] <= time.time()
            text = run_stet(home, "status").stdout.decode()
            verdict = next(line for line in text.splitlines() if line.startswith("Sync: "))
            assert verdict.startswith("Sync: not healthy: the attachment pass of notes fails since "), verdict
            assert f"RuntimeError: {FAULT}" in verdict
            code, report = doctor(home)
            assert code == 1
            assert report["ok"] is False
            (check,) = [c for c in report["checks"] if c["name"] == "health"]
            assert check["status"] == "fail"
            assert "the attachment pass of notes fails since" in check["detail"]
            assert FAULT in check["detail"]
            human = run_stet(home, "doctor", check=False).stdout.decode()
            assert FAULT in human
            assert "checks failed" in human

            # The fault is gone: the next try succeeds, the file is recorded, all healthy again.
            broken.clear()
            recovered = events.wait_for("health.changed", timeout=90, state="recovered")
            assert recovered.data["healthy"] is True
        wait_recorded(home, "a.png")
        assert status_json(home)["health"] == {"ok": True, "problems": []}
        assert "Sync: healthy." in run_stet(home, "status").stdout.decode()
        code, report = doctor(home)
        (check,) = [c for c in report["checks"] if c["name"] == "health"]
        assert check["status"] == "ok", check
    finally:
        d.stop()


@pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")
def test_a_failing_rescan_of_notes_is_shown_and_cleared(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in KEYRING_ENV.items():
        monkeypatch.setenv(key, value)
    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    (vault / "readme.md").write_text("a note\n")
    run_stet(home, "init", str(vault), "--name", "notes")

    from stet.daemon.folder.bridge import FileBridge

    broken = threading.Event()
    real_reconcile = FileBridge.reconcile_async

    async def faulty_reconcile(self: FileBridge, *args: Any, **kwargs: Any) -> Any:
        if broken.is_set():
            raise RuntimeError(FAULT)
        return await real_reconcile(self, *args, **kwargs)

    monkeypatch.setattr(FileBridge, "reconcile_async", faulty_reconcile)
    d = InProcessDaemon(home).start()  # the first scan (at open) works
    try:
        assert d.daemon is not None
        assert d.loop is not None
        (runtime,) = d.daemon.vaults.values()
        broken.set()
        d.loop.call_soon_threadsafe(runtime.reconcile_wanted.set)  # a rescan, as folder events ask
        data = wait_until(lambda: s if (s := status_json(home))["health"]["problems"] else None,
                          timeout=30, what="the failed rescan in stet status")
        (problem,) = data["health"]["problems"]
        assert (problem["task"], problem["vault"], problem["lastError"]) == (
            "notes rescan", "notes", f"RuntimeError: {FAULT}")
        text = run_stet(home, "status").stdout.decode()
        assert "Sync: not healthy: the notes rescan of notes fails since" in text
        assert doctor(home)[0] == 1
        broken.clear()  # the retry (after the backoff) works: healthy again
        wait_until(lambda: status_json(home)["health"]["ok"], timeout=30, what="the rescan to work again")
        assert doctor(home)[0] == 0
    finally:
        d.stop()


@pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")
def test_a_vault_loop_that_raises_is_restarted_and_shown(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A vault's loops run under its ``serve()``: one that raises past its own error
    handling (here the checkpoint loop's burst check) is shown and restarted, never gone."""
    for key, value in KEYRING_ENV.items():
        monkeypatch.setenv(key, value)
    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    (vault / "readme.md").write_text("a note\n")
    run_stet(home, "init", str(vault), "--name", "notes")

    from stet.daemon.base.memory import BurstWatch

    broken = threading.Event()
    real_due = BurstWatch.due

    def faulty_due(self: BurstWatch, *args: Any, **kwargs: Any) -> Any:
        if broken.is_set():
            raise RuntimeError(FAULT)
        return real_due(self, *args, **kwargs)

    monkeypatch.setattr(BurstWatch, "due", faulty_due)
    d = InProcessDaemon(home).start()
    try:
        broken.set()
        data = wait_until(lambda: s if (s := status_json(home))["health"]["problems"] else None,
                          timeout=30, what="the stopped checkpoint loop in stet status")
        (problem,) = data["health"]["problems"]
        assert (problem["task"], problem["vault"], problem["lastError"]) == (
            "store checkpoint", "notes", f"RuntimeError: {FAULT}")
        broken.clear()  # restarted after the backoff: its first checkpoint says healthy
        wait_until(lambda: status_json(home)["health"]["ok"], timeout=30, what="the loop to run again")
    finally:
        d.stop()
