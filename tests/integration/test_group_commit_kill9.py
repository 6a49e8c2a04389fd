"""Group commit through a real daemon (daemon/notes/group_commit.py): eight agents append at
once with idempotency keys (their appends share commits), the daemon is killed with
``kill -9`` mid-run, restarted; then every acknowledged append is in the note, and every
append whose answer was lost, retried with its key, is there exactly once."""

from __future__ import annotations

import http.client
import threading
from pathlib import Path

from tests.harness import DaemonProcess, wait_until
from tests.integration.agent_support import agent_for, make_token, owner_agent
from tests.integration.bridge_support import restart, start_daemon

WRITERS = 8
PER_WRITER = 40  # bounded: 320 appends in all
KILL_AT = 120  # acknowledged appends before kill -9
PATH = "shared.md"
HEADER = "# Shared findings\n"


class Run:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[str] = set()
        self.in_doubt: set[str] = set()
        self.failures: list[str] = []
        self.back = threading.Event()
        self.api_url = ""


def writer(run: Run, index: int, daemon: DaemonProcess, token: str) -> None:
    agent = agent_for(daemon, token)
    try:
        for seq in range(PER_WRITER):
            marker = f"g{index}-{seq:03d}"
            for _attempt in range(3):
                try:
                    answer = agent.append(PATH, marker + "\n", idempotencyKey=f"key-{marker}")
                except (OSError, http.client.HTTPException):
                    with run.lock:
                        run.in_doubt.add(marker)
                    if not run.back.wait(timeout=120):
                        run.failures.append(f"{marker}: the daemon did not come back")
                        return
                    agent.retarget(run.api_url)
                    continue  # the same key again
                if answer.status != 200:
                    run.failures.append(f"{marker}: {answer.status} {answer.body}")
                    return
                with run.lock:
                    run.acked.add(marker)
                break
            else:
                run.failures.append(f"{marker}: no answer after retries")
                return
    except Exception as exc:  # reported by the test
        run.failures.append(f"writer {index}: {exc!r}")
    finally:
        agent.close()


def test_kill_9_after_grouped_acknowledged_appends_loses_none(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    (vault_dir / PATH).write_text(HEADER)
    daemon = start_daemon(home, vault_dir, daemon_factory)
    tokens = [make_token(home, f"finder{i}", append=(PATH,)) for i in range(WRITERS)]
    run = Run()
    run.api_url = daemon.api_url
    threads = [threading.Thread(target=writer, args=(run, i, daemon, tokens[i]), name=f"writer{i}")
               for i in range(WRITERS)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(run.acked) >= KILL_AT or run.failures, timeout=120,
                   what=f"{KILL_AT} acknowledged appends")
        assert not run.failures, run.failures[:3]
        daemon.kill9()
        with run.lock:
            acked_before = set(run.acked)
        daemon = restart(home, daemon_factory)
        owner = owner_agent(daemon)
        lines = owner.ok(owner.read(PATH))["content"].splitlines()
        missing = acked_before - set(lines)
        assert not missing, f"{len(missing)} acknowledged appends lost by kill -9: {sorted(missing)[:5]}"
        run.api_url = daemon.api_url
        run.back.set()
        for t in threads:
            t.join(timeout=180)
        assert not any(t.is_alive() for t in threads)
        assert not run.failures, run.failures[:3]
        content = owner.ok(owner.read(PATH))["content"]
        lines = content.splitlines()
        wanted = {f"g{i}-{s:03d}" for i in range(WRITERS) for s in range(PER_WRITER)}
        assert run.acked == wanted
        assert lines[0] == HEADER.strip()
        assert sorted(lines[1:]) == sorted(wanted), "an append lost or applied twice"
        assert run.in_doubt, "kill -9 caught no append in flight"
        wait_until(lambda: (vault_dir / PATH).read_text() == content, timeout=30,
                   what="the file to catch up with the note")
        owner.close()
    finally:
        run.back.set()
