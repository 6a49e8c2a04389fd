"""The unit of work as its callers use it (issue 11): a nested unit passes up what it
touched, so the outer unit's rollback forgets it; a promotion and a live editor's update
are each one unit (one commit, nothing announced or kept when they fail) instead of a
hand-made ``store.transaction`` with ``forget`` in an ``except``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stet.daemon.live.write_path import LiveWritePath
from stet.daemon.notes.changes import Change
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops import promotion
from stet.daemon.ops.notes import OWNER, NoteOperations
from stet.daemon.safety.brake import Brake
from stet.daemon.safety.versions_keeper import VersionsKeeper
from stet.sync.brake import BrakePolicy
from stet.sync.conflict_log import ConflictLog
from stet.sync.errors import StetError
from stet.sync.note_doc import NoteDoc
from stet.sync.permissions import Scopes
from stet.sync.store import VaultStore
from stet.sync.versions import VersionPolicy

from .test_write_unit import counting_commits

MAX = 4096


@dataclass
class Rig:
    store: VaultStore
    service: NotesService
    events: EventBus
    keeper: VersionsKeeper
    heard: list[Change]

    def owner(self) -> NoteOperations:
        return NoteOperations(self.service, self.events, OWNER, extensions=(".md",), max_bytes=MAX,
                              versions=self.keeper)

    def sse(self) -> list[str]:
        return [e.type for e in self.events.replay("v", 0)]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    events = EventBus()
    keeper = VersionsKeeper(service, events, VersionPolicy())
    Brake(service, events, keeper, BrakePolicy())
    RecordsKeeper(service, events)
    heard: list[Change] = []
    service.subscribe(lambda c: heard.append(c) if c.kind != "index" else None)
    yield Rig(store, service, events, keeper, heard)
    store.close()


class Boom(Exception):
    pass


def test_a_nested_unit_passes_up_what_it_touched(rig: Rig) -> None:
    rig.service.write_text("n.md", "one\n", "cli")
    note_id = rig.store.note_at("n.md").id  # type: ignore[union-attr]
    heard = len(rig.heard)
    seen: list[tuple[set[str], list[str | None]]] = []

    def failing_unit() -> None:
        with rig.service.write("cli") as outer:
            with rig.service.write("cli"):
                rig.service.write_text("n.md", "one\ntwo\n", "cli")
            seen.append((set(outer.touched), [c.text_after for c in outer.changes if c.kind == "changed"]))
            raise Boom

    with pytest.raises(Boom):
        failing_unit()
    touched, changes = seen[0]
    assert note_id in touched  # the inner unit's document, now the outer's
    assert changes == ["one\ntwo\n"]
    assert rig.service.read("n.md")[1] == "one\n"  # the cached document was forgotten
    assert rig.heard[heard:] == []


def _refused_rewrite(rig: Rig, content: str) -> int:
    """A refused ``update_note`` of n.md made against its current state: its conflict id."""
    row = rig.store.note_at("n.md")
    assert row is not None
    conflict = ConflictLog(rig.store).record(
        at=1.0, token="agent:a", path="n.md", operation="update_note", code="brake_engaged",
        attempted={"content": content}, current_revision=row.revision, note_id=row.id,
        base_revision=row.revision, base_state=rig.service.doc(row.id).snapshot())
    return conflict.id


def test_a_promotion_is_one_unit_one_commit(rig: Rig) -> None:
    rig.service.write_text("n.md", "# N\nold line\n", "cli")
    conflict_id = _refused_rewrite(rig, "# N\nnew line\n")
    heard, sse = len(rig.heard), len(rig.sse())
    with counting_commits(rig.store) as counter:
        result = promotion.promote(rig.owner(), conflict_id)
    assert counter.commits == 1, counter.statements
    assert result["promoted"] is True
    assert result["beforeVersion"] is not None
    assert rig.service.read("n.md")[1] == "# N\nnew line\n"
    assert [c.kind for c in rig.heard[heard:]] == ["changed"]
    assert "conflict.promoted" in rig.sse()[sse:]


def test_a_failed_promotion_keeps_and_announces_nothing(rig: Rig) -> None:
    rig.service.write_text("n.md", "# N\nold line\n", "cli")
    note_id = rig.store.note_at("n.md").id  # type: ignore[union-attr]
    conflict_id = _refused_rewrite(rig, "# N\n" + "x" * (MAX + 1))  # too large: refused mid-unit
    versions = len(rig.keeper.versions.for_note(note_id))
    heard, sse = len(rig.heard), len(rig.sse())
    with pytest.raises(StetError) as err:
        promotion.promote(rig.owner(), conflict_id)
    assert err.value.code == "too_large"
    assert len(rig.keeper.versions.for_note(note_id)) == versions  # the before-version rolled back
    conflict = ConflictLog(rig.store).get(conflict_id)
    assert conflict is not None
    assert conflict.promoted_at is None
    assert rig.heard[heard:] == []
    assert rig.sse()[sse:] == []
    assert rig.service.read("n.md")[1] == "# N\nold line\n"


def _client_edit(rig: Rig, note_id: str, text: str) -> bytes:
    client = NoteDoc.from_updates([rig.service.doc(note_id).full_update()])
    update = client.set_text(text)
    assert update is not None
    return update


def test_a_live_update_is_one_commit(rig: Rig) -> None:
    rig.service.write_text("n.md", "one\n", "cli")
    note_id = rig.store.note_at("n.md").id  # type: ignore[union-attr]
    live = LiveWritePath(rig.service, rig.events, max_bytes=MAX, clock=lambda: 1.0)
    update = _client_edit(rig, note_id, "one\ntwo\n")
    with counting_commits(rig.store) as counter:
        assert live.apply(note_id, update, source="ui", token="owner", scopes=Scopes.everything())
    assert counter.commits == 1, counter.statements
    assert rig.service.read("n.md")[1] == "one\ntwo\n"


def test_a_refused_live_update_changes_nothing_and_is_recorded(rig: Rig) -> None:
    rig.service.write_text("n.md", "one\ntwo\n", "cli")
    note_id = rig.store.note_at("n.md").id  # type: ignore[union-attr]
    live = LiveWritePath(rig.service, rig.events, max_bytes=MAX, clock=lambda: 1.0)
    update = _client_edit(rig, note_id, "two\n")  # not an append
    heard = len(rig.heard)
    with pytest.raises(StetError) as err:
        live.apply(note_id, update, source="agent:a", token="agent:a", scopes=Scopes(append=("**",)))
    assert err.value.code == "forbidden"
    assert rig.heard[heard:] == []
    assert rig.service.read("n.md")[1] == "one\ntwo\n"
    assert [c.operation for c in ConflictLog(rig.store).list()] == ["live_edit"]
    assert "conflict.refused" in rig.sse()
