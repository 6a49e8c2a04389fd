"""Merges a person can read (issue 32), on a real store and the real write path in-process:
two writers changing the same words leave both lines whole, the same change lands once,
and an overlap is listed in ``stet conflicts``, announced, and each side kept as a version.
The texts are checked whole: no interleaved characters, nothing doubled."""

from __future__ import annotations

from pathlib import Path

import pytest

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import OWNER, NoteOperations, Principal
from stet.daemon.safety.versions_keeper import VersionsKeeper
from stet.sync.versions import VersionPolicy

NOTE = "rate_limit = 50 rpm\nStatus: draft\n"


@pytest.fixture
def ops(tmp_path: Path) -> NoteOperations:
    from stet.sync.store import VaultStore

    service = NotesService("v1", VaultStore(tmp_path / "v.db"))
    events = EventBus()
    records = RecordsKeeper(service, events)
    keeper = VersionsKeeper(service, events, VersionPolicy())
    return NoteOperations(service, events, OWNER, extensions=(".md",), max_bytes=1_000_000,
                          search=records.index, versions=keeper)


def _as(ops: NoteOperations, name: str) -> NoteOperations:
    """The same vault's operations as the agent ``name``."""
    return NoteOperations(ops.service, ops.events, Principal("agent", name), extensions=(".md",),
                          max_bytes=1_000_000, search=ops.search, versions=ops.versions)


def _text(ops: NoteOperations, path: str = "cfg.md") -> str:
    content = ops.read_note(path)["content"]
    assert isinstance(content, str)
    return content


def test_two_agents_making_the_same_change_from_one_base_land_it_once(ops: NoteOperations) -> None:
    ops.create_note("cfg.md", NOTE)
    base = ops.read_note("cfg.md")["revision"]
    new = "rate_limit = 100 rpm\nStatus: done\n"
    _as(ops, "a").update_note("cfg.md", new, baseRevision=base)
    second = _as(ops, "b").update_note("cfg.md", new, baseRevision=base)
    assert _text(ops) == new
    assert second["changed"] is False
    assert ops.list_conflicts()["conflicts"] == []


def test_two_agents_with_different_values_keep_both_lines_whole(ops: NoteOperations) -> None:
    ops.create_note("cfg.md", NOTE)
    base = ops.read_note("cfg.md")["revision"]
    _as(ops, "a").update_note("cfg.md", "rate_limit = 100 rpm\nStatus: done\n", baseRevision=base)
    _as(ops, "b").update_note("cfg.md", "rate_limit = 60 rpm\nStatus: done\n", baseRevision=base)
    assert _text(ops) == "rate_limit = 100 rpm\nrate_limit = 60 rpm\nStatus: done\n"
    [conflict] = ops.list_conflicts()["conflicts"]
    assert conflict["code"] == "merged"
    assert conflict["path"] == "cfg.md"
    texts = [s["text"] for s in conflict["attempted"]["sides"]]
    assert texts == ["rate_limit = 100 rpm\nStatus: done\n", "rate_limit = 60 rpm\nStatus: done\n"]
    kinds = [(v["kind"]) for v in ops.history.list_versions("cfg.md")["versions"]]
    assert kinds.count("concurrent") == 2


def test_changes_to_different_words_of_one_line_still_merge_inside_it(ops: NoteOperations) -> None:
    ops.create_note("fox.md", "the quick brown fox\n")
    base = ops.read_note("fox.md")["revision"]
    ops.update_note("fox.md", "the slow brown fox\n", baseRevision=base)
    ops.update_note("fox.md", "the quick brown cat\n", baseRevision=base)
    assert _text(ops, "fox.md") == "the slow brown cat\n"
    assert ops.list_conflicts()["conflicts"] == []


def test_a_stale_expected_revision_whose_content_is_already_there_is_an_unchanged_success(
        ops: NoteOperations) -> None:
    ops.create_note("cfg.md", NOTE)
    read = ops.read_note("cfg.md")["revision"]
    new = "rate_limit = 100 rpm\nStatus: done\n"
    won = _as(ops, "a").update_note("cfg.md", new, expectedRevision=read)
    again = _as(ops, "b").update_note("cfg.md", new, expectedRevision=read)
    assert again == {"path": "cfg.md", "revision": won["revision"], "changed": False, "unchanged": True}
    edited = _as(ops, "c").edit_note("cfg.md", [{"oldText": "50 rpm", "newText": "100 rpm"},
                                                {"oldText": "draft", "newText": "done"}],
                                     expectedRevision=read)
    assert edited["changed"] is False
    assert edited["unchanged"] is True
    assert _text(ops) == new
    assert ops.list_conflicts()["conflicts"] == []


def test_a_revisionless_rewrite_from_a_token_that_read_keeps_what_others_appended(
        ops: NoteOperations) -> None:
    ops.create_note("log.md", "# Log\nfirst\n")
    naive = _as(ops, "naive")
    read = naive.read_note("log.md")
    _as(ops, "other").append_note("log.md", "appended by other\n")
    answer = naive.update_note("log.md", read["content"].replace("first", "FIRST"))
    assert _text(ops, "log.md") == "# Log\nFIRST\nappended by other\n"
    assert answer["mergedFrom"] == read["revision"]
    forced = naive.update_note("log.md", "# Log\nreplaced\n", force=True)
    assert forced["changed"] is True
    assert "mergedFrom" not in forced
    assert _text(ops, "log.md") == "# Log\nreplaced\n"


def test_a_person_on_disk_and_an_agent_from_an_older_text_keep_both_lines(ops: NoteOperations) -> None:
    ops.create_note("cfg.md", NOTE)
    base = _as(ops, "a").read_note("cfg.md")["revision"]
    ops.service.write_text("cfg.md", NOTE.replace("50", "75"), "disk")  # the person's save
    _as(ops, "a").update_note("cfg.md", NOTE.replace("50", "80"), baseRevision=base)
    assert _text(ops) == "rate_limit = 75 rpm\nrate_limit = 80 rpm\nStatus: draft\n"
