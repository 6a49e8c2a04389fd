"""What a three-way merge of note texts returns, and what it takes (sync/text_merge.py).

:class:`Side` is one version of the note and who wrote it; :class:`MergeResult` the merged text
and, as :class:`Overlap` values, the regions where sides' changes overlapped (each side's lines
there, for the daemon to record as a conflict of kind ``merged``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MergeResult", "Overlap", "Side"]


@dataclass(frozen=True, slots=True)
class Side:
    """One version of the note: its text and who wrote it (e.g. ``device:abc``, ``agent:x``).

    The key only orders overlapping versions deterministically (ties broken by text).
    """

    text: str
    key: str


@dataclass(frozen=True, slots=True)
class Overlap:
    """A region several sides changed differently.

    ``base`` holds the base lines of the region; ``sides`` one ``(key, lines)`` entry per distinct
    change, in the order they appear in the merged text (a deletion has empty lines and adds
    nothing to the text). The key of a change several sides made alike is the smallest of theirs.
    Every line is shown with its line break, a last line that has none in the text included.
    """

    base: str
    sides: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MergeResult:
    text: str
    overlaps: tuple[Overlap, ...] = ()

    @property
    def clean(self) -> bool:
        """Whether no region had overlapping changes."""
        return not self.overlaps
