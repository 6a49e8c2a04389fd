"""What a daemon killed between two steps of writing a note's file leaves behind, and how
the next start picks it up (SPEC §6.6, R2): never a note lost, never text doubled, and
the file caught up with the note.

A "crash" here is a store closed in the middle of the bridge's write sequence (begin
the write, replace the file, record it); a fresh service and bridge on the same store
and folder then reconcile, as a restarted daemon does.
"""

from __future__ import annotations

from pathlib import Path

from stet.daemon.base.atomic_files import atomic_write
from stet.daemon.folder.bridge import FileBridge
from stet.daemon.notes.service import NotesService
from stet.sync.store import VaultStore
from stet.sync.text_diff import Splice

EXT = (".md", ".markdown", ".txt")


def start(tmp_path: Path) -> tuple[Path, VaultStore, NotesService, FileBridge]:
    root = tmp_path / "vault"
    root.mkdir(exist_ok=True)
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    return root, store, service, FileBridge(root, service, extensions=EXT, max_bytes=1 << 20)


def append(service: NotesService, path: str, text: str) -> None:
    current = service.read(path)[1]
    service.apply_splices(path, [Splice(len(current), len(current), text)], "agent:a")


def restart(tmp_path: Path, store: VaultStore) -> tuple[NotesService, FileBridge]:
    store.close()
    _root, _store, service, bridge = start(tmp_path)
    bridge.reconcile()
    bridge.flush_writes()
    return service, bridge


def writing_a_after_one(tmp_path: Path) -> tuple[Path, VaultStore, NotesService, FileBridge]:
    """``a.md`` ("# A\n") taken in, "one\n" appended, and the bridge's write of the result
    begun (``begin_write``): the moment each crash window starts from."""
    root, store, service, bridge = start(tmp_path)
    (root / "a.md").write_text("# A\n")
    bridge.reconcile()
    append(service, "a.md", "one\n")
    row = store.note_at("a.md")
    assert row is not None
    bridge.replica.begin_write(row.id)
    return root, store, service, bridge


def test_a_file_replaced_but_not_recorded_is_not_merged_twice(tmp_path: Path) -> None:
    # The bridge begins writing "# A\none\n" and replaces the file ...
    root, store, service, bridge = writing_a_after_one(tmp_path)
    atomic_write(root / "a.md", service.read("a.md")[1].encode())
    # ... more is appended before the write is recorded, and the daemon dies.
    append(service, "a.md", "two\n")
    service, _bridge = restart(tmp_path, store)
    assert service.read("a.md")[1] == "# A\none\ntwo\n"  # not "# A\none\none\ntwo\n"
    assert (root / "a.md").read_text() == "# A\none\ntwo\n"
    service.store.close()


def test_a_file_write_begun_but_not_done_leaves_the_note_whole(tmp_path: Path) -> None:
    # ... and the daemon dies before replacing the file
    root, store, service, bridge = writing_a_after_one(tmp_path)
    service, _bridge = restart(tmp_path, store)
    assert service.read("a.md")[1] == "# A\none\n"  # the old file is not an edit deleting "one"
    assert (root / "a.md").read_text() == "# A\none\n"
    service.store.close()


def test_a_file_left_behind_its_note_is_written_at_the_next_start(tmp_path: Path) -> None:
    root, store, service, bridge = start(tmp_path)
    (root / "a.md").write_text("# A\n")
    bridge.reconcile()
    append(service, "a.md", "acknowledged\n")  # committed; the daemon dies before writing the file
    service, _bridge = restart(tmp_path, store)
    assert service.read("a.md")[1] == "# A\nacknowledged\n"
    assert (root / "a.md").read_text() == "# A\nacknowledged\n"
    service.store.close()


def test_a_note_never_written_out_is_written_at_the_next_start_not_deleted(tmp_path: Path) -> None:
    root, store, service, _bridge = start(tmp_path)
    service.write_text("agents/new.md", "created by an agent\n", "agent:a")  # acknowledged, no file yet
    service, _bridge = restart(tmp_path, store)
    row, text = service.read("agents/new.md")
    assert not row.deleted
    assert text == "created by an agent\n"
    assert (root / "agents/new.md").read_text() == "created by an agent\n"
    service.store.close()
