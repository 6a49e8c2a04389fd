"""``base/health``: the backoff of a failing task (1 s doubling to 60 s, back to 1 s after a
success) and the problems it records (one per task and vault, cleared by a success)."""

from __future__ import annotations

from stet.daemon.base.health import Backoff, Health, Problem


def test_the_backoff_doubles_to_a_minute_and_starts_over_after_a_success() -> None:
    b = Backoff()
    assert [b.failed() for _ in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    b.succeeded()
    assert b.failed() == 1


def test_a_problem_counts_failures_in_a_row_keeps_its_start_and_is_cleared_by_a_success() -> None:
    now = [1000.0]
    health = Health(clock=lambda: now[0])
    told: list[tuple[str, str, Problem]] = []
    health.on_change.append(lambda vault, what, p: told.append((vault, what, p)))
    health.failed("attachment pass", "v1", KeyError("bin/run.sh"), 1)
    now[0] = 1002.0
    p = health.failed("attachment pass", "v1", ValueError("line one\nthe last line"), 2)
    assert (p.since, p.failures, p.last_error, p.retry_at) == (1000.0, 2, "ValueError: the last line", 1004.0)
    assert health.to_json({"v1": "notes"})["problems"][0]["vault"] == "notes"
    assert not health.to_json({})["ok"]
    health.ok("attachment pass", "v2")  # another vault's success clears nothing here
    assert len(health.problems()) == 1
    health.ok("attachment pass", "v1")
    assert health.to_json({}) == {"ok": True, "problems": []}
    assert [(v, what) for v, what, _ in told] == [("v1", "failed"), ("v1", "failed"), ("v1", "recovered")]
    assert told[0][2].last_error == "KeyError: 'bin/run.sh'"
