"""The file bridge driven directly (no watcher thread): disk → CRDT exactness, the
clobber check before CRDT → disk writes, and reconcile after missed events."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pycrdt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stet.daemon.folder.bridge import FileBridge
from stet.daemon.folder.watcher import FsEvent
from stet.daemon.notes.service import NotesService
from stet.sync.note_doc import NoteDoc
from stet.sync.store import VaultStore
from stet.sync.text_diff import Splice

EXT = (".md", ".markdown", ".txt")
PIECES = ["😀", "世界", "e\u0301", "\r\n", "\n", "\ufeff", "👩‍👩‍👧", "word ", "# h\n", "- item\n", "x"]
contents = st.lists(st.sampled_from(PIECES) | st.text(max_size=6), max_size=40).map("".join)


def make(tmp_path: Path) -> tuple[Path, VaultStore, NotesService, FileBridge]:
    root = tmp_path / "vault"
    root.mkdir(exist_ok=True)
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=EXT, max_bytes=1 << 20)
    return root, store, service, bridge


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq=st.lists(contents, min_size=1, max_size=6))
def test_any_sequence_of_file_contents_ends_byte_identical(
    tmp_path_factory: pytest.TempPathFactory, seq: list[str]
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    root, store, service, bridge = make(tmp)
    note = root / "n.md"
    for text in seq:
        note.write_bytes(text.encode("utf-8"))
        assert bridge.ingest_path("n.md") is False
        row, stored = service.read("n.md")
        assert stored.encode("utf-8") == note.read_bytes()
    # And what the store persisted reloads to the same bytes.
    row = store.note_at("n.md")
    assert row is not None
    assert NoteDoc.from_updates(store.updates(row.id)).text.encode() == note.read_bytes()
    store.close()


def _peer_edit(service: NotesService, note_id: str, new_text_fn) -> bytes:  # type: ignore[no-untyped-def]
    peer = NoteDoc(pycrdt.Doc())
    peer.apply_update(service.doc(note_id).full_update())
    update = peer.set_text(new_text_fn(peer.text))
    assert update is not None
    return update


def test_remote_change_racing_a_disk_edit_keeps_both(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    note = root / "a.md"
    note.write_bytes(b"# Title\n\nbody\n")
    bridge.ingest_path("a.md")
    row = store.note_at("a.md")
    assert row is not None
    # Someone saves the file; the daemon has not read it yet (event still settling)...
    note.write_bytes(b"# Title\n\nbody\nsaved on disk\n")
    # ...when a peer's change arrives.
    update = _peer_edit(service, row.id, lambda t: t.replace("# Title", "# Title (from peer)"))
    service.apply_update(row.id, update, "peer:DEVICE")
    written = bridge.flush_writes()
    assert written == 1
    final = note.read_text()
    assert final == "# Title (from peer)\n\nbody\nsaved on disk\n"
    assert service.read("a.md")[1] == final


def test_own_writes_are_not_read_back_as_edits(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    (root / "a.md").write_text("one\n")
    bridge.ingest_path("a.md")
    row = store.note_at("a.md")
    assert row is not None
    service.write_text("a.md", "one\ntwo\n", "cli")
    bridge.flush_writes()
    assert (root / "a.md").read_text() == "one\ntwo\n"
    rows_before = store.update_rows(row.id)
    bridge.ingest_path("a.md")  # what the watcher does after our rename lands
    assert store.update_rows(row.id) == rows_before


def test_a_file_we_cannot_read_is_never_written_over(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    note = root / "a.md"
    note.write_text("text\n")
    bridge.ingest_path("a.md")
    note.write_bytes(b"\xff\xfe not utf-8 any more")
    service.write_text("a.md", "agent text\n", "cli")
    bridge.flush_writes()
    assert note.read_bytes() == b"\xff\xfe not utf-8 any more"
    assert "a.md" in store.skipped()


def test_reconcile_catches_up_after_missed_events(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    for name in ("keep.md", "edit.md", "gone.md", "move.md"):
        (root / name).write_text(f"{name} original text\n")
    report = bridge.reconcile()
    assert report.created == 4
    moved_id = store.note_at("move.md").id  # type: ignore[union-attr]
    # Events lost (overflow): edit, add, delete and rename behind the watcher's back.
    (root / "edit.md").write_text("edit.md original text\nplus a line\n")
    (root / "new.md").write_text("brand new\n")
    (root / "gone.md").unlink()
    (root / "sub").mkdir()
    os.rename(root / "move.md", root / "sub" / "moved.md")
    report = bridge.reconcile()
    assert (report.changed, report.created, report.deleted, report.moved) == (1, 1, 1, 1)
    assert store.note_at("sub/moved.md").id == moved_id  # type: ignore[union-attr]
    listed = {r.path: service.read(r.path)[1] for r in store.live_notes()}
    on_disk = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.md")}
    assert listed == on_disk
    # Nothing changed since: a second pass reads nothing and changes nothing.
    again = bridge.reconcile()
    assert (again.changed, again.created, again.deleted, again.moved) == (0, 0, 0, 0)


def test_delete_then_recreate_same_text_brings_back_the_same_note(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    (root / "a.md").write_text("same\n")
    bridge.ingest_path("a.md")
    first = store.note_at("a.md").id  # type: ignore[union-attr]
    (root / "a.md").unlink()
    bridge.ingest_path("a.md")
    assert store.note_at("a.md") is None
    (root / "a.md").write_text("same\n")
    bridge.ingest_path("a.md")
    assert store.note_at("a.md").id == first  # type: ignore[union-attr]
    assert service.read("a.md")[1] == "same\n"


async def test_a_peers_move_racing_a_disk_edit_keeps_the_edit(tmp_path: Path) -> None:
    """The file was saved just before a peer's move of it arrived (SPEC §3.8, this side)."""
    root, store, service, bridge = make(tmp_path)
    (root / "draft.md").write_text("line one\n")
    bridge.ingest_path("draft.md")
    with (root / "draft.md").open("a") as f:
        f.write("appended here, not read yet\n")
    service.move("draft.md", "final.md", "peer:DEVICE", device="DEVICE")  # the bridge renames the file
    assert (root / "final.md").read_text() == "line one\nappended here, not read yet\n"
    bridge.ingest_path("final.md")  # the watcher's event for the renamed file settles
    assert service.read("final.md")[1] == "line one\nappended here, not read yet\n"
    store.close()


def test_an_imported_file_edited_while_a_peer_edit_arrives_keeps_both(tmp_path: Path) -> None:
    """`stet init` records no merge base; a peer's edit and a disk edit made before the
    bridge wrote the peer's must both survive (the file must not replace the note)."""
    from stet.sync.vault_import import import_folder

    root = tmp_path / "vault"
    root.mkdir()
    (root / "a.md").write_text("# Notes\nfirst\n")
    store = VaultStore(tmp_path / "v.db")
    import_folder(store, root, extensions=EXT, max_bytes=1 << 20)
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=EXT, max_bytes=1 << 20)
    row = store.note_at("a.md")
    assert row is not None
    assert row.disk is not None
    assert row.disk.snapshot is None
    update = _peer_edit(service, row.id, lambda t: t + "from the peer\n")
    service.apply_update(row.id, update, "peer:DEVICE")
    with (root / "a.md").open("a") as f:
        f.write("saved on disk\n")
    bridge.ingest_path("a.md")
    bridge.flush_writes()
    text = service.read("a.md")[1]
    assert "from the peer\n" in text
    assert "saved on disk\n" in text
    assert (root / "a.md").read_text() == text
    store.close()


async def test_a_rename_here_racing_a_peers_move_of_the_same_note_makes_no_copy(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    (root / "draft.md").write_text("the text\n")
    bridge.ingest_path("draft.md")
    os.rename(root / "draft.md", root / "mine.md")  # renamed here; the event is not read yet...
    service.move("draft.md", "theirs.md", "peer:DEVICE", device="DEVICE")  # ...when a peer's move arrives
    bridge.ingest_path("mine.md")  # the rename's event settles
    bridge.flush_writes()
    assert sorted(p.name for p in root.iterdir()) == ["mine.md"]
    assert [r.path for r in store.live_notes()] == ["mine.md"]
    assert service.read("mine.md")[1] == "the text\n"
    store.close()


async def test_a_save_landing_while_the_bridge_writes_is_read_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in-place save between the bridge's check and its rename (while the temp file is
    written) must not end up in the replaced inode, unread."""
    import stet.daemon.folder.writer.temp_files as dw

    root, store, service, bridge = make(tmp_path)
    note = root / "a.md"
    note.write_text("first\n")
    bridge.ingest_path("a.md")
    row = store.note_at("a.md")
    assert row is not None
    real_write_temp = dw.write_temp
    saved = []

    def write_temp_with_a_save(*args: Any, **kwargs: Any) -> Any:
        result = real_write_temp(*args, **kwargs)
        if not saved:
            saved.append(True)
            with note.open("a") as f:
                f.write("saved during the write\n")
        return result

    monkeypatch.setattr(dw, "write_temp", write_temp_with_a_save)
    service.apply_update(row.id, _peer_edit(service, row.id, lambda t: "peer\n" + t), "peer:DEVICE")
    assert bridge.flush_writes() == 0  # the save landed: nothing replaced
    assert note.read_text() == "first\nsaved during the write\n"
    bridge.ingest_path("a.md")  # the save's event settles
    bridge.flush_writes()
    assert note.read_text() == "peer\nfirst\nsaved during the write\n"
    assert service.read("a.md")[1] == note.read_text()
    store.close()


async def test_a_split_rename_with_a_peer_edit_not_written_yet_is_a_move(tmp_path: Path) -> None:
    """A busy moment splits a rename's events; the note meanwhile got a peer's edit that is
    not in the file yet. Still one note, moved, holding both."""
    root, store, service, bridge = make(tmp_path)
    (root / "a.md").write_text("the text\n")
    bridge.ingest_path("a.md")
    row = store.note_at("a.md")
    assert row is not None
    service.apply_update(row.id, _peer_edit(service, row.id, lambda t: t + "peer line\n"), "peer:DEVICE")
    os.rename(root / "a.md", root / "b.md")
    bridge.on_fs_event(FsEvent("created", "b.md", None))  # the two halves, created first
    bridge.on_fs_event(FsEvent("deleted", "a.md", None))
    bridge.ingest_path("a.md")  # the deletion settles
    bridge.flush_writes()
    assert [r.path for r in store.live_notes()] == ["b.md"]
    assert service.read("b.md")[1] == "the text\npeer line\n"
    assert (root / "b.md").read_text() == "the text\npeer line\n"
    assert not (root / "a.md").exists()
    store.close()


async def test_a_peer_edit_for_a_file_deleted_here_does_not_bring_the_file_back(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    (root / "a.md").write_text("the text\n")
    bridge.ingest_path("a.md")
    row = store.note_at("a.md")
    assert row is not None
    (root / "a.md").unlink()  # deleted here; the event is not read yet...
    service.apply_update(row.id, _peer_edit(service, row.id, lambda t: t + "peer line\n"), "peer:DEVICE")
    bridge.flush_writes()  # ...when the peer's edit is written out
    assert not (root / "a.md").exists()
    bridge.ingest_path("a.md")  # the deletion settles
    assert store.note_at("a.md") is None
    store.close()


async def test_reconcile_follows_a_renamed_file_whose_note_is_ahead_of_it(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    (root / "a.md").write_text("the text\n")
    bridge.ingest_path("a.md")
    row = store.note_at("a.md")
    assert row is not None
    service.apply_update(row.id, _peer_edit(service, row.id, lambda t: t + "peer line\n"), "peer:DEVICE")
    os.rename(root / "a.md", root / "b.md")  # while no event is read (a restart, an overflow)
    report = bridge.reconcile()
    bridge.flush_writes()
    assert (report.moved, report.created, report.deleted) == (1, 0, 0)
    assert [r.path for r in store.live_notes()] == ["b.md"]
    assert (root / "b.md").read_text() == "the text\npeer line\n"
    store.close()


async def test_a_rename_in_a_folder_not_watched_yet_is_a_move(tmp_path: Path) -> None:
    """The folder was just made, so only the old name's deletion is reported, no creation."""
    root, store, service, bridge = make(tmp_path)
    (root / "new").mkdir()
    (root / "new" / "a.md").write_text("the text\n")
    bridge.ingest_path("new/a.md")
    os.rename(root / "new" / "a.md", root / "new" / "b.md")
    bridge.on_fs_event(FsEvent("deleted", "new/a.md", None))
    bridge.ingest_path("new/a.md")  # the deletion settles
    assert [r.path for r in store.live_notes()] == ["new/b.md"]
    store.close()


def test_a_file_deleted_here_does_not_take_edits_it_never_held_with_it(tmp_path: Path) -> None:
    """SPEC §3.9 on the deleting side: a peer's edit that reached the note but not yet the
    file was not seen by whoever deleted the file, so the delete must not cover it."""
    from stet.sync.vault_index import should_resurrect

    root, store, service, bridge = make(tmp_path)
    (root / "a.md").write_text("the text\n")
    bridge.ingest_path("a.md")
    row = store.note_at("a.md")
    assert row is not None
    service.apply_update(row.id, _peer_edit(service, row.id, lambda t: t + "peer line\n"), "peer:DEVICE")
    (root / "a.md").unlink()  # deleted before the peer's line was written out
    bridge.ingest_path("a.md")
    assert store.note_at("a.md") is None
    entry = service.index.entry(row.id)
    assert entry is not None
    assert entry.deleted
    assert should_resurrect(entry, service.doc(row.id).state_vector())
    store.close()


async def test_a_peer_edit_then_a_peer_move_of_a_file_renamed_here_make_no_copy(tmp_path: Path) -> None:
    root, store, service, bridge = make(tmp_path)
    (root / "draft.md").write_text("the text\n")
    bridge.ingest_path("draft.md")
    row = store.note_at("draft.md")
    assert row is not None
    os.rename(root / "draft.md", root / "mine.md")  # renamed here; the event is not read yet
    service.apply_update(row.id, _peer_edit(service, row.id, lambda t: t + "peer line\n"), "peer:DEVICE")
    bridge.flush_writes()  # the edit waits: its file is gone
    service.move("draft.md", "theirs.md", "peer:DEVICE", device="DEVICE")
    bridge.flush_writes()  # the move must not write a second copy either
    assert not (root / "theirs.md").exists()
    bridge.ingest_path("mine.md")  # the rename's event settles
    assert [r.path for r in store.live_notes()] == ["mine.md"]
    assert service.read("mine.md")[1] == "the text\npeer line\n"
    store.close()


async def test_a_file_deleted_here_as_a_peers_move_of_it_arrives_is_deleted_not_a_ghost(
    tmp_path: Path,
) -> None:
    """Found by the long R1 run (seed 20261129): B's file was deleted on disk 0.3 s before
    A's move of the note arrived. The delete's event named the old path, which no longer
    had a note; the note stayed live at the new path with no file, forever (A and C had
    the file). The delete is taken once the note's wait for events is over."""
    root = tmp_path / "vault"
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=EXT, max_bytes=1 << 20,
                        unclosed_write_s=0.05, settle_s=0.01)
    (root / "c130.md").write_text("# created on A\n")
    bridge.ingest_path("c130.md")
    os.rename(root / "c130.md", tmp_path / "trash.md")  # deleted here (moved out of the vault)
    service.move("c130.md", "archive/r149.md", "peer:A", device="A")  # A's move arrives
    bridge.ingest_path("c130.md")  # the delete's event: no note there any more
    deadline = time.monotonic() + 10
    while store.note_at("archive/r149.md") is not None:
        assert time.monotonic() < deadline, "the note stayed live with no file"
        await asyncio.sleep(0.01)  # poll: the bridge's wait for events runs on the loop
    assert not (root / "archive" / "r149.md").exists()
    assert not (root / "c130.md").exists()
    assert [r.path for r in store.deleted_notes()] == ["archive/r149.md"]
    store.close()


def test_the_event_of_our_own_removal_does_not_delete_the_note_brought_back_since(tmp_path: Path) -> None:
    """Found by the long R1 run (seed 20261129): a peer's delete removed the file here, a
    peer's edit brought the note back, and the removal's event, read only then, found the
    file missing (not written again yet) and deleted the note as if a person had."""
    root, store, service, bridge = make(tmp_path)
    (root / "r97.md").write_text("# note\nkept\n")
    bridge.ingest_path("r97.md")
    row = store.note_at("r97.md")
    assert row is not None
    service.delete("r97.md", "peer:B", device="B")  # the bridge removes the file
    assert not (root / "r97.md").exists()
    update = _peer_edit(service, row.id, lambda t: t + "appended on C\n")
    service.undelete(row.id, "r97.md", "# note\nkept\n", "peer:C")  # brought back ...
    service.apply_update(row.id, update, "peer:C")  # ... with C's edit
    bridge.ingest_path("r97.md")  # the removal's event, read now: the file is owed, not gone
    live = store.note_at("r97.md")
    assert live is not None
    assert not live.deleted
    assert bridge.flush_writes() == 1
    assert (root / "r97.md").read_text() == "# note\nkept\nappended on C\n"
    store.close()


async def test_an_append_landing_after_the_check_before_the_rename_is_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``>>`` that opened the file before the bridge's rename and writes after its check:
    the bytes go into the replaced inode. They are read from it and merged (issue 11; the
    check-then-rename window lost a person's line in 1 of 9 eight-agent runs)."""
    import stet.daemon.base.atomic_files as af

    root, store, service, bridge = make(tmp_path)
    note = root / "a.md"
    note.write_text("first\n")
    bridge.ingest_path("a.md")
    row = store.note_at("a.md")
    assert row is not None
    real_replace = os.replace
    appended: list[bool] = []

    def replace_after_an_append(src: str | Path, dst: str | Path) -> None:
        if not appended and Path(dst) == note:
            appended.append(True)
            with note.open("a") as f:  # after the check, before the rename
                f.write("appended by a person\n")
        real_replace(src, dst)

    monkeypatch.setattr(af.os, "replace", replace_after_an_append)
    service.apply_splices("a.md", [Splice(len("first\n"), len("first\n"), "agent line\n")], "agent:a1")
    assert bridge.flush_writes() == 1
    assert appended
    text = service.read("a.md")[1]
    assert sorted(text.splitlines()) == ["agent line", "appended by a person", "first"]
    bridge.flush_writes()  # the merged text goes out
    assert note.read_text() == text
    bridge.close()
    store.close()


def test_a_file_differing_only_by_case_is_skipped_ascii_or_not(tmp_path: Path) -> None:
    """Found by index now (a bulk intake asked this per file by listing the folder)."""
    root, store, service, bridge = make(tmp_path)
    (root / "sub").mkdir()
    for name in ("Note.md", "sub/Ärger.md", "sub/Star.md", "sub/\u017fun.md", "plain.md"):
        (root / name).write_text(f"{name}\n")
        bridge.ingest_path(name)
    for name in ("note.md", "sub/ärger.md", "sub/\u017ftar.md", "sub/sun.md", "sub/PLAIN.md"):
        (root / name).write_text(f"{name}\n")
        bridge.ingest_path(name)
    skipped = store.skipped()
    assert skipped["note.md"] == "differs only by case from Note.md"
    assert skipped["sub/ärger.md"] == "differs only by case from sub/Ärger.md"
    assert skipped["sub/\u017ftar.md"] == "differs only by case from sub/Star.md"  # long s: casefolds to s
    assert skipped["sub/sun.md"] == "differs only by case from sub/\u017fun.md"  # ASCII vs a non-ASCII one
    assert "sub/PLAIN.md" not in skipped  # another folder: not the same name
    assert store.note_at("sub/PLAIN.md") is not None
    bridge.close()
    store.close()
