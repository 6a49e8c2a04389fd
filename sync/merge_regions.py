"""Resolving a region several sides of a merge changed differently (sync/text_merge.py).

:func:`merge_region` absorbs a change another already holds, writes the lines every change
begins or ends with once, then merges the rest word by word (:func:`paired_edits` pairs a
side's lines with the base lines they edit first); where changes touch the same word the lines
are resolved whole (``_resolve_lines``): each side's lines once, in base order then by
``(key, text)``, and an :class:`Overlap` reported. :func:`union_of_inserts` keeps every side's
whole-line insertions at one point.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from .merge_align import Edit, matching_blocks, placed_edits, split_lines, tokenize
from .merge_clusters import Cluster, cluster_changes, join_edge_copies, version_text
from .merge_result import Overlap

__all__ = [
    "distinct_changes",
    "line_starts",
    "merge_region",
    "ordered_changes",
    "paired_edits",
    "union_of_inserts",
]


# A conflicting region with more tokens than this on one side skips the word-level merge.
_TOKEN_LIMIT = 50_000


def _bodies(text: str) -> list[str]:
    """The lines of ``text`` without their terminators."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if text.endswith("\n"):
        lines.pop()
    return lines


def distinct_changes(versions: Iterable[tuple[str, str]], base: str) -> dict[str, str]:
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
    for i, j, k in [*matching_blocks(small, big), (len(small), len(big), 0)]:
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


def ordered_changes(changes: dict[str, str]) -> list[tuple[str, str]]:
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
    changes = _absorb(distinct_changes(versions, base), base)
    if not changes:
        return base
    ordered = ordered_changes(changes)
    if len(ordered) == 1:
        return ordered[0][1]
    keys = [key for key, _ in ordered]
    bl = split_lines(base)
    vl = [split_lines(text) for _, text in ordered]
    per_side = [placed_edits(bl, v, matching_blocks(bl, v)) for v in vl]
    parts: list[str] = []
    pos = 0
    for cl in cluster_changes(per_side):
        parts.extend(bl[pos : cl.start])
        pos = cl.end
        piece = "".join(bl[cl.start : cl.end])
        texts = {s: version_text(bl, vl[s], cl.start, cl.end, edits) for s, edits in cl.edits.items()}
        cl_changes = distinct_changes(((keys[s], text) for s, text in texts.items()), piece)
        if cl.start == cl.end:
            parts.append(union_of_inserts(cl_changes, eol))
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


def union_of_inserts(changes: dict[str, str], eol: str) -> str:
    """Insertions of whole lines at one point: all of them (absorbed ones once), in order."""
    return _join_blocks([text for _, text in ordered_changes(_absorb(changes, ""))], eol)


# Regions up to this many base lines x version lines have their lines paired by shared words
# before their tokens are diffed; larger ones are diffed as one run of tokens.
_PAIRING_LIMIT = 4_096


def line_starts(tokens: list[str]) -> list[int]:
    """Token offsets of the line starts of ``tokens`` (every line ends with a line break), and
    the end."""
    return [0, *(i + 1 for i, t in enumerate(tokens) if t == "\n")]


def _shape_ratio(a: list[str], b: list[str]) -> float:
    """How alike two token runs are with every word taken as the same word."""

    def shape(tokens: list[str]) -> list[str]:
        return ["w" if t[0].isalnum() else t for t in tokens]

    return difflib.SequenceMatcher(None, shape(a), shape(b), autojunk=False).ratio()


def paired_edits(bt: list[str], vt: list[str]) -> list[Edit]:
    """The token changes turning a region of whole lines into one side's version of it, that
    never make a version line an edit of a base line unlike it.

    The lines are paired first, in order, maximising how alike paired lines are (a dynamic
    programme, small regions only); tokens are then diffed within each pair, and the lines
    between pairs are whole-line changes of their own. A version line unlike the base line in
    its place is a line of its own (a rewrite, or an insertion next to an edit), not an edit
    whose spaces and line breaks happen to match.
    """
    bo, vo = line_starts(bt), line_starts(vt)
    n, m = len(bo) - 1, len(vo) - 1
    if n * m > _PAIRING_LIMIT:
        return placed_edits(bt, vt, matching_blocks(bt, vt), tokens=True)
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
    out: list[Edit] = []
    pi = pj = 0
    for i, j in [*pairs, (n, m)]:
        if i > pi or j > pj:
            out.append((bo[pi], bo[i], vo[pj], vo[j]))
        if i < n:
            b, v = bt[bo[i] : bo[i + 1]], vt[vo[j] : vo[j + 1]]
            for a0, a1, b0, b1 in placed_edits(b, v, matching_blocks(b, v), tokens=True):
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
    per_side = [paired_edits(bt, vt) for vt in vts]

    def line_start(p: int) -> bool:
        return p == 0 or bt[p - 1] == "\n"

    def open_end(s: int, e: Edit) -> bool:
        """Whether the change ends inside a line (of base, or of its side's text)."""
        _, a1, _, b1 = e
        return not (line_start(a1) and (b1 == 0 or vts[s][b1 - 1] == "\n"))

    def version(cl: Cluster, s: int) -> str:
        return version_text(bt, vts[s], cl.start, cl.end, cl.edits[s])

    clusters = join_edge_copies(cluster_changes(per_side, open_end), version)
    n = len(bt)

    # Resolve each token cluster: None marks a conflict.
    resolved: list[str | None] = []
    for cl in clusters:
        base_piece = "".join(bt[cl.start : cl.end])
        changes = distinct_changes(((keys[s], version(cl, s)) for s in cl.edits), base_piece)
        if cl.start == cl.end and _whole_line_inserts(bt, cl.start, changes):
            resolved.append(union_of_inserts(changes, eol))
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
                    version_text(
                        bt, vts[s], g0, g1, [e for c in group for e in clusters[c].edits.get(s, ())]
                    ),
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


def merge_region(base: str, changes: dict[str, str], eol: str, out_overlaps: list[Overlap]) -> str:
    """Merge several sides' different versions of a region of whole lines.

    A change already part of another one is absorbed, and lines every change begins (or ends)
    with are written once, before any word is looked at: the word level might pair those lines
    with the base's differently for each side. The rest is merged word by word.
    """
    changes = _absorb(changes, base)
    if len(changes) == 1:
        return next(iter(changes))
    lines = [split_lines(text) for text in changes]
    if all(lines):
        head = _common_run(lines)
        tail = _common_run([ls[head:][::-1] for ls in lines])
        if head or tail:
            first = lines[0]
            base_lines = split_lines(base)
            kept_head = _common_run([base_lines, first[:head]])
            kept_tail = _common_run([base_lines[kept_head:][::-1], first[len(first) - tail :][::-1]])
            middle_base = "".join(base_lines[kept_head : len(base_lines) - kept_tail])
            middles = distinct_changes(
                (
                    (
                        (key, "".join(ls[head : len(ls) - tail]))
                        for (text, key), ls in zip(changes.items(), lines, strict=True)
                    )
                ),
                middle_base,
            )
            middle = merge_region(middle_base, middles, eol, out_overlaps) if middles else middle_base
            return "".join(first[:head]) + middle + "".join(first[len(first) - tail :])
    return _merge_words(base, ordered_changes(changes), eol, out_overlaps)


def _whole_line_inserts(bt: Sequence[str], p: int, changes: dict[str, str]) -> bool:
    """Whether insertions at token position ``p`` are whole lines (kept side by side)."""
    return (p == 0 or bt[p - 1] == "\n") and all(text.endswith("\n") for text in changes)
