"""The folder replica passes the replica contract (``replica_contract.py``), on a real
temp folder, real files and a real SQLite store, with no event loop (the bridge's
offline path: a rescan takes in, a flush writes out) -- plus what is the folder's own:
its base is recorded in the unit of the edit, and the write path knows nothing of files.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from stet.daemon.folder.bridge import FileBridge
from stet.daemon.folder.replica import FolderReplica
from stet.daemon.notes.changes import Change
from stet.daemon.notes.service import NotesService
from stet.sync.folder_scan import read_note_file
from stet.sync.note_doc import revision_of
from stet.sync.note_rows import DiskState
from stet.sync.store import VaultStore

from .replica_contract import ReplicaContract

EXT = (".md",)


class FolderAdapter:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "vault"
        self.root.mkdir()
        self.store = VaultStore(tmp_path / "v.db")
        self.service = NotesService("v", self.store)
        self.bridge = FileBridge(self.root, self.service, extensions=EXT, max_bytes=1 << 20)
        self.heard: list[Change] = []
        self.service.subscribe(lambda c: self.heard.append(c) if c.kind != "index" else None)

    def make(self, path: str, text: str) -> None:
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)
        (self.root / path).write_text(text, encoding="utf-8")

    def edit(self, path: str, text: str) -> None:
        (self.root / path).write_text(text, encoding="utf-8")

    def remove(self, path: str) -> None:
        (self.root / path).unlink()

    def take_in(self) -> None:
        self.bridge.reconcile()

    def send_out(self) -> None:
        self.bridge.flush_writes()

    def copy(self, path: str) -> str | None:
        try:
            return (self.root / path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    @contextlib.contextmanager
    def failing_store(self) -> Iterator[None]:
        eio = sqlite3.OperationalError("disk I/O error")
        with mock.patch.object(VaultStore, "append_update", side_effect=eio):
            yield

    def close(self) -> None:
        self.bridge.close()
        self.store.close()


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[FolderAdapter]:
    adapter = FolderAdapter(tmp_path)
    yield adapter
    adapter.close()


class TestFolderReplica(ReplicaContract):
    """The shared suite, run on the folder."""


# -- what is the folder's own ------------------------------------------------------------


def _disk_state(root: Path, path: str) -> tuple[str, DiskState]:
    data, fst = read_note_file(root, path, 1 << 20)
    return data.decode(), DiskState(revision_of(data), fst.mtime_ns, fst.size, fst.ino)


def test_the_base_is_recorded_in_the_unit_of_the_edit(replica: FolderAdapter) -> None:
    """An ingest rolled back with its caller's unit leaves no note and no file state."""
    folder = replica.bridge.replica
    replica.make("a.md", "one\n")
    text, disk = _disk_state(replica.root, "a.md")

    def failing_unit() -> None:
        with replica.service.write("disk"):
            folder.ingest("a.md", text, disk)
            raise RuntimeError("the unit fails after the ingest")

    with pytest.raises(RuntimeError):
        failing_unit()
    assert replica.store.note_at("a.md") is None
    assert replica.heard == []
    result = folder.ingest("a.md", text, disk)
    assert result.changed
    row = replica.store.note_at("a.md")
    assert row is not None
    assert row.disk is not None
    assert (row.disk.revision, row.disk.ino) == (disk.revision, disk.ino)
    assert row.disk.snapshot is not None  # the base a later edit of the file is merged against


def test_a_file_edit_is_applied_as_an_update_made_on_the_files_base(replica: FolderAdapter) -> None:
    """The replica's merge goes through the write path's apply-style calls: with an agent
    edit not written out yet, the file's edit arrives as one ``changed`` Change whose
    update is the file's (made on a fork at its base), by the file's source."""
    replica.make("a.md", "# A\n")
    replica.take_in()
    replica.send_out()
    row = replica.store.note_at("a.md")
    assert row is not None
    replica.service.write_text("a.md", "# A\nagent\n", "agent:x")
    replica.edit("a.md", "# A\nfile\n")
    heard = len(replica.heard)
    replica.take_in()
    changes = replica.heard[heard:]
    assert [(c.kind, c.source) for c in changes] == [("changed", "disk")]
    assert changes[0].update is not None
    assert set(replica.service.read("a.md")[1].splitlines()) == {"# A", "agent", "file"}
    after = replica.store.note_at("a.md")
    assert after is not None
    assert after.disk is not None
    assert after.disk.revision == revision_of(b"# A\nfile\n")  # the file, not the merged note
    assert replica.bridge.pending_writes == 1  # the merged text is owed to the file


def test_the_write_path_has_no_file_bookkeeping() -> None:
    """Disk bookkeeping left ``NotesService``: it is the folder replica's."""
    for name in ("ingest_disk", "begin_disk_write", "mark_disk_synced"):
        assert not hasattr(NotesService, name)
        assert hasattr(FolderReplica, {"ingest_disk": "ingest", "begin_disk_write": "begin_write",
                                       "mark_disk_synced": "mark_synced"}[name])
