"""The structure of a note (sync/markdown_structure.py): headings and sections, tasks,
frontmatter and links, with non-ASCII names, code fences and CRLF. Each edit is checked on
the text a person reads afterwards, whole."""

from __future__ import annotations

import pytest

from stet.sync import markdown_structure as md
from stet.sync.errors import StetError
from stet.sync.text_diff import Splice, apply_splices

NOTE = """---
title: 计划
tags: [projet, план]
owner: Léa
---
# Проект Альфа
Вступление.

## Решения
- мы выбрали SQLite

## المهام
- [ ] اشتري الحليب
- [x] call Bob 📞
- [ ] buy milk

## Notes
```python
# not a heading, and [[not a link]]
```
See [[Решения#Итог|итог]], [[folder/日本語ノート]], ![[diagram.png]] and [the plan](../plans/the%20plan.md).
`[[inline code]]` is not a link; [site](https://example.org/x.md) is not a note.
"""


def edited(text: str, splices: list[Splice]) -> str:
    return apply_splices(text, splices)


def test_headings_skip_code_and_frontmatter_and_keep_their_sections() -> None:
    found = [(h.level, h.text, h.line) for h in md.headings(NOTE)]
    assert found == [(1, "Проект Альфа", 6), (2, "Решения", 9), (2, "المهام", 12), (2, "Notes", 17)]
    top = md.find_section(NOTE, "Проект Альфа")
    assert NOTE[top.body_start : top.end].endswith("not a note.\n")  # a level-1 section holds the rest
    decisions = md.find_section(NOTE, "## Решения")
    assert NOTE[decisions.body_start : decisions.end] == "- мы выбрали SQLite\n\n"


def test_a_section_append_lands_at_its_end_before_the_next_heading() -> None:
    out = edited(NOTE, md.plan_section_edit(NOTE, "Решения", "append", "- и WAL"))
    assert "## Решения\n- мы выбрали SQLite\n- и WAL\n\n## المهام\n" in out
    assert out.replace("\n- и WAL", "", 1) == NOTE  # nothing else changed


def test_prepend_replace_and_insert_after_keep_the_heading_and_the_rest() -> None:
    out = edited(NOTE, md.plan_section_edit(NOTE, "المهام", "prepend", "أولاً:"))
    assert "## المهام\nأولاً:\n- [ ] اشتري الحليب\n" in out
    out = edited(NOTE, md.plan_section_edit(NOTE, "Решения", "replace", "- PostgreSQL после всего"))
    assert "## Решения\n- PostgreSQL после всего\n\n## المهام\n" in out
    assert "SQLite" not in out
    assert out.count("## ") == NOTE.count("## ")


def test_a_heading_on_the_last_line_without_a_line_break() -> None:
    text = "# A\nbody\n## 中文"
    assert (
        edited(text, md.plan_section_edit(text, "中文", "append", "新的一行"))
        == "# A\nbody\n## 中文\n新的一行\n"
    )
    assert edited(text, md.plan_section_edit(text, "中文", "replace", "x")) == "# A\nbody\n## 中文\nx\n"


def test_crlf_notes_get_crlf_lines() -> None:
    text = "# A\r\none\r\n\r\n# B\r\n"
    assert (
        edited(text, md.plan_section_edit(text, "A", "append", "two")) == "# A\r\none\r\ntwo\r\n\r\n# B\r\n"
    )


def test_a_missing_heading_and_an_ambiguous_one_are_refused_with_what_to_do() -> None:
    with pytest.raises(StetError) as missing:
        md.plan_section_edit(NOTE, "Итоги", "append", "x")
    assert missing.value.code == "anchor_not_found"
    text = "# Project A\n## Decisions\none\n# Project B\n## Decisions\ntwo\n"
    with pytest.raises(StetError) as ambiguous:
        md.find_section(text, "Decisions")
    assert ambiguous.value.code == "anchor_ambiguous"
    assert ambiguous.value.details["count"] == 2
    out = edited(text, md.plan_section_edit(text, "Project B > Decisions", "append", "three"))
    assert out == "# Project A\n## Decisions\none\n# Project B\n## Decisions\ntwo\nthree\n"
    with pytest.raises(StetError) as bad_mode:
        md.plan_section_edit(text, "Project A", "sideways", "x")
    assert bad_mode.value.code == "bad_request"


def test_a_task_is_ticked_by_its_text_and_ticking_twice_changes_nothing() -> None:
    out = edited(NOTE, md.plan_task_tick(NOTE, "buy milk", True))
    assert "- [x] buy milk\n" in out
    assert "- [ ] اشتري الحليب\n" in out  # the other open task kept
    assert md.plan_task_tick(out, "buy milk", True) == []
    back = edited(out, md.plan_task_tick(out, "call Bob 📞", False))
    assert "- [ ] call Bob 📞\n" in back
    assert edited(NOTE, md.plan_task_tick(NOTE, "- [ ] اشتري الحليب", True)).count("- [x]") == 2


def test_a_task_that_matches_several_is_ambiguous_and_code_blocks_hold_no_tasks() -> None:
    text = "- [ ] write the plan\n- [ ] write the plan down\n```\n- [ ] in code\n```\n"
    assert edited(text, md.plan_task_tick(text, "write the plan", True)).startswith(
        "- [x] write the plan\n- [ ]"
    )
    with pytest.raises(StetError) as ambiguous:
        md.plan_task_tick(text, "write", True)
    assert (ambiguous.value.code, ambiguous.value.details["count"]) == ("anchor_ambiguous", 2)
    with pytest.raises(StetError) as missing:
        md.plan_task_tick(text, "in code", True)
    assert missing.value.code == "anchor_not_found"


def test_frontmatter_is_read_and_edited_line_by_line() -> None:
    assert md.frontmatter(NOTE) == {"title": "计划", "tags": ["projet", "план"], "owner": "Léa"}
    out = edited(
        NOTE,
        md.plan_frontmatter_edit(
            NOTE,
            {"status": "done", "title": "計画 2"},
            delete=["owner"],
            add_tags=["决策"],
            remove_tags=["projet"],
        ),
    )
    assert out.startswith("---\ntitle: 計画 2\ntags: [план, 决策]\nstatus: done\n---\n# Проект Альфа\n")
    assert out.split("---\n", 2)[2] == NOTE.split("---\n", 2)[2]  # the note below untouched
    assert md.frontmatter(out) == {"title": "計画 2", "tags": ["план", "决策"], "status": "done"}


def test_a_note_without_frontmatter_gets_a_block_and_bad_names_are_refused() -> None:
    assert (
        edited("# Hi\n", md.plan_frontmatter_edit("# Hi\n", {"n": 3, "ok": True}))
        == "---\nn: 3\nok: true\n---\n# Hi\n"
    )
    with pytest.raises(StetError):
        md.plan_frontmatter_edit("# Hi\n", {"bad:name": 1})
    with pytest.raises(StetError):
        md.plan_frontmatter_edit("# Hi\n", add_tags=["a,b"])
    with pytest.raises(StetError) as broken:
        md.frontmatter("---\n: : [\n---\n")
    assert broken.value.code == "bad_request"


def test_a_string_that_yaml_would_read_otherwise_is_quoted() -> None:
    out = edited("# x\n", md.plan_frontmatter_edit("# x\n", {"when": "yes", "count": "007"}))
    assert md.frontmatter(out) == {"when": "yes", "count": "007"}


def test_links_outside_code_with_headings_aliases_and_relative_paths() -> None:
    found = [(link.target, link.kind, link.heading, link.alias, link.embed) for link in md.links(NOTE)]
    assert found == [
        ("Решения", "wikilink", "Итог", "итог", False),
        ("folder/日本語ノート", "wikilink", None, None, False),
        ("diagram.png", "wikilink", None, None, True),
        ("../plans/the plan.md", "markdown", None, "the plan", False),
    ]
    markdown = md.links(NOTE)[3]
    assert md.link_keys("notes/idea.md", markdown) == ["plans/the plan"]


def test_links_resolve_by_path_then_by_name_anywhere() -> None:
    by_key, by_name = md.key_maps(
        ["Решения.md", "deep/folder/日本語ノート.md", "a/b.md", "c/b.md", "b/x/b.md"]
    )
    assert md.resolve("решения", by_key, by_name) == "Решения.md"
    assert md.resolve("folder/日本語ノート", by_key, by_name) == "deep/folder/日本語ノート.md"
    assert md.resolve("b", by_key, by_name) == "a/b.md"  # the shortest path, then the first
    assert md.resolve("c/b", by_key, by_name) == "c/b.md"
    assert md.resolve("nowhere", by_key, by_name) is None
