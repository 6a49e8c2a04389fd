"""The change log is kept at a cap per path (P13, issue 35): a note edited thousands of
times keeps its newest ``KEEP_PER_PATH`` entries, the other notes' entries are untouched,
and ``recent_changes`` still answers newest first. On a real store, through the real
write path in-process (``NoteOperations`` -> ``NotesService`` -> ``RecordsKeeper``)."""

from __future__ import annotations

from pathlib import Path

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import NoteOperations, Principal
from stet.sync.change_log import KEEP_PER_PATH, PRUNE_STRIDE, ChangeLog
from stet.sync.store import VaultStore


def _rig(tmp_path: Path) -> tuple[NotesService, NoteOperations, RecordsKeeper]:
    service = NotesService("v1", VaultStore(tmp_path / "v.db"))
    events = EventBus()
    records = RecordsKeeper(service, events)
    ops = NoteOperations(service, events, Principal("agent", "bot"), extensions=(".md",), max_bytes=1_000_000)
    return service, ops, records


def _log_rows(service: NotesService, path: str) -> int:
    row = service.store.db.execute("SELECT count(*) FROM change_log WHERE path = ?", (path,)).fetchone()
    return int(row[0])


def test_a_note_edited_past_the_cap_keeps_only_its_newest_entries(tmp_path: Path) -> None:
    service, ops, records = _rig(tmp_path)
    try:
        ops.create_note("quiet.md", "# quiet\n")
        ops.append_note("quiet.md", "one line\n")
        ops.create_note("busy.md", "# busy\n")
        edits = KEEP_PER_PATH * 2 + 37
        for i in range(edits):
            ops.append_note("busy.md", f"entry {i}\n")
        # Between the cap and the cap plus a few of the prune's strides (which edit prunes
        # is picked by its revision), never the whole history.
        assert KEEP_PER_PATH <= _log_rows(service, "busy.md") <= KEEP_PER_PATH + 4 * PRUNE_STRIDE
        newest = ChangeLog(service.store).query(path="busy.md", limit=KEEP_PER_PATH)
        assert len(newest) == KEEP_PER_PATH
        # The newest entry is the last append, and the entries kept are the newest ones.
        last = service.store.note_at("busy.md")
        assert last is not None
        assert newest[0].revision_after == last.revision
        ids = [e.id for e in newest]
        assert ids == sorted(ids, reverse=True)
        # The other note's entries are untouched.
        assert _log_rows(service, "quiet.md") == 2
    finally:
        records.index.close()


def test_two_notes_edited_in_turn_are_both_kept_at_the_cap(tmp_path: Path) -> None:
    service, ops, records = _rig(tmp_path)
    try:
        ops.create_note("a.md", "# a\n")
        ops.create_note("b.md", "# b\n")
        for i in range(KEEP_PER_PATH * 3):
            ops.append_note("a.md", f"a{i}\n")
            ops.append_note("b.md", f"b{i}\n")
        for path in ("a.md", "b.md"):
            assert KEEP_PER_PATH <= _log_rows(service, path) <= KEEP_PER_PATH + 4 * PRUNE_STRIDE
    finally:
        records.index.close()


def test_the_cap_holds_for_a_bulk_of_changes_logged_at_once(tmp_path: Path) -> None:
    """``on_changes`` (a bulk intake, a group of appends) is capped as well."""
    service, ops, records = _rig(tmp_path)
    try:
        ops.create_note("g.md", "# g\n")
        for i in range(KEEP_PER_PATH * 3):
            with service.append_group():
                ops.append_note("g.md", f"a{i}\n")
                ops.append_note("g.md", f"b{i}\n")
        assert KEEP_PER_PATH <= _log_rows(service, "g.md") <= KEEP_PER_PATH + 4 * PRUNE_STRIDE
    finally:
        records.index.close()
