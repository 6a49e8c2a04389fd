"""Grouping the sides' changes of a merge into regions where they interact (sync/text_merge.py).

Changes are ``(a0, a1, b0, b1)`` tuples against one base (lines, or tokens of a region);
:func:`clusters` groups those whose base ranges overlap or touch by the rule of the level, and
:func:`join_edge_copies` joins neighbouring regions where one change repeats another at their
shared edge (one change seen through two diffs). :func:`version_text` is a side's text of a
region.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .merge_align import Edit

__all__ = ["Cluster", "cluster_changes", "join_edge_copies", "version_text"]


@dataclass(slots=True)
class Cluster:
    start: int
    end: int
    # side index -> that side's changes inside the cluster, in order
    edits: dict[int, list[Edit]]


def cluster_changes(
    per_side: Sequence[Sequence[Edit]], open_end: Callable[[int, Edit], bool] | None = None
) -> list[Cluster]:
    """Group the sides' changes into regions where they interact, in base order.

    Changes whose base ranges overlap, an insertion strictly inside another's range, and
    insertions at one point always interact. A change that starts where another ends interacts
    with it when that one ends inside a line, ``open_end(side, edit)`` (the word level: diff3's
    rule within a line); changes on either side of a line start stay apart (at the line level
    always: an insertion at the edge of a changed range, or two changed ranges side by side).
    """
    flat = sorted((e[0], e[1] > e[0], s, e) for s, edits in enumerate(per_side) for e in edits)
    out: list[Cluster] = []
    cur: Cluster | None = None
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
        cur = Cluster(a0, e[1], {s: [e]})
        tight_end = t
        out.append(cur)
    return out


def join_edge_copies(clusters: list[Cluster], version: Callable[[Cluster, int], str]) -> list[Cluster]:
    """Join regions next to each other where one side's version of one repeats, at the edge
    they share, another side's version of the other (one version ends with the other's start, or
    the other starts with it): that is one change seen through two diffs (typically a merge
    result holding both sides' versions, merged again with one of those sides), to be resolved
    together rather than land twice. Of a point of insertions only the sides that repeat join.
    ``version(cluster, side)`` is that side's text of the cluster."""
    out: list[Cluster] = []
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
        rest: dict[int, list[Edit]] = {}
        for s, edits in cl.edits.items():
            text = version(cl, s)
            if prev is not None and any(_ends_alike(version(prev, o), text) for o in prev.edits):
                prev.edits[s] = [*prev.edits.get(s, ()), *edits]
            elif nxt is not None and any(_ends_alike(text, version(nxt, o)) for o in nxt.edits):
                nxt.edits[s] = [*edits, *nxt.edits.get(s, ())]
            else:
                rest[s] = edits
        if rest:
            out.append(Cluster(cl.start, cl.end, rest))
    return out


def _ends_alike(first: str, second: str) -> bool:
    """Whether text ``first`` ends with ``second`` or ``second`` starts with ``first`` (both
    non-empty): ``second`` written right after ``first`` would repeat some of it."""
    return bool(first) and bool(second) and (first.endswith(second) or second.startswith(first))


def version_text(
    base: Sequence[str], side: Sequence[str], start: int, end: int, edits: Iterable[Edit]
) -> str:
    """base[start:end] with ``edits`` (all inside it) applied, as text."""
    parts: list[str] = []
    pos = start
    for a0, a1, b0, b1 in edits:
        parts.extend(base[pos:a0])
        parts.extend(side[b0:b1])
        pos = a1
    parts.extend(base[pos:end])
    return "".join(parts)
