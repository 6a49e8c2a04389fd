"""Which revision of a note each reader was last handed (issue 32 item 5).

A full rewrite sent without ``expectedRevision`` or ``baseRevision`` by a token that read
the note a moment ago was made on what it read: taken as a ``baseRevision`` rewrite at that
revision, whatever others wrote since survives it through the merge rule, instead of the
rewrite being a bet that nobody else wrote. Bounded in entries and in age (the age of the
states the revision memory keeps, past which a base cannot be rebuilt anyway); in memory
only -- after a restart a rewrite is what it says, as before.
"""

from __future__ import annotations

from collections import OrderedDict

from .revision_memory import DEFAULT_MAX_AGE_S

MAX_READS = 20_000


class ReadMemory:
    def __init__(self, *, max_entries: int = MAX_READS, max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self._reads: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()

    def handed(self, reader: str, note_id: str, revision: str, now: float) -> None:
        """``reader`` (a token's source, e.g. ``agent:x``) was just given ``revision``."""
        key = (reader, note_id)
        self._reads[key] = (revision, now)
        self._reads.move_to_end(key)
        while len(self._reads) > self.max_entries:
            self._reads.popitem(last=False)

    def last_read(self, reader: str, note_id: str, now: float) -> str | None:
        """The revision ``reader`` was last given of the note, if within the window."""
        got = self._reads.get((reader, note_id))
        if got is None:
            return None
        revision, at = got
        if now - at > self.max_age_s or now < at:
            del self._reads[(reader, note_id)]
            return None
        return revision
