"""The rules of the agent write shapes (SPEC §6.4), as pure functions over text.

- append: the text goes at the end; if the note does not end with a line break, one
  is added first so an appended line never glues onto the last line.
- edit: every ``oldText`` must occur exactly once in the current text and the edits
  must not overlap; otherwise the whole call is refused and nothing is written.
- update: a full rewrite, applied as a minimal diff (``text_diff``) by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import StetError
from .text_diff import Splice


@dataclass(frozen=True, slots=True)
class Edit:
    old_text: str
    new_text: str


def parse_edits(raw: Any) -> list[Edit]:
    if not isinstance(raw, list) or not raw:
        raise StetError("edits must be a non-empty list of {oldText, newText}", code="bad_request")
    edits = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise StetError(f"edits[{i}] must be an object", code="bad_request")
        old, new = item.get("oldText"), item.get("newText")
        if not isinstance(old, str) or not isinstance(new, str):
            raise StetError(f"edits[{i}] needs string oldText and newText", code="bad_request")
        if old == "":
            raise StetError(f"edits[{i}].oldText must not be empty", code="bad_request")
        edits.append(Edit(old, new))
    return edits


def _count(text: str, needle: str, limit: int = 10_000) -> tuple[int, int]:
    """(occurrences, first index) counting overlapping matches."""
    count, first, start = 0, -1, 0
    while count < limit:
        i = text.find(needle, start)
        if i < 0:
            break
        if first < 0:
            first = i
        count += 1
        start = i + 1
    return count, first


def plan_edits(current: str, edits: Sequence[Edit]) -> list[Splice]:
    """Splices for anchored edits, or a refusal naming the first bad anchor."""
    splices = []
    for i, e in enumerate(edits):
        n, at = _count(current, e.old_text)
        if n == 0:
            raise StetError(f"edits[{i}].oldText was not found in the note", code="anchor_not_found",
                            editIndex=i)
        if n > 1:
            raise StetError(f"edits[{i}].oldText matches {n} times; include more context to make it unique",
                            code="anchor_ambiguous", editIndex=i, matches=n)
        splices.append((at, at + len(e.old_text), e.new_text, i))
    splices.sort()
    for (_a0, a1, _, ia), (b0, _b1, _, ib) in zip(splices, splices[1:], strict=False):
        if b0 < a1:
            raise StetError(f"edits[{ia}] and edits[{ib}] overlap", code="anchors_overlap",
                            editIndexes=[ia, ib])
    return [Splice(s, e, t) for s, e, t, _ in splices]


def append_splice(current: str, text: str) -> Splice:
    if current and not current.endswith("\n") and text and not text.startswith(("\n", "\r\n")):
        text = ("\r\n" if "\r\n" in current else "\n") + text
    return Splice(len(current), len(current), text)
