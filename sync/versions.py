"""The versions rules of SPEC §5: pure decisions, no I/O.

- **Large deletion** (§5.1): one update that leaves a note with ``shrink_ratio`` (20%) or
  less of its text, when the note had at least ``shrink_min_chars`` (200) characters.
  *Characters* are Python ``str`` lengths, i.e. Unicode code points: ``"é"`` written as
  one code point is 1, as ``e`` + a combining accent is 2, and an emoji is 1 (a family
  emoji joined with ZWJs is several). The ratio is compared exactly (as a decimal
  fraction, no float rounding): 1000 → 200 characters *is* a large deletion, 1000 → 201
  is not. *Left of its text* means the characters of the old text still in the new one
  (by the same minimal diff the write path uses), not just the new length: a note
  overwritten with unrelated text of the same size has 0% of its text left, and that
  overwrite is exactly what the rule must keep. For a pure cut both measures agree.
- **Idle versions** (§5.2): a note that has not been edited for ``idle_minutes`` is kept.
- **Retention** (§5.2, §5.3): the ``keep`` (50) newest versions of a note are kept; beyond
  them, the ``keep_shrink`` (10) most recent ``before-large-deletion`` / ``before-deletion``
  versions of the note are kept until they are ``shrink_keep_days`` (30) days old; every
  other version is dropped. Versions a held change still needs are never dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from fractions import Fraction

from .config import VersionsConfig
from .text_diff import diff_splices


class VersionKind(StrEnum):
    """Why a version was kept (a str-valued enum: stored and shown as its value)."""

    IDLE = "idle"
    BEFORE_LARGE_DELETION = "before-large-deletion"
    BEFORE_DELETION = "before-deletion"
    BEFORE_RESTORE = "before-restore"
    BEFORE_PROMOTION = "before-promotion"  # a refused write applied by a person (SPEC §6.4)
    # One side's text just before a merge whose sides changed the same words differently
    # (both are in the note, one after the other; docs/recovering.md "Overlapping edits").
    CONCURRENT = "concurrent"


BEFORE_LARGE_DELETION = VersionKind.BEFORE_LARGE_DELETION
BEFORE_DELETION = VersionKind.BEFORE_DELETION
BEFORE_RESTORE = VersionKind.BEFORE_RESTORE
BEFORE_PROMOTION = VersionKind.BEFORE_PROMOTION
IDLE = VersionKind.IDLE
CONCURRENT = VersionKind.CONCURRENT

KINDS = (IDLE, BEFORE_LARGE_DELETION, BEFORE_DELETION, BEFORE_RESTORE, BEFORE_PROMOTION, CONCURRENT)
SHRINK_KINDS = frozenset({BEFORE_LARGE_DELETION, BEFORE_DELETION})
BEFORE_KINDS = frozenset({BEFORE_LARGE_DELETION, BEFORE_DELETION, BEFORE_RESTORE, BEFORE_PROMOTION,
                          CONCURRENT})

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class VersionPolicy(VersionsConfig):
    """The numbers of ``[versions]`` in config.toml (SPEC §8, ``VersionsConfig``) and what
    they decide."""

    @classmethod
    def from_config(cls, config: VersionsConfig) -> VersionPolicy:
        return cls(**{f.name: getattr(config, f.name) for f in fields(VersionsConfig)})

    @property
    def idle_s(self) -> float:
        return self.idle_minutes * 60.0

    def is_large_deletion(self, before: str, after: str) -> bool:
        """Whether the update ``before`` → ``after`` leaves 20% or less of the text."""
        n = len(before)
        if n < self.shrink_min_chars or n == 0:
            return False
        if is_large_deletion(n, len(after), self.shrink_ratio, self.shrink_min_chars):
            return True  # fewer characters now than the limit: whatever they are
        if after.startswith(before) or after.endswith(before):
            return False  # text added at one end, nothing taken (an append): quick to tell
        return is_large_deletion(n, chars_left(before, after), self.shrink_ratio, self.shrink_min_chars)


@functools.lru_cache(maxsize=16)
def _exact(ratio: float) -> Fraction:
    # repr() is the shortest decimal that round-trips: 0.2 -> 1/5, 0.3 -> 3/10 (whereas
    # Fraction(0.3) is a hair below 3/10 and would miss the exact-30% boundary).
    return Fraction(repr(float(ratio)))


def is_large_deletion(before_chars: int, left_chars: int, ratio: float = 0.2, min_chars: int = 200) -> bool:
    """Whether one update is a large deletion (SPEC §5.1): the note had ``before_chars``
    characters, at least ``min_chars``, and ``left_chars`` of them are left after the
    update, ``ratio`` of them or fewer. Characters are ``len()`` of a Python ``str``
    (code points); ``left_chars`` is ``chars_left(before, after)`` (for a pure cut, the
    new length).
    """
    if before_chars < min_chars or before_chars <= 0:
        return False
    return left_chars <= before_chars * _exact(ratio)


_last_left: tuple[str, str, int] | None = None


def chars_left(before: str, after: str) -> int:
    """How many characters of ``before`` are still in ``after``: what the minimal diff
    (``text_diff.diff_splices``, bounded in time) does not delete or replace."""
    global _last_left
    last = _last_left
    if last is not None and last[0] is before and last[1] is after:
        return last[2]  # the versions keeper and the brake ask about the same change
    left = len(before) - sum(sp.end - sp.start for sp in diff_splices(before, after, deadline_s=0.2))
    _last_left = (before, after, left)
    return left


def is_idle(last_edit_at: float, now: float, idle_minutes: float) -> bool:
    """A note last edited at ``last_edit_at`` has been left alone long enough (SPEC §5.2)."""
    return now - last_edit_at >= idle_minutes * 60.0


@dataclass(frozen=True, slots=True)
class VersionMeta:
    """What retention needs to know of a version."""

    id: int
    kind: str
    created_at: float


def _newest_first(versions: Sequence[VersionMeta]) -> list[VersionMeta]:
    return sorted(versions, key=lambda v: (v.created_at, v.id), reverse=True)


def versions_to_keep(versions: Sequence[VersionMeta], now: float, policy: VersionPolicy,
                     protected: Collection[int] = ()) -> set[int]:
    """The ids of one note's versions that retention keeps at ``now``."""
    ordered = _newest_first(versions)
    keep = {v.id for v in ordered[: policy.keep]}
    shrink = [v for v in ordered if v.kind in SHRINK_KINDS][: policy.keep_shrink]
    horizon = now - policy.shrink_keep_days * DAY_S
    keep.update(v.id for v in shrink if v.created_at >= horizon)
    keep.update(v.id for v in ordered if v.id in protected)
    return keep


def versions_to_drop(versions: Sequence[VersionMeta], now: float, policy: VersionPolicy,
                     protected: Collection[int] = ()) -> list[int]:
    """The ids of one note's versions that retention drops at ``now`` (oldest first)."""
    keep = versions_to_keep(versions, now, policy, protected)
    return [v.id for v in reversed(_newest_first(versions)) if v.id not in keep]


def restore_path_candidates(path: str, limit: int = 1000) -> Iterator[str]:
    """Where a deleted note goes back when its old path is taken: ``a/b (restored).md``,
    then ``a/b (restored 2).md`` and so on (at most ``limit`` names)."""
    folder, sep, name = path.rpartition("/")
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    suffix = f".{ext}" if ext else ""
    for n in range(1, limit + 1):
        label = "restored" if n == 1 else f"restored {n}"
        yield f"{folder}{sep}{stem} ({label}){suffix}"


def first_free_path(path: str, taken: Callable[[str], bool], limit: int = 1000) -> str | None:
    """``path`` if free, else the first free restore candidate (None if all are taken)."""
    if not taken(path):
        return path
    for candidate in restore_path_candidates(path, limit):
        if not taken(candidate):
            return candidate
    return None


def preview(text: str, width: int = 80) -> str:
    """The first non-blank line of a text, cut to ``width`` characters."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped:
            return stripped if len(stripped) <= width else stripped[: width - 1] + "…"
    return ""
