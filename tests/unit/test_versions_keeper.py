"""Versions, restore and the burst brake driven in-process on a real store, with an
injected clock (SPEC §5): no daemon, no waiting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pycrdt
import pytest

from stet.daemon.folder.bridge import FileBridge
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.service import NotesService
from stet.daemon.safety.brake import Brake
from stet.daemon.safety.versions_keeper import VersionsKeeper
from stet.sync.brake import BrakePolicy
from stet.sync.errors import StetError
from stet.sync.note_doc import NoteDoc
from stet.sync.store import VaultStore
from stet.sync.version_store import Version, VersionInfo
from stet.sync.versions import DAY_S, VersionPolicy

EXT = (".md", ".markdown", ".txt")
T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> float:
        self.t += seconds
        return self.t


@dataclass
class Rig:
    root: Path
    store: VaultStore
    service: NotesService
    bridge: FileBridge
    keeper: VersionsKeeper
    brake: Brake
    events: EventBus
    clock: Clock

    def versions(self, path: str, kind: str | None = None) -> list[VersionInfo]:
        row = self.store.note_at(path) or next(r for r in self.store.deleted_notes() if r.path == path)
        return [v for v in self.keeper.versions.for_note(row.id) if kind is None or v.kind == kind]

    def version(self, info: VersionInfo) -> Version:
        v = self.keeper.versions.get(info.id)
        assert v is not None
        return v

    def text(self, path: str) -> str:
        return self.service.read(path)[1]

    def event_types(self) -> list[str]:
        return [e.type for e in self.events.replay("v", 0)]


def make_rig(tmp: Path, *, versions: VersionPolicy | None = None, brake: BrakePolicy | None = None) -> Rig:
    root = tmp / "vault"
    root.mkdir(exist_ok=True)
    store = VaultStore(tmp / "v.db")
    clock = Clock()
    service = NotesService("v", store, clock=clock)
    bridge = FileBridge(root, service, extensions=EXT, max_bytes=1 << 20)
    events = EventBus()
    keeper = VersionsKeeper(service, events, versions or VersionPolicy())
    brk = Brake(service, events, keeper, brake or BrakePolicy())
    return Rig(root, store, service, bridge, keeper, brk, events, clock)


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return make_rig(tmp_path)


FORTY_LINES = "".join(f"line {i:02d} of a note worth keeping\n" for i in range(40))
FOUR_LINES = "".join(f"line {i:02d} of a note worth keeping\n" for i in range(4))


def _peer_rewrite(rig: Rig, path: str, text: str) -> None:
    row = rig.store.note_at(path)
    assert row is not None
    peer = NoteDoc(pycrdt.Doc())
    peer.apply_update(rig.service.doc(row.id).full_update())
    update = peer.set_text(text)
    assert update is not None
    rig.service.apply_remote_update(row.id, update, "peer:DEVICE", "DEVICE")


def _disk_rewrite(rig: Rig, path: str, text: str) -> None:
    (rig.root / path).write_text(text, encoding="utf-8")
    assert rig.bridge.ingest_path(path) is False


WRITERS: dict[str, Callable[[Rig, str, str], None]] = {
    "disk": _disk_rewrite,
    "cli": lambda rig, path, text: rig.service.write_text(path, text, "cli"),
    "agent:bot": lambda rig, path, text: rig.service.write_text(path, text, "agent:bot"),
    "peer:DEVICE": _peer_rewrite,
    "restore": lambda rig, path, text: rig.service.write_text(path, text, "restore"),
}


# -- before-large-deletion, for every source (SPEC §5.1) ---------------------------------------


@pytest.mark.parametrize("source", list(WRITERS))
def test_a_large_cut_saves_the_text_before_with_the_source_that_made_it(rig: Rig, source: str) -> None:
    _disk_rewrite(rig, "n.md", FORTY_LINES)
    WRITERS[source](rig, "n.md", FOUR_LINES)
    assert rig.text("n.md") == FOUR_LINES
    (info,) = rig.versions("n.md")
    assert (info.kind, info.source, info.chars) == ("before-large-deletion", source, len(FORTY_LINES))
    assert rig.version(info).text == FORTY_LINES
    assert "version.created" in rig.event_types()


def test_a_cut_made_by_an_agent_on_another_device_names_the_device(rig: Rig) -> None:
    rig.service.write_text("far.md", FORTY_LINES, "cli")
    row = rig.store.note_at("far.md")
    assert row is not None
    peer = NoteDoc(pycrdt.Doc())
    peer.apply_update(rig.service.doc(row.id).full_update())
    update = peer.set_text(FOUR_LINES)
    assert update is not None
    rig.service.apply_remote_update(row.id, update, "agent:bot", "DEVICE")
    (info,) = rig.versions("far.md")
    assert info.source == "agent:bot on DEVICE"


@pytest.mark.parametrize(
    ("before_chars", "after_chars", "saved"),
    [(1000, 200, True), (1000, 210, False), (199, 0, False), (200, 0, True), (200, 40, True),
     (200, 41, False)],
)
def test_boundaries(rig: Rig, before_chars: int, after_chars: int, saved: bool) -> None:
    text = "".join(chr(0x41 + i % 26) for i in range(before_chars))
    rig.service.write_text("b.md", text, "cli")
    rig.service.write_text("b.md", text[:after_chars], "cli")  # a cut that leaves after_chars
    assert len(rig.versions("b.md", "before-large-deletion")) == int(saved)


def test_an_overwrite_with_other_text_is_a_large_deletion_too(rig: Rig) -> None:
    """What is left of the note's text counts, not the new length: an agent replacing a
    note with unrelated text of the same size destroyed all of it."""
    old = "".join(f"original line {i}\n" for i in range(60))
    rig.service.write_text("o.md", old, "cli")
    rig.service.write_text("o.md", "".join(f"UNRELATED TEXT {i:03d}\n" for i in range(60)), "agent:bot")
    (info,) = rig.versions("o.md")
    assert (info.kind, info.source, rig.version(info).text) == ("before-large-deletion", "agent:bot", old)
    # Keeping a fifth and a bit of the lines (21%) is not a large deletion.
    lines = old.splitlines(keepends=True)
    rig.service.write_text("p.md", old, "cli")
    kept = "".join(lines[:13])  # 13 of 60 lines: about 21% of the characters
    assert len(kept) > 0.2 * len(old)
    rig.service.write_text("p.md", kept + "NEW\n" * 200, "agent:bot")
    assert rig.versions("p.md") == []


def test_a_note_shrunk_by_small_steps_keeps_no_shrink_version(rig: Rig) -> None:
    text = "abcdefghij" * 100
    rig.service.write_text("s.md", text, "cli")
    for n in range(900, 0, -100):  # each step leaves 89% or more of what was there, but the last...
        rig.service.write_text("s.md", text[:n], "cli")
    # ...200 -> 100 is 50%: per update, never 20% or less.
    assert rig.text("s.md") == text[:100]
    assert rig.versions("s.md") == []


def test_deleting_a_note_of_200_characters_saves_before_deletion(rig: Rig) -> None:
    rig.service.write_text("big.md", "z" * 200, "cli")
    rig.service.write_text("small.md", "z" * 199, "cli")
    rig.service.delete("big.md", "agent:bot")
    rig.service.delete("small.md", "agent:bot")
    (info,) = rig.versions("big.md")
    assert (info.kind, info.source, info.chars) == ("before-deletion", "agent:bot", 200)
    assert rig.versions("small.md") == []


# -- idle versions (SPEC §5.2) --------------------------------------------------------------------


def test_an_idle_version_after_ten_minutes_without_edits(rig: Rig) -> None:
    rig.service.write_text("i.md", "first draft\n", "cli")
    assert rig.keeper.tick(rig.clock.advance(599)) == 0
    rig.service.write_text("i.md", "second draft\n", "agent:bot")  # the timer starts again
    assert rig.keeper.tick(rig.clock.advance(599)) == 0
    assert rig.keeper.tick(rig.clock.advance(1)) == 1
    (info,) = rig.versions("i.md")
    assert (info.kind, info.source, rig.version(info).text) == ("idle", "agent:bot", "second draft\n")
    assert rig.keeper.tick(rig.clock.advance(3600)) == 0  # nothing new: no second copy


def test_pending_idle_versions_survive_a_restart(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.service.write_text("i.md", "kept across a restart\n", "cli")
    rig.store.close()
    again = make_rig(tmp_path)
    again.clock.t = T0 + 601
    assert again.keeper.tick(again.clock()) == 1
    assert [v.kind for v in again.versions("i.md")] == ["idle"]
    again.store.close()


def test_retention_with_an_injected_clock(rig: Rig) -> None:
    """60 idle versions → 50 kept, plus the 10 newest shrink versions for 30 days, then gone."""
    big = "keep me " * 40
    for i in range(12):  # 12 large cuts: 12 before-large-deletion versions
        rig.service.write_text("r.md", f"{i} {big}", "cli")
        rig.service.write_text("r.md", f"cut {i}", "cli")
    shrink_ids = [v.id for v in rig.versions("r.md")]
    assert len(shrink_ids) == 12
    for i in range(60):
        rig.service.write_text("r.md", f"idle text {i}\n", "cli")
        assert rig.keeper.tick(rig.clock.advance(600)) == 1
    kept = rig.versions("r.md")
    assert len(kept) == 60
    assert [v.kind for v in kept[:50]] == ["idle"] * 50
    assert [v.id for v in kept[50:]] == shrink_ids[:10]  # the 10 most recent shrink versions
    assert [rig.version(v).text for v in kept[:2]] == ["idle text 59\n", "idle text 58\n"]
    rig.clock.advance(30 * DAY_S)
    rig.keeper.tick(rig.clock())
    assert [v.kind for v in rig.versions("r.md")] == ["idle"] * 50


def test_versions_survive_a_restart(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.service.write_text("p.md", FORTY_LINES, "cli")
    rig.service.write_text("p.md", "", "cli")
    rig.store.close()
    again = make_rig(tmp_path)
    (info,) = again.versions("p.md")
    assert again.version(info).text == FORTY_LINES
    again.store.close()


# -- restore (SPEC §5.4) ------------------------------------------------------------------------------


def test_restore_then_undo_the_restore(rig: Rig) -> None:
    rig.service.write_text("u.md", FORTY_LINES, "cli")
    rig.service.write_text("u.md", FOUR_LINES + "and a new line\n", "agent:bot")
    (cut,) = rig.versions("u.md")
    result = rig.keeper.restore(rig.version(cut))
    assert (result.changed, result.undeleted, result.path) == (True, False, "u.md")
    assert rig.text("u.md") == FORTY_LINES
    before = rig.keeper.versions.get(result.before_restore or 0)
    assert before is not None
    assert before.kind == "before-restore"
    assert before.text == FOUR_LINES + "and a new line\n"
    undo = rig.keeper.restore(before)
    assert rig.text("u.md") == FOUR_LINES + "and a new line\n"
    assert undo.before_restore is not None
    assert rig.store.note_at("u.md").updated_by == "restore"  # type: ignore[union-attr]
    # Restoring what the note already holds changes nothing.
    again = rig.keeper.restore(before)
    assert (again.changed, again.before_restore) == (False, None)


def test_a_concurrent_edit_made_elsewhere_survives_a_restore(rig: Rig) -> None:
    old = "# Plan\n\nstep one\nstep two\n\n## Notes\nnothing yet\n"
    rig.service.write_text("c.md", old, "cli")
    rig.service.write_text("c.md", "# Plan\n\nstep one (done)\n\n## Notes\nnothing yet\n", "cli")
    v = rig.keeper.save(rig.store.note_at("c.md").id, "c.md", "idle", "cli",  # type: ignore[union-attr]
                        "rev", old)
    row = rig.store.note_at("c.md")
    assert row is not None
    # A peer that has the current text adds a line at the end, concurrently with the restore.
    peer = NoteDoc(pycrdt.Doc())
    peer.apply_update(rig.service.doc(row.id).full_update())
    peer_update = peer.set_text(peer.text + "peer: a note added meanwhile\n")
    assert peer_update is not None
    rig.keeper.restore(v)
    rig.service.apply_remote_update(row.id, peer_update, "peer:DEVICE", "DEVICE")
    assert rig.text("c.md") == old + "peer: a note added meanwhile\n"


def test_restore_a_deleted_note_to_its_path_or_beside_it(rig: Rig) -> None:
    text = "# Gone\n" + "a paragraph that matters\n" * 10
    _disk_rewrite(rig, "gone.md", text)
    note_id = rig.store.note_at("gone.md").id  # type: ignore[union-attr]
    (rig.root / "gone.md").unlink()
    rig.bridge.ingest_path("gone.md")
    (info,) = rig.versions("gone.md")
    assert info.kind == "before-deletion"
    result = rig.keeper.restore(rig.version(info))
    assert (result.undeleted, result.path, result.note_id) == (True, "gone.md", note_id)
    rig.bridge.flush_writes()
    assert (rig.root / "gone.md").read_text(encoding="utf-8") == text
    # Deleted again, and something else takes the path: the note comes back beside it.
    rig.service.delete("gone.md", "cli")
    rig.service.write_text("gone.md", "a different note\n", "cli")
    result = rig.keeper.restore(rig.version(info))
    assert result.path == "gone (restored).md"
    assert result.to_json()["pathWasTaken"] is True
    assert rig.text("gone (restored).md") == text
    assert rig.text("gone.md") == "a different note\n"


# -- the burst brake (SPEC §5.6) ------------------------------------------------------------------------


def _populate(rig: Rig, n: int, prefix: str = "n", size: int = 50) -> dict[str, str]:
    texts = {f"{prefix}{i:02d}.md": f"note {i}\n" + "x" * size + "\n" for i in range(n)}
    for path, text in texts.items():
        rig.service.write_text(path, text, "cli")
    return texts


def test_an_agent_that_deletes_ten_notes_is_held_and_then_refused(rig: Rig) -> None:
    texts = _populate(rig, 12)
    paths = list(texts)
    for path in paths[:9]:
        rig.service.delete(path, "agent:bot")
        rig.clock.advance(5)
    assert rig.brake.changes() == []
    assert not rig.brake.is_engaged("agent:bot")
    rig.service.delete(paths[9], "agent:bot")  # the tenth within 60 s
    held = rig.brake.changes()
    assert [h.path for h in held] == paths[:10]
    assert all(rig.brake.is_held(h.note_id) for h in held)
    assert rig.event_types().count("brake.held") == 10
    # Every held note has its before-deletion version (these are under 200 characters).
    for h in held:
        v = rig.keeper.versions.get(h.version_id or 0)
        assert v is not None
        assert v.text == texts[h.path]
        assert v.kind == "before-deletion"
    with pytest.raises(StetError) as refused:
        rig.service.delete(paths[10], "agent:bot")
    assert refused.value.code == "brake_engaged"
    assert refused.value.status == 423
    with pytest.raises(StetError):
        rig.service.write_text(paths[10], "", "agent:bot")  # emptying is destructive too
    rig.service.write_text(paths[10], texts[paths[10]] + "an append is fine\n", "agent:bot")
    rig.service.delete(paths[11], "cli")  # another source is not affected
    released = rig.brake.release(None)
    assert len(released) == 10
    assert not rig.brake.is_engaged("agent:bot")
    assert not any(rig.brake.is_held(h.note_id) for h in held)
    rig.service.delete(paths[10], "agent:bot")
    assert rig.event_types().count("brake.released") == 10


def test_a_remote_agents_burst_is_held_but_does_not_refuse_the_local_agent_of_that_name(rig: Rig) -> None:
    texts = _populate(rig, 11)
    for path in list(texts)[:10]:  # emptied by "agent:bot" on another device
        row = rig.store.note_at(path)
        assert row is not None
        peer = NoteDoc(pycrdt.Doc())
        peer.apply_update(rig.service.doc(row.id).full_update())
        update = peer.set_text("")
        assert update is not None
        rig.service.apply_remote_update(row.id, update, "agent:bot", "DEVICE")
    held = rig.brake.changes()
    assert len(held) == 10
    assert {(h.source, h.kind) for h in held} == {("agent:bot on DEVICE", "emptied")}
    rig.service.delete(list(texts)[10], "agent:bot")  # the local agent is not braked


def test_deletes_spread_over_more_than_the_window_are_not_held(rig: Rig) -> None:
    paths = list(_populate(rig, 10))
    for path in paths:
        rig.service.delete(path, "disk")
        rig.clock.advance(7)  # 10 deletes over 63 s: never 10 within 60 s
    assert rig.brake.changes() == []


def test_revert_puts_emptied_and_deleted_notes_back_byte_identical(rig: Rig) -> None:
    texts = {f"r{i}.md": f"\ufeffnote {i}\r\nline two 😀\r\nno final newline" for i in range(10)}
    texts["big.md"] = FORTY_LINES
    for path, text in texts.items():
        _disk_rewrite(rig, path, text)
    paths = list(texts)
    for path in paths[:5]:
        rig.service.write_text(path, "", "cli")  # emptied
    for path in paths[5:]:
        rig.service.delete(path, "cli")
    held = rig.brake.changes()
    assert sorted(h.path for h in held) == sorted(paths)
    assert {h.kind for h in held} == {"emptied", "deleted"}
    results = rig.brake.revert(None)
    assert all("error" not in r for r in results)
    rig.bridge.flush_writes()
    for path, text in texts.items():
        assert (rig.root / path).read_bytes() == text.encode("utf-8"), path
        assert rig.text(path) == text
    assert rig.brake.changes() == []
    assert not rig.brake.is_engaged("cli")
    assert {h.state for h in rig.brake.changes(include_resolved=True)} == {"reverted"}


def test_a_checkout_that_overwrites_notes_in_place_is_held_and_reverted(rig: Rig) -> None:
    originals = {f"o{i}.md": f"# Note {i}\n" + f"original paragraph {i}\n" * 12 for i in range(12)}
    for path, text in originals.items():
        _disk_rewrite(rig, path, text)
    for i, path in enumerate(originals):  # another branch's files at the same paths
        _disk_rewrite(rig, path, f"# Other {i}\n" + f"unrelated content {i}!\n" * 12)
    held = rig.brake.changes()
    assert len(held) == 12
    assert {h.kind for h in held} == {"overwritten"}
    assert all(h.source == "disk" for h in held)
    rig.brake.revert([h.id for h in held])
    rig.bridge.flush_writes()
    for path, text in originals.items():
        assert (rig.root / path).read_text(encoding="utf-8") == text
    assert rig.brake.engaged() == {}  # the revert's own overwrites are not a new burst
    assert rig.brake.changes() == []


def test_a_note_held_twice_reverts_to_the_text_before_the_first(rig: Rig) -> None:
    texts = _populate(rig, 10)
    t0, t1, t2 = ("first text " * 30, "SECOND TEXT " * 30, "third words " * 30)
    rig.service.write_text("a.md", t0, "cli")
    for path in texts:
        rig.service.write_text(path, "", "disk")  # the burst: the brake engages for the disk
    rig.service.write_text("a.md", t1, "disk")  # overwritten while engaged: held
    rig.service.write_text("a.md", t2, "disk")  # and again: held a second time
    assert [h.kind for h in rig.brake.changes() if h.path == "a.md"] == ["overwritten", "overwritten"]
    rig.brake.revert(None)
    assert rig.text("a.md") == t0
    assert all(rig.text(p) == t for p, t in texts.items())


def test_held_changes_are_released_after_the_hold_time(rig: Rig) -> None:
    paths = list(_populate(rig, 10))
    for path in paths:
        rig.service.delete(path, "disk")
    assert len(rig.brake.changes()) == 10
    assert rig.brake.tick(rig.clock.advance(29 * 60)) == 0
    assert rig.brake.tick(rig.clock.advance(60)) == 10
    assert rig.brake.changes() == []
    assert not rig.brake.is_engaged("disk")
    assert {h.resolved_by for h in rig.brake.changes(include_resolved=True)} == {"timeout"}


def test_a_timeout_releases_an_agents_changes_but_not_its_brake(rig: Rig) -> None:
    paths = list(_populate(rig, 11))
    for path in paths[:10]:
        rig.service.delete(path, "agent:bot")
    rig.brake.tick(rig.clock.advance(31 * 60))
    assert rig.brake.changes() == []
    assert rig.brake.is_engaged("agent:bot")
    with pytest.raises(StetError):
        rig.service.delete(paths[10], "agent:bot")
    rig.brake.release(None)  # a person: `stet release --all`
    rig.service.delete(paths[10], "agent:bot")


def test_on_timeout_hold_keeps_holding(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, brake=BrakePolicy(on_timeout="hold"))
    for path in _populate(rig, 10):
        rig.service.delete(path, "disk")
    assert rig.brake.tick(rig.clock.advance(365 * DAY_S)) == 0
    assert len(rig.brake.changes()) == 10


def test_a_held_changes_version_outlives_retention(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, versions=VersionPolicy(keep=2, keep_shrink=0))
    texts = [chr(0x41 + i) * 300 for i in range(6)]  # unrelated to each other: overwrites
    rig.service.write_text("a.md", texts[0], "cli")
    for path in _populate(rig, 10):
        rig.service.write_text(path, "", "disk")  # the brake engages for the disk
    for text in texts[1:4]:  # overwritten three times while engaged: each held, each a version
        rig.service.write_text("a.md", text, "disk")
    first = next(h for h in rig.brake.changes() if h.path == "a.md")
    assert len(rig.keeper.versions.for_note(first.note_id)) == 3  # over the cap of 2: all held
    assert rig.keeper.versions.get(first.version_id or 0) is not None
    rig.brake.release([first.id])
    rig.service.write_text("a.md", texts[4], "disk")  # held again: a version, then retention
    assert rig.keeper.versions.get(first.version_id or 0) is None  # released: ordinary retention


def test_held_state_survives_a_restart(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    for path in _populate(rig, 10):
        rig.service.delete(path, "agent:bot")
    rig.store.close()
    again = make_rig(tmp_path)
    assert len(again.brake.changes()) == 10
    assert again.brake.is_engaged("agent:bot")
    assert all(again.brake.is_held(h.note_id) for h in again.brake.changes())
    again.store.close()
