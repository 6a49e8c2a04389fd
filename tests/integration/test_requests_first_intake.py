"""Requests first during a bulk intake, through the real daemon (issue 11 P8, SPEC §3.15).

1,000 new note files land in a running daemon's folder while a client asks
``GET /v1/status`` every 20 ms. Every request is answered, every file becomes a note, and
the daemon's own log of its loop (``STET_LOOP_HOLDS``: ``loop_slices.request_stats``)
shows that the intake's slices of long work were cut for the requests in flight, and how
many turns of the loop a request took from its bytes' arrival to its answer. No timing is
asserted (the machine is shared): turns and slices are counted.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.agent_support import owner_agent
from tests.integration.bridge_support import open_store

FILES = 1000


def _count_live(home: Path) -> int:
    with open_store(home) as db:
        return int(db.execute("SELECT COUNT(*) FROM notes WHERE deleted = 0").fetchone()[0])


def _last_requests(holds: Path) -> dict[str, float]:
    rows = [json.loads(line) for f in holds.glob("holds-*.jsonl")
            for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    counted = [r for r in rows if "requests" in r]
    assert counted, f"no requests line in the loop-holds log ({len(rows)} lines)"
    last: dict[str, float] = counted[-1]["requests"]
    return last


def test_status_requests_overtake_a_bulk_intake(home: Path, vault_dir: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                daemon_factory: list[DaemonProcess]) -> None:
    holds = tmp_path / "holds"
    monkeypatch.setenv("STET_LOOP_HOLDS", str(holds))
    monkeypatch.setenv("STET_LOOP_HOLDS_MS", "1000")  # long steps aside: the requests' counters
    monkeypatch.delenv("STET_REQUESTS_FIRST", raising=False)
    run_stet(home, "init", str(vault_dir), "--name", "notes", "--json")
    daemon = DaemonProcess(home)
    daemon_factory.append(daemon)
    daemon.start()
    agent = owner_agent(daemon)
    assert agent.request("GET", "/v1/status").status == 200
    answers: list[int] = []
    stop = threading.Event()

    def poll() -> None:
        deadline = time.monotonic() + 240  # bounded even if the test body fails
        while not stop.is_set() and time.monotonic() < deadline:
            answers.append(agent.request("GET", "/v1/status").status)
            stop.wait(0.02)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    texts = {f"unzipped/d{i % 10:02d}/note-{i:05d}.md": f"# Note {i}\n\nbody of note {i}\n"
             for i in range(FILES)}
    for rel, text in texts.items():
        target = vault_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    wait_until(lambda: _count_live(home) >= FILES, timeout=180, what=f"{FILES} files to become notes")
    stop.set()
    poller.join(timeout=30)
    agent.close()
    assert daemon.stop() == 0  # a clean stop writes the last counters
    assert answers
    assert set(answers) == {200}
    counted = _last_requests(holds)
    print(f"{len(answers)} status answers during the intake; requests first: {counted}")
    assert counted["answered"] >= len(answers)
    # The intake's long work (drain, delivery of events, compare) was cut to one item
    # while a request was in flight: requests overtook bulk work.
    assert counted["slices_cut"] > 0
    # Turns from a request's bytes to its answer were counted (the loop-holds turn counter).
    assert counted["turns"] >= counted["answered"]
    with open_store(home) as db:
        paths = {p for (p,) in db.execute("SELECT path FROM notes WHERE deleted = 0")}
    assert paths == set(texts)
