"""The contract every replica of a vault's notes passes (issue 11; automerge-repo's
adapter-test pattern: one suite, run against each adapter).

A *replica* keeps its own copy of notes and exchanges edits with the write path
(``NotesService``): the folder (files), a peer session (another device). Whatever its
medium, it must: take in what its copy made, once; keep edits made on both sides; never
undo, from a stale copy, what was changed since the copy's base; be one unit of work
(one commit) per edit taken in; keep and announce nothing of an edit whose intake
failed, and take it in later; and bring its copy up to date with the notes.

An adapter's test module defines a ``replica`` fixture returning a ``ReplicaAdapter``
and subclasses ``ReplicaContract`` (``class TestFolderReplica(ReplicaContract)``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from stet.daemon.notes.changes import Change
from stet.daemon.notes.service import NotesService
from stet.sync.store import VaultStore
from stet.sync.text_diff import Splice

from ..unit.test_write_unit import counting_commits


class ReplicaAdapter(Protocol):
    """One replica under test, and the write path it exchanges edits with."""

    store: VaultStore
    service: NotesService
    heard: list[Change]  # what after-commit listeners heard (notes only, not the index)

    def make(self, path: str, text: str) -> None:
        """The replica's side makes a new note (not taken in yet)."""

    def edit(self, path: str, text: str) -> None:
        """The replica's side gives its copy this text (not taken in yet)."""

    def remove(self, path: str) -> None:
        """The replica's side deletes its copy (not taken in yet)."""

    def take_in(self) -> None:
        """Take in whatever the replica's side made since it was last in sync."""

    def send_out(self) -> None:
        """Bring the replica's copies up to date with the notes."""

    def copy(self, path: str) -> str | None:
        """The replica's copy of a note (None: it has none)."""

    def failing_store(self) -> AbstractContextManager[None]:
        """While open, the store fails every update it is asked to append."""


def _append(service: NotesService, path: str, text: str, source: str = "agent:other") -> None:
    current = service.read(path)[1]
    service.apply_splices(path, [Splice(len(current), len(current), text)], source)


def _note_text(r: ReplicaAdapter, path: str) -> str | None:
    row = r.store.note_at(path)
    return None if row is None else r.service.read(path)[1]


class ReplicaContract:
    """The shared suite (not collected itself: adapters subclass it as ``Test...``)."""

    def test_a_note_made_in_the_replica_becomes_one_note(self, replica: ReplicaAdapter) -> None:
        replica.make("a.md", "# A\nfirst\n")
        replica.take_in()
        assert _note_text(replica, "a.md") == "# A\nfirst\n"
        assert [(c.kind, c.path) for c in replica.heard] == [("created", "a.md")]
        replica.send_out()
        assert replica.copy("a.md") == "# A\nfirst\n"

    def test_an_edit_is_taken_in_once(self, replica: ReplicaAdapter) -> None:
        replica.make("a.md", "one\n")
        replica.take_in()
        replica.send_out()
        replica.edit("a.md", "one\ntwo\n")
        replica.take_in()
        heard = len(replica.heard)
        replica.take_in()  # nothing new: nothing taken in again
        replica.send_out()
        replica.take_in()
        assert replica.heard[heard:] == []
        assert _note_text(replica, "a.md") == "one\ntwo\n"
        assert replica.copy("a.md") == "one\ntwo\n"

    def test_edits_made_on_both_sides_are_both_kept_once(self, replica: ReplicaAdapter) -> None:
        replica.make("a.md", "# A\n")
        replica.take_in()
        replica.send_out()
        _append(replica.service, "a.md", "from an agent\n")  # not in the copy yet
        replica.edit("a.md", "# A\nfrom the replica\n")  # made on the copy's older state
        replica.take_in()
        text = _note_text(replica, "a.md")
        assert text is not None
        assert text.count("from an agent\n") == 1
        assert text.count("from the replica\n") == 1
        assert text.startswith("# A\n")
        replica.send_out()
        assert replica.copy("a.md") == text

    def test_a_stale_copy_does_not_undo_what_changed_since(self, replica: ReplicaAdapter) -> None:
        replica.make("a.md", "keep\ndrop me\n")
        replica.take_in()
        replica.send_out()
        replica.service.write_text("a.md", "keep\n", "agent:other")  # deleted since the copy's base
        replica.edit("a.md", "keep\ndrop me\nadded\n")  # the copy still has the line, and adds one
        replica.take_in()
        assert _note_text(replica, "a.md") == "keep\nadded\n"  # the deletion holds; the addition too
        replica.send_out()
        assert replica.copy("a.md") == "keep\nadded\n"

    def test_one_edit_taken_in_is_one_commit(self, replica: ReplicaAdapter) -> None:
        replica.make("a.md", "one\n")
        replica.take_in()
        replica.send_out()
        replica.edit("a.md", "one\ntwo\n")
        with counting_commits(replica.store) as counter:
            replica.take_in()
        assert counter.commits == 1, counter.statements

    def test_a_failed_intake_keeps_nothing_and_is_retried(self, replica: ReplicaAdapter) -> None:
        replica.make("a.md", "one\n")
        replica.take_in()
        replica.send_out()
        replica.edit("a.md", "one\ntwo\n")
        heard = len(replica.heard)
        with replica.failing_store():
            replica.take_in()
        assert _note_text(replica, "a.md") == "one\n"  # memory matches the store (forgotten)
        assert replica.heard[heard:] == []
        replica.take_in()
        assert _note_text(replica, "a.md") == "one\ntwo\n"
        assert [c.text_after for c in replica.heard[heard:]] == ["one\ntwo\n"]

    def test_changes_made_elsewhere_reach_the_copy(self, replica: ReplicaAdapter) -> None:
        replica.service.write_text("b.md", "from an agent\n", "agent:other")
        replica.make("a.md", "one\n")
        replica.take_in()
        _append(replica.service, "a.md", "two\n")
        replica.send_out()
        assert replica.copy("b.md") == "from an agent\n"
        assert replica.copy("a.md") == "one\ntwo\n"
        heard = len(replica.heard)
        replica.take_in()  # its own writes are not edits to take in again
        assert replica.heard[heard:] == []

    def test_a_removal_deletes_the_note_once(self, replica: ReplicaAdapter) -> None:
        replica.make("a.md", "one\n")
        replica.take_in()
        replica.send_out()
        heard = len(replica.heard)
        replica.remove("a.md")
        replica.take_in()
        replica.take_in()
        assert replica.store.note_at("a.md") is None
        assert [(c.kind, c.path) for c in replica.heard[heard:]] == [("deleted", "a.md")]
