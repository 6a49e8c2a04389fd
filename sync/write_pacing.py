"""When may a note changed by an agent or a peer be written to its file (SPEC §3.3; §9 P2, P11).

A note is written at once (after the bridge's few-ms burst delay) unless it is *hot*: it
changed ``hot_changes`` times or more within the last ``interval_s`` (an agent appending
hundreds of lines a second, a peer replaying a backlog). A hot note goes to disk at most
once per ``interval_s`` after its last write, so a flood of small changes becomes a few
file writes (P2: every append would otherwise be a temp file, an fsync and a rename).

Typing is never hot: a person types ~5-15 characters a second and a held key repeats at
~30 a second, far below the default 8 changes in 100 ms (80 a second). The rule used to
be "any note written less than ``interval_s`` ago waits", which held each keystroke of a
live editor (one change, arriving ~30 ms after the previous one was written) for the rest
of the interval: ~70 ms added to every keystroke on the peer's disk (P11).

Pure: the caller passes the clock (``time.monotonic()``) and asks.
"""

from __future__ import annotations

from collections import deque

BUSY_INTERVAL_S = 0.1
HOT_CHANGES = 8


class WritePacing:
    """Per note: its recent changes and its last write; ``due`` says when it may be written."""

    def __init__(self, interval_s: float = BUSY_INTERVAL_S, hot_changes: int = HOT_CHANGES) -> None:
        if interval_s < 0 or hot_changes < 1:
            raise ValueError("interval_s must be >= 0 and hot_changes >= 1")
        self.interval_s = interval_s
        self.hot_changes = hot_changes
        self._changes: dict[str, deque[float]] = {}  # note -> its last hot_changes change times
        self._written: dict[str, float] = {}  # note -> when its file was last written

    def changed(self, note_id: str, now: float) -> None:
        """The note changed (not from its own file) at ``now``."""
        times = self._changes.get(note_id)
        if times is None:
            times = self._changes[note_id] = deque(maxlen=self.hot_changes)
        times.append(now)

    def written(self, note_id: str, now: float) -> None:
        """The note's file was written (and recorded) at ``now``."""
        self._written[note_id] = now

    def hot(self, note_id: str, now: float) -> bool:
        """Changed ``hot_changes`` times or more within the last ``interval_s``."""
        times = self._changes.get(note_id)
        return times is not None and len(times) == self.hot_changes and now - times[0] < self.interval_s

    def due(self, note_id: str, now: float) -> float:
        """The earliest moment the note may be written: ``now`` unless it is hot and was
        written less than ``interval_s`` ago, then the end of that interval."""
        last = self._written.get(note_id)
        if last is None or now - last >= self.interval_s or not self.hot(note_id, now):
            return now
        return last + self.interval_s

    def forget_quiet(self, now: float) -> None:
        """Drop what no longer matters: writes and changes older than ``interval_s``."""
        for note_id, at in list(self._written.items()):
            if now - at >= self.interval_s:
                del self._written[note_id]
        for note_id, times in list(self._changes.items()):
            if now - times[-1] >= self.interval_s:
                del self._changes[note_id]

    def tracked(self) -> int:
        """Notes with state kept (for tests: quiet notes cost nothing)."""
        return len(self._changes.keys() | self._written.keys())
