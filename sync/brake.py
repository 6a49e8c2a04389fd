"""The burst brake rule of SPEC §5.6, pure: no clock, no I/O.

A change is *destructive* for the brake when it deletes a populated note, empties one,
or overwrites one: a large deletion by the versions rule (SPEC §5.1: 20% or less of the
text of a note of 200+ characters left), which is what a bad ``git checkout`` or a
runaway agent rewriting notes does. *Populated* means the text holds something other
than whitespace; *emptied* means an update leaves nothing but whitespace. When one source
makes destructive changes to
``notes`` (10) or more different notes within ``window_seconds`` (60 s), the brake
engages for that source: those changes, and every further destructive change from that
source while it stays engaged, are held. ``notes = 0`` turns the brake off.

For agents, the daemon also refuses further destructive writes while the brake is
engaged (``brake_engaged``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .change_kinds import Source, is_git
from .destruction import Destruction, classify
from .versions import VersionPolicy

DELETED = "deleted"
EMPTIED = "emptied"
OVERWRITTEN = "overwritten"

RELEASE = "release"
HOLD = "hold"

GIT = Source.GIT  # the source of changes git made in the vault (SPEC §3.16)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BrakePolicy:
    """The numbers of ``[brake]`` in config.toml (SPEC §8)."""

    notes: int = 10
    window_seconds: float = 60
    hold_minutes: float = 30
    on_timeout: str = RELEASE  # or "hold"
    trust_git: bool = True  # a burst made by git is not held (its versions are kept)

    @classmethod
    def from_config(cls, config: Any) -> BrakePolicy:
        """From a ``stet.sync.config.BrakeConfig`` (same field names)."""
        return cls(notes=config.notes, window_seconds=config.window_seconds,
                   hold_minutes=config.hold_minutes, on_timeout=config.on_timeout,
                   trust_git=config.trust_git)

    def counts(self, source: str) -> bool:
        """Whether the brake counts (and may hold) this source's destructive changes."""
        return not (self.trust_git and is_git(source))

    @property
    def enabled(self) -> bool:
        return self.notes > 0

    @property
    def hold_s(self) -> float:
        return self.hold_minutes * 60.0

    def releases_at(self, held_at: float) -> float | None:
        """When a change held at ``held_at`` is released by itself (None: never)."""
        return held_at + self.hold_s if self.on_timeout == RELEASE else None


def destruction(before: str, after: str | None, versions: VersionPolicy | None = None) -> str | None:
    """``"deleted"``, ``"emptied"`` or ``"overwritten"`` (a large deletion by ``versions``'
    rule) if a change from ``before`` to ``after`` (None: the note is deleted) destroys a
    populated note, else None: the brake's names for ``destruction.classify``'s answer."""
    return _HELD.get(classify(before, after, versions))


_HELD = {Destruction.DELETED: DELETED, Destruction.EMPTIED: EMPTIED, Destruction.SHRINK: OVERWRITTEN}


def is_destructive_write(before: str, after: str | None, versions: VersionPolicy) -> bool:
    """What an agent may not do while its brake is engaged."""
    return destruction(before, after, versions) is not None


@dataclass
class BurstRule(Generic[T]):
    """Counts each source's destructive changes in a sliding window.

    At most ``notes - 1`` changes per source are remembered: the one after them either
    trips the rule or pushes the oldest out of the window.
    """

    notes: int = 10
    window_s: float = 60.0
    _recent: dict[str, OrderedDict[str, tuple[float, T]]] = field(default_factory=dict)

    def observe(self, source: str, note_id: str, at: float, item: T) -> list[T]:
        """Record one destructive change by ``source`` at ``at``.

        Returns the changes to hold if this one trips the rule (every change of the
        source still in the window, this one last), else an empty list.
        """
        if self.notes <= 0:
            return []
        recent = self._recent.setdefault(source, OrderedDict())
        recent.pop(note_id, None)
        recent[note_id] = (at, item)
        self._expire(source, at)
        if len(recent) >= self.notes:
            del self._recent[source]
            return [entry[1] for entry in recent.values()]
        return []

    def _expire(self, source: str, now: float) -> None:
        recent = self._recent.get(source)
        if recent is None:
            return
        while recent:
            first_at = next(iter(recent.values()))[0]
            if first_at >= now - self.window_s:
                break
            recent.popitem(last=False)
        if not recent:
            del self._recent[source]

    def forget(self, source: str) -> None:
        self._recent.pop(source, None)

    def prune(self, now: float) -> None:
        """Drop what has left the window (bounded memory for idle sources)."""
        for source in list(self._recent):
            self._expire(source, now)

    def pending(self, source: str) -> int:
        return len(self._recent.get(source, ()))
