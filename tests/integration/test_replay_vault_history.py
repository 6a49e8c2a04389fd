"""A real vault's history replayed by `git checkout` with a peer connected (issue 37, the
replay test of the slow suite): a generated vault with the real one's shape
(tests/integration/vault_shape.py: notes in five scripts under non-ASCII names, png/svg twins
of different modes) and 24 commits, checked out on A one after the other, then back to an old
commit (most of the vault deleted at once) and forward again. After each step, B holds
exactly A's files (bytes and exec bits) within 5 s -- waited on with a deadline, the time of
each step printed -- A holds exactly the commit's tree and `git status` on A is clean, nothing
is held by the brake, and the deletes did not wait ``delete_delay_seconds`` (60 s here: git's
bursts reach peers at once). The daemons' resident memory after the first sync and after the
replay is printed too (issue 37 item 11)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.git_support import git, nothing_held
from tests.integration.peer_support import invite, join, start_daemon, wait_linked
from tests.integration.vault_shape import History, commit_history, expected_shape, shape_of

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("git") is None, reason="needs git")]

COMMITS = 24
STEP_BOUND_S = 5.0
CONFIG = "[peer]\ndelete_delay_seconds = 60\n"  # a person's deletes wait; git's must not


def rss_mib(d: DaemonProcess) -> float:
    assert d.proc is not None
    for line in Path(f"/proc/{d.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_vault_history_replayed_by_checkout_reaches_the_peer_step_by_step(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    history = History(seed=37)
    history.first()
    for _ in range(COMMITS - 1):
        history.step()
    ids = commit_history(va, history)
    git(va, "checkout", "-q", ids[0])
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes", "--device-name", "desk-a")
    (tmp_path / "ha" / "config.toml").write_text(CONFIG)
    (tmp_path / "hb").mkdir()
    (tmp_path / "hb" / "config.toml").write_text(CONFIG)
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_until(lambda: shape_of(vb) == shape_of(va), timeout=120, what="the first sync")
    after_first = (rss_mib(a), rss_mib(b))

    steps = [*range(1, COMMITS), 3, COMMITS - 1]
    times: list[tuple[int, float, int]] = []
    for target in steps:
        want = expected_shape(history.trees[target])
        before = shape_of(va)
        started = time.monotonic()
        git(va, "checkout", "-q", ids[target])
        assert shape_of(va) == want, f"git's checkout of step {target} on A"

        def b_follows(want: dict[str, tuple[str, bool]] = want) -> bool:
            return shape_of(vb) == want

        wait_until(b_follows, timeout=60, what=f"B to follow step {target}")
        took = time.monotonic() - started
        changed = len(set(before.items()) ^ set(want.items()))
        times.append((target, took, changed))
        assert shape_of(va) == want, f"A changed after step {target}: something was written back"
        status = git(va, "status", "--porcelain")
        assert status == "", f"after step {target}: {status}"
    nothing_held(a, b)
    after_replay = (rss_mib(a), rss_mib(b))
    print("\nstep  files changed  seconds to B")
    for target, took, changed in times:
        print(f"{target:4}  {changed:13}  {took:12.2f}")
    print(f"RSS MiB after the first sync: A {after_first[0]:.1f}, B {after_first[1]:.1f}; "
          f"after {len(steps)} steps: A {after_replay[0]:.1f}, B {after_replay[1]:.1f}")
    slow = [(t, round(s, 2)) for t, s, _ in times if s > STEP_BOUND_S]
    assert slow == [], f"steps over {STEP_BOUND_S} s: {slow}"
