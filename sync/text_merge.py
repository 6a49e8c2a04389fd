"""Three-way merge of note texts without conflict markers (docs/decisions/0001-three-way-merge.md).

Pure ``str`` logic: no I/O, no CRDT. :func:`merge_texts` takes the common base and any number of
sides (each a text and the key of whoever wrote it) and returns one text that keeps what every
side wrote, plus the regions where sides' changes overlapped.

The rule, relative to the base:

* A region changed by one side only, or changed identically by several, is applied (once).
  Changes to neighbouring lines, and lines inserted next to a line another side changed, do not
  interact. Whether the text ends with a line break merges on its own (a side that changed it
  wins).
* Changes by several sides to the same lines are merged word by word (tokens: runs of word
  characters, runs of white space, single punctuation marks; each CJK ideograph or kana is a token
  of its own), so edits to different words of one line all land. A side's lines are first paired
  with the base lines they edit (equal lines, else lines sharing words); a line sharing no word
  with the base line in its place is a line of its own, not an edit of it.
* Where the sides' changes touch the same word or adjoin it (an *overlap*), the lines each side
  wrote there are emitted whole, once each, in base order and then by ``(key, text)``, and an
  :class:`Overlap` is reported. A base line any of them deleted is gone, so a side that deleted
  the lines another edited contributes nothing to the text (it is still reported), and no
  version brings back a line another deleted. No conflict markers are ever written.
* A change another side's change already holds is absorbed (no overlap): a side whose whole
  change another side's text holds (a fast-forward, checked first on whole texts), or whose
  version of a region only lacks what the other wrote and still has base lines the other deleted
  (or all of whose writing the other holds whole). This makes merging a merge result again with
  one of its inputs a no-op (guaranteed when each side's changes stand apart; see the decision
  record for when a side's changed lines run together).
* Insertions of whole lines by several sides at one point are all kept, ordered by
  ``(key, text)``; identical ones (or ones another holds) land once. That is not an overlap
  (like git's union merge).

Everything depends only on the inputs (no clocks, no hash seeds, the order of ``sides`` does not
matter), so every machine computes the same bytes. Work is bounded: line and token diffs are a
patience diff with a step budget (ranges it cannot afford become replacements), line pairing
runs only on small regions, and a region larger than ``_TOKEN_LIMIT`` tokens is resolved as
whole lines without the word-level step.
"""

from __future__ import annotations

import difflib
import operator
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate

__all__ = ["MergeResult", "Overlap", "Side", "merge_texts", "tokenize"]


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


# ----------------------------------------------------------------------------------------------
# Tokens

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


# ----------------------------------------------------------------------------------------------
# Diff: patience anchors, difflib inside small anchorless gaps, a deterministic step budget

_Block = tuple[int, int, int]  # a[i:i+n] == b[j:j+n]
_Edit = tuple[int, int, int, int]  # base[a0:a1] becomes side[b0:b1]

# Anchorless gaps up to this many element pairs get difflib's matcher; larger ones (sharing no
# element that is unique on both sides) are replacements.
_SMALL_GAP = 40_000
# Steps (elements of the ranges examined) one diff may use beyond a linear allowance.
_DIFF_STEPS = 2_000_000
# A conflicting region with more tokens than this on one side skips the word-level merge.
_TOKEN_LIMIT = 50_000


def _prefix_len(a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int) -> int:
    """Length of the common prefix of a[alo:ahi] and b[blo:bhi] (galloping slice compares)."""
    n = min(ahi - alo, bhi - blo)
    i = 0
    step = 8
    while i < n:
        c = min(step, n - i)
        if a[alo + i : alo + i + c] == b[blo + i : blo + i + c]:
            i += c
            step = min(step * 2, 1 << 14)
        elif c <= 8:
            while a[alo + i] == b[blo + i]:
                i += 1
            return i
        else:
            step = c // 4
    return i


def _suffix_len(a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int) -> int:
    """Length of the common suffix of a[alo:ahi] and b[blo:bhi] (galloping slice compares)."""
    n = min(ahi - alo, bhi - blo)
    i = 0
    step = 8
    while i < n:
        c = min(step, n - i)
        if a[ahi - i - c : ahi - i] == b[bhi - i - c : bhi - i]:
            i += c
            step = min(step * 2, 1 << 14)
        elif c <= 8:
            while a[ahi - i - 1] == b[bhi - i - 1]:
                i += 1
            return i
        else:
            step = c // 4
    return i


def _anchors(a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int) -> list[_Block]:
    """Patience anchors of a[alo:ahi] vs b[blo:bhi], as runs: elements occurring exactly once in
    each range, the longest run of them in the same order on both sides."""
    sa = a[alo:ahi]
    sb = b[blo:bhi]
    ca = Counter(sa)
    cb = Counter(sb)
    bpos = {x: j for j, x in enumerate(sb, blo) if cb[x] == 1}
    pairs = [(i, bpos[x]) for i, x in enumerate(sa, alo) if ca[x] == 1 and x in bpos]
    if not pairs:
        return []
    js = [j for _, j in pairs]
    if not all(map(operator.lt, js, js[1:])):
        pairs = _increasing(pairs)
    runs: list[_Block] = []
    pi, pj, n = pairs[0][0], pairs[0][1], 1
    for i, j in pairs[1:]:
        if i == pi + n and j == pj + n:
            n += 1
        else:
            runs.append((pi, pj, n))
            pi, pj, n = i, j, 1
    runs.append((pi, pj, n))
    return runs


def _increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of ``pairs`` (increasing first items) whose second items increase."""
    tails: list[int] = []
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
    out: list[tuple[int, int]] = []
    idx = tail_idx[-1]
    while idx >= 0:
        out.append(pairs[idx])
        idx = prev[idx]
    out.reverse()
    return out


def _patience(
    a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int, budget: list[int]
) -> list[_Block]:
    """Blocks a[alo:ahi] and b[blo:bhi] have in common (patience diff, unordered); ``budget[0]``
    is the steps left, shared by the caller's calls (a range it cannot afford is a replacement)."""
    out: list[_Block] = []
    stack = [(alo, ahi, blo, bhi)]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        p = _prefix_len(a, b, alo, ahi, blo, bhi)
        if p:
            out.append((alo, blo, p))
            alo += p
            blo += p
        s = _suffix_len(a, b, alo, ahi, blo, bhi)
        if s:
            out.append((ahi - s, bhi - s, s))
            ahi -= s
            bhi -= s
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


def _sorted_blocks(blocks: list[_Block]) -> list[_Block]:
    """Blocks in order, touching ones joined."""
    blocks.sort()
    merged: list[_Block] = []
    for i, j, k in blocks:
        if merged:
            mi, mj, mk = merged[-1]
            if mi + mk == i and mj + mk == j:
                merged[-1] = (mi, mj, mk + k)
                continue
        merged.append((i, j, k))
    return merged


def _matching_blocks(a: Sequence[str], b: Sequence[str]) -> list[_Block]:
    """Sorted, non-touching blocks of elements ``a`` and ``b`` have in common (a patience diff)."""
    budget = [_DIFF_STEPS + 8 * (len(a) + len(b))]
    return _sorted_blocks(_patience(a, b, 0, len(a), 0, len(b), budget))


class _Index:
    """Occurrence counts and a position of every element of a sequence (the last one)."""

    __slots__ = ("count", "pos")

    def __init__(self, seq: Sequence[str]) -> None:
        self.count = Counter(seq)
        self.pos = dict(zip(seq, range(len(seq)), strict=True))


def _line_blocks(
    base: Sequence[str], side: Sequence[str], base_index: _Index, side_index: _Index | None = None
) -> list[_Block]:
    """Sorted blocks of lines ``base`` and ``side`` have in common, for long, mostly equal texts.

    Walks both from the start: equal runs at the speed of list slice compares; at a difference,
    the nearest pair of lines (fewest lines skipped on both sides) that occur exactly once in each
    text resynchronises the walk, and the lines skipped are diffed with :func:`_patience`. Every
    line is looked at a bounded number of times, so the cost is linear plus the gaps' diffs.
    """
    n, m = len(base), len(side)
    side_index = side_index or _Index(side)
    bcount, bpos = base_index.count, base_index.pos
    scount, spos = side_index.count, side_index.pos
    budget = [_DIFF_STEPS + 8 * (n + m)]
    out: list[_Block] = []
    i = j = 0
    while True:
        k = _prefix_len(base, side, i, n, j, m)
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
    return _sorted_blocks(out)


def _edits(
    base: Sequence[str], side: Sequence[str], blocks: list[_Block], tokens: bool = False
) -> list[_Edit]:
    """The changes turning ``base`` into ``side``, in order and never touching each other.

    A pure insertion or deletion that could sit at several places (equal elements around it) is
    put at the first of them, so that identical changes made by different sides land at the same
    place whatever else each side changed; for ``tokens``, at the first place where it is whole
    lines (starts at a line start, ends with a line break) if there is one, so that a line added
    next to a changed line does not touch the change.
    """
    raw: list[_Edit] = []
    ai = bj = 0
    for i, j, k in [*blocks, (len(base), len(side), 0)]:
        if i > ai or j > bj:
            raw.append((ai, i, bj, j))
        ai, bj = i + k, j + k
    out: list[_Edit] = []
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


# ----------------------------------------------------------------------------------------------
# Clustering the sides' changes


@dataclass(slots=True)
class _Cluster:
    start: int
    end: int
    # side index -> that side's changes inside the cluster, in order
    edits: dict[int, list[_Edit]]


def _clusters(
    per_side: Sequence[Sequence[_Edit]], open_end: Callable[[int, _Edit], bool] | None = None
) -> list[_Cluster]:
    """Group the sides' changes into regions where they interact, in base order.

    Changes whose base ranges overlap, an insertion strictly inside another's range, and
    insertions at one point always interact. A change that starts where another ends interacts
    with it when that one ends inside a line, ``open_end(side, edit)`` (the word level: diff3's
    rule within a line); changes on either side of a line start stay apart (at the line level
    always: an insertion at the edge of a changed range, or two changed ranges side by side).
    """
    flat = sorted((e[0], e[1] > e[0], s, e) for s, edits in enumerate(per_side) for e in edits)
    out: list[_Cluster] = []
    cur: _Cluster | None = None
    tight_end = False  # whether a change of ``cur`` ends where it ends, inside a line
    for a0, is_range, s, e in flat:
        t = open_end is not None and open_end(s, e)
        if cur is not None:
            if a0 < cur.end:
                joins = True
            elif a0 == cur.end:
                joins = (cur.start == cur.end and not is_range) or tight_end
            else:
                joins = False
            if joins:
                if e[1] > cur.end:
                    cur.end, tight_end = e[1], t
                elif e[1] == cur.end:
                    tight_end = tight_end or t
                cur.edits.setdefault(s, []).append(e)
                continue
        cur = _Cluster(a0, e[1], {s: [e]})
        tight_end = t
        out.append(cur)
    return out


def _join_edge_copies(clusters: list[_Cluster], version: Callable[[_Cluster, int], str]) -> list[_Cluster]:
    """Join regions next to each other where one side's version of one repeats, at the edge
    they share, another side's version of the other (one version ends with the other's start, or
    the other starts with it): that is one change seen through two diffs (typically a merge
    result holding both sides' versions, merged again with one of those sides), to be resolved
    together rather than land twice. Of a point of insertions only the sides that repeat join.
    ``version(cluster, side)`` is that side's text of the cluster."""
    out: list[_Cluster] = []
    for c, cl in enumerate(clusters):
        prev = out[-1] if out and out[-1].start < out[-1].end == cl.start else None
        if cl.start < cl.end:
            if prev is not None and any(
                _ends_alike(version(prev, o), version(cl, s)) for o in prev.edits for s in cl.edits if o != s
            ):
                prev.end = cl.end
                for s, edits in cl.edits.items():
                    prev.edits[s] = [*prev.edits.get(s, ()), *edits]
            else:
                out.append(cl)
            continue
        nxt = (
            clusters[c + 1]
            if c + 1 < len(clusters) and cl.start == clusters[c + 1].start < clusters[c + 1].end
            else None
        )
        rest: dict[int, list[_Edit]] = {}
        for s, edits in cl.edits.items():
            text = version(cl, s)
            if prev is not None and any(_ends_alike(version(prev, o), text) for o in prev.edits):
                prev.edits[s] = [*prev.edits.get(s, ()), *edits]
            elif nxt is not None and any(_ends_alike(text, version(nxt, o)) for o in nxt.edits):
                nxt.edits[s] = [*edits, *nxt.edits.get(s, ())]
            else:
                rest[s] = edits
        if rest:
            out.append(_Cluster(cl.start, cl.end, rest))
    return out


def _ends_alike(first: str, second: str) -> bool:
    """Whether text ``first`` ends with ``second`` or ``second`` starts with ``first`` (both
    non-empty): ``second`` written right after ``first`` would repeat some of it."""
    return bool(first) and bool(second) and (first.endswith(second) or second.startswith(first))


def _version(base: Sequence[str], side: Sequence[str], start: int, end: int, edits: Iterable[_Edit]) -> str:
    """base[start:end] with ``edits`` (all inside it) applied, as text."""
    parts: list[str] = []
    pos = start
    for a0, a1, b0, b1 in edits:
        parts.extend(base[pos:a0])
        parts.extend(side[b0:b1])
        pos = a1
    parts.extend(base[pos:end])
    return "".join(parts)


# ----------------------------------------------------------------------------------------------
# Resolving a region


def _bodies(text: str) -> list[str]:
    """The lines of ``text`` without their terminators."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if text.endswith("\n"):
        lines.pop()
    return lines


def _distinct(versions: Iterable[tuple[str, str]], base: str) -> dict[str, str]:
    """text -> smallest key, for the versions that change ``base``."""
    out: dict[str, str] = {}
    for key, text in versions:
        if text != base and (text not in out or key < out[text]):
            out[text] = key
    return out


def _contained(small: list[str], big: list[str], base: set[str]) -> bool:
    """Whether the change that gave lines ``small`` is already part of the one that gave ``big``
    (both versions of one region whose base lines are ``base``).

    Going from small to big may only drop base lines (big deleted them too) and add lines that
    are not base lines (big's own writing, not a base line small deleted). And if small only
    deleted lines, big may have written none here (it may have edited them: a deletion against
    an edit is an overlap).
    """
    si = bj = 0
    added = False
    for i, j, k in [*_matching_blocks(small, big), (len(small), len(big), 0)]:
        if any(line not in base for line in small[si:i]) or any(line in base for line in big[bj:j]):
            return False
        added = added or j > bj
        si, bj = i + k, j + k
    return not (added and all(line in base for line in small))


def _absorb(changes: dict[str, str], base: str) -> dict[str, str]:
    """Drop each change (but a deletion) that is already part of another change of ``base``.

    First by :func:`_contained`; then a change all of whose writing is found whole inside another
    change (:func:`_written_inside`): what it wrote is there, though the other may keep base
    lines it deleted. A merge that emitted several versions of an overlap does, and merging that
    result again with one of its inputs must change nothing.
    """
    if len(changes) < 2:
        return changes
    base_lines = set(_bodies(base))
    bodies = {text: _bodies(text) for text in changes}

    def sift(texts: list[str], contained: Callable[[list[str], list[str]], bool]) -> list[str]:
        # Largest first; a change goes if a kept one holds it, and pushes out kept ones it holds.
        kept: list[str] = []
        for text in sorted(texts, key=lambda t: (len(t), t), reverse=True):
            if text and any(contained(bodies[text], bodies[k]) for k in kept):
                continue
            kept = [k for k in kept if not (k and contained(bodies[k], bodies[text]))]
            kept.append(text)
        return kept

    kept = sift(list(changes), lambda s, b: _contained(s, b, base_lines))
    kept = sift(kept, lambda s, b: _written_inside(s, b, base_lines))
    return {text: changes[text] for text in sorted(kept)}


def _written_inside(small: list[str], big: list[str], base: set[str]) -> bool:
    """Whether every run of lines ``small`` wrote (lines that are not base lines, one of them
    not blank) occurs whole in ``big``, in the same order."""
    runs: list[list[str]] = [[]]
    for line in small:
        if line in base:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(line)
    if not any(line.strip() for run in runs for line in run):
        return False
    pos = 0
    for run in filter(None, runs):
        n = len(run)
        pos = next((i for i in range(pos, len(big) - n + 1) if big[i : i + n] == run), -1)
        if pos < 0:
            return False
        pos += n
    return True


def _eol(*texts: str) -> str:
    """The line terminator the texts use: CRLF if the first line break found is one, else LF."""
    for text in texts:
        i = text.find("\n")
        if i >= 0:
            return "\r\n" if i and text[i - 1] == "\r" else "\n"
    return "\n"


def _join_blocks(blocks: Sequence[str], eol: str) -> str:
    """Concatenate blocks of whole lines, never gluing a line to the next (every block ends with
    a line break already, the last lines of the texts having been given one)."""
    parts: list[str] = []
    for block in blocks:
        if parts and not parts[-1].endswith("\n"):
            parts.append(eol)
        if block:
            parts.append(block)
    return "".join(parts)


def _ordered(changes: dict[str, str]) -> list[tuple[str, str]]:
    """(key, text) pairs in output order."""
    return sorted((key, text) for text, key in changes.items())


def _resolve_lines(
    base: str, versions: Iterable[tuple[str, str]], eol: str, out_overlaps: list[Overlap]
) -> str:
    """Whole-line resolution of a region several sides changed (no word is looked at).

    Each version is diffed against the region's base by lines. Where one side changed lines (or
    several alike, or several inserted lines at one point) that applies; where sides' changes
    overlap, the lines each of them wrote are written whole, once each, in base order and then
    by ``(key, text)``; a base line any of them deleted is gone (so a deletion contributes
    nothing, and no side's version brings back a line another deleted); an :class:`Overlap` is
    reported.
    """
    changes = _absorb(_distinct(versions, base), base)
    if not changes:
        return base
    ordered = _ordered(changes)
    if len(ordered) == 1:
        return ordered[0][1]
    keys = [key for key, _ in ordered]
    bl = _lines(base)
    vl = [_lines(text) for _, text in ordered]
    per_side = [_edits(bl, v, _matching_blocks(bl, v)) for v in vl]
    parts: list[str] = []
    pos = 0
    for cl in _clusters(per_side):
        parts.extend(bl[pos : cl.start])
        pos = cl.end
        piece = "".join(bl[cl.start : cl.end])
        texts = {s: _version(bl, vl[s], cl.start, cl.end, edits) for s, edits in cl.edits.items()}
        cl_changes = _distinct(((keys[s], text) for s, text in texts.items()), piece)
        if cl.start == cl.end:
            parts.append(_union(cl_changes, eol))
            continue
        cl_changes = _absorb(cl_changes, piece)
        if len(cl_changes) == 1:
            parts.append(next(iter(cl_changes)))
            continue
        chosen = sorted(
            {min((s for s in cl.edits if texts[s] == text), key=keys.__getitem__) for text in cl_changes}
        )
        runs = sorted((e[0], keys[s], "".join(vl[s][e[2] : e[3]]), s) for s in chosen for e in cl.edits[s])
        deleted = {p for s in chosen for a0, a1, _, _ in cl.edits[s] for p in range(a0, a1)}
        out: list[str] = []
        written: dict[int, list[str]] = {s: [] for s in chosen}
        ri = 0
        for p in range(cl.start, cl.end + 1):
            here: list[str] = []
            while ri < len(runs) and runs[ri][0] == p:
                _, _, text, s = runs[ri]
                written[s].append(text)
                if text and text not in here:
                    here.append(text)
                ri += 1
            out.extend(here)
            if p < cl.end and p not in deleted:
                out.append(bl[p])
        first = {s: min(e[0] for e in cl.edits[s]) for s in chosen}
        sides = sorted(chosen, key=lambda s: (first[s], keys[s], "".join(written[s])))
        out_overlaps.append(Overlap(piece, tuple((keys[s], "".join(written[s])) for s in sides)))
        parts.append(_join_blocks(out, eol))
    parts.extend(bl[pos:])
    return "".join(parts)


def _common_run(seqs: list[list[str]]) -> int:
    """How many leading elements all of ``seqs`` have in common."""
    n = 0
    for column in zip(*seqs, strict=False):
        if any(x != column[0] for x in column):
            break
        n += 1
    return n


def _union(changes: dict[str, str], eol: str) -> str:
    """Insertions of whole lines at one point: all of them (absorbed ones once), in order."""
    return _join_blocks([text for _, text in _ordered(_absorb(changes, ""))], eol)


# Regions up to this many base lines x version lines have their lines paired by shared words
# before their tokens are diffed; larger ones are diffed as one run of tokens.
_PAIRING_LIMIT = 4_096


def _line_runs(tokens: list[str]) -> list[int]:
    """Token offsets of the line starts of ``tokens`` (every line ends with a line break), and
    the end."""
    return [0, *(i + 1 for i, t in enumerate(tokens) if t == "\n")]


def _shape_ratio(a: list[str], b: list[str]) -> float:
    """How alike two token runs are with every word taken as the same word."""

    def shape(tokens: list[str]) -> list[str]:
        return ["w" if t[0].isalnum() else t for t in tokens]

    return difflib.SequenceMatcher(None, shape(a), shape(b), autojunk=False).ratio()


def _paired_edits(bt: list[str], vt: list[str]) -> list[_Edit]:
    """The token changes turning a region of whole lines into one side's version of it, that
    never make a version line an edit of a base line unlike it.

    The lines are paired first, in order, maximising how alike paired lines are (a dynamic
    programme, small regions only); tokens are then diffed within each pair, and the lines
    between pairs are whole-line changes of their own. A version line unlike the base line in
    its place is a line of its own (a rewrite, or an insertion next to an edit), not an edit
    whose spaces and line breaks happen to match.
    """
    bo, vo = _line_runs(bt), _line_runs(vt)
    n, m = len(bo) - 1, len(vo) - 1
    if n * m > _PAIRING_LIMIT:
        return _edits(bt, vt, _matching_blocks(bt, vt), tokens=True)
    bw = [Counter(t for t in bt[bo[i] : bo[i + 1]] if t[0].isalnum()) for i in range(n)]
    vw = [Counter(t for t in vt[vo[j] : vo[j + 1]] if t[0].isalnum()) for j in range(m)]

    # A line equal to a base line pairs with it before any other; then lines sharing words, the
    # more the better (ties: the more alike in all their tokens).
    def score(i: int, j: int) -> int:
        b, v = bt[bo[i] : bo[i + 1]], vt[vo[j] : vo[j + 1]]
        if b == v:
            return 1 << 30
        common = (bw[i] & vw[j]).total()
        return (
            1000 * common + int(100 * difflib.SequenceMatcher(None, b, v, autojunk=False).ratio())
            if common
            else 0
        )

    scores = [[score(i, j) for j in range(m)] for i in range(n)]
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = best[i], best[i + 1]
        for j in range(m - 1, -1, -1):
            pair = below[j + 1] + scores[i][j] if scores[i][j] else -1
            row[j] = max(pair, below[j], row[j + 1])
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < n and j < m:
        if scores[i][j] and best[i][j] == best[i + 1][j + 1] + scores[i][j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    # One line in place of one line, sharing no word but alike in shape (every word changed,
    # say by two sides whose edits a merge joined): an edit of it too.
    gaps = zip([(-1, -1), *pairs], [*pairs, (n, m)], strict=True)
    pairs = sorted(
        {*pairs}
        | {
            (i0 + 1, j0 + 1)
            for (i0, j0), (i1, j1) in gaps
            if i1 - i0 == j1 - j0 == 2
            and _shape_ratio(bt[bo[i0 + 1] : bo[i1]], vt[vo[j0 + 1] : vo[j1]]) >= 0.75
        }
    )
    out: list[_Edit] = []
    pi = pj = 0
    for i, j in [*pairs, (n, m)]:
        if i > pi or j > pj:
            out.append((bo[pi], bo[i], vo[pj], vo[j]))
        if i < n:
            b, v = bt[bo[i] : bo[i + 1]], vt[vo[j] : vo[j + 1]]
            for a0, a1, b0, b1 in _edits(b, v, _matching_blocks(b, v), tokens=True):
                out.append((a0 + bo[i], a1 + bo[i], b0 + vo[j], b1 + vo[j]))
        pi, pj = i + 1, j + 1
    return out


def _merge_words(
    base: str, versions: Sequence[tuple[str, str]], eol: str, out_overlaps: list[Overlap]
) -> str:
    """Word-level N-way merge of a region of whole lines several sides changed differently.

    Token changes that do not touch one another all apply; a line holding a token conflict is
    resolved as whole lines (with every other line the conflict's changes span).
    """
    bt = tokenize(base)
    vts = [tokenize(text) for _, text in versions]
    if max(len(bt), *map(len, vts)) > _TOKEN_LIMIT:
        return _resolve_lines(base, versions, eol, out_overlaps)
    keys = [key for key, _ in versions]
    per_side = [_paired_edits(bt, vt) for vt in vts]

    def line_start(p: int) -> bool:
        return p == 0 or bt[p - 1] == "\n"

    def open_end(s: int, e: _Edit) -> bool:
        """Whether the change ends inside a line (of base, or of its side's text)."""
        _, a1, _, b1 = e
        return not (line_start(a1) and (b1 == 0 or vts[s][b1 - 1] == "\n"))

    def version(cl: _Cluster, s: int) -> str:
        return _version(bt, vts[s], cl.start, cl.end, cl.edits[s])

    clusters = _join_edge_copies(_clusters(per_side, open_end), version)
    n = len(bt)

    # Resolve each token cluster: None marks a conflict.
    resolved: list[str | None] = []
    for cl in clusters:
        base_piece = "".join(bt[cl.start : cl.end])
        changes = _distinct(((keys[s], version(cl, s)) for s in cl.edits), base_piece)
        if cl.start == cl.end and _whole_line_inserts(bt, cl.start, changes):
            resolved.append(_union(changes, eol))
            continue
        changes = _absorb(changes, base_piece)
        resolved.append(next(iter(changes)) if len(changes) == 1 else None)

    # Cut the region at the line starts it has in base and in every side: not inside a change,
    # not between a change and an insertion after it, not after a change that leaves its side
    # mid-line. A group of lines holding a conflict is resolved as whole lines.
    blocked = [False] * (n + 1)
    for cl in clusters:
        for p in range(cl.start + 1, cl.end):
            blocked[p] = True
        if cl.end > cl.start and any(e[0] == e[1] == cl.end for es in cl.edits.values() for e in es):
            blocked[cl.end] = True
    for vt, edits in zip(vts, per_side, strict=True):
        for a0, a1, _, b1 in edits:
            if a1 > a0 and b1 and vt[b1 - 1] != "\n":
                blocked[a1] = True
    cuts = [0, *(p for p in range(1, n) if bt[p - 1] == "\n" and not blocked[p]), n]
    parts: list[str] = []
    ci = 0
    for g0, g1 in zip(cuts, cuts[1:], strict=False):
        last = g1 == n
        group: list[int] = []
        while ci < len(clusters) and (clusters[ci].start < g1 or (last and clusters[ci].start == n)):
            group.append(ci)
            ci += 1
        if any(resolved[c] is None for c in group):
            group_versions = [
                (
                    keys[s],
                    _version(bt, vts[s], g0, g1, [e for c in group for e in clusters[c].edits.get(s, ())]),
                )
                for s in range(len(vts))
            ]
            parts.append(_resolve_lines("".join(bt[g0:g1]), group_versions, eol, out_overlaps))
            continue
        pos = g0
        for c in group:
            parts.extend(bt[pos : clusters[c].start])
            parts.append(resolved[c] or "")
            pos = clusters[c].end
        parts.extend(bt[pos:g1])
    return "".join(parts)


def _merge_region(base: str, changes: dict[str, str], eol: str, out_overlaps: list[Overlap]) -> str:
    """Merge several sides' different versions of a region of whole lines.

    A change already part of another one is absorbed, and lines every change begins (or ends)
    with are written once, before any word is looked at: the word level might pair those lines
    with the base's differently for each side. The rest is merged word by word.
    """
    changes = _absorb(changes, base)
    if len(changes) == 1:
        return next(iter(changes))
    lines = [_lines(text) for text in changes]
    if all(lines):
        head = _common_run(lines)
        tail = _common_run([ls[head:][::-1] for ls in lines])
        if head or tail:
            first = lines[0]
            base_lines = _lines(base)
            kept_head = _common_run([base_lines, first[:head]])
            kept_tail = _common_run([base_lines[kept_head:][::-1], first[len(first) - tail :][::-1]])
            middle_base = "".join(base_lines[kept_head : len(base_lines) - kept_tail])
            middles = _distinct(
                (
                    (
                        (key, "".join(ls[head : len(ls) - tail]))
                        for (text, key), ls in zip(changes.items(), lines, strict=True)
                    )
                ),
                middle_base,
            )
            middle = _merge_region(middle_base, middles, eol, out_overlaps) if middles else middle_base
            return "".join(first[:head]) + middle + "".join(first[len(first) - tail :])
    return _merge_words(base, _ordered(changes), eol, out_overlaps)


def _whole_line_inserts(bt: Sequence[str], p: int, changes: dict[str, str]) -> bool:
    """Whether insertions at token position ``p`` are whole lines (kept side by side)."""
    return (p == 0 or bt[p - 1] == "\n") and all(text.endswith("\n") for text in changes)


# ----------------------------------------------------------------------------------------------
# Public API


def _lines(text: str) -> list[str]:
    """``text`` split after each LF (CRLF stays one line ending; no other separator counts)."""
    parts = text.split("\n")
    last = parts.pop()
    lines = [part + "\n" for part in parts]
    if last:
        lines.append(last)
    return lines


def _holds(base: list[str], x: list[str], x_edits: list[_Edit], y: list[str], y_count: Counter[str]) -> bool:
    """Whether text ``y`` already holds all of ``x``'s change to ``base`` (``x_edits``): going
    from x to y deletes no line x wrote and brings back no base line x deleted; and where x only
    deleted lines, y wrote nothing right there nor, next to there, a line sharing a word with
    one of them (it may be its edit of them: an edit against a deletion is an overlap, for the
    region merge to report)."""
    written = [j for _, _, b0, b1 in x_edits for j in range(b0, b1)]
    need = Counter(x[j] for j in written)
    if any(y_count[line] < n for line, n in need.items()):
        return False  # cheap refusal: y lacks some line x wrote
    deleted = Counter(line for a0, a1, _, _ in x_edits for line in base[a0:a1])
    cuts: dict[int, set[str]] = {}  # where x only deleted lines: the words of those lines
    for a0, a1, b0, b1 in x_edits:
        if b0 == b1:
            cuts[b0] = set().union(*(_words(line) for line in base[a0:a1]))
    mine = set(written)
    xi = yj = 0
    for i, j, k in [*_line_blocks(x, y, _Index(x)), (len(x), len(y), 0)]:
        if any(n in mine for n in range(xi, i)) or any(deleted[line] for line in y[yj:j]):
            return False
        # y wrote right where x deleted lines, or wrote (around there) a line like one of them.
        if j > yj and any(
            (p == xi == i or words & set().union(*map(_words, y[yj:j])))
            for p, words in cuts.items()
            if xi <= p <= i
        ):
            return False
        xi, yj = i + k, j + k
    return True


def _words(line: str) -> set[str]:
    return {token for token in tokenize(line) if token[0].isalnum()}


def _terminated(text: str, eol: str) -> str:
    return text if not text or text.endswith("\n") else text + eol


def merge_texts(base: str, sides: Sequence[Side]) -> MergeResult:
    """Merge every side's changes to ``base`` into one text (the rule: module docstring).

    The result depends only on ``base`` and the set of sides, not on their order. A side equal
    to ``base`` contributes nothing; with no side that changes anything the result is ``base``.
    """
    distinct = _distinct(((side.key, side.text) for side in sides), base)
    if not distinct:
        return MergeResult(base)
    if len(distinct) == 1:
        return MergeResult(next(iter(distinct)))
    ordered = _ordered(distinct)
    keys = [key for key, _ in ordered]
    eol = _eol(base, *distinct)
    # Whether the text ends with a line break merges like a one-bit text: a side that changed it
    # wins (all such sides agree). Every text's last line gets one while merging, so that lines
    # appended after it are line insertions, not changes of it; the merged text loses it again
    # if the bit says so. An empty side has no last line and no say.
    ends = base.endswith("\n")
    if any(text and text.endswith("\n") != ends for _, text in ordered):
        ends = not ends
    base = _terminated(base, eol)
    base_lines = _lines(base)
    side_lines = [_lines(_terminated(text, eol)) for _, text in ordered]
    index = _Index(base_lines)
    side_indexes = [_Index(lines) for lines in side_lines]
    per_side = [
        _edits(base_lines, lines, _line_blocks(base_lines, lines, index, side_index))
        for lines, side_index in zip(side_lines, side_indexes, strict=True)
    ]
    # A side whose whole change another side already holds (a fast-forward: typically a merge
    # result merged again with one of its inputs) adds nothing; of two holding each other, the
    # larger (key, text) stays.
    holds = {
        (x, y)
        for x in range(len(ordered))
        for y in range(len(ordered))
        if x != y and _holds(base_lines, side_lines[x], per_side[x], side_lines[y], side_indexes[y].count)
    }
    kept = [
        x
        for x in range(len(ordered))
        if not any((x, y) in holds and ((y, x) not in holds or y > x) for y in range(len(ordered)))
    ]
    if len(kept) < len(ordered):
        keys = [keys[x] for x in kept]
        side_lines = [side_lines[x] for x in kept]
        per_side = [per_side[x] for x in kept]
    offsets = list(accumulate(map(len, base_lines), initial=0))

    def version(cl: _Cluster, s: int) -> str:
        return _version(base_lines, side_lines[s], cl.start, cl.end, cl.edits[s])

    parts: list[str] = []
    overlaps: list[Overlap] = []
    pos = 0
    for cl in _join_edge_copies(_clusters(per_side), version):
        parts.append(base[offsets[pos] : offsets[cl.start]])
        pos = cl.end
        piece = base[offsets[cl.start] : offsets[cl.end]]
        changes = _distinct(((keys[s], version(cl, s)) for s in sorted(cl.edits)), piece)
        if cl.start == cl.end:
            parts.append(_union(changes, eol))
        else:
            parts.append(_merge_region(piece, changes, eol, overlaps))
    parts.append(base[offsets[pos] :])
    text = "".join(parts)
    if not ends and text.endswith("\n"):
        text = text[: -len(eol)] if text.endswith(eol) else text[:-1]
    return MergeResult(text, tuple(overlaps))
