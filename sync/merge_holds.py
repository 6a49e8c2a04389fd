"""Whether one side of a merge already holds another side's whole change (sync/text_merge.py):
a fast-forward, such as a merge result merged again with one of its inputs.

:func:`holds_change` decides it the way diff3 would with the held side as the base: the holding
side's changes to it never touch what it changed. Line by line first; where the holding side
lacks lines the other wrote (it merged other words into them), token by token. The weak form
lets the holding side have lines where the other deleted lines (its edit of them: an overlap
the caller reports), used when exactly two sides are left.
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence

from .merge_align import Edit, OccurrenceIndex, line_blocks, matching_blocks, placed_edits, tokenize, words_of
from .merge_regions import line_starts, paired_edits

__all__ = ["holds_change", "touches_every_change"]


def touches_every_change(x_edits: Sequence[Edit], y_edits: Sequence[Edit]) -> bool:
    """Whether every change of ``x_edits`` overlaps or touches (in base lines) one of
    ``y_edits``: a text that holds x's change has changed every region x changed."""
    k = 0
    for a0, a1, _, _ in x_edits:
        while k < len(y_edits) and y_edits[k][1] < a0:
            k += 1
        if k == len(y_edits) or y_edits[k][0] > a1:
            return False
    return True


def holds_change(
    base: list[str], x: list[str], x_edits: list[Edit], y: list[str], *, weak: bool = False
) -> list[tuple[int, int, int, int]] | None:
    """Whether text ``y`` already holds all of ``x``'s change to ``base`` (``x_edits``), as
    diff3 would see it with x as the base: y's changes to x never touch what x changed.

    Line by line: going from x to y brings back no base line x deleted; where x only deleted
    lines, y wrote nothing right there nor, next to there, a line sharing a word with one of
    them (it may be its edit of them: an edit against a deletion is an overlap). Where y lacks
    lines x wrote, the tokens decide (:func:`_tokens_hold`): y may have changed other words of
    those lines (a word-level merge), never a token x wrote nor one next to it within a line.

    None if y does not hold x. Else, with ``weak``, the places where y wrote lines at or next to
    lines x deleted (ignored in that mode) as ``(a0, a1, y0, y1)``: base lines x deleted, the
    lines y has there; without ``weak`` always ``[]``.
    """
    deleted = Counter(line for a0, a1, _, _ in x_edits for line in base[a0:a1])
    base_count = Counter(base)
    cuts: dict[int, tuple[int, int, set[str]]] = {}  # x position where x only deleted lines
    for a0, a1, b0, b1 in x_edits:
        if b0 == b1:
            cuts[b0] = (a0, a1, set().union(*(words_of(line) for line in base[a0:a1])))
    written = [False] * (len(x) + 1)
    for _, _, b0, b1 in x_edits:
        for j in range(b0, b1):
            written[j] = True
    faced: list[tuple[int, int, int, int]] = []
    regions: list[Edit] | None = None
    xi = yj = 0
    for i, j, k in [*line_blocks(x, y, OccurrenceIndex(x)), (len(x), len(y), 0)]:
        back = [line for line in y[yj:j] if deleted[line]]
        # Which of several equal lines (blank ones, repeated ones) x deleted is a guess of the
        # line diff: then the tokens decide whether y has it where x deleted it.
        if any(base_count[line] == 1 and line.strip() for line in back):
            return None
        # y wrote right where x deleted lines, or wrote (around there) a line like one of them.
        if j > yj:
            near = [
                (a0, a1)
                for p, (a0, a1, words) in cuts.items()
                if xi <= p <= i and (p == xi == i or words & set().union(*map(words_of, y[yj:j])))
            ]
            if near and not weak:
                return None
            faced.extend((a0, a1, yj, j) for a0, a1 in near)
        if back or any(written[xi:i]):
            regions = regions if regions is not None else _coalesced(base, x_edits, base_count)
            if not _tokens_hold(base, x, regions, y, xi, i, yj, j, weak):
                return None
        xi, yj = i + k, j + k
    return faced


def _coalesced(base: list[str], edits: list[Edit], count: Counter[str]) -> list[Edit]:
    """``edits`` with the ones only blank or repeated lines keep apart joined into one: which of
    several equal lines a line diff matched is a guess, and the lines of x's change are paired
    with the base's anew by words (:func:`paired_edits`) over the joined range."""
    out: list[Edit] = []
    for a0, a1, b0, b1 in edits:
        if out and all(count[line] > 1 or not line.strip() for line in base[out[-1][1] : a0]):
            a0, b0 = out[-1][0], out[-1][2]
            out.pop()
        out.append((a0, a1, b0, b1))
    return out


def _tokens_hold(
    base: list[str],
    x: list[str],
    x_edits: list[Edit],
    y: list[str],
    xi: int,
    i: int,
    yj: int,
    j: int,
    weak: bool,
) -> bool:
    """Whether y's lines ``y[yj:j]`` hold x's change to ``x[xi:i]`` token by token: each token
    x wrote there is in y, and y's changes of those lines (to x) touch neither a token x wrote
    nor a place where x deleted tokens (a whole-line deletion at a line start may be touched by
    a change of whole lines, and with ``weak`` is ignored)."""
    # Tokens of x's lines in the range, which of them x wrote, and where x deleted tokens
    # (line, token offset in it) -> whether whole lines.
    line_tokens: dict[int, list[str]] = {}
    line_mine: dict[int, list[bool]] = {}
    cut_in: dict[tuple[int, int], bool] = {}
    k = bisect_left(x_edits, xi, key=operator.itemgetter(3))
    for a0, a1, b0, b1 in x_edits[k:]:
        if b0 > i:
            break
        bt, vt = tokenize("".join(base[a0:a1])), tokenize("".join(x[b0:b1]))
        flags = [False] * len(vt)
        cuts: list[tuple[int, bool]] = []
        for c0, c1, d0, d1 in paired_edits(bt, vt):
            flags[d0:d1] = [True] * (d1 - d0)
            if c1 > c0 and d0 == d1:
                cuts.append((d0, (c0 == 0 or bt[c0 - 1] == "\n") and bt[c1 - 1] == "\n"))
        starts = line_starts(vt)
        for n in range(len(starts) - 1):
            line_tokens[b0 + n] = vt[starts[n] : starts[n + 1]]
            line_mine[b0 + n] = flags[starts[n] : starts[n + 1]]
        for d, whole in cuts:
            n = bisect_left(starts, d + 1) - 1  # the line holding token d (or the end)
            where = (b0 + n, d - starts[n]) if d < len(vt) else (b1, 0)
            cut_in[where] = cut_in.get(where, True) and whole
    xt: list[str] = []
    mine: list[bool] = []
    cut_at: dict[int, bool] = {}
    for line in range(xi, i + 1):
        for (cl, offset), whole in cut_in.items():
            if cl == line:
                cut_at[len(xt) + offset] = whole
        if line == i:
            break
        piece = line_tokens.get(line) or tokenize(x[line])
        xt.extend(piece)
        mine.extend(line_mine.get(line) or [False] * len(piece))
    yt = tokenize("".join(y[yj:j]))

    def line_start(p: int) -> bool:
        return p == 0 or xt[p - 1] == "\n"

    for c0, c1, d0, d1 in placed_edits(xt, yt, matching_blocks(xt, yt), tokens=True):
        if any(mine[c0:c1]):
            return False
        starts_whole = line_start(c0) and (d0 == 0 or yt[d0 - 1] == "\n")
        ends_whole = line_start(c1) and (d1 == 0 or yt[d1 - 1] == "\n")
        if c0 > 0 and mine[c0 - 1] and not starts_whole:
            return False
        if c1 < len(xt) and mine[c1] and not ends_whole:
            return False
        for p, whole in cut_at.items():
            if not c0 <= p <= c1:
                continue
            if not whole:
                return False
            if weak:
                continue
            if c0 == c1 == p or (p == c0 and not starts_whole) or (p == c1 and not ends_whole):
                return False
            if c0 < p < c1:
                return False
    return True
