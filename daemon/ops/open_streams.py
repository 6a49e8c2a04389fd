"""Every long-lived stream of the API, under the credential that opened it (issue 33, finding 1).

An SSE event stream or a live (Yjs) socket outlives the request that authenticated it, so a
check at the door is not enough: when the credential ends (an agent token revoked, the web
page signed out, its session expired) its streams must end too, within a second. Each stream
registers here under its *holder* -- ``Principal.holder``: ``token:<sha256 of the secret>``,
``ui:<sha256 of the session id>`` or ``owner`` -- with a function that closes it.

The credential's end closes them, not a check per message: an in-process revocation or a
sign-out calls ``end`` (or ``check_now``) itself; a revocation by another process (``stet
token revoke`` writes home.db directly) is seen by the holder checks, which the ticker runs
every ``TICK_S`` while any stream is open (each is a cheap look: home.db's ``data_version``
first, the token table only when it moved).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Collection

logger = logging.getLogger(__name__)

TICK_S = 0.2  # how often ended credentials are looked for while streams are open (≪ 1 s)

Closer = Callable[[str], None]  # closes one stream, saying why (the reason a person reads)
# Given the holders with open streams: those that no longer hold, each with the reason.
HolderCheck = Callable[[Collection[str]], dict[str, str]]


class OpenStreams:
    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self._open: dict[str, dict[int, Closer]] = {}
        self._checks: list[HolderCheck] = []
        self._serial = itertools.count()
        self._ticker: asyncio.Task[None] | None = None

    def add_check(self, check: HolderCheck) -> None:
        self._checks.append(check)

    def add(self, holder: str, close: Closer) -> Callable[[], None]:
        """Register an open stream; returns the function that forgets it (call it when the
        stream ends on its own)."""
        key = next(self._serial)
        self._open.setdefault(holder, {})[key] = close
        if self._ticker is None or self._ticker.done():
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to tick for
                self._ticker = asyncio.get_running_loop().create_task(self._tick(), name="open-streams")

        def forget() -> None:
            streams = self._open.get(holder)
            if streams is not None:
                streams.pop(key, None)
                if not streams:
                    del self._open[holder]

        return forget

    def count(self, holder: str | None = None) -> int:
        if holder is not None:
            return len(self._open.get(holder, {}))
        return sum(len(s) for s in self._open.values())

    def end(self, holder: str, reason: str) -> int:
        """Close every stream of ``holder`` now; how many there were."""
        streams = self._open.pop(holder, {})
        for close in streams.values():
            try:
                close(reason)
            except Exception:
                logger.exception("closing a stream of an ended credential failed")
        if streams:
            logger.info("closed %d open stream(s): %s", len(streams), reason)
        return len(streams)

    def check_now(self) -> None:
        """Ask every holder check about the holders with open streams; end those that ended."""
        if not self._open:
            return
        for check in self._checks:
            try:
                ended = check(list(self._open))
            except Exception:
                logger.exception("checking open streams' credentials failed")
                continue
            for holder, reason in ended.items():
                self.end(holder, reason)

    async def _tick(self) -> None:
        while self._open:
            await asyncio.sleep(self.tick_s)
            self.check_now()

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
