"""The overlap of a peer merge recorded on every machine (issue 32, the peer case), on real
stores and the real write path of two in-process vaults: the machine that did not compute
the merge -- its peer did, and sent the result -- lists the same overlap, with each side's
text and who wrote it, announces it and keeps each side as a version; once, also when both
computed it at once, and not again on a second sync or after a restart."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pycrdt

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import OWNER, NoteOperations
from stet.daemon.safety.versions_keeper import VersionsKeeper
from stet.sync.live_updates import preview
from stet.sync.peer_merge import MARKS_NAME, mark_ids
from stet.sync.store import VaultStore
from stet.sync.versions import VersionPolicy

NOTE = "# Limits\n\nrate_limit = 50 rpm\nStatus: draft\n"
HUNDRED = NOTE.replace("50", "100").replace("draft", "done")
SIXTY = NOTE.replace("50", "60").replace("draft", "done")


@dataclass
class Machine:
    name: str
    service: NotesService
    events: EventBus
    ops: NoteOperations

    @property
    def note_id(self) -> str:
        return self.service.note_at("cfg.md").id

    def catch_up_for(self, other: Machine) -> tuple[str, bytes, str, str, bytes, str]:
        """What this machine sends ``other`` at a sync: what it lacks, with our snapshot and
        who last wrote our text (``PeerSession._on_note_svs``)."""
        doc = self.service.doc(self.note_id)
        theirs = other.service.doc(self.note_id).state_vector()
        return (self.note_id, doc.update_since(theirs), f"peer:{self.name}", self.name, doc.snapshot(),
                f"disk on {self.name}")

    def merged(self) -> list[dict[str, object]]:
        return [c for c in self.ops.list_conflicts()["conflicts"] if c["code"] == "merged"]

    def announced(self) -> list[dict[str, object]]:
        return [e.data for e in self.events.replay("v", 0) if e.type == "note.merged"]


def _machine(tmp_path: Path, name: str, db: str | None = None) -> Machine:
    service = NotesService("v", VaultStore(tmp_path / (db or f"{name}.db")), device_id=name)
    events = EventBus()
    records = RecordsKeeper(service, events)
    versions = VersionsKeeper(service, events, VersionPolicy())
    ops = NoteOperations(service, events, OWNER, extensions=(".md",), max_bytes=1_000_000,
                         search=records.index, versions=versions)
    return Machine(name, service, events, ops)


def _pair(tmp_path: Path) -> tuple[Machine, Machine]:
    """X and Y holding one note, then each saving another value on disk while apart."""
    x, y = _machine(tmp_path, "X"), _machine(tmp_path, "Y")
    x.service.write_text("cfg.md", NOTE, "disk")
    y.service.apply_remote_index(x.service.index.full_update(), "X")
    y.service.apply_remote_update(x.note_id, x.service.doc(x.note_id).full_update(), "peer:X", "X")
    assert y.service.text_of(y.note_id) == NOTE
    x.service.write_text("cfg.md", HUNDRED, "disk")
    y.service.write_text("cfg.md", SIXTY, "disk")
    return x, y


def _check_recorded(m: Machine) -> None:
    [conflict] = m.merged()
    sides = {s["source"]: s["text"] for s in conflict["attempted"]["sides"]}  # type: ignore[index]
    assert sides == {"disk on X": HUNDRED, "disk on Y": SIXTY}
    [event] = m.announced()
    assert event["conflict"] == conflict["id"]
    assert sorted(event["sources"]) == ["disk on X", "disk on Y"]  # type: ignore[arg-type]
    kept = [v for v in m.ops.history.list_versions("cfg.md")["versions"] if v["kind"] == "concurrent"]
    assert {v["source"] for v in kept} == {"disk on X", "disk on Y"}
    assert {m.ops.history.read_version("cfg.md", v["id"])["content"] for v in kept} == {HUNDRED, SIXTY}


def _check_text(*machines: Machine) -> str:
    texts = {m.service.text_of(m.note_id) for m in machines}
    assert len(texts) == 1, texts
    text = texts.pop()
    for line in ("rate_limit = 100 rpm\n", "rate_limit = 60 rpm\n", "Status: done\n"):
        assert text.count(line) == 1, text
    for mixed in ("1060", "6010", "doneone"):
        assert mixed not in text, text
    return text


def test_the_machine_that_gets_the_merge_made_elsewhere_records_the_overlap_too(tmp_path: Path) -> None:
    x, y = _pair(tmp_path)
    x.service.apply_remote_update(*y.catch_up_for(x))  # X merges (Y's state had none of X's)
    assert len(x.merged()) == 1
    # Y's catch-up from X is built after X merged: it holds all of Y's, Y computes nothing.
    y.service.apply_remote_update(*x.catch_up_for(y))
    text = _check_text(x, y)
    assert [len(m.merged()) for m in (x, y)] == [1, 1]  # (main: [1, 0], only where computed)
    for m in (x, y):
        _check_recorded(m)
    # A second sync, both ways, the live way and as a catch-up: nothing new anywhere.
    for _ in range(2):
        x.service.apply_remote_update(*y.catch_up_for(x))
        y.service.apply_remote_update(*x.catch_up_for(y))
        x.service.apply_remote_update(y.note_id, y.service.doc(y.note_id).full_update(), "peer:Y", "Y")
    assert _check_text(x, y) == text
    for m in (x, y):
        _check_recorded(m)


def test_both_machines_merging_at_once_record_it_once_each_and_not_again_after_a_restart(
        tmp_path: Path) -> None:
    x, y = _pair(tmp_path)
    to_x, to_y = y.catch_up_for(x), x.catch_up_for(y)  # built before either merged
    x.service.apply_remote_update(*to_x)
    y.service.apply_remote_update(*to_y)
    # The repairs cross: each receives the other's (the same items as its own).
    x_now, y_now = x.service.doc(x.note_id).full_update(), y.service.doc(y.note_id).full_update()
    x.service.apply_remote_update(x.note_id, y_now, "peer:Y", "Y")
    y.service.apply_remote_update(y.note_id, x_now, "peer:X", "X")
    text = _check_text(x, y)
    for m in (x, y):
        _check_recorded(m)
    # A restart: the store loaded again, a sync: still one record, nothing announced anew.
    x2 = _machine(tmp_path, "X", "X.db")
    x2.service.apply_remote_update(*y.catch_up_for(x2))
    assert x2.service.text_of(x2.note_id) == text
    assert len(x2.merged()) == 1
    assert x2.announced() == []


def test_the_same_change_on_both_machines_records_nothing(tmp_path: Path) -> None:
    x, y = _machine(tmp_path, "X"), _machine(tmp_path, "Y")
    x.service.write_text("cfg.md", NOTE, "disk")
    y.service.apply_remote_index(x.service.index.full_update(), "X")
    y.service.apply_remote_update(x.note_id, x.service.doc(x.note_id).full_update(), "peer:X", "X")
    x.service.write_text("cfg.md", HUNDRED, "disk")
    y.service.write_text("cfg.md", HUNDRED, "disk")
    to_x, to_y = y.catch_up_for(x), x.catch_up_for(y)
    x.service.apply_remote_update(*to_x)
    y.service.apply_remote_update(*to_y)
    y.service.apply_remote_update(*x.catch_up_for(y))
    assert x.service.text_of(x.note_id) == y.service.text_of(y.note_id) == HUNDRED
    for m in (x, y):
        assert m.merged() == []
        assert m.announced() == []


def test_a_live_editor_may_edit_a_note_holding_a_merge_mark_but_never_write_marks(tmp_path: Path) -> None:
    x, y = _pair(tmp_path)
    x.service.apply_remote_update(*y.catch_up_for(x))
    state = x.service.doc(x.note_id).full_update()
    editor: pycrdt.Doc[Any] = pycrdt.Doc()
    editor.apply_update(state)
    before = editor.get_state()
    text = editor.get("content", type=pycrdt.Text)
    text += "typed live\n"
    typed = editor.get_update(before)
    seen = preview(state, typed)
    assert seen.not_text is None
    assert seen.text.endswith("typed live\n")
    before = editor.get_state()
    editor.get(MARKS_NAME, type=pycrdt.Map)["m/forged"] = "[]"
    assert preview(state, editor.get_update(before)).not_text == "Stet's merge records"


def test_a_rewrite_merged_here_against_a_peers_change_is_recorded_by_the_peer_too(tmp_path: Path) -> None:
    """Y merges alone (an agent's ``baseRevision`` rewrite -- or a file edit -- from before X's
    change, which came as a live update): X takes the result in as an ordinary update, and
    lists the overlap too, with both sides as Y had them."""
    x, y = _machine(tmp_path, "X"), _machine(tmp_path, "Y")
    x.service.write_text("cfg.md", NOTE, "disk")
    y.service.apply_remote_index(x.service.index.full_update(), "X")
    y.service.apply_remote_update(x.note_id, x.service.doc(x.note_id).full_update(), "peer:X", "X")
    base = y.ops.read_note("cfg.md")["revision"]
    before = x.service.doc(x.note_id).state_vector()
    x.service.write_text("cfg.md", HUNDRED, "disk")
    y.service.apply_remote_update(x.note_id, x.service.doc(x.note_id).update_since(before), "disk", "X")
    y.ops.update_note("cfg.md", SIXTY, baseRevision=base)
    text = y.service.text_of(y.note_id)
    x.service.apply_remote_update(x.note_id, y.service.doc(y.note_id).update_since(
        x.service.doc(x.note_id).state_vector()), "cli", "Y")
    assert _check_text(x, y) == text
    assert [len(m.merged()) for m in (x, y)] == [1, 1]
    [conflict] = x.merged()
    sides = {s["by"] if "by" in s else s["source"]: s["text"]  # type: ignore[index]
             for s in conflict["attempted"]["sides"]}  # type: ignore[index]
    assert sides == {"disk on X": HUNDRED, "cli on Y": SIXTY}
    [event] = x.announced()
    assert event["conflict"] == conflict["id"]


def test_a_damaged_mark_from_a_peer_is_not_recorded_and_the_update_still_lands(tmp_path: Path) -> None:
    x, y = _pair(tmp_path)
    doc = x.service.doc(x.note_id)
    before = doc.state_vector()
    with doc.doc.transaction():
        doc.doc.get(MARKS_NAME, type=pycrdt.Map)["m/bad"] = "not a mark"
    update = doc.update_since(before)
    y.service.apply_remote_update(y.note_id, update, "peer:X", "X")
    assert y.service.text_of(y.note_id) == SIXTY
    assert y.merged() == []
    assert mark_ids(y.service.doc(y.note_id)) == {"bad"}  # taken in (and sent on), not recorded
