"""The SSE replay buffer, kept compressed (issue 18, P7).

A first sync of 10,000 notes publishes 10,000 events, which ``EventBus`` keeps for
clients that resume with ``Last-Event-ID``: as JSON text ~4.4 MB of one daemon's resident
memory after the sync (a tracemalloc diff of B after the first sync against B after a
restart, bench/history/rounds.md). Here the newest events are kept as they are and every
``BLOCK`` of them is sealed into one zlib-compressed block (events of one vault look
alike: ~10x smaller); a replay opens only the blocks after its ``Last-Event-ID``. At
least the last ``capacity`` events are kept (at most ``BLOCK - 1`` more: whole blocks go).
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

BLOCK = 512  # events per sealed block
_SEP = "\x1f"  # never in a JSON text (escaped as \u001f), a vault id or an event type

Row = tuple[int, str, str, str]  # (id, vault id, type, data as compact JSON)


@dataclass(frozen=True, slots=True)
class _Block:
    first_id: int
    last_id: int
    count: int
    vaults: frozenset[str]
    packed: bytes

    @classmethod
    def seal(cls, rows: list[Row]) -> _Block:
        text = "\n".join(f"{i}{_SEP}{v}{_SEP}{t}{_SEP}{d}" for i, v, t, d in rows)
        # level 1: sealing happens on the write path (every BLOCK events); it is ~1 ms here
        return cls(rows[0][0], rows[-1][0], len(rows), frozenset(r[1] for r in rows),
                   zlib.compress(text.encode("utf-8"), 1))

    def rows(self) -> Iterator[Row]:
        for line in zlib.decompress(self.packed).decode("utf-8").split("\n"):
            i, v, t, d = line.split(_SEP, 3)
            yield int(i), v, t, d


class EventHistory:
    """The last ``capacity`` events (at least), oldest first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._recent: list[Row] = []
        self._blocks: deque[_Block] = deque()
        self._sealed = 0  # events in ``_blocks``

    def __len__(self) -> int:
        return self._sealed + len(self._recent)

    def append(self, row: Row) -> None:
        self._recent.append(row)
        if len(self._recent) >= BLOCK:
            block = _Block.seal(self._recent)
            self._recent = []
            self._blocks.append(block)
            self._sealed += block.count
        while self._blocks and len(self) - self._blocks[0].count >= self.capacity:
            self._sealed -= self._blocks.popleft().count

    def after(self, vault_id: str, after: int) -> Iterator[Row]:
        """The kept events of ``vault_id`` with an id above ``after``, oldest first."""
        for block in list(self._blocks):
            if block.last_id > after and vault_id in block.vaults:
                for row in block.rows():
                    if row[1] == vault_id and row[0] > after:
                        yield row
        for row in list(self._recent):
            if row[1] == vault_id and row[0] > after:
                yield row

    def packed_bytes(self) -> int:
        """What the sealed blocks hold (for tests and measurements)."""
        return sum(len(b.packed) for b in self._blocks)
