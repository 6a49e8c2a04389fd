"""R2 for agent writes (SPEC §6.6): ``kill -9`` while 1,000 acknowledged appends are in
flight, and a reader watching the file the whole time.

Three agents append distinct marker lines (``w<agent>-<seq>``) with idempotency keys,
each waiting for one answer before its next append. At a point chosen by a seeded RNG
(an acknowledged-write count) the daemon is killed with SIGKILL. An append whose answer
did not arrive is *in doubt*: after the restart its agent retries it with the same key
(it must then be present exactly once, whether or not the killed daemon had applied it).

Checked:
- right after the restart, before any further write, every acknowledged marker is in the
  note (API) and, once the daemon has caught the file up, on disk;
- at the end (>= 1,000 acknowledged), every marker exactly once, API and disk equal;
- every read of the file by a concurrent reader is a *whole* state: the header, then
  complete marker lines only (the file ends with a line break), no marker twice, and for
  each agent the markers present are exactly its first n, in the order it wrote them
  (prefix-closed) -- never a torn write, a half line, or a later write without an earlier.
"""

from __future__ import annotations

import http.client
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.harness import DaemonProcess, wait_until
from tests.integration.agent_support import Agent, agent_for, make_token, owner_agent
from tests.integration.bridge_support import restart, start_daemon

SEED = 20261129
TOTAL = 1000
WRITERS = 3
PATH = "journal.md"
HEADER = "# Journal\n"
LINE = re.compile(r"w(\d)-(\d{4})\Z")


def whole_state(text: str) -> dict[int, int] | str:
    """Markers per writer if ``text`` is a whole state of the journal, else why not."""
    if not text.startswith(HEADER):
        return "header missing"
    body = text[len(HEADER):]
    if body and not body.endswith("\n"):
        return "ends inside a line"
    seen: dict[int, list[int]] = {}
    for line in body.splitlines():
        m = LINE.match(line)
        if m is None:
            return f"not a whole marker line: {line!r}"
        seen.setdefault(int(m.group(1)), []).append(int(m.group(2)))
    for writer, seqs in seen.items():
        if seqs != list(range(len(seqs))):
            return f"writer {writer}: markers not its first n in order: {seqs[:5]}...{seqs[-5:]}"
    return {w: len(s) for w, s in seen.items()}


class Run:
    """The shared state of writers, reader and the test's main thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[str] = set()
        self.attempted: set[str] = set()
        self.waiting = 0  # writers blocked until the daemon is back
        self.finished = 0
        self.back = threading.Event()
        self.api_url = ""
        self.failures: list[str] = []
        self.stop_reading = threading.Event()
        self.reads = 0
        self.distinct_reads: set[int] = set()

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def writer(run: Run, index: int, agent_factory: Callable[[int], Agent]) -> None:
    agent = agent_factory(index)
    try:
        seq = 0
        while run.count() < TOTAL:
            marker = f"w{index}-{seq:04d}"
            with run.lock:
                run.attempted.add(marker)
            for _attempt in range(3):
                try:
                    answer = agent.append(PATH, marker + "\n", idempotencyKey=marker)
                except (OSError, http.client.HTTPException):
                    # No answer: in doubt. Wait for the daemon to come back, retry the same key.
                    with run.lock:
                        run.waiting += 1
                    came_back = run.back.wait(timeout=60)
                    with run.lock:
                        run.waiting -= 1
                    if not came_back:
                        run.failures.append(f"writer {index}: the daemon did not come back")
                        return
                    agent.retarget(run.api_url)
                    continue
                if answer.status != 200:
                    run.failures.append(f"writer {index} {marker}: {answer.status} {answer.body}")
                    return
                with run.lock:
                    run.acked.add(marker)
                break
            else:
                run.failures.append(f"writer {index} {marker}: no answer after retries")
                return
            seq += 1
    except Exception as exc:  # reported by the test
        run.failures.append(f"writer {index}: {exc!r}")
    finally:
        agent.close()
        with run.lock:
            run.finished += 1


def reader(run: Run, file: Path) -> None:
    while not run.stop_reading.is_set():
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            run.failures.append("reader: the journal was missing")
            return
        state = whole_state(text)
        if isinstance(state, str):
            run.failures.append(f"reader saw a partial file ({state}): {text[-200:]!r}")
            return
        run.reads += 1
        run.distinct_reads.add(len(text))


def markers_in(text: str) -> list[str]:
    return text[len(HEADER):].splitlines()


def test_kill_9_during_1000_acknowledged_appends_loses_none_and_never_tears_the_file(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    rng = random.Random(SEED)
    kill_at = rng.randint(TOTAL // 4, 3 * TOTAL // 4)
    (vault_dir / PATH).write_text(HEADER)
    daemon = start_daemon(home, vault_dir, daemon_factory)
    tokens = [make_token(home, f"journalist{i}", append=(PATH,)) for i in range(WRITERS)]
    run = Run()
    run.api_url = daemon.api_url
    threads = [threading.Thread(target=writer, args=(run, i, lambda i: agent_for(daemon, tokens[i])),
                                name=f"writer{i}") for i in range(WRITERS)]
    read_thread = threading.Thread(target=reader, args=(run, vault_dir / PATH), name="reader")
    read_thread.start()
    for t in threads:
        t.start()
    try:
        wait_until(lambda: run.count() >= kill_at or run.failures, timeout=120,
                   what=f"{kill_at} acknowledged appends")
        assert not run.failures, run.failures[:3]
        daemon.kill9()  # while the writers have appends in flight
        killed_at = time.monotonic()
        # Every writer is now stuck on a request that got no answer.
        wait_until(lambda: run.waiting + run.finished == WRITERS, timeout=30, what="writers to notice")
        acked_before = set(run.acked)

        assert len(acked_before) >= kill_at

        daemon = restart(home, daemon_factory)
        owner = owner_agent(daemon)
        content = owner.ok(owner.read(PATH))["content"]
        state = whole_state(content)
        assert not isinstance(state, str), state
        missing = acked_before - set(markers_in(content))
        assert not missing, f"{len(missing)} acknowledged appends lost by kill -9: {sorted(missing)[:5]}"
        wait_until(lambda: acked_before <= set(markers_in((vault_dir / PATH).read_text())), timeout=10,
                   what="the file on disk to hold every acknowledged append after the restart")

        run.api_url = daemon.api_url
        run.back.set()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert not run.failures, run.failures[:3]
        assert run.count() >= TOTAL

        content = owner.ok(owner.read(PATH))["content"]
        final = markers_in(content)
        assert len(final) == len(set(final)), "an append was applied twice"
        assert set(final) == run.attempted  # in-doubt appends were retried: all there, once
        assert run.acked <= set(final)
        assert not isinstance(whole_state(content), str)
        wait_until(lambda: (vault_dir / PATH).read_text() == content, timeout=10,
                   what="the file to catch up with the note")
        owner.close()
    finally:
        run.back.set()
        run.stop_reading.set()
        read_thread.join(timeout=30)
    assert not run.failures, run.failures[:3]
    assert run.reads >= 20, run.reads
    assert len(run.distinct_reads) >= 10  # it really watched the file grow
    assert time.monotonic() - killed_at < 120
    assert daemon.stop() == 0


def test_notes_created_just_before_a_kill_9_are_there_after_the_restart(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    """Acknowledged creates whose files the killed daemon had not written yet are owed
    to the disk at the next start -- not taken for notes deleted on disk."""
    daemon = start_daemon(home, vault_dir, daemon_factory)
    agent = agent_for(daemon, make_token(home, "creator", write=("made/**",)))
    expected = {}
    for i in range(30):
        path, text = f"made/n{i:02d}.md", f"note {i}, acknowledged\n"
        assert agent.create(path, text).status == 201
        expected[path] = text
    agent.ok(agent.append("made/n29.md", "and appended\n"))
    expected["made/n29.md"] += "and appended\n"
    daemon.kill9()  # right after the last answer: the last files are not written yet
    agent.close()

    daemon = restart(home, daemon_factory)
    owner = owner_agent(daemon)
    for path, text in expected.items():
        assert owner.ok(owner.read(path))["content"] == text, path
    wait_until(lambda: all((vault_dir / p).exists() and (vault_dir / p).read_text() == t
                           for p, t in expected.items()), timeout=10, what="every note written to disk")
    owner.close()
    assert daemon.stop() == 0
