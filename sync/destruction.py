"""The one rule for what a change destroys (issue 31: the brake's rule was written twice).

Versions keep the text before a large deletion, the burst brake counts and holds
destructive changes, the peer hub delays them: all ask this function, once per change
(the write path sets ``Change.destruction`` from it).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol


class Destruction(StrEnum):
    """What a change did to a populated note (a str-valued enum: equal to its value, JSON as it)."""

    NONE = "none"
    SHRINK = "shrink"  # a large deletion (SPEC §5.2: <= 20% of the text left)
    EMPTIED = "emptied"
    DELETED = "deleted"


class ShrinkRule(Protocol):
    def is_large_deletion(self, before: str, after: str) -> bool: ...


def is_populated(text: str) -> bool:
    """Holds something other than whitespace (``isspace`` stops at the first such character)."""
    return text != "" and not text.isspace()


def classify(before: str, after: str | None, rule: ShrinkRule | None, *,
             nothing_taken: bool = False) -> Destruction:
    """What a change from ``before`` to ``after`` (None: the note deleted) destroyed.
    ``nothing_taken``: the change deleted no character (an append), so nothing is gone
    whatever the sizes say -- the write path knows it without comparing the texts."""
    if not is_populated(before):
        return Destruction.NONE
    if after is None:
        return Destruction.DELETED
    if nothing_taken:
        return Destruction.NONE
    if not is_populated(after):
        return Destruction.EMPTIED
    if rule is not None and rule.is_large_deletion(before, after):
        return Destruction.SHRINK
    return Destruction.NONE
