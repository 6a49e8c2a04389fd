"""A bulk intake and a first sync never freeze the receiving peer either (issue 11 P8 "on
the peer too", issue 18 P4).

Two real daemons, paired over loopback TLS, each asked ``GET /v1/status`` every 20 ms.
Every answer must come within 1 s -- a generous bound on a loaded machine, not a
benchmark (``bench/p8_bulk.py`` and ``bench/p5_restart.py`` measure) -- that a peer
applying a whole frame of notes, or every buffered frame, in one step of its loop fails:

- a first sync of 2,000 small notes to an empty peer (they travel in one 2 MB frame);
- 2,000 files unzipped into A's folder while B is linked (A streams each new note).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.harness import DaemonProcess, run_stet
from tests.integration.agent_support import owner_agent
from tests.integration.peer_support import invite, join, start_daemon, tree, wait_linked, wait_same_tree

NOTES = 2000
WORST_ALLOWED_S = 1.0
POLL_S = 0.02


class StatusPoller:
    """Asks ``GET /v1/status`` every 20 ms in a thread (bounded in time) and keeps the latencies."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.agent = owner_agent(daemon)
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StatusPoller:
        assert self.agent.request("GET", "/v1/status").status == 200
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + 300  # bounded even if the test body fails
        while not self._stop.is_set() and time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                status = self.agent.request("GET", "/v1/status").status
            except Exception as exc:  # recorded, and the test fails on it
                self.errors.append(repr(exc))
                status = 0
            self.latencies.append(time.monotonic() - t0)
            if status != 200:
                self.errors.append(f"status {status}")
            self._stop.wait(POLL_S)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.agent.close()

    def check(self, what: str) -> None:
        assert not self.errors, f"{what}: {self.errors[:3]}"
        assert self.latencies, f"{what}: the poller never got an answer"
        worst = max(self.latencies)
        slow = sum(1 for x in self.latencies if x >= WORST_ALLOWED_S)
        print(f"{what}: {len(self.latencies)} status answers, worst {worst:.3f}s")
        assert worst < WORST_ALLOWED_S, (
            f"{what}: GET /v1/status took {worst:.2f}s at worst ({len(self.latencies)} answers, "
            f"{slow} over {WORST_ALLOWED_S}s)")


def _note(i: int) -> str:
    return f"# Note {i}\n\n" + "".join(f"line {j} of note {i}, some words to sync\n" for j in range(20))


def test_a_first_sync_of_two_thousand_notes_never_freezes_the_receiving_peer(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    for i in range(NOTES):
        target = va / f"d{i % 20:02d}" / f"note-{i:05d}.md"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_note(i), encoding="utf-8")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    with StatusPoller(b) as on_b:
        join(b, invite(a), vb)
        wait_same_tree(va, vb, timeout=240)
    on_b.check("B during the first sync")
    assert len(tree(vb)) == NOTES


def test_two_thousand_files_unzipped_on_a_never_freeze_either_peer(
    tmp_path: Path, daemon_factory: list[DaemonProcess]
) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    (va / "README.md").write_text("# Vault\n", encoding="utf-8")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_same_tree(va, vb, timeout=60)
    with StatusPoller(a) as on_a, StatusPoller(b) as on_b:
        for i in range(NOTES):  # written as fast as an unzip writes them
            target = va / "unzipped" / f"d{i % 20:02d}" / f"note-{i:05d}.md"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_note(i), encoding="utf-8")
        final = wait_same_tree(va, vb, timeout=240)
    on_a.check("A during the intake")
    on_b.check("B receiving it")
    assert len(final) == NOTES + 1
