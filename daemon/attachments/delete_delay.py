"""Local attachment deletions wait ``[peer] delete_delay_seconds`` before peers hear of them
(SPEC §5.6, §3.14), as notes' deletes do, through the one outbound gate.

A deletion the folder side found (and the brake admitted) is not recorded in the attachment
index at once: it *waits*, and the gate (``OutboundGate.defer``, key ``attachment:<id>``,
woken by its ``call_at`` timer, never polled; not while the brake holds that key) lets it go
when due. Then the next pass records it -- if the folder still shows it deleted. While it
waits, nothing of it is recorded (the index, the seen state and the blob of the file's last
bytes stay as they were, so a ``kill -9`` loses nothing: the next start plans it again and
it waits again), and the folder side writes nothing at its path. A file that is back before
the deletion is due (a ``git stash`` round trip, an ``rm`` and a copy back from a backup)
leaves nothing to send: the deletion is no longer planned and is dropped. Its version
(``before-deletion``) and its ``stet log`` line are made when it is recorded.

``stet status`` counts the waiting ones in ``pendingDeletes`` (``pending``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from stet.sync.attachment_plan import IntakeAction, RecordDelete
from stet.sync.held_attachments import held_key

logger = logging.getLogger(__name__)


class DeferredSends(Protocol):
    """What this needs of the daemon's ``OutboundGate``."""

    def defer(self, vault_id: str, note_id: str, send: Callable[[], None], due: float | None) -> None: ...


class DeferredDeletes:
    """One vault's attachment deletions waiting for the delete delay."""

    def __init__(self, vault_id: str, delay_s: Callable[[str], float], wake: Callable[[], None],
                 *, clock: Callable[[], float] = time.time) -> None:
        self.vault_id = vault_id
        self.delay_s = delay_s
        self.wake = wake
        self.clock = clock
        self.outbound: DeferredSends | None = None  # None: no gate (deletions recorded at once)
        self._waiting: dict[IntakeAction, float] = {}  # deletion -> when it may go
        self._sources: dict[IntakeAction, str] = {}  # who made each waiting deletion
        self._due: dict[IntakeAction, str] = {}  # let go by the gate: record at the next pass

    def planned(self, actions: Iterable[IntakeAction]) -> None:
        """The pass planned these: a waiting deletion it no longer plans (the file is back,
        or changed) is dropped -- nothing destructive goes."""
        now = set(actions)
        for a in [a for a in self._waiting if a not in now]:
            logger.info("attachment %s is back before its deletion reached peers: nothing sent",
                        getattr(a, "path", "?"))
            del self._waiting[a]
            self._sources.pop(a, None)
        self._due = {a: source for a, source in self._due.items() if a in now}

    def waiting(self, a: IntakeAction) -> bool:
        return a in self._waiting

    def take_due(self) -> dict[IntakeAction, str]:
        """The deletions let go since the last call, with their sources."""
        due, self._due = self._due, {}
        return due

    def defer(self, actions: Sequence[IntakeAction], source: str) -> list[IntakeAction]:
        """Admitted actions of ``source``: the deletions wait (given to the gate); returns
        the others, to record now. ``delay_s(source)``: none for git's (SPEC §3.16)."""
        delay = self.delay_s(source)
        gate = self.outbound
        if gate is None or delay <= 0:
            return list(actions)
        now: list[IntakeAction] = []
        due = self.clock() + delay
        for a in actions:
            if not isinstance(a, RecordDelete):
                now.append(a)
                continue
            self._waiting[a] = due
            self._sources[a] = source
            gate.defer(self.vault_id, held_key(a.seen.att_id), functools.partial(self._let_go, a), due)
        return now

    def _let_go(self, a: IntakeAction) -> None:
        """The gate: the deletion is due (and not held): recorded by the next pass."""
        if self._waiting.pop(a, None) is not None:
            self._due[a] = self._sources.pop(a, "disk")
            self.wake()

    def release(self, actions: Iterable[IntakeAction]) -> None:
        """The brake released these (they are recorded now): no longer waiting."""
        for a in actions:
            self._waiting.pop(a, None)
            self._sources.pop(a, None)

    def drop_path(self, path: str) -> None:
        """Something was written back at ``path`` (revert, restore): its deletion is moot."""
        for a in [a for a in self._waiting if isinstance(a, RecordDelete) and a.path == path]:
            del self._waiting[a]
            self._sources.pop(a, None)

    def paths(self) -> set[str]:
        return {a.path for a in self._waiting if isinstance(a, RecordDelete)}

    def pending(self) -> tuple[int, float]:
        """(how many wait, seconds until the last one goes)."""
        if not self._waiting:
            return 0, 0.0
        return len(self._waiting), max(0.0, max(self._waiting.values()) - self.clock())
