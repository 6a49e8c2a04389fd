"""A power loss between the writer's renames and the batch's ``syncfs`` (issue 11 P4:
no fsync per file; SPEC §3.3, §6.6): a file of ours renamed into place may come back
empty, cut short or zero-filled. It must never be taken as the user's edit -- the note
keeps its text and the file is written again -- and nothing is lost or doubled.

The "power loss" is simulated as in ``test_crash_windows``: the writes recorded as begun,
the file left as a power loss may leave it, the store closed, and a fresh service and
bridge on the same store and folder reconcile, as a restarted daemon does.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stet.daemon.base import atomic_files
from stet.sync.torn_writes import torn_write

from .test_crash_windows import append, restart, start, writing_a_after_one


@pytest.mark.parametrize("left", [b"", b"# A\non", b"# A\n\0\0\0\0", b"\0\0\0\0\0\0\0\0"])
def test_a_replaced_file_cut_short_by_a_power_loss_is_written_again(tmp_path: Path, left: bytes) -> None:
    # The writer begins writing "# A\none\n" and renames it into place; the power goes
    # before the batch's syncfs: the file comes back with less than was written.
    root, store, service, bridge = writing_a_after_one(tmp_path)
    (root / "a.md").write_bytes(left)
    service, _bridge = restart(tmp_path, store)
    assert service.read("a.md")[1] == "# A\none\n"  # not emptied, not cut
    assert (root / "a.md").read_text() == "# A\none\n"
    service.store.close()


def test_a_new_notes_file_left_empty_by_a_power_loss_is_written_again(tmp_path: Path) -> None:
    root, store, service, bridge = start(tmp_path)
    service.write_text("peer/new.md", "from a peer\n", "peer:b")
    row = store.note_at("peer/new.md")
    assert row is not None
    bridge.replica.begin_write(row.id)
    (root / "peer").mkdir()
    (root / "peer/new.md").write_bytes(b"")
    service, _bridge = restart(tmp_path, store)
    row2, text = service.read("peer/new.md")
    assert not row2.deleted
    assert text == "from a peer\n"
    assert (root / "peer/new.md").read_text() == "from a peer\n"
    service.store.close()


def test_a_cut_after_more_was_appended_keeps_everything(tmp_path: Path) -> None:
    root, store, service, bridge = writing_a_after_one(tmp_path)  # "# A\none\n" renamed into place ...
    append(service, "a.md", "two\n")  # ... more acknowledged meanwhile, then the power goes
    (root / "a.md").write_bytes(b"# A\n")
    service, _bridge = restart(tmp_path, store)
    assert service.read("a.md")[1] == "# A\none\ntwo\n"
    assert (root / "a.md").read_text() == "# A\none\ntwo\n"
    service.store.close()


def test_an_edit_of_a_file_with_no_write_left_by_a_crash_is_the_users(tmp_path: Path) -> None:
    """Only the writes a crash left are suspect: the same cut made by the user while the
    daemon runs (no write of ours pending from an earlier run) is their edit."""
    root, store, service, bridge = start(tmp_path)
    (root / "a.md").write_text("# A\none\n")
    bridge.reconcile()
    (root / "a.md").write_text("# A\n")
    bridge.reconcile()
    assert service.read("a.md")[1] == "# A\n"
    service, _bridge = restart(tmp_path, store)
    assert service.read("a.md")[1] == "# A\n"
    service.store.close()


def test_a_batch_of_files_is_made_durable_at_once_not_fsynced_one_by_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, store, service, bridge = start(tmp_path)
    for i in range(40):
        service.write_text(f"d{i % 4}/n{i}.md", f"note {i}\n", "peer:b")
    calls = {"fsync": 0}
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls["fsync"] += 1
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    assert bridge.flush_writes() == 40
    assert bridge.writer.durable_calls == 1  # one call for the batch ...
    if atomic_files._SYNCFS is not None:
        assert calls["fsync"] == 0  # ... one syncfs, no fsync per file or folder
    else:
        assert calls["fsync"] <= 40 + 5  # ... each file and folder once (no syncfs here)
    for i in range(40):
        assert (root / f"d{i % 4}/n{i}.md").read_text() == f"note {i}\n"
    row = store.note_at("d0/n0.md")
    assert row is not None
    assert row.disk is not None
    assert row.disk.revision == row.revision
    store.close()


def test_the_fsync_fallback_makes_each_file_and_folder_durable(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else str(fd))
        real_fsync(fd)

    (tmp_path / "d").mkdir()
    files = [tmp_path / "d" / f"f{i}.md" for i in range(3)]
    for f in files:
        f.write_text("x")
    monkeypatch.setattr(os, "fsync", recording_fsync)
    assert atomic_files.make_durable(files, {tmp_path / "d"}, use_syncfs=False) == "fsync"
    assert len(synced) == 4


def test_torn_write_rule() -> None:
    assert torn_write("", "abc")
    assert torn_write("ab", "abc")
    assert torn_write("\0\0\0", "abc")
    assert torn_write("a\0\0", "abc")
    assert not torn_write("abc", "abc")  # the whole write: ours, done
    assert not torn_write("abd", "abc")  # an edit
    assert not torn_write("abcd", "abc")  # an edit (something added)
    assert not torn_write("\0\0\0\0", "abc")  # longer than the write


def test_a_few_files_are_fsynced_each_not_by_a_syncfs(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A live editor's keystroke written out must not wait for other programs' writeback
    (what a ``syncfs`` of the whole file system waits for): a small batch fsyncs its own
    files and folders."""
    root, store, service, bridge = start(tmp_path)
    for i in range(3):
        service.write_text(f"n{i}.md", f"note {i}\n", "peer:b")
    calls = {"fsync": 0, "syncfs": 0}
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        calls["fsync"] += 1
        real_fsync(fd)

    def counting_syncfs(fd: int) -> int:
        calls["syncfs"] += 1
        return 0

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(atomic_files, "_SYNCFS", counting_syncfs)
    assert bridge.flush_writes() == 3
    assert calls == {"fsync": 3 + 1, "syncfs": 0}  # each file, and their one folder
    store.close()
