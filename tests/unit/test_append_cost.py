"""The append path's shortcuts (issue 18, P2) keep its answers: the size limit counted
from the note's known size (no join and encode of the whole note per append), an
insertion-only change classified without comparing texts, and the update with its note
row written inside the caller's unit without a savepoint of their own -- on a real store
and the real write path, in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from stet.daemon.notes.changes import Change, Destruction
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import OWNER, NoteOperations
from stet.sync.errors import StetError
from stet.sync.store import VaultStore
from stet.sync.versions import VersionPolicy

LIMIT = 1_000


def make_ops(tmp_path: Path, max_bytes: int = LIMIT) -> NoteOperations:
    service = NotesService("v1", VaultStore(tmp_path / "v.db"))
    events = EventBus()
    records = RecordsKeeper(service, events)
    return NoteOperations(service, events, OWNER, extensions=(".md",), max_bytes=max_bytes,
                          flush_index=records.flush_index)


def test_an_append_up_to_the_limit_is_taken_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    ops = make_ops(tmp_path)
    ops.create_note("log.md", "é" * 10 + "\n")  # 21 bytes, 11 characters
    ops.append_note("log.md", "x" * (LIMIT - 21 - 3) + "é\n")  # exactly LIMIT bytes
    assert len(ops.read_note("log.md")["content"].encode()) == LIMIT
    with pytest.raises(StetError) as refused:
        ops.append_note("log.md", "y")
    assert refused.value.code == "too_large"
    assert refused.value.details["size"] == LIMIT + 1
    assert len(ops.read_note("log.md")["content"].encode()) == LIMIT  # nothing of it applied


def test_the_newline_an_append_adds_counts_toward_the_limit(tmp_path: Path) -> None:
    ops = make_ops(tmp_path)
    ops.create_note("log.md", "no newline at the end")  # 21 bytes
    with pytest.raises(StetError) as refused:
        ops.append_note("log.md", "z" * (LIMIT - 21))  # + the "\n" put before it: one too many
    assert refused.value.details["size"] == LIMIT + 1
    ops.append_note("log.md", "z" * (LIMIT - 22))
    assert ops.read_note("log.md")["content"] == "no newline at the end\n" + "z" * (LIMIT - 22)


def test_the_size_of_a_note_read_from_the_store_is_right_for_the_first_append(tmp_path: Path) -> None:
    ops = make_ops(tmp_path)
    ops.create_note("log.md", "ü" * 400 + "\n")  # 801 bytes
    fresh = NoteOperations(NotesService("v1", ops.store), EventBus(), OWNER, extensions=(".md",),
                           max_bytes=LIMIT)  # no document in memory: loaded from the updates
    with pytest.raises(StetError):
        fresh.append_note("log.md", "ü" * 100)  # 200 bytes: 1,001
    fresh.append_note("log.md", "ü" * 99)


class CountingPolicy(VersionPolicy):
    calls = 0

    def is_large_deletion(self, before: str, after: str) -> bool:
        CountingPolicy.calls += 1
        return super().is_large_deletion(before, after)


def test_an_append_is_not_compared_with_the_whole_note_but_a_cut_still_is(tmp_path: Path) -> None:
    ops = make_ops(tmp_path, max_bytes=10_000_000)
    ops.service.shrink_policy = CountingPolicy()
    seen: list[Change] = []
    ops.service.subscribe(seen.append)
    ops.create_note("log.md", "a line of the log\n" * 2000)
    CountingPolicy.calls = 0
    for i in range(20):
        ops.append_note("log.md", f"appended {i}\n")
    assert CountingPolicy.calls == 0  # insertions only: nothing of the text can be gone
    assert all(c.destruction is Destruction.NONE for c in seen[1:])
    ops.update_note("log.md", "a line of the log\n" * 10)  # 99.5 % cut
    assert CountingPolicy.calls == 1
    assert seen[-1].destruction is Destruction.SHRINK
    ops.update_note("log.md", "")
    assert seen[-1].destruction is Destruction.EMPTIED


def test_a_keyed_append_opens_one_savepoint_and_a_failed_row_write_keeps_nothing(tmp_path: Path) -> None:
    ops = make_ops(tmp_path)
    ops.create_note("log.md", "# log\n")
    statements: list[str] = []
    ops.store.db.set_trace_callback(statements.append)
    ops.append_note("log.md", "one\n", idempotencyKey="k1")
    ops.store.db.set_trace_callback(None)
    savepoints = [s for s in statements if s.startswith("SAVEPOINT")]
    # BEGIN for the operation's unit and nothing nested: the append adds no savepoint of
    # its own inside the operation's unit (there used to be one, and one more around the
    # update and the note row).
    assert len(savepoints) == 0, statements
    assert sum(s.startswith("COMMIT") for s in statements) == 1
    # The update and the note row still stand or fall together: a row write that fails
    # rolls the update back with it (the unit's savepoint), and the document is forgotten.
    row = ops.store.note_at("log.md")
    assert row is not None
    updates_before = ops.store.update_rows(row.id)
    real_put = ops.store.put_note

    def failing_put(_row: object) -> None:
        raise RuntimeError("disk full")

    ops.store.put_note = failing_put  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError):
            ops.append_note("log.md", "two\n", idempotencyKey="k2")
    finally:
        ops.store.put_note = real_put  # type: ignore[method-assign]
    assert ops.store.update_rows(row.id) == updates_before
    assert ops.read_note("log.md")["content"] == "# log\none\n"
    again = ops.append_note("log.md", "two\n", idempotencyKey="k2")  # the key was not kept either
    assert "replayed" not in again
    assert ops.read_note("log.md")["content"] == "# log\none\ntwo\n"


def test_a_checked_path_is_remembered_and_a_refused_one_refused_every_time() -> None:
    from stet.daemon.ops.notes import check_path

    for _ in range(3):
        assert check_path("logs/Cafe\u0301.md") == "logs/Caf\u00e9.md"  # NFC, remembered or not
        with pytest.raises(StetError) as refused:
            check_path("../outside.md")
        assert refused.value.code == "invalid_path"
        with pytest.raises(StetError):
            check_path(42)
