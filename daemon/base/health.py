"""What the daemon knows is broken right now (issue 37, item 4): a long task that raised.

A supervised task (an attachment pass loop, ...) that fails tells ``Health.failed``; the
problem -- which task, since when, how often, the last error line, when it is tried again --
shows in ``GET /v1/status`` (``health``), so ``stet status`` says "not healthy" with the
reason and ``stet doctor`` fails a check, and each change is announced (``on_change``: the
``health.changed`` event of the vault's stream). The next run that succeeds clears it
(``Health.ok``). Before, a pass that raised every 20 s for minutes left ``stet status``
saying "healthy".

``Backoff``: how long a failed task waits before it runs again (1 s doubling to 60 s).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

BACKOFF_S = (1.0, 60.0)  # first wait after a failure, and the most it doubles to


class Backoff:
    """1 s, 2 s, 4 s ... 60 s after each failure in a row; back to 1 s after a success."""

    def __init__(self, first_s: float = BACKOFF_S[0], most_s: float = BACKOFF_S[1]) -> None:
        self.first_s = first_s
        self.most_s = most_s
        self._next_s = first_s

    def failed(self) -> float:
        """The wait before the next try (and double it for the one after)."""
        wait, self._next_s = self._next_s, min(self._next_s * 2, self.most_s)
        return wait

    def succeeded(self) -> None:
        self._next_s = self.first_s


@dataclass(frozen=True, slots=True)
class Problem:
    task: str  # e.g. "attachment pass"
    vault_id: str  # "" for the home's own tasks
    since: float  # wall clock of the first failure in a row
    failures: int  # in a row
    last_error: str  # "KeyError: 'bin/run.sh'": the exception's last line
    retry_at: float  # wall clock of the next try

    def to_json(self, vault_names: dict[str, str]) -> dict[str, Any]:
        return {"task": self.task, "vault": vault_names.get(self.vault_id, self.vault_id),
                "since": self.since, "failures": self.failures, "lastError": self.last_error,
                "retryInSeconds": round(max(0.0, self.retry_at - time.time()), 1)}


def error_line(exc: BaseException) -> str:
    """The line a traceback ends with: the exception's type and message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1]}" if text else type(exc).__name__


class Health:
    """The home's current problems, one per (task, vault)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._problems: dict[tuple[str, str], Problem] = {}
        # (vault id, "failed" | "recovered", the problem): announced as ``health.changed``.
        self.on_change: list[Callable[[str, str, Problem], None]] = []

    def failed(self, task: str, vault_id: str, exc: BaseException, retry_in_s: float) -> Problem:
        now = self.clock()
        old = self._problems.get((task, vault_id))
        problem = Problem(task, vault_id, old.since if old else now, (old.failures if old else 0) + 1,
                          error_line(exc), now + retry_in_s)
        self._problems[(task, vault_id)] = problem
        self._announce(vault_id, "failed", problem)
        return problem

    def ok(self, task: str, vault_id: str) -> None:
        """A run of ``task`` succeeded: its problem, if any, is over."""
        problem = self._problems.pop((task, vault_id), None)
        if problem is not None:
            logger.info("%s of %s works again (after %d failure(s) since %s)", task, vault_id or "the home",
                        problem.failures, time.strftime("%H:%M:%S", time.localtime(problem.since)))
            self._announce(vault_id, "recovered", problem)

    def problems(self) -> list[Problem]:
        return sorted(self._problems.values(), key=lambda p: (p.since, p.task, p.vault_id))

    def to_json(self, vault_names: dict[str, str]) -> dict[str, Any]:
        problems = self.problems()
        return {"ok": not problems, "problems": [p.to_json(vault_names) for p in problems]}

    def _announce(self, vault_id: str, what: str, problem: Problem) -> None:
        for listener in list(self.on_change):
            try:
                listener(vault_id, what, problem)
            except Exception:  # telling of a problem never makes another
                logger.exception("a health listener failed")
