"""A person's ``>>`` appends racing agents' appends to the same note (issue 11).

A shell's ``>>`` opens the file with O_APPEND, writes a line and closes it. When the
daemon writes the note's file (an agent's append to carry out), it renames a new file
over the old one; an append that lands in the old file between the daemon's last check
and the rename went into a file nobody reads any more -- the line was lost (1 run in 9
of an eight-agent run before the fix). Here one person appends hundreds of lines a few
ms apart while two agents append through the API: at the end the file and the note are
equal and hold every line exactly once.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, wait_until
from tests.integration.agent_support import owner_agent

PATH = "journal.md"
HEADER = "# Journal\n"


def _race(daemon: DaemonProcess, vault_dir: Path, seed: int, person_lines: int, agent_lines: int) -> None:
    rng = random.Random(seed)
    target = vault_dir / PATH
    prefix = f"r{seed}"
    errors: list[BaseException] = []

    def person() -> None:
        try:
            for i in range(person_lines):
                with open(target, "a", encoding="utf-8") as f:  # what `echo ... >> journal.md` does
                    f.write(f"{prefix}-p-{i:04d}\n")
                time.sleep(rng.uniform(0.0005, 0.004))  # a person's script: a few ms apart
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def agent(k: int) -> None:
        try:
            client = owner_agent(daemon)
            for i in range(agent_lines):
                client.ok(client.append(PATH, f"{prefix}-a{k}-{i:04d}\n"))
            client.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=person)] + [threading.Thread(target=agent, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    expected = {f"{prefix}-p-{i:04d}" for i in range(person_lines)}
    expected |= {f"{prefix}-a{k}-{i:04d}" for k in (1, 2) for i in range(agent_lines)}

    def settled() -> str | None:
        note = daemon.read(PATH)["content"]
        on_disk = target.read_text(encoding="utf-8")
        if note != on_disk:
            return None
        ours = [line for line in note.splitlines() if line.startswith(prefix + "-")]
        return note if set(ours) >= expected else None

    try:
        text = wait_until(settled, timeout=60, what="the file and the note to agree and hold every line")
    except AssertionError:
        note = daemon.read(PATH)["content"]
        ours = Counter(line for line in note.splitlines() if line.startswith(prefix + "-"))
        missing = sorted(expected - set(ours))
        raise AssertionError(f"run {seed}: lines lost: {missing[:10]} ({len(missing)})") from None
    counts = Counter(line for line in text.splitlines() if line.startswith(prefix + "-"))
    doubled = sorted(line for line, n in counts.items() if n > 1)
    assert not doubled, f"run {seed}: lines doubled: {doubled[:10]}"
    assert set(counts) == expected
    assert text.startswith(HEADER)
    assert text.endswith("\n")


def _start(daemon: DaemonProcess, vault_dir: Path) -> None:
    client = owner_agent(daemon)
    client.ok(client.create(PATH, HEADER))
    client.close()
    wait_until(lambda: (vault_dir / PATH).exists(), timeout=30, what="the journal's file")


def test_person_appends_race_agent_appends_none_lost_or_doubled(vault_dir: Path,
                                                                daemon: DaemonProcess) -> None:
    _start(daemon, vault_dir)
    runs = int(os.environ.get("STET_APPEND_RACE_RUNS", "5"))
    for run in range(runs):
        _race(daemon, vault_dir, seed=run, person_lines=200, agent_lines=100)


@pytest.mark.slow
def test_person_appends_race_agent_appends_many_runs(vault_dir: Path, daemon: DaemonProcess) -> None:
    _start(daemon, vault_dir)
    for run in range(40):
        _race(daemon, vault_dir, seed=100 + run, person_lines=300, agent_lines=150)
