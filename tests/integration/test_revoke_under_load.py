"""A token revoked while agents append at full speed is refused from the next request on
(issue 18, P2: home.db's data_version is read once per loop turn, ``daemon/base/turn_memo.py``,
and the token cache follows it) -- through the real daemon, the real CLI and keep-alive
connections; the other agents' appends all land, none twice."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet

from .agent_support import agent_for, owner_agent

AGENTS = 4
MAX_REQUESTS = 600  # per agent thread: the loops are bounded in count ...
MAX_SECONDS = 90.0  # ... and in time


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    home, vault = tmp_path / "home", tmp_path / "vault"
    home.mkdir()
    vault.mkdir()
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    d = DaemonProcess(home)
    try:
        d.start()
        yield d
        assert d.stop() == 0, d.log_tail()
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.kill9()


def token(home: Path, name: str) -> str:
    out = run_stet(home, "token", "create", name, "--vault", "notes", "--append", "logs/**", "--json").stdout
    value: str = json.loads(out)["token"]
    return value


def test_a_token_revoked_during_concurrent_appends_is_refused_at_once(daemon: DaemonProcess) -> None:
    home = daemon.home
    stays = [token(home, f"stays-{i}") for i in range(AGENTS)]
    goes = token(home, "goes")
    revoked_at: list[float] = []  # monotonic time the CLI's revoke returned
    after_revoke = threading.Event()
    goes_busy = threading.Event()  # the agent about to be revoked has 30 answers
    answers: dict[str, list[tuple[float, int]]] = {}  # agent -> (request start, status)
    errors: list[BaseException] = []

    def run(name: str, secret: str) -> None:
        agent = agent_for(daemon, secret)
        mine = answers.setdefault(name, [])
        deadline = time.monotonic() + MAX_SECONDS
        try:
            for i in range(MAX_REQUESTS):
                if time.monotonic() > deadline:
                    break
                started = time.monotonic()
                answer = agent.append(f"logs/{name}.md", f"{name} line {i}\n", idempotencyKey=f"{name}-{i}")
                mine.append((started, answer.status))
                if name == "goes" and len(mine) >= 30:
                    goes_busy.set()
                if answer.status == 401 and name == "goes":
                    after = [s for s, _ in mine if revoked_at and s > revoked_at[0]]
                    if len(after) >= 20:
                        break
                if name != "goes" and after_revoke.is_set() and i >= 100:
                    break
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            agent.close()

    threads = [threading.Thread(target=run, args=(f"stays-{i}", s)) for i, s in enumerate(stays)]
    threads.append(threading.Thread(target=run, args=("goes", goes)))
    for t in threads:
        t.start()
    goes_busy.wait(timeout=60)  # the revoked agent is busy (or 60 s passed)
    run_stet(home, "token", "revoke", "goes")
    revoked_at.append(time.monotonic())
    after_revoke.set()
    for t in threads:
        t.join(timeout=MAX_SECONDS + 30)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)

    gone = answers["goes"]
    before = [status for started, status in gone if started < revoked_at[0] - 0.001]
    after = [status for started, status in gone if started > revoked_at[0]]
    assert before
    assert set(before) <= {200, 401}  # a request racing the revoke may go either way
    assert len(after) >= 20, "the revoked agent made too few requests after the revoke"
    assert set(after) == {401}, after  # every request started after the revoke: refused
    owner = owner_agent(daemon)
    try:
        for i in range(AGENTS):
            name = f"stays-{i}"
            assert {status for _, status in answers[name]} == {200}
            text = owner.ok(owner.read(f"logs/{name}.md"))["content"]
            lines = text.splitlines()
            assert lines == [f"{name} line {n}" for n in range(len(answers[name]))]  # each once, in order
        applied = owner.ok(owner.read("logs/goes.md"))["content"].splitlines()
        assert len(applied) == sum(1 for s in gone if s[1] == 200)
    finally:
        owner.close()
