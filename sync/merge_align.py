"""Aligning one side of a merge with the base (sync/text_merge.py): its job is where a side
differs from the base, as changes every machine places the same way.

Texts are cut into lines (after each LF) or into word-level tokens (:func:`tokenize`); the
blocks a side shares with the base come from a patience diff built on sync/text_diff.py's
primitives (common ends, unique anchors, block joining), with difflib inside small anchorless
gaps and a deterministic step budget (no clocks: two machines must agree); :func:`line_blocks`
walks long, mostly equal texts in linear time. :func:`placed_edits` turns blocks into changes
and slides an ambiguous insertion or deletion to one canonical place.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Sequence

from .text_diff import (
    Block,
    Edit,
    changed_ranges,
    common_prefix_length,
    join_touching_blocks,
    trim_common_ends,
    unique_anchors,
)

__all__ = [
    "Block",
    "Edit",
    "OccurrenceIndex",
    "line_blocks",
    "line_terminator",
    "matching_blocks",
    "placed_edits",
    "split_lines",
    "terminated",
    "tokenize",
    "words_of",
]


# Han ideographs (with the iteration marks 々〆〇) and kana, one token each.
_CJK = (
    "\u3005-\u3007\u3041-\u3098\u309b-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)


# Combining marks (and joiners) that belong to the word they follow: Python's \w does not match
# them, so without this "é" written as e + U+0301, Arabic harakat or Indic vowel signs would
# split words. Ranges of the main scripts; letters inside them are word characters anyway.
_MARKS = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed"
    "\u0900-\u0963\u0966-\u0dff\u0e31\u0e34-\u0e3a\u0e47-\u0e4e\u1ab0-\u1aff\u1dc0-\u1dff"
    "\u200c\u200d\u20d0-\u20ff\ufe00-\ufe0f\ufe20-\ufe2f"
)


_TOKEN = re.compile(
    rf"[{_CJK}][\u3099\u309a]*"  # one ideograph / kana (with a combining voicing mark)
    rf"|(?:[^\W{_CJK}]|[{_MARKS}])+"  # a run of word characters
    r"|[^\S\n]+"  # a run of white space within a line
    r"|\n"  # a line break
    rf"|.[{_MARKS}]*",  # one punctuation mark or symbol (with its variation selector)
)


def tokenize(text: str) -> list[str]:
    """The merge's word-level tokens of ``text`` (a partition: ``"".join`` gives it back)."""
    return _TOKEN.findall(text)


def words_of(line: str) -> set[str]:
    return {token for token in tokenize(line) if token[0].isalnum()}


# Anchorless gaps up to this many element pairs get difflib's matcher; larger ones (sharing no
# element that is unique on both sides) are replacements.
_SMALL_GAP = 40_000


# Steps (elements of the ranges examined) one diff may use beyond a linear allowance.
_DIFF_STEPS = 2_000_000


def _anchors(a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int) -> list[Block]:
    """Patience anchors of a[alo:ahi] vs b[blo:bhi] (text_diff's), as runs of consecutive ones."""
    pairs, _ = unique_anchors(a, b, alo, ahi, blo, bhi)
    if not pairs:
        return []
    runs: list[Block] = []
    pi, pj, n = pairs[0][0], pairs[0][1], 1
    for i, j in pairs[1:]:
        if i == pi + n and j == pj + n:
            n += 1
        else:
            runs.append((pi, pj, n))
            pi, pj, n = i, j, 1
    runs.append((pi, pj, n))
    return runs


def _patience(
    a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int, budget: list[int]
) -> list[Block]:
    """Blocks a[alo:ahi] and b[blo:bhi] have in common (patience diff, unordered); ``budget[0]``
    is the steps left, shared by the caller's calls (a range it cannot afford is a replacement)."""
    out: list[Block] = []
    stack = [(alo, ahi, blo, bhi)]
    while stack:
        alo, ahi, blo, bhi = trim_common_ends(a, b, *stack.pop(), out)
        n, m = ahi - alo, bhi - blo
        if not n or not m:
            continue
        budget[0] -= n + m
        if budget[0] < 0:
            continue
        runs = _anchors(a, b, alo, ahi, blo, bhi)
        if not runs:
            if n * m <= _SMALL_GAP:
                matcher = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
                out.extend((i + alo, j + blo, k) for i, j, k in matcher.get_matching_blocks() if k)
            continue
        pi, pj = alo, blo
        for i, j, k in runs:
            out.append((i, j, k))
            if i > pi and j > pj:
                stack.append((pi, i, pj, j))
            pi, pj = i + k, j + k
        if ahi > pi and bhi > pj:
            stack.append((pi, ahi, pj, bhi))
    return out


def matching_blocks(a: Sequence[str], b: Sequence[str]) -> list[Block]:
    """Sorted, non-touching blocks of elements ``a`` and ``b`` have in common (a patience diff)."""
    budget = [_DIFF_STEPS + 8 * (len(a) + len(b))]
    return join_touching_blocks(_patience(a, b, 0, len(a), 0, len(b), budget))


class OccurrenceIndex:
    """Occurrence counts and a position of every element of a sequence (the last one)."""

    __slots__ = ("count", "pos")

    def __init__(self, seq: Sequence[str]) -> None:
        self.count = Counter(seq)
        self.pos = dict(zip(seq, range(len(seq)), strict=True))


def line_blocks(
    base: Sequence[str],
    side: Sequence[str],
    base_index: OccurrenceIndex,
    side_index: OccurrenceIndex | None = None,
) -> list[Block]:
    """Sorted blocks of lines ``base`` and ``side`` have in common, for long, mostly equal texts.

    Walks both from the start: equal runs at the speed of list slice compares; at a difference,
    the nearest pair of lines (fewest lines skipped on both sides) that occur exactly once in each
    text resynchronises the walk, and the lines skipped are diffed with :func:`_patience`. Every
    line is looked at a bounded number of times, so the cost is linear plus the gaps' diffs.
    """
    n, m = len(base), len(side)
    side_index = side_index or OccurrenceIndex(side)
    bcount, bpos = base_index.count, base_index.pos
    scount, spos = side_index.count, side_index.pos
    budget = [_DIFF_STEPS + 8 * (n + m)]
    out: list[Block] = []
    i = j = 0
    while True:
        k = common_prefix_length(base, side, i, n, j, m)
        if k:
            out.append((i, j, k))
            i += k
            j += k
        if i == n or j == m:
            break
        # The nearest anchor: lines unique in both, cost = lines skipped on both sides.
        ai, aj = n, m
        cost = n - i + m - j
        d = 0
        while d < cost and (j + d < m or i + d < n):
            if j + d < m:
                x = side[j + d]
                if scount[x] == 1 and bcount[x] == 1:
                    bi = bpos[x]
                    if bi >= i and bi - i + d < cost:
                        ai, aj, cost = bi, j + d, bi - i + d
            if i + d < n:
                y = base[i + d]
                if bcount[y] == 1 and scount[y] == 1:
                    sj = spos[y]
                    if sj >= j and sj - j + d < cost:
                        ai, aj, cost = i + d, sj, sj - j + d
            d += 1
        out.extend(_patience(base, side, i, ai, j, aj, budget))
        i, j = ai, aj
    return join_touching_blocks(out)


def placed_edits(
    base: Sequence[str], side: Sequence[str], blocks: list[Block], tokens: bool = False
) -> list[Edit]:
    """The changes turning ``base`` into ``side``, in order and never touching each other.

    A pure insertion or deletion that could sit at several places (equal elements around it) is
    put at the first of them, so that identical changes made by different sides land at the same
    place whatever else each side changed; for ``tokens``, at the first place where it is whole
    lines (starts at a line start, ends with a line break) if there is one, so that a line added
    next to a changed line does not touch the change.
    """
    raw = changed_ranges(blocks, 0, len(base), 0, len(side))
    out: list[Edit] = []
    for idx, (a0, a1, b0, b1) in enumerate(raw):
        if a0 == a1 or b0 == b1:
            limit = out[-1][1] if out else 0
            # Elements are matched between the previous change and this one, so moving the
            # change one element up (or down) keeps the same text on both sides when the
            # element leaving it equals the element entering it.
            seq, c0, c1 = (side, b0, b1) if a0 == a1 else (base, a0, a1)
            while a0 > limit and base[a0 - 1] == seq[c1 - 1]:
                a0, a1, b0, b1, c0, c1 = a0 - 1, a1 - 1, b0 - 1, b1 - 1, c0 - 1, c1 - 1
            if tokens:
                stop = raw[idx + 1][0] - 1 if idx + 1 < len(raw) else len(base)
                shift = 0
                while not _whole_lines(base, a0 + shift, seq, c0 + shift, c1 + shift):
                    if a1 + shift >= stop or base[a1 + shift] != seq[c0 + shift]:
                        shift = 0
                        break
                    shift += 1
                a0, a1, b0, b1 = a0 + shift, a1 + shift, b0 + shift, b1 + shift
            if out and a0 == limit:  # slid against the previous change: one change
                pa0, _, pb0, _ = out.pop()
                a0, b0 = pa0, pb0
        out.append((a0, a1, b0, b1))
    return out


def _whole_lines(base: Sequence[str], a0: int, seq: Sequence[str], c0: int, c1: int) -> bool:
    """Whether the run seq[c0:c1] inserted or deleted at base position a0 is whole lines."""
    return (a0 == 0 or base[a0 - 1] == "\n") and seq[c1 - 1] == "\n"


def split_lines(text: str) -> list[str]:
    """``text`` split after each LF (CRLF stays one line ending; no other separator counts)."""
    parts = text.split("\n")
    last = parts.pop()
    lines = [part + "\n" for part in parts]
    if last:
        lines.append(last)
    return lines


def terminated(text: str, eol: str) -> str:
    return text if not text or text.endswith("\n") else text + eol


def line_terminator(*texts: str) -> str:
    """The line terminator the texts use: CRLF if the first line break found is one, else LF."""
    for text in texts:
        i = text.find("\n")
        if i >= 0:
            return "\r\n" if i and text[i - 1] == "\r" else "\n"
    return "\n"
