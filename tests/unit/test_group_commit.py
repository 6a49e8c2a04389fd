"""Group commit (daemon/notes/group_commit.py) on a real store and the real write path
in-process: the appends of one loop turn share one commit, each answered after it; a
retried key is answered from its record and applied once; an append failing inside the
group is rolled back alone (its savepoint) while the others commit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.group_commit import GroupCommit
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import OWNER, NoteOperations
from stet.sync import idempotency
from stet.sync.errors import StetError
from stet.sync.store import VaultStore


@pytest.fixture
def ops(tmp_path: Path) -> NoteOperations:
    service = NotesService("v1", VaultStore(tmp_path / "v.db"))
    events = EventBus()
    records = RecordsKeeper(service, events)
    ops = NoteOperations(service, events, OWNER, extensions=(".md",), max_bytes=1_000_000,
                         search=records.index)
    ops.create_note("log.md", "# log\n")
    return ops


def appends(ops: NoteOperations, group: GroupCommit, lines: list[tuple[str, str]]) -> list[Any]:
    """All at once, in one loop turn; each answer or the error it got."""

    async def main() -> list[Any]:
        return await asyncio.gather(*(group.run(lambda text=text, key=key: ops.append_note(
            "log.md", text, idempotencyKey=key)) for text, key in lines), return_exceptions=True)

    return asyncio.run(main())


def test_appends_of_one_turn_share_one_commit(ops: NoteOperations) -> None:
    group = GroupCommit(ops.service)
    lines = [(f"line {i}\n", f"key-{i}") for i in range(20)]
    before = ops.store.commits
    answers = appends(ops, group, lines)
    assert ops.store.commits - before == 1
    assert group.groups == 1
    assert all(isinstance(a, dict) and a["path"] == "log.md" for a in answers)
    text = ops.read_note("log.md")["content"]
    assert all(text.count(line) == 1 for line, _ in lines)
    # each answer names the revision its append made: all different, the last is the note's
    assert len({a["revision"] for a in answers}) == 20
    assert answers[-1]["revision"] == ops.read_note("log.md")["revision"]
    # what was acknowledged is in the store: a fresh service rebuilds it
    again = NotesService("v1", ops.store)
    assert again.doc(ops.store.note_at("log.md").id).text == text  # type: ignore[union-attr]


def test_a_group_is_bounded_and_the_rest_follow_in_the_next(ops: NoteOperations) -> None:
    group = GroupCommit(ops.service, max_group=8)
    before = ops.store.commits
    answers = appends(ops, group, [(f"line {i}\n", f"key-{i}") for i in range(20)])
    assert all(isinstance(a, dict) for a in answers)
    assert ops.store.commits - before == group.groups == 3


def test_a_retried_key_is_answered_from_its_record_exactly_once(ops: NoteOperations) -> None:
    group = GroupCommit(ops.service)
    first = appends(ops, group, [("once\n", "k1"), ("other\n", "k2"), ("once\n", "k1")])
    assert first[0]["revision"] == first[2]["revision"]
    assert first[2]["replayed"] is True
    assert "replayed" not in first[0]
    later = appends(ops, group, [("once\n", "k1"), ("third\n", "k3")])
    assert later[0]["replayed"] is True
    assert later[0]["revision"] == first[0]["revision"]
    text = ops.read_note("log.md")["content"]
    assert text.count("once\n") == 1
    assert text.count("other\n") == 1
    assert text.count("third\n") == 1
    reused = appends(ops, group, [("not the same\n", "k1")])
    assert isinstance(reused[0], StetError)
    assert reused[0].code == "idempotency_key_reused"


def test_a_failing_append_does_not_fail_or_lose_the_others(ops: NoteOperations,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    save = idempotency.IdempotencyKeys.save

    def failing_save(self: Any, token: str, key: str, *args: Any) -> None:
        if key == "bad":  # after its append's store writes, inside its unit
            raise OSError("simulated failure while saving the key")
        save(self, token, key, *args)

    monkeypatch.setattr(idempotency.IdempotencyKeys, "save", failing_save)
    group = GroupCommit(ops.service)
    before = ops.store.commits
    answers = appends(ops, group, [("a\n", "ka"), ("doomed\n", "bad"), ("b\n", "kb"),
                                   ("x" * 2_000_000, "big"), ("c\n", "kc")])
    assert ops.store.commits - before == 1
    assert isinstance(answers[1], OSError)
    assert isinstance(answers[3], StetError)
    assert answers[3].code == "too_large"
    assert [isinstance(answers[i], dict) for i in (0, 2, 4)] == [True, True, True]
    text = ops.read_note("log.md")["content"]
    assert text == "# log\na\nb\nc\n"
    ops.service.forget(ops.store.note_at("log.md").id)  # type: ignore[union-attr]
    assert ops.read_note("log.md")["content"] == text  # the store holds the same
    monkeypatch.setattr(idempotency.IdempotencyKeys, "save", save)
    retried = appends(ops, group, [("doomed\n", "bad"), ("a\n", "ka")])
    assert "replayed" not in retried[0]
    assert retried[1]["replayed"] is True
    assert ops.read_note("log.md")["content"] == "# log\na\nb\nc\ndoomed\n"


def test_a_failed_commit_fails_every_append_of_the_group(ops: NoteOperations,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    group = GroupCommit(ops.service)
    real_execute = ops.store.db.execute
    calls = {"n": 0}

    class FailingCommit:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def execute(self, sql: str, *args: Any) -> Any:
            if sql == "COMMIT":
                calls["n"] += 1
                raise OSError("disk gone")
            return real_execute(sql, *args)

    real = ops.store.db
    monkeypatch.setattr(ops.store, "_db", FailingCommit())
    answers = appends(ops, group, [("a\n", "ka"), ("b\n", "kb")])
    monkeypatch.setattr(ops.store, "_db", real)
    assert calls["n"] == 1
    assert all(isinstance(a, OSError) for a in answers)
    assert ops.read_note("log.md")["content"] == "# log\n"
    again = appends(ops, group, [("a\n", "ka")])
    assert "replayed" not in again[0]
    assert ops.read_note("log.md")["content"] == "# log\na\n"


def test_an_append_alone_is_its_own_unit_and_commit(ops: NoteOperations) -> None:
    group = GroupCommit(ops.service)

    def traced(run: Any) -> tuple[Any, list[str]]:
        statements: list[str] = []
        ops.store.db.set_trace_callback(statements.append)
        try:
            return run(), statements
        finally:
            ops.store.db.set_trace_callback(None)

    _, direct = traced(lambda: ops.append_note("log.md", "direct\n", idempotencyKey="k-direct"))
    before = ops.store.commits
    answers, grouped = traced(lambda: appends(ops, group, [("alone\n", "k-alone")]))
    assert isinstance(answers[0], dict)
    assert ops.store.commits - before == 1
    # no group unit around it: the same BEGIN and SAVEPOINTs as the append made directly
    assert [s.split()[0] for s in grouped] == [s.split()[0] for s in direct]
    failed = appends(ops, group, [("x" * 2_000_000, "k-big")])
    assert isinstance(failed[0], StetError)
    assert failed[0].code == "too_large"
    assert ops.read_note("log.md")["content"] == "# log\ndirect\nalone\n"
