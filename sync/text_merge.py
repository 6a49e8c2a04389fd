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

The work is split by responsibility: sync/merge_align.py (a side's changes against the base),
sync/merge_clusters.py (which changes interact), sync/merge_regions.py (resolving a region
several sides changed), sync/merge_holds.py (whether a side already holds another's change),
sync/merge_result.py (the values). This module puts them together.

Everything depends only on the inputs (no clocks, no hash seeds, the order of ``sides`` does not
matter), so every machine computes the same bytes. Work is bounded: line and token diffs are a
patience diff with a step budget (ranges it cannot afford become replacements), line pairing
runs only on small regions, and a region larger than ``_TOKEN_LIMIT`` tokens is resolved as
whole lines without the word-level step.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

from .merge_align import (
    Edit,
    OccurrenceIndex,
    line_blocks,
    line_terminator,
    placed_edits,
    split_lines,
    terminated,
    tokenize,
)
from .merge_clusters import Cluster, cluster_changes, join_edge_copies, version_text
from .merge_holds import holds_change, touches_every_change
from .merge_regions import distinct_changes, merge_region, ordered_changes, union_of_inserts
from .merge_result import MergeResult, Overlap, Side

__all__ = ["MergeResult", "Overlap", "Side", "merge_texts", "tokenize"]


def merge_texts(base: str, sides: Sequence[Side]) -> MergeResult:
    """Merge every side's changes to ``base`` into one text (the rule: module docstring).

    The result depends only on ``base`` and the set of sides, not on their order. A side equal
    to ``base`` contributes nothing; with no side that changes anything the result is ``base``.
    """
    distinct = distinct_changes(((side.key, side.text) for side in sides), base)
    if not distinct:
        return MergeResult(base)
    if len(distinct) == 1:
        return MergeResult(next(iter(distinct)))
    ordered = ordered_changes(distinct)
    keys = [key for key, _ in ordered]
    eol = line_terminator(base, *distinct)
    # Whether the text ends with a line break merges like a one-bit text: a side that changed it
    # wins (all such sides agree). Every text's last line gets one while merging, so that lines
    # appended after it are line insertions, not changes of it; the merged text loses it again
    # if the bit says so. An empty side has no last line and no say.
    ends = base.endswith("\n")
    if any(text and text.endswith("\n") != ends for _, text in ordered):
        ends = not ends
    base = terminated(base, eol)
    base_lines = split_lines(base)
    side_lines = [split_lines(terminated(text, eol)) for _, text in ordered]
    index = OccurrenceIndex(base_lines)
    side_indexes = [OccurrenceIndex(lines) for lines in side_lines]
    per_side = [
        placed_edits(base_lines, lines, line_blocks(base_lines, lines, index, side_index))
        for lines, side_index in zip(side_lines, side_indexes, strict=True)
    ]
    # A side whose whole change another side already holds (a fast-forward: typically a merge
    # result merged again with one of its inputs) adds nothing; of two holding each other, the
    # larger (key, text) stays.
    holds = {
        (x, y)
        for x in range(len(ordered))
        for y in range(len(ordered))
        if x != y
        and touches_every_change(per_side[x], per_side[y])
        and holds_change(base_lines, side_lines[x], per_side[x], side_lines[y]) is not None
    }
    kept = [
        x
        for x in range(len(ordered))
        if not any((x, y) in holds and ((y, x) not in holds or y > x) for y in range(len(ordered)))
    ]
    offsets = list(accumulate(map(len, base_lines), initial=0))

    def merged(chosen: list[int]) -> MergeResult:
        """The merge of the sides ``chosen`` (indexes into ``ordered``)."""
        return _merge_lines(
            base,
            base_lines,
            offsets,
            [keys[x] for x in chosen],
            [side_lines[x] for x in chosen],
            [per_side[x] for x in chosen],
            eol,
            ends,
        )

    result = merged(kept)
    if len(kept) == 2:
        # One side holds the other's change but for lines the other deleted where it has lines
        # (its edit of them, or, in a merge result, another side's edit kept by an overlap): its
        # text is the merge, whatever the region merge makes of the two diffs; the deletion
        # against those lines is an overlap.
        for x, y in ((kept[0], kept[1]), (kept[1], kept[0])):
            faced = (
                holds_change(base_lines, side_lines[x], per_side[x], side_lines[y], weak=True)
                if touches_every_change(per_side[x], per_side[y])
                else None
            )
            if faced is None:
                continue
            alone = merged([y])
            if alone.text != result.text:
                overlaps = tuple(
                    Overlap(
                        "".join(base_lines[a0:a1]),
                        tuple(sorted([(keys[x], ""), (keys[y], "".join(side_lines[y][y0:y1]))])),
                    )
                    for a0, a1, y0, y1 in faced
                )
                result = MergeResult(alone.text, overlaps or result.overlaps)
            break
    return result


def _merge_lines(
    base: str,
    base_lines: list[str],
    offsets: list[int],
    keys: list[str],
    side_lines: list[list[str]],
    per_side: list[list[Edit]],
    eol: str,
    ends: bool,
) -> MergeResult:
    """Merge the sides' line changes ``per_side`` to ``base`` (lines ``base_lines`` starting at
    ``offsets``): regions by :func:`merge_region`, insertions at one point by
    :func:`union_of_inserts`; the text ends with a line break if ``ends``."""

    def version(cl: Cluster, s: int) -> str:
        return version_text(base_lines, side_lines[s], cl.start, cl.end, cl.edits[s])

    parts: list[str] = []
    overlaps: list[Overlap] = []
    pos = 0
    for cl in join_edge_copies(cluster_changes(per_side), version):
        parts.append(base[offsets[pos] : offsets[cl.start]])
        pos = cl.end
        piece = base[offsets[cl.start] : offsets[cl.end]]
        changes = distinct_changes(((keys[s], version(cl, s)) for s in sorted(cl.edits)), piece)
        if cl.start == cl.end:
            parts.append(union_of_inserts(changes, eol))
        else:
            parts.append(merge_region(piece, changes, eol, overlaps))
    parts.append(base[offsets[pos] :])
    text = "".join(parts)
    if not ends and text.endswith("\n"):
        text = text[: -len(eol)] if text.endswith(eol) else text[:-1]
    return MergeResult(text, tuple(overlaps))
