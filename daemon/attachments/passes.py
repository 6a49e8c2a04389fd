"""When the folder side of attachments runs a pass (SPEC §3.14): one task per vault.

A pass runs when woken (folder events, a peer's index update, a blob's arrival), at start,
and every ``rescan_s`` (a periodic pass: the home's blobs are swept after it). Passes never
overlap (one lock, also taken by ``sync_now`` and ``write_back``) and are spaced out: each
starts at least ``DEBOUNCE_S``, and twice as long as the last one took, after the last one
ended -- less once every blob waited for has landed (``hurry``). A pass that must look at
something again asks for another pass later (``retry_later``), doubling the delay while it
keeps having to.

Supervised (issue 37, item 4): a pass that raises is logged, its memory reloaded from the
store, and tried again after a backoff (1 s doubling to 60 s: ``base/health``); the failure
is a problem of the home's ``Health`` (``stet status``, ``stet doctor``, ``health.changed``)
until a later pass succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable

from stet.daemon.base.health import Backoff, Health

logger = logging.getLogger(__name__)

DEBOUNCE_S = 0.25  # passes are at least this far apart: a burst of events (an unzip) costs few
# The most a long pass delays the next (half of it, doubled). A pass's wall time counts
# what else the daemon did meanwhile: at 5 s, a peer's 1,300 attachment deletions that
# arrived beside 1,800 note deletions waited 10 s for the pass after the first (issue 37).
MAX_GAP_S = 1.0
RETRY_S = (0.5, 10.0)  # a file that changed while read, or a path changed before a write:
# looked at again after the first delay, doubling (to the second) while it keeps changing
PASS_TASK = "attachment pass"  # the task's name in ``Health`` (``stet status``)


class PassLoop:
    """One vault's passes: ``run_pass(periodic)`` under ``lock``, when ``woken``."""

    def __init__(self, vault_id: str, run_pass: Callable[[bool], Awaitable[None]], *, rescan_s: float,
                 hurry: asyncio.Event, after_periodic: Callable[[], Awaitable[object]] | None,
                 on_failure: Callable[[], None], health: Health | None = None) -> None:
        self.vault_id = vault_id
        self.run_pass = run_pass  # walk: whether the pass must walk the folder (the periodic one)
        self.rescan_s = rescan_s
        self.hurry = hurry  # set: every blob waited for has landed (the spacing is cut short)
        self.after_periodic = after_periodic
        self.on_failure = on_failure  # a pass failed: memory as the store has it again
        self.health = health if health is not None else Health()  # the home's (one per vault in tests)
        self.backoff = Backoff()
        self.woken = asyncio.Event()
        self.lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.last_pass_s = 0.0
        self.last_pass_end = -math.inf  # time.monotonic() when the last pass ended
        self._retry_s = RETRY_S[0]

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"attachments:{self.vault_id}")

    async def stop(self) -> None:
        if self._task is not None:
            task = self._task
            while not task.done():
                # Again if need be: Python 3.11's ``wait_for`` drops a cancel that comes as
                # what it waits for completes, and the loop then waited an hour (a test's
                # stop hung right after a pass had been woken).
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._task = None
        async with self.lock:  # a pass in a worker thread finishes first
            pass

    def poke(self) -> None:
        """A pass soon."""
        self.woken.set()

    def pending(self) -> bool:
        """A pass is due or running."""
        return self.woken.is_set() or self.lock.locked()

    def retry_later(self, wake: Callable[[], None]) -> None:
        """Something must be looked at again: ``wake`` after the retry delay (doubling)."""
        asyncio.get_running_loop().call_later(self._retry_s, wake)
        self._retry_s = min(self._retry_s * 2, RETRY_S[1])

    def no_retry(self) -> None:
        self._retry_s = RETRY_S[0]

    async def _run(self) -> None:
        while True:
            periodic = False
            try:
                await asyncio.wait_for(self.woken.wait(), timeout=self.rescan_s or None)
            except TimeoutError:
                periodic = True
            # A burst of events (or a long pass) spaces the passes out: each starts at least
            # DEBOUNCE_S, and twice as long as the last one took, after the last one ended.
            # Counted from that end, not from this wake: the first wake after a quiet spell
            # runs a pass at once (a first sync's wanted blobs were asked for a whole
            # DEBOUNCE_S late: P9, issue 14).
            since = time.monotonic() - self.last_pass_end
            await self._spacing(max(DEBOUNCE_S, 2 * self.last_pass_s) - since)
            self.woken.clear()
            started = time.monotonic()
            try:
                async with self.lock:
                    await self.run_pass(periodic)
                if periodic and self.after_periodic is not None:
                    await self.after_periodic()
            except Exception as exc:
                wait = self.backoff.failed()
                logger.exception("attachment pass of %s failed; tried again in %.0f s", self.vault_id, wait)
                self.health.failed(PASS_TASK, self.vault_id, exc, wait)
                self.on_failure()
                self.woken.set()  # what the failed pass left undone is done by the next one
                await asyncio.sleep(wait)
            else:
                self.backoff.succeeded()
                self.health.ok(PASS_TASK, self.vault_id)
            self.last_pass_end = time.monotonic()
            self.last_pass_s = min(self.last_pass_end - started, MAX_GAP_S)

    async def _spacing(self, seconds: float) -> None:
        """Wait ``seconds`` before a pass, or less once every blob waited for has landed."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.hurry.wait(), seconds)
        self.hurry.clear()
