"""A value read at most once per turn of the event loop (issue 18, P2).

Requests that arrive together (eight agents appending at once) are handled in the same
turn of the loop; each used to ask home.db's ``PRAGMA data_version`` (is the token cache
still true?) on its own. Read once per turn, the answer is as fresh for each of them --
a change committed by another process is seen by the first request of the next turn,
so a revoked token is refused as soon as it was before (nothing is remembered across a
turn, and without a running loop nothing is remembered at all).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class TurnMemo(Generic[T]):
    """``get()`` calls ``read`` once per event-loop turn and answers the rest from it."""

    __slots__ = ("_read", "_value", "_known", "reads")

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._value: T | None = None
        self._known = False
        self.reads = 0  # how often ``read`` ran (for tests)

    def get(self) -> T:
        if self._known:
            return self._value  # type: ignore[return-value]
        value = self._read()
        self.reads += 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (offline tools, tests): nothing to share it with
            return value
        self._value, self._known = value, True
        loop.call_soon(self.forget)  # runs after every callback already due in this turn
        return value

    def forget(self) -> None:
        self._value, self._known = None, False
