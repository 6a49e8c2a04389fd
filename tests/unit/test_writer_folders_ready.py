"""A batch's folders made ready once, not per file (issue 11, P8 on the peer): the
writer threads' ``mkdir`` and ``stat`` of each note's folder and of the temp folder were
most of their time for a small new note. A folder removed after it was made ready is made
again: no note of the batch is lost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stet.daemon.folder.bridge import FileBridge
from stet.daemon.notes.service import NotesService
from stet.sync.store import VaultStore
from tests.harness import until


def _synced(store: VaultStore) -> int:
    return int(store.db.execute("SELECT count(*) FROM notes WHERE disk_revision = revision").fetchone()[0])


async def test_a_batch_makes_each_folder_ready_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=(".md",), max_bytes=1 << 20)
    n, folders = 200, 4
    texts = {f"d{i % folders}/n{i}.md": f"note {i}\n" for i in range(n)}
    calls = {"mkdir": 0, "stat": 0}
    real_mkdir, real_stat = os.mkdir, os.stat

    def counting_mkdir(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).startswith(str(root)):
            calls["mkdir"] += 1
        return real_mkdir(path, *args, **kwargs)

    def counting_stat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).startswith(str(root)):
            calls["stat"] += 1
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", counting_mkdir)
    monkeypatch.setattr(os, "stat", counting_stat)
    with service.write("peer:A"):
        for path, text in texts.items():
            service.write_text(path, text, "peer:A")
    await until(lambda: _synced(store) == n, "every file written and recorded")
    # Before: two mkdir (the note's folder, the temp folder) and ~5 stats per note, so
    # >= 400 mkdir here. Now: the folders of a batch once (each folder, the temp folder),
    # a batch at most 256 notes -- a few batches on a loaded machine.
    assert calls["mkdir"] <= 4 * (folders + 1), calls
    assert calls["stat"] <= n, calls
    for path, text in texts.items():
        assert (root / path).read_text() == text
    assert not list(root.rglob(".stet-*.tmp"))
    bridge.close()
    store.close()


def test_a_notes_folder_removed_while_the_batch_is_written_is_made_again(tmp_path: Path) -> None:
    """The folder made for a batch's new notes is empty until their renames: removed then
    (an emptied folder tidied away), the renames found no folder -- the notes were lost."""
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=(".md",), max_bytes=1 << 20)
    writer = bridge.writer
    real_write_temp = writer.renames.write_temp
    calls: list[str] = []
    n = 20

    def remove_the_folder_before_the_last(plan):  # type: ignore[no-untyped-def]
        calls.append(plan.note_id)
        if len(calls) == n:  # every other temp file written, none renamed yet
            os.rmdir(root / "a")  # empty: the temp files are in the temp folder
        return real_write_temp(plan)

    writer.renames.write_temp = remove_the_folder_before_the_last  # type: ignore[method-assign]
    with service.write("agent:x"):
        for i in range(n):
            service.write_text(f"a/n{i}.md", f"note {i}\n", "agent:x")
    writer.flush_writes()
    assert len(calls) == n
    for i in range(n):
        assert (root / "a" / f"n{i}.md").read_text() == f"note {i}\n"
    assert _synced(store) == n
    bridge.close()
    store.close()


def test_a_temp_folder_gone_since_it_was_made_ready_is_made_again(tmp_path: Path) -> None:
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=(".md",), max_bytes=1 << 20)
    # Made ready earlier in the batch, gone since.
    bridge.writer.folders._ready[root / "a"] = root / ".stet-tmp-gone"
    with service.write("agent:x"):
        service.write_text("a/n.md", "note\n", "agent:x")
    bridge.writer.flush_writes()
    assert (root / "a" / "n.md").read_text() == "note\n"
    assert _synced(store) == 1
    assert not (root / ".stet-tmp-gone").exists()
    bridge.close()
    store.close()
