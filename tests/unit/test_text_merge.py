"""Tests for stet.sync.text_merge: the one three-way merge rule (no conflict markers)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from stet.sync.text_merge import MergeResult, Overlap, Side, merge_texts, tokenize


def merge(base: str, *texts: str) -> MergeResult:
    return merge_texts(base, [Side(text, f"k{n}") for n, text in enumerate(texts)])


# ----------------------------------------------------------------------------------------------
# The reproductions


def test_different_numbers_on_one_line_are_both_kept_whole() -> None:
    base = "rate_limit = 50 rpm\nStatus: draft\n"
    a = "rate_limit = 100 rpm\nStatus: done\n"
    b = "rate_limit = 60 rpm\nStatus: done\n"
    result = merge_texts(base, [Side(a, "device:a"), Side(b, "device:b")])
    text = result.text
    assert text == "rate_limit = 100 rpm\nrate_limit = 60 rpm\nStatus: done\n"
    assert text.count("rate_limit = 100 rpm\n") == 1
    assert text.count("rate_limit = 60 rpm\n") == 1
    assert text.count("Status: done\n") == 1
    for glued in ("1060", "10100", "6100", "doneone"):
        assert glued not in text
    assert result.overlaps == (
        Overlap(
            "rate_limit = 50 rpm\n",
            (("device:a", "rate_limit = 100 rpm\n"), ("device:b", "rate_limit = 60 rpm\n")),
        ),
    )
    assert not result.clean


def test_the_same_change_on_both_sides_lands_once() -> None:
    base = "rate_limit = 50 rpm\nStatus: draft\n"
    a = "rate_limit = 100 rpm\nStatus: done\n"
    result = merge(base, a, a)
    assert result.text == a
    assert result.clean


def test_a_person_and_an_agent_writing_different_values_keep_both_lines() -> None:
    base = "# Budget\nlimit: 70\nowner: ops\n"
    person = "# Budget\nlimit: 75\nowner: ops\n"
    agent = "# Budget\nlimit: 80\nowner: ops\n"
    result = merge_texts(base, [Side(person, "device:laptop"), Side(agent, "agent:planner")])
    # agent:planner < device:laptop
    assert result.text == "# Budget\nlimit: 80\nlimit: 75\nowner: ops\n"
    assert result.overlaps == (
        Overlap("limit: 70\n", (("agent:planner", "limit: 80\n"), ("device:laptop", "limit: 75\n"))),
    )


def test_different_words_of_one_line_merge_inside_the_line() -> None:
    result = merge("the quick brown fox", "the slow brown fox", "the quick brown cat")
    assert result.text == "the slow brown cat"
    assert result.clean


def test_different_words_of_one_line_with_line_breaks() -> None:
    result = merge("a\nthe quick brown fox\nz\n", "a\nthe slow brown fox\nz\n", "a\nthe quick brown cat\nz\n")
    assert result.text == "a\nthe slow brown cat\nz\n"
    assert result.clean


def test_cjk_word_edit_and_appended_line_both_apply() -> None:
    base = "我们讨论了数据库迁移计划\n"
    a = "我们讨论了数据仓库迁移计划\n"
    b = "我们讨论了数据库迁移计划\n下周开始执行\n"
    result = merge(base, a, b)
    assert result.text == "我们讨论了数据仓库迁移计划\n下周开始执行\n"
    assert result.clean


def test_cjk_edits_to_different_characters_of_one_line_merge() -> None:
    base = "我们讨论了数据库迁移计划\n"
    a = "我们讨论了数据仓库迁移计划\n"
    b = "我们讨论了数据库迁移方案\n"
    result = merge(base, a, b)
    assert result.text == "我们讨论了数据仓库迁移方案\n"
    assert result.clean


def test_japanese_edits_to_different_characters_of_one_line_merge() -> None:
    base = "明日は東京で会議です。\n"
    a = "明日は大阪で会議です。\n"
    b = "明日は東京で打ち合わせです。\n"
    result = merge(base, a, b)
    assert result.text == "明日は大阪で打ち合わせです。\n"
    assert result.clean


def test_cjk_edits_to_the_same_characters_overlap_whole() -> None:
    base = "计划：周一\n"
    result = merge(base, "计划：周二\n", "计划：周三\n")
    assert result.text == "计划：周二\n计划：周三\n"
    assert len(result.overlaps) == 1


def test_three_sides_changing_one_line_differently() -> None:
    base = "a\nL\nb\n"
    result = merge(base, "a\nL1\nb\n", "a\nL2\nb\n", "a\nL3\nb\n")
    assert result.text == "a\nL1\nL2\nL3\nb\n"
    assert result.overlaps == (Overlap("L\n", (("k0", "L1\n"), ("k1", "L2\n"), ("k2", "L3\n"))),)


def test_three_identical_sides_land_once() -> None:
    result = merge("a\nL\nb\n", "a\nL1\nb\n", "a\nL1\nb\n", "a\nL1\nb\n")
    assert result.text == "a\nL1\nb\n"
    assert result.clean


# ----------------------------------------------------------------------------------------------
# The rule's other cases


def test_one_side_only() -> None:
    assert merge("a\nb\n", "a\nB\n").text == "a\nB\n"
    assert merge("a\nb\n", "a\nb\n", "a\nB\n") == MergeResult("a\nB\n")
    assert merge("a\nb\n", "a\nb\n", "a\nb\n") == MergeResult("a\nb\n")
    assert merge_texts("a\n", []) == MergeResult("a\n")


def test_deletion_against_an_edit_keeps_the_edit_and_reports_it() -> None:
    result = merge("a\nL\nb\n", "a\nb\n", "a\nL2\nb\n")
    assert result.text == "a\nL2\nb\n"
    assert result.overlaps == (Overlap("L\n", (("k0", ""), ("k1", "L2\n"))),)


def test_deletion_of_a_word_against_an_edit_of_it() -> None:
    result = merge("x\none two three\ny\n", "x\none three\ny\n", "x\none 2 three\ny\n")
    assert result.text == "x\none three\none 2 three\ny\n"
    assert len(result.overlaps) == 1


def test_deletions_of_different_lines_both_apply() -> None:
    assert merge("a\nb\nc\nd\n", "a\nc\nd\n", "a\nb\nc\n") == MergeResult("a\nc\n")


def test_same_word_and_other_words_of_a_line_make_the_whole_line_an_overlap() -> None:
    base = "one two three four\n"
    a = "ONE two THREE four\n"
    b = "one two 3 FOUR\n"
    result = merge(base, a, b)
    assert result.text == a + b
    assert len(result.overlaps) == 1
    for line in result.text.splitlines():
        assert not ("ONE" in line and "FOUR" in line)


def test_adjoining_word_changes_overlap() -> None:
    # A changes "quick", B inserts a word right after it: they touch.
    result = merge("the quick fox\n", "the slow fox\n", "the quickest, brown fox\n")
    assert result.text == "the slow fox\nthe quickest, brown fox\n"
    assert len(result.overlaps) == 1


def test_an_insertion_next_to_a_changed_line_is_not_an_overlap() -> None:
    assert merge("a\nL\nb\n", "a\nX\nL\nb\n", "a\nL2\nb\n") == MergeResult("a\nX\nL2\nb\n")
    assert merge("a\nL\nb\n", "a\nL\nX\nb\n", "a\nL2\nb\n") == MergeResult("a\nL2\nX\nb\n")
    assert merge("a\nL\nb\n", "a\nL\nX\nb\n", "a\nb\n") == MergeResult("a\nX\nb\n")


def test_changes_to_neighbouring_lines_both_apply() -> None:
    assert merge("a\nb\nc\n", "A\nb\nc\n", "a\nB\nc\n") == MergeResult("A\nB\nc\n")


def test_insertions_at_one_point_are_all_kept_in_key_order() -> None:
    base = "# Log\n- first\n"
    a = "# Log\n- first\n- from a\n"
    b = "# Log\n- first\n- from b\n- and b\n"
    assert merge_texts(base, [Side(b, "z"), Side(a, "a")]) == MergeResult(
        base + "- from a\n- from b\n- and b\n"
    )
    assert merge_texts(base, [Side(b, "a"), Side(a, "z")]) == MergeResult(
        base + "- from b\n- and b\n- from a\n"
    )
    # The same key: ordered by text.
    assert merge_texts(base, [Side(b, "k"), Side(a, "k")]).text == base + "- from a\n- from b\n- and b\n"


def test_identical_insertions_land_once() -> None:
    base = "a\nb\n"
    assert merge(base, "a\nX\nb\n", "a\nX\nb\n") == MergeResult("a\nX\nb\n")
    assert merge(base, "a\nX\nb\n", "a\nX\nY\nb\n") == MergeResult("a\nX\nY\nb\n")


def test_an_unterminated_last_line_changed_twice_is_not_glued() -> None:
    result = merge("a\nb", "a\nc", "a\nd")
    assert result.text == "a\nc\nd"
    assert len(result.overlaps) == 1


def test_appends_after_an_unterminated_last_line() -> None:
    assert merge("a\nb", "a\nb\nx", "a\nb\ny") == MergeResult("a\nb\nx\ny")
    # Whether the text ends with a line break merges on its own: A added one.
    assert merge("a\nb", "a\nb\nx\n", "a\nb\ny") == MergeResult("a\nb\nx\ny\n")
    assert merge("a\nb\n", "a\nb\nx", "a\nb\ny") == MergeResult("a\nb\nx\ny")
    assert merge("a\nb\n", "a\nb\nx\n", "a\nb\ny\n") == MergeResult("a\nb\nx\ny\n")


def test_an_unterminated_line_before_another_block_gets_a_line_break() -> None:
    result = merge("a\nb", "a\nc", "a\nd\n")
    assert result.text == "a\nc\nd\n"


def test_crlf_text_keeps_crlf() -> None:
    result = merge("a\r\nb", "a\r\nc", "a\r\nd")
    assert result.text == "a\r\nc\r\nd"
    result = merge("one two\r\nz\r\n", "one 2\r\nz\r\n", "1 two\r\nz\r\n")
    assert result.text == "1 2\r\nz\r\n"


def test_empty_base() -> None:
    assert merge("", "x\n", "y\n") == MergeResult("x\ny\n")
    assert merge("", "x", "y") == MergeResult("x\ny")
    assert merge("", "x", "x") == MergeResult("x")


def test_everything_deleted_by_one_side_and_edited_by_another() -> None:
    # Line a: only one side changed it (deleted). Line b: a deletion against an edit.
    result = merge("a\nb\n", "", "a\nB\n")
    assert result.text == "B\n"
    assert not result.clean


def test_joining_two_lines_and_editing_a_word_of_the_second() -> None:
    # The joined line pairs with the first line (a line of a version pairs with one base line):
    # the second line was deleted by one side and edited by the other.
    result = merge("a b\nc d\n", "a b c d\n", "a b\nc D\n")
    assert result.text == "a b c d\nc D\n"
    assert result.overlaps == (Overlap("c d\n", (("k0", ""), ("k1", "c D\n"))),)


def test_deleting_a_line_and_editing_the_next_one() -> None:
    result = merge(
        "x\nold line\nnext words here\ny\n", "x\nnext words here\ny\n", "x\nnew line\nnext WORDS here\ny\n"
    )
    assert result.text == "x\nnew line\nnext WORDS here\ny\n"
    assert result.overlaps == (Overlap("old line\n", (("k0", ""), ("k1", "new line\n"))),)


def test_a_change_contained_in_another_is_absorbed() -> None:
    assert merge("L\n", "La\n", "La\nLb\n") == MergeResult("La\nLb\n")
    assert merge("x\nL\ny\n", "x\nLa\ny\n", "x\nLb\nLa\ny\n") == MergeResult("x\nLb\nLa\ny\n")


def test_merging_a_merge_again_with_one_of_its_inputs_is_a_no_op() -> None:
    base = "rate_limit = 50 rpm\nStatus: draft\n"
    a = "rate_limit = 100 rpm\nStatus: done\n"
    b = "rate_limit = 60 rpm\nStatus: done\n"
    merged = merge(base, a, b).text
    for side in (a, b):
        again = merge_texts(base, [Side(merged, "merged"), Side(side, "k")])
        assert again.text == merged
        assert again.clean


def test_re_merging_a_word_merge_next_to_an_inserted_line_is_a_no_op() -> None:
    # One side inserted a line above the line it edited, the other edited another word of that
    # line: the result's line is a word merge neither side wrote. Its line diff against the
    # side that inserted pairs differently from the side's own, and the rule used to repeat the
    # side's line on a re-merge (the fast-forward check looked at whole lines only).
    base = "a b c\n- [ ] one two\nd e f\n"
    inserted = "a b c\n- [ ] inserted line\n- [ ] one TWO\nd e f\n"
    edited = "a b c\n- [ ] ONE two\nd e f\n"
    merged = merge(base, inserted, edited)
    assert merged == MergeResult("a b c\n- [ ] inserted line\n- [ ] ONE TWO\nd e f\n")
    for side in (inserted, edited):
        for key in ("merged", "zz"):
            again = merge_texts(base, [Side(merged.text, key), Side(side, "k")])
            assert again == MergeResult(merged.text)


def test_the_order_of_sides_does_not_matter() -> None:
    base = "a\nL\nb\nthe quick brown fox\n"
    texts = [
        "a\nL1\nb\nthe slow brown fox\n",
        "a\nL2\nb\nthe quick brown cat\n",
        "a\nL\nb\nc\nthe quick brown fox\n",
    ]
    results = {
        merge_texts(base, [Side(texts[i], f"s{i}") for i in order])
        for order in itertools.permutations(range(3))
    }
    assert len(results) == 1


def test_no_conflict_markers() -> None:
    text = merge("x = 1\n", "x = 2\n", "x = 3\n").text
    for marker in ("<<<<<<<", "=======", ">>>>>>>", "|||||||"):
        assert marker not in text


def test_tokens() -> None:
    assert tokenize("rate_limit = 50 rpm\n") == ["rate_limit", " ", "=", " ", "50", " ", "rpm", "\n"]
    assert tokenize("数据库 café") == ["数", "据", "库", " ", "café"]
    assert tokenize("cafe\u0301 ok") == ["cafe\u0301", " ", "ok"]
    assert tokenize("مَرحبا بِكم") == ["مَرحبا", " ", "بِكم"]
    assert tokenize("- [ ] Задача") == ["-", " ", "[", " ", "]", " ", "Задача"]
    assert tokenize("東京です") == ["東", "京", "で", "す"]
    for text in ("a\r\n b", "x\u2028y", "👍🏽 ok", "\t\n\n", ""):
        assert "".join(tokenize(text)) == text


def test_a_large_note_is_merged_quickly() -> None:
    """A loose bound (the real figure is bench/merge_bench.py's): 1 MB, 100 changes a side."""
    import time

    lines = [f"line {i} with some words of text in it\n" if i % 5 else "\n" for i in range(25_000)]
    a, b = list(lines), list(lines)
    for i in range(1, 25_000, 250):
        a[i] = f"line {i} changed by a\n"
        b[i + 100] = f"line {i + 100} changed by b\n"
    a[501] = "line 501 with some words of text in it, a\n"
    b[501] = "line 501 with some WORDS of text in it\n"
    base = "".join(lines)
    start = time.perf_counter()
    result = merge(base, "".join(a), "".join(b))
    assert time.perf_counter() - start < 2.0
    assert result.clean
    assert "line 501 with some WORDS of text in it, a\n" in result.text


# ----------------------------------------------------------------------------------------------
# Properties

WORDS = [
    "alpha", "plan", "draft", "done", "café", "naïve", "Ærø", "straße", "élève",
    "数据库", "迁移", "東京", "です", "مرحبا", "سلام", "ملاحظة", "привет", "данные", "задача",
]  # fmt: skip
PREFIXES = ["", "# ", "## ", "- [ ] ", "- "]
NEW = ["n", "ñ", "新", "ж", "ن", "é"]


@dataclass
class Script:
    """One side's edits, by base line: replaced lines, word edits, deletions, inserted lines."""

    replace: dict[int, str] = field(default_factory=dict)
    word: dict[int, tuple[int, str]] = field(default_factory=dict)
    delete: set[int] = field(default_factory=set)
    insert: dict[int, str] = field(default_factory=dict)  # after base line i (-1: at the top)


def split_line(line: str) -> tuple[str, list[str]]:
    for prefix in sorted(PREFIXES, key=len, reverse=True):
        if prefix and line.startswith(prefix):
            return prefix, line[len(prefix) :].split(" ")
    return "", line.split(" ") if line else []


def line_result(line: str, script: Script, i: int) -> str | None:
    if i in script.delete:
        return None
    if i in script.replace:
        return script.replace[i]
    if i in script.word:
        w, new = script.word[i]
        prefix, words = split_line(line)
        words[w] = new
        return prefix + " ".join(words)
    return line


def apply_script(lines: list[str], terminated: bool, script: Script) -> str:
    out = [script.insert[-1]] if -1 in script.insert else []
    for i, line in enumerate(lines):
        result = line_result(line, script, i)
        if result is not None:
            out.append(result)
        if i in script.insert:
            out.append(script.insert[i])
    # An unterminated text cannot end with a blank line: the script's lines would not be its lines.
    assume(terminated or not out or out[-1])
    return "\n".join(out) + ("\n" if terminated and out else "")


@st.composite
def bases(draw: st.DrawFn) -> tuple[list[str], bool]:
    """Unique non-empty markdown-ish lines, single blank lines between some of them."""
    content = draw(
        st.lists(
            st.builds(
                lambda prefix, words: prefix + " ".join(words),
                st.sampled_from(PREFIXES),
                st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
            ),
            min_size=1,
            max_size=10,
            unique=True,
        )
    )
    lines: list[str] = []
    for n, line in enumerate(content):
        lines.append(line)
        if n + 1 < len(content) and draw(st.booleans()) and draw(st.booleans()):
            lines.append("")
    return lines, draw(st.booleans())


@st.composite
def scripts(draw: st.DrawFn, lines: list[str], count: int) -> list[Script]:
    """``count`` scripts; later ones often touch the lines of earlier ones, sometimes alike."""
    out: list[Script] = []
    serial = itertools.count()

    def new_word(side: int) -> str:
        return f"{draw(st.sampled_from(NEW))}{'ABC'[side]}{next(serial)}"

    for side in range(count):
        script = Script()
        for i, line in enumerate(lines):
            earlier = [s for s in out if i in s.replace or i in s.word or i in s.delete]
            kind = draw(st.sampled_from(["keep", "keep", "keep", "replace", "word", "delete", "copy"]))
            if kind == "copy" and earlier:
                src = draw(st.sampled_from(earlier))
                if i in src.replace:
                    script.replace[i] = src.replace[i]
                elif i in src.word:
                    script.word[i] = src.word[i]
                else:
                    script.delete.add(i)
                continue
            if kind == "keep" and earlier and draw(st.booleans()):
                kind = draw(st.sampled_from(["replace", "word", "delete"]))  # make overlaps likely
            _, words = split_line(line)
            if kind == "word" and not words:
                kind = "replace"
            if kind == "replace":
                script.replace[i] = f"{draw(st.sampled_from(PREFIXES))}{new_word(side)} {new_word(side)}"
            elif kind == "word":
                script.word[i] = (draw(st.integers(0, len(words) - 1)), new_word(side))
            elif kind == "delete":
                script.delete.add(i)
        for i in range(-1, len(lines)):
            if draw(st.integers(0, 5)) == 0:
                copies = [s.insert[i] for s in out if i in s.insert]
                if copies and draw(st.booleans()):
                    script.insert[i] = copies[0]
                else:
                    script.insert[i] = f"- [ ] {new_word(side)}"
        out.append(script)
    return out


@dataclass
class Expected:
    kept: list[str]  # base lines nobody touched, in order
    once: set[str]  # lines that must be present exactly once
    gone: set[str]  # base lines that must be absent
    conflicts: list[list[set[str]]]  # per conflicting line: each version's new words
    conflict_lines: int


def expect(lines: list[str], texts: list[Script]) -> Expected:
    exp = Expected([], set(), set(), [], 0)
    for i, line in enumerate(lines):
        touching = [s for s in texts if i in s.replace or i in s.word or i in s.delete]
        if not touching:
            if line:  # (blank lines repeat: which one a side kept is ambiguous)
                exp.kept.append(line)
            continue
        results = {line_result(line, s, i) for s in touching}
        merged: str | None = None
        if all(i in s.word for s in touching):
            by_word: dict[int, set[str]] = {}
            for s in touching:
                by_word.setdefault(s.word[i][0], set()).add(s.word[i][1])
            if all(len(v) == 1 for v in by_word.values()):
                prefix, words = split_line(line)
                for w, news in by_word.items():
                    words[w] = next(iter(news))
                merged = prefix + " ".join(words)
        if merged is not None or len(results) == 1:
            result = merged if merged is not None else next(iter(results))
            if result is None:
                if line:
                    exp.gone.add(line)
            else:
                exp.once.add(result)
            continue
        exp.conflict_lines += 1
        exp.once.update(r for r in results if r is not None)
        exp.conflicts.append([new_words(r, line) for r in results if r is not None])
    for s in texts:
        exp.once.update(s.insert.values())
    return exp


def new_words(result: str, base_line: str) -> set[str]:
    """The words a side wrote into a line (the generated ones end with its letter and a number)."""
    return {word for word in result.split(" ") if re.search(r"[ABC]\d+$", word)} - set(base_line.split(" "))


def isolated(script: Script) -> bool:
    """Whether no two of the script's changes are next to each other: no two changed lines in a
    row, no insertion right before or after a changed line (a line diff makes one change of
    such a run)."""
    lines = {*script.replace, *script.word, *script.delete}
    return not any(i + 1 in lines for i in lines) and not any(
        g in lines or g + 1 in lines for g in script.insert
    )


def is_subsequence(small: list[str], big: list[str]) -> bool:
    it = iter(big)
    return all(x in it for x in small)


def check(base_lines: list[str], terminated: bool, texts: list[Script]) -> None:
    base = "\n".join(base_lines) + ("\n" if terminated else "")
    side_texts = [apply_script(base_lines, terminated, s) for s in texts]
    sides = [Side(text, f"side:{n}") for n, text in enumerate(side_texts)]
    result = merge_texts(base, sides)
    out = result.text.split("\n")
    exp = expect(base_lines, texts)

    assert is_subsequence(exp.kept, out), "a line nobody touched was lost"
    written = set().union(*(new_words(text.replace("\n", " "), "") for text in side_texts))
    assert written <= set(result.text.replace("\n", " ").split(" ")), "a word someone wrote was lost"
    for versions in exp.conflicts:
        for line in out:
            words = set(line.split(" "))
            assert sum(bool(words & v) for v in versions) <= 1, f"interleaved line {line!r}"
    if all(isolated(s) for s in texts):
        # Each side's changes are single lines or insertions apart from one another: the
        # expectation is exact. (Otherwise a side's run of changed lines is one rewrite whose
        # lines need not pair with the base's the way the script made them.)
        for line in exp.once:
            assert out.count(line) == 1, f"{line!r} present {out.count(line)} times"
        for line in exp.gone:
            assert line not in out
        assert len(result.overlaps) == exp.conflict_lines
    for overlap in result.overlaps:
        assert all(line in out for _, lines in overlap.sides for line in lines.splitlines())
        assert len(overlap.sides) >= 2
    for marker in ("<<<<<<<", ">>>>>>>"):
        assert marker not in result.text

    # Independent of the order of sides.
    for order in itertools.permutations(sides):
        assert merge_texts(base, list(order)) == result
    # Idempotent: the result merged again with any side is the result. Asserted exactly when each
    # side's changes stand apart from one another. When a side's changed lines run together,
    # the result's line diff against the base can pair lines differently from the side's; the
    # fast-forward check (sync/merge_holds.py, token by token) now covers most of those, but
    # about 1 in 1,000 generated cases (2 or 3 sides, measured with 6,000 examples) still repeat
    # a line on re-merge (docs/decisions/0001-three-way-merge.md): there only nothing anyone
    # wrote may be lost.
    for side in sides:
        for key in ("merged", "zz"):
            again = merge_texts(base, [Side(result.text, key), side]).text
            if all(isolated(s) for s in texts):
                assert again == result.text
            else:
                assert written <= set(again.replace("\n", " ").split(" ")), "a re-merge lost a word"
    # A side equal to base contributes nothing.
    for side in sides:
        assert merge_texts(base, [Side(base, "base"), side]) == MergeResult(side.text)


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.data())
def test_property_two_sides(data: st.DataObject) -> None:
    lines, terminated = data.draw(bases())
    check(lines, terminated, data.draw(scripts(lines, 2)))


@SETTINGS
@given(st.data())
def test_property_three_sides(data: st.DataObject) -> None:
    lines, terminated = data.draw(bases())
    check(lines, terminated, data.draw(scripts(lines, 3)))


@SETTINGS
@given(
    st.text(st.sampled_from("ab \n数é,"), max_size=30),
    st.lists(st.text(st.sampled_from("ab \n数é,"), max_size=30), min_size=1, max_size=3),
)
def test_property_arbitrary_texts(base: str, texts: list[str]) -> None:
    """Whatever the texts: deterministic, order-free, each side alone or with base is itself."""
    sides = [Side(text, f"k{n % 2}") for n, text in enumerate(texts)]
    result = merge_texts(base, sides)
    assert all(merge_texts(base, list(order)) == result for order in itertools.permutations(sides))
    for side in sides:
        assert merge_texts(base, [side]) == MergeResult(side.text)
        assert merge_texts(base, [Side(base, "b"), side]) == MergeResult(side.text)
        assert merge_texts(base, [side, Side(side.text, "other")]).text == side.text
    for marker in ("<<<<<<<", ">>>>>>>"):
        assert marker not in result.text


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_side_changed_anything(n: int) -> None:
    assert merge_texts("a\n", [Side("a\n", str(i)) for i in range(n)]) == MergeResult("a\n")
