"""Hybrid logical clock (Kulkarni et al. 2014) for ordering attachment changes (SPEC §3.14).

An ``Hlc`` is (wall milliseconds, counter). It never runs backwards on one device, even
when the wall clock steps back (NTP, a suspended laptop); and a change made after seeing
another's is always later than it, whatever the two machines' clocks say. Packed as 16
lowercase hex digits (48 bits of milliseconds, 16 bits of counter), so a packed HLC sorts
as text in the same order as the clock and travels in JSON without losing precision.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

WALL_BITS = 48
COUNTER_BITS = 16
MAX_WALL = (1 << WALL_BITS) - 1
MAX_COUNTER = (1 << COUNTER_BITS) - 1
# A remote time further ahead of our wall clock than this is not adopted by our clock (a
# peer whose clock is a year off must not drag every later change into its future).
MAX_DRIFT_MS = 24 * 3600 * 1000
_PACKED_RE = re.compile(r"[0-9a-f]{16}\Z")


class HlcError(ValueError):
    pass


@dataclass(frozen=True, slots=True, order=True)
class Hlc:
    wall: int  # milliseconds since the epoch
    counter: int = 0

    def __post_init__(self) -> None:
        if not (0 <= self.wall <= MAX_WALL and 0 <= self.counter <= MAX_COUNTER):
            raise HlcError(f"HLC out of range: {self.wall}, {self.counter}")

    def pack(self) -> str:
        return f"{(self.wall << COUNTER_BITS) | self.counter:016x}"

    @classmethod
    def unpack(cls, packed: str) -> Hlc:
        if not isinstance(packed, str) or _PACKED_RE.match(packed) is None:
            raise HlcError(f"not a packed HLC (16 lowercase hex digits): {packed!r}")
        value = int(packed, 16)
        return cls(value >> COUNTER_BITS, value & MAX_COUNTER)

    def next(self) -> Hlc:
        """The smallest HLC after this one."""
        if self.counter < MAX_COUNTER:
            return Hlc(self.wall, self.counter + 1)
        return Hlc(self.wall + 1, 0)


ZERO = Hlc(0, 0)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class HybridClock:
    """One device's clock. The owner persists ``last`` (packed) and passes it back on
    restart, so a restart with the wall clock stepped back still never repeats a time."""

    def __init__(self, now_ms: Callable[[], int] = wall_ms, last: Hlc = ZERO,
                 max_drift_ms: int = MAX_DRIFT_MS) -> None:
        self._now_ms = now_ms
        self.last = last
        self.max_drift_ms = max_drift_ms

    def _physical(self) -> int:
        return min(max(self._now_ms(), 0), MAX_WALL)

    def now(self) -> Hlc:
        """The time of a local change (or of a message being sent): after everything seen."""
        pt = self._physical()
        self.last = Hlc(pt, 0) if pt > self.last.wall else self.last.next()
        return self.last

    def observe(self, remote: Hlc) -> Hlc:
        """Take in a time received from a peer; returns our clock after it.

        A remote time more than ``max_drift_ms`` ahead of our wall clock is not adopted
        (logged instead); the change it stamps still competes with its own time.
        """
        pt = self._physical()
        if remote.wall > pt + self.max_drift_ms:
            logger.warning("a peer's clock is %.0f s ahead of ours; not adopting it",
                           (remote.wall - pt) / 1000)
            return self.now()
        last = self.last
        wall = max(last.wall, remote.wall, pt)
        if wall == last.wall == remote.wall:
            candidate = Hlc(wall, max(last.counter, remote.counter)).next()
        elif wall == last.wall:
            candidate = last.next()
        elif wall == remote.wall:
            candidate = remote.next()
        else:
            candidate = Hlc(wall, 0)
        self.last = candidate
        return candidate
