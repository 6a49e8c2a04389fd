"""Minimal text diffs for turning one note text into another (SPEC §3.1).

Pure ``str`` logic, no CRDT here. The caller diffs the text the note had against the text on disk
with :func:`diff_splices`, converts the result to UTF-8 byte offsets with :func:`to_byte_splices`
(pycrdt ``Text`` indexes are bytes) and applies the byte splices in the order given.

Algorithm (line-first, then characters, every stage bounded):

1. Trim the common prefix and suffix (chunked slice comparisons, C speed).
2. Diff the middle as lines (``str.splitlines`` boundaries): a patience diff (lines that occur
   exactly once on both sides, the longest increasing run of them as anchors, recurse into the
   gaps), with a Myers O(ND) diff for gaps that have no unique line, skipped when a count of the
   lines they could share shows it would cost more than the budget allows.
3. Inside each changed hunk of lines, characters: a Myers diff (prefix/suffix trim, a "shorter
   text inside the longer" shortcut, then middle-snake bisection as in diff-match-patch) for a
   short hunk; for a longer one the same line machinery on words first, then characters inside
   short runs of changed words. Each hunk also has its own step cap, so one rewritten section
   cannot use up the time of the others. A hunk larger than ``char_diff_limit`` on either side,
   or any work left when the deadline has passed, is emitted as one replacement instead (still
   trimmed of its common prefix/suffix).
4. A semantic clean-up (the diff-match-patch rule): an unchanged run no longer than the edits on
   both of its sides is folded into one edit, so "hello" -> "world" is one splice, not four
   one-letter ones.

Every loop is linear or charged to a budget (a wall-clock deadline for :func:`diff_splices`, a
deterministic step count for :func:`union_splices`): a multi-MB input cannot hang the daemon.
"""

from __future__ import annotations

import re
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

__all__ = [
    "Block",
    "ByteSplice",
    "Edit",
    "Splice",
    "apply_splices",
    "changed_ranges",
    "common_affixes",
    "common_prefix_length",
    "common_suffix_length",
    "diff_splices",
    "join_touching_blocks",
    "to_byte_splices",
    "trim_common_ends",
    "union_splices",
    "unique_anchors",
]

# Hunks up to this many characters per side (after trimming) get a character Myers diff directly;
# larger ones are diffed as words first, then by character inside runs of changed words up to
# _CHAR_IN_WORDS characters per side (longer runs share no word: they are rewrites).
_CHAR_DIRECT = 64
_CHAR_IN_WORDS = 64
# Steps (Myers diagonals, patience elements) one hunk may use, whatever the deadline says.
_HUNK_STEPS = 50_000
_HUNK_STEPS_PER_CHAR = 20
# Words, runs of white space, runs of anything else: a partition of the text.
_WORD = re.compile(r"\w+|\s+|[^\w\s]+")

# Largest piece of work started under a deadline-only budget (about 0.5 s of Myers steps): a
# gap that cannot be aligned within it is a replacement, without burning the deadline first.
_MAX_STEPS = 2_000_000

# Work budget for union_splices, counted in inner-loop steps rather than seconds so that the
# result depends only on the inputs (two machines computing the same union must agree).
_UNION_STEP_BUDGET = 2_000_000


@dataclass(frozen=True, slots=True)
class Splice:
    """Replace ``old[start:end]`` with ``text`` (indexes are Python code points into OLD)."""

    start: int
    end: int
    text: str


@dataclass(frozen=True, slots=True)
class ByteSplice:
    """Delete ``length`` UTF-8 bytes at byte offset ``start``, then insert ``text`` there."""

    start: int
    length: int
    text: str


# ----------------------------------------------------------------------------------------------
# Budget


class _Budget:
    """Work allowance shared by every stage of one diff: a deadline and/or a step count."""

    __slots__ = ("_deadline", "_steps")

    def __init__(self, deadline: float | None, steps: int | None) -> None:
        self._deadline = deadline
        self._steps = steps

    def sub(self, steps: int) -> _Budget:
        """A budget with the same deadline and its own step cap."""
        return _Budget(self._deadline, steps)

    def affords(self, steps: int) -> bool:
        """Whether ``steps`` more fit (a deadline-only budget affords _MAX_STEPS at a time)."""
        return steps <= (_MAX_STEPS if self._steps is None else self._steps)

    def spend(self, steps: int) -> bool:
        """Charge ``steps``; return False once the budget is exhausted (and from then on)."""
        if self._steps is not None:
            self._steps -= steps
            if self._steps < 0:
                return False
        return self._deadline is None or time.monotonic() < self._deadline


# ----------------------------------------------------------------------------------------------
# Sequence primitives (index ranges of a str or a list of lines/words, no copies of the input)

_Seq = Sequence[object]
# (i, j, size): a[i:i+size] == b[j:j+size]
Block = tuple[int, int, int]
# (a0, a1, b0, b1): a[a0:a1] is replaced by b[b0:b1]
Edit = tuple[int, int, int, int]


def trim_common_ends(
    a: _Seq, b: _Seq, alo: int, ahi: int, blo: int, bhi: int, out: list[Block]
) -> tuple[int, int, int, int]:
    """Append the common prefix and suffix of a[alo:ahi] vs b[blo:bhi] to ``out`` as blocks;
    the ranges that are left between them."""
    p = common_prefix_length(a, b, alo, ahi, blo, bhi)
    if p:
        out.append((alo, blo, p))
        alo += p
        blo += p
    s = common_suffix_length(a, b, alo, ahi, blo, bhi)
    if s:
        out.append((ahi - s, bhi - s, s))
        ahi -= s
        bhi -= s
    return alo, ahi, blo, bhi


def common_prefix_length(a: _Seq, b: _Seq, alo: int, ahi: int, blo: int, bhi: int) -> int:
    """Length of the common prefix of a[alo:ahi] and b[blo:bhi]; O(n) with slice compares."""
    n = min(ahi - alo, bhi - blo)
    i = 0
    step = 16
    while i < n:
        c = min(step, n - i)
        if a[alo + i : alo + i + c] == b[blo + i : blo + i + c]:
            i += c
            step = min(step * 2, 1 << 16)
        elif c <= 16:
            while a[alo + i] == b[blo + i]:
                i += 1
            return i
        else:
            step = c // 4
    return i


def common_suffix_length(a: _Seq, b: _Seq, alo: int, ahi: int, blo: int, bhi: int) -> int:
    """Length of the common suffix of a[alo:ahi] and b[blo:bhi]; O(n) with slice compares."""
    n = min(ahi - alo, bhi - blo)
    i = 0
    step = 16
    while i < n:
        c = min(step, n - i)
        if a[ahi - i - c : ahi - i] == b[bhi - i - c : bhi - i]:
            i += c
            step = min(step * 2, 1 << 16)
        elif c <= 16:
            while a[ahi - i - 1] == b[bhi - i - 1]:
                i += 1
            return i
        else:
            step = c // 4
    return i


def common_affixes(a: str, b: str) -> tuple[int, int]:
    """(common prefix length, common suffix length not overlapping it) of two strings."""
    p = common_prefix_length(a, b, 0, len(a), 0, len(b))
    q = common_suffix_length(a, b, p, len(a), p, len(b))
    return p, q


def _bisect(
    a: _Seq, b: _Seq, alo: int, ahi: int, blo: int, bhi: int, budget: _Budget
) -> tuple[int, int] | None:
    """Myers' middle snake of a[alo:ahi] vs b[blo:bhi] (both non-empty, ends already trimmed).

    Returns a split point (x, y), relative to (alo, blo), such that diffing the two halves
    separately gives a shortest edit script; None when the budget runs out.
    """
    n = ahi - alo
    m = bhi - blo
    max_d = (n + m + 1) // 2
    off = max_d
    vlen = 2 * max_d + 2
    v1 = [-1] * vlen
    v2 = [-1] * vlen
    v1[off + 1] = 0
    v2[off + 1] = 0
    delta = n - m
    front = delta % 2 != 0
    k1start = k1end = k2start = k2end = 0
    for d in range(max_d):
        if not budget.spend(2 * d + 1):
            return None
        for k1 in range(-d + k1start, d + 1 - k1end, 2):
            k1o = off + k1
            x1 = v1[k1o + 1]
            if k1 != -d and (k1 == d or v1[k1o - 1] >= x1):
                x1 = v1[k1o - 1] + 1
            y1 = x1 - k1
            if x1 < n and y1 < m and a[alo + x1] == b[blo + y1]:
                # Follow the snake; long ones (repetitive text) at C speed.
                snake = 1 + common_prefix_length(a, b, alo + x1 + 1, ahi, blo + y1 + 1, bhi)
                x1 += snake
                y1 += snake
            v1[k1o] = x1
            if x1 > n:
                k1end += 2
            elif y1 > m:
                k1start += 2
            elif front:
                k2o = off + delta - k1
                if 0 <= k2o < vlen and v2[k2o] != -1 and x1 >= n - v2[k2o]:
                    return x1, y1
        for k2 in range(-d + k2start, d + 1 - k2end, 2):
            k2o = off + k2
            x2 = v2[k2o + 1]
            if k2 != -d and (k2 == d or v2[k2o - 1] >= x2):
                x2 = v2[k2o - 1] + 1
            y2 = x2 - k2
            if x2 < n and y2 < m and a[ahi - 1 - x2] == b[bhi - 1 - y2]:
                snake = 1 + common_suffix_length(a, b, alo, ahi - 1 - x2, blo, bhi - 1 - y2)
                x2 += snake
                y2 += snake
            v2[k2o] = x2
            if x2 > n:
                k2end += 2
            elif y2 > m:
                k2start += 2
            elif not front:
                k1o = off + delta - k2
                if 0 <= k1o < vlen and v1[k1o] != -1:
                    x1 = v1[k1o]
                    y1 = off + x1 - k1o
                    if x1 >= n - x2:
                        return x1, y1
    return None


def _myers_blocks(
    a: _Seq, b: _Seq, alo: int, ahi: int, blo: int, bhi: int, budget: _Budget, out: list[Block]
) -> None:
    """Append matching blocks of a[alo:ahi] vs b[blo:bhi] to ``out`` (unordered).

    Parts left when the budget runs out simply get no blocks (they become replacements).
    """
    sa = a if isinstance(a, str) else None
    sb = b if isinstance(b, str) else None
    stack = [(alo, ahi, blo, bhi)]
    while stack:
        alo, ahi, blo, bhi = trim_common_ends(a, b, *stack.pop(), out)
        n = ahi - alo
        m = bhi - blo
        if n == 0 or m == 0:
            continue
        if sa is not None and sb is not None:
            # The shorter text inside the longer one: one block, the rest is insert/delete.
            if n < m:
                k = sb.find(sa[alo:ahi], blo, bhi)
                if k >= 0:
                    out.append((alo, k, n))
                    continue
            else:
                k = sa.find(sb[blo:bhi], alo, ahi)
                if k >= 0:
                    out.append((k, blo, m))
                    continue
            if n == 1 or m == 1:
                continue  # a single element that is not inside the other side: replace
        split = _bisect(a, b, alo, ahi, blo, bhi, budget)
        if split is None:
            continue
        x, y = split
        if (x == 0 and y == 0) or (x == n and y == m):
            continue  # cannot happen after trimming; never loop
        stack.append((alo + x, ahi, blo + y, bhi))
        stack.append((alo, alo + x, blo, blo + y))


def unique_anchors(
    a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int
) -> tuple[list[tuple[int, int]], int]:
    """Patience anchors: lines occurring once in each range, longest increasing subsequence.

    Also returns an upper bound on the number of lines the ranges can have in common.
    """
    ca = Counter(a[alo:ahi])
    cb = Counter(b[blo:bhi])
    common = ca.keys() & cb.keys()
    if not common:
        return [], 0
    bound = sum(min(ca[x], cb[x]) for x in common)
    unique = {x for x in common if ca[x] == 1 and cb[x] == 1}
    if not unique:
        return [], bound
    bpos = {b[j]: j for j in range(blo, bhi) if b[j] in unique}
    pairs = [(i, bpos[a[i]]) for i in range(alo, ahi) if a[i] in unique]
    # Longest increasing subsequence of the b positions (a positions already increase).
    tails: list[int] = []  # smallest last b position of an increasing run of each length
    tail_idx: list[int] = []
    prev = [-1] * len(pairs)
    for idx, (_, j) in enumerate(pairs):
        k = bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            tail_idx.append(idx)
        else:
            tails[k] = j
            tail_idx[k] = idx
        prev[idx] = tail_idx[k - 1] if k else -1
    result: list[tuple[int, int]] = []
    idx = tail_idx[-1]
    while idx >= 0:
        result.append(pairs[idx])
        idx = prev[idx]
    result.reverse()
    return result, bound


def _line_blocks(a: list[str], b: list[str], budget: _Budget) -> list[Block]:
    """Sorted, merged matching blocks between two lists of lines (patience, then Myers)."""
    out: list[Block] = []
    stack = [(0, len(a), 0, len(b))]
    while stack:
        alo, ahi, blo, bhi = trim_common_ends(a, b, *stack.pop(), out)
        if alo == ahi or blo == bhi:
            continue
        if not budget.spend(ahi - alo + bhi - blo):
            continue
        anchors, bound = unique_anchors(a, b, alo, ahi, blo, bhi)
        if not anchors:
            # Myers needs about D*D/2 steps, and D >= n + m - 2 * (lines possibly in common).
            d_min = ahi - alo + bhi - blo - 2 * bound
            if bound and budget.affords(d_min * d_min // 2):
                ga, gb = _canonical(a[alo:ahi], b[blo:bhi])
                found: list[Block] = []
                _myers_blocks(ga, gb, 0, len(ga), 0, len(gb), budget, found)
                out.extend((i + alo, j + blo, size) for i, j, size in found)
            continue  # else: (mostly) nothing in common, one replacement
        pi, pj = alo, blo
        for i, j in anchors:
            out.append((i, j, 1))
            if i > pi and j > pj:
                stack.append((pi, i, pj, j))
            pi, pj = i + 1, j + 1
        if ahi > pi and bhi > pj:
            stack.append((pi, ahi, pj, bhi))
    return join_touching_blocks(out)


def _canonical(a: list[str], b: list[str]) -> tuple[list[str], list[str]]:
    """Map equal items to one object, so Myers' comparisons hit CPython's identity fast path."""
    canon = dict(zip(a, a, strict=True))
    canon.update(zip(b, b, strict=True))
    get = canon.__getitem__
    return list(map(get, a)), list(map(get, b))


def join_touching_blocks(blocks: list[Block]) -> list[Block]:
    """``blocks`` sorted, touching ones joined into one (sorts ``blocks`` in place)."""
    blocks.sort()
    merged: list[Block] = []
    for i, j, size in blocks:
        if merged:
            pi, pj, ps = merged[-1]
            if pi + ps == i and pj + ps == j:
                merged[-1] = (pi, pj, ps + size)
                continue
        merged.append((i, j, size))
    return merged


def changed_ranges(blocks: list[Block], alo: int, ahi: int, blo: int, bhi: int) -> list[Edit]:
    """The changed regions between sorted matching blocks within a[alo:ahi] x b[blo:bhi]."""
    edits: list[Edit] = []
    ai, bj = alo, blo
    for i, j, size in [*blocks, (ahi, bhi, 0)]:
        if i > ai or j > bj:
            edits.append((ai, i, bj, j))
        ai, bj = i + size, j + size
    return edits


# ----------------------------------------------------------------------------------------------
# Public API


def diff_splices(
    old: str, new: str, *, char_diff_limit: int = 20_000, deadline_s: float = 0.5
) -> list[Splice]:
    """Minimal-ish edits turning ``old`` into ``new``.

    Splices are sorted by start, non-overlapping and never adjacent (touching ones are merged).
    Line-first, then characters inside each changed hunk of lines, so a one-word change in a 1 MB
    note is a one-word splice. A hunk larger than ``char_diff_limit`` characters on either side,
    or everything still unrefined once ``deadline_s`` has passed, is emitted as one replacement
    of its lines (trimmed of any common prefix/suffix). ``old == new`` gives ``[]``.
    """
    if old == new:
        return []
    budget = _Budget(time.monotonic() + deadline_s, None)
    n, m = len(old), len(new)
    p = common_prefix_length(old, new, 0, n, 0, m)
    s = common_suffix_length(old, new, p, n, p, m)
    if p == n - s or p == m - s:  # one side is empty after trimming: a pure insert or delete
        return [Splice(p, n - s, new[p : m - s])]

    # Line level, on the middle part only.
    old_lines = old[p : n - s].splitlines(keepends=True)
    new_lines = new[p : m - s].splitlines(keepends=True)
    line_blocks = _line_blocks(old_lines, new_lines, budget)
    a_off = list(accumulate(map(len, old_lines), initial=p))
    b_off = list(accumulate(map(len, new_lines), initial=p))

    # Character level, inside each changed hunk of lines.
    edits: list[Edit] = []
    for i0, i1, j0, j1 in changed_ranges(line_blocks, 0, len(old_lines), 0, len(new_lines)):
        a0, a1, b0, b1 = a_off[i0], a_off[i1], b_off[j0], b_off[j1]
        refine = a1 - a0 <= char_diff_limit and b1 - b0 <= char_diff_limit
        _refine_hunk(old, new, a0, a1, b0, b1, budget if refine else None, edits)
    return [Splice(a0, a1, new[b0:b1]) for a0, a1, b0, b1 in _cleanup(edits)]


def _refine_hunk(
    old: str,
    new: str,
    a0: int,
    a1: int,
    b0: int,
    b1: int,
    budget: _Budget | None,
    edits: list[Edit],
) -> None:
    """Append the character-level edits turning old[a0:a1] into new[b0:b1] to ``edits``.

    Small hunks get a character Myers diff; larger ones a word-level diff first, then characters
    inside short changed runs of words. Each hunk has its own step cap (on top of the shared
    deadline) so one rewritten section cannot starve the refinement of the others. Without a
    budget (hunk over the size cap) or once it runs out: one replacement, ends trimmed.
    """
    p = common_prefix_length(old, new, a0, a1, b0, b1)
    s = common_suffix_length(old, new, a0 + p, a1, b0 + p, b1)
    a0, b0, a1, b1 = a0 + p, b0 + p, a1 - s, b1 - s
    n, m = a1 - a0, b1 - b0
    if budget is None or n == 0 or m == 0 or not budget.spend(0):
        edits.append((a0, a1, b0, b1))
        return
    hunk_budget = budget.sub(_HUNK_STEPS + _HUNK_STEPS_PER_CHAR * (n + m))
    if max(n, m) <= _CHAR_DIRECT:
        _char_edits(old, new, a0, a1, b0, b1, hunk_budget, edits)
        return
    a_words = _WORD.findall(old, a0, a1)
    b_words = _WORD.findall(new, b0, b1)
    word_blocks = _line_blocks(a_words, b_words, hunk_budget)
    a_off = list(accumulate(map(len, a_words), initial=a0))
    b_off = list(accumulate(map(len, b_words), initial=b0))
    for i0, i1, j0, j1 in changed_ranges(word_blocks, 0, len(a_words), 0, len(b_words)):
        c0, c1, d0, d1 = a_off[i0], a_off[i1], b_off[j0], b_off[j1]
        if max(c1 - c0, d1 - d0) <= _CHAR_IN_WORDS:
            _char_edits(old, new, c0, c1, d0, d1, hunk_budget, edits)
        else:
            edits.append((c0, c1, d0, d1))


def _char_edits(
    old: str, new: str, a0: int, a1: int, b0: int, b1: int, budget: _Budget, edits: list[Edit]
) -> None:
    blocks: list[Block] = []
    _myers_blocks(old, new, a0, a1, b0, b1, budget, blocks)
    edits.extend(changed_ranges(join_touching_blocks(blocks), a0, a1, b0, b1))


def _cleanup(edits: list[Edit]) -> list[Edit]:
    """Merge touching edits, and fold an unchanged run into its neighbours when it is no longer
    than the edit on each side of it (the diff-match-patch semantic rule)."""
    out: list[Edit] = []
    for edit in edits:
        a0, a1, b0, b1 = edit
        while out:
            pa0, pa1, pb0, pb1 = out[-1]
            gap = a0 - pa1
            if gap == 0 or (gap <= max(pa1 - pa0, pb1 - pb0) and gap <= max(a1 - a0, b1 - b0)):
                out.pop()
                a0, b0 = pa0, pb0
            else:
                break
        out.append((a0, a1, b0, b1))
    return out


def apply_splices(old: str, splices: Sequence[Splice]) -> str:
    """Apply sorted, non-overlapping code-point splices to ``old`` (reference applier)."""
    parts: list[str] = []
    pos = 0
    for sp in splices:
        _check(sp, pos, len(old))
        parts.append(old[pos : sp.start])
        parts.append(sp.text)
        pos = sp.end
    parts.append(old[pos:])
    return "".join(parts)


def _check(sp: Splice, pos: int, size: int) -> None:
    if not pos <= sp.start <= sp.end <= size:
        raise ValueError(f"splice {sp.start}:{sp.end} is unsorted, overlapping or out of range")


def _utf8_len(text: str, start: int, end: int) -> int:
    part = text[start:end]
    return len(part) if part.isascii() else len(part.encode("utf-8"))


def to_byte_splices(old: str, splices: Sequence[Splice]) -> list[ByteSplice]:
    """Convert sorted code-point splices on ``old`` to UTF-8 byte splices.

    The result is in DESCENDING start order (for equal starts, the later input splice first), so
    applying them one after another to a pycrdt ``Text`` holding ``old`` never shifts an offset
    still to be used. O(len(old)) in total.
    """
    out: list[ByteSplice] = []
    pos = 0  # code points consumed
    byte_pos = 0  # UTF-8 bytes consumed
    for sp in splices:
        _check(sp, pos, len(old))
        byte_pos += _utf8_len(old, pos, sp.start)
        length = _utf8_len(old, sp.start, sp.end)
        out.append(ByteSplice(byte_pos, length, sp.text))
        byte_pos += length
        pos = sp.end
    out.reverse()
    return out


def union_splices(base: str, other: str) -> list[Splice]:
    """Additive merge: pure inserts on ``base`` adding every run of lines of ``other`` it lacks.

    Nothing of ``base`` is deleted. Lines are compared without their terminators (a line that
    differs only by CRLF/LF is the same line). Where both sides replaced the same region, the
    result keeps base's lines, then other's lines, each once. If base's last line has no
    terminator and lines are added after it, a line break (base's own style) is inserted first.
    Deterministic: the work cap is a step count, not a clock.
    """
    if base == other:
        return []
    base_lines = base.splitlines(keepends=True)
    other_lines = other.splitlines(keepends=True)
    base_bodies = base.splitlines()
    other_bodies = other.splitlines()
    blocks = _line_blocks(base_bodies, other_bodies, _Budget(None, _UNION_STEP_BUDGET))
    a_off = list(accumulate(map(len, base_lines), initial=0))
    unterminated = bool(base_lines) and base_lines[-1] == base_bodies[-1]
    out: list[Splice] = []
    for _, i1, j0, j1 in changed_ranges(blocks, 0, len(base_bodies), 0, len(other_bodies)):
        if j0 == j1:
            continue  # other lacks these lines: keep base's, delete nothing
        pos = a_off[i1]
        text = "".join(other_lines[j0:j1])
        # A lone CR followed by an LF would fuse two lines into one CRLF line: keep them apart.
        if pos == len(base) and unterminated:
            sep = _line_break(base_lines, other_lines)
            text = (sep + "\n" if sep[-1] == "\r" and text[0] == "\n" else sep) + text
        if pos and base[pos - 1] == "\r" and text[0] == "\n":
            text = "\n" + text
        if pos < len(base) and base[pos] == "\n" and text[-1] == "\r":
            text += "\n"
        out.append(Splice(pos, pos, text))
    return out


def _line_break(*texts: list[str]) -> str:
    """The line terminator of the first terminated line found, else "\\n"."""
    for lines in texts:
        for line in lines:
            body = line.splitlines()[0] if line else ""
            if len(body) < len(line):
                return line[len(body) :]
    return "\n"
