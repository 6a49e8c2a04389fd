"""The file bridge with the daemon running (SPEC §3): real daemon processes, real files,
real watchdog events. Offline changes, restarts and kill -9 are in test_bridge_offline.py.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stet.client.daemon_link import ApiError
from tests.harness import DaemonProcess, wait_until
from tests.integration.bridge_support import (
    MAX_BYTES_CONFIG,
    api_notes,
    assert_skipped,
    folder_notes,
    live_id,
    make_unsyncable,
    replayed_texts,
    snapshot,
    start_daemon,
    stored_notes,
    watch_while,
)

# -- 1. bytes round-trip ---------------------------------------------------------------

# (first save, second save): the second save edits inside and around multi-byte characters,
# so the diff's code-point → UTF-8 byte offset conversion is exercised, not just the import.
ROUND_TRIP = {
    "emoji.md": (
        "# Emoji 😀 and 👍🏽\nfamily 👨‍👩‍👧 here\nflags 🇫🇷🇯🇵\n",
        "# Emoji 😀😀 and 👍🏿\nfamily 👨‍👩‍👧‍👦 there\nflags 🇯🇵\n",
    ),
    "cjk.md": (
        "# 日本語のノート\n中文内容，还有한국어。\n第三行\n",
        "# 日本語の新しいノート\n中文内容，한국어。\n第三行と四行\n",
    ),
    "combining.md": (
        "cafe\u0301 n\u0303o\u0308 a\u030a\nZ\u0336\u0353a\u0337lgo\n",
        "cafe\u0301\u0301 n\u0303 o\u0308 a\u030a\nZ\u0336a\u0337\u0353lgo!\n",
    ),
    "crlf.md": (
        "line one\r\nline two\r\n\r\nlast\r\n",
        "line one\r\nline 2\r\n\r\nnew\r\nlast\r\n",
    ),
    "bom.md": (
        "\ufeff# With a BOM\nbody\n",
        "\ufeff# With a BOM 😀\nbody\nmore\n",
    ),
    "no-final-newline.md": (
        "no newline at the end 😀",
        "still no newline at the end 😀 日本",
    ),
    "all-at-once.txt": (
        "\ufeffBOM, CRLF 😀\r\ne\u0301 中文\r\nno final newline",
        "\ufeffBOM, CRLF 😀👍\r\ne\u0301\u0302 中文字\r\nstill no final newline",
    ),
}


def _assert_stored_exactly(daemon: DaemonProcess, path: str, data: bytes) -> None:
    note = daemon.read(path)
    assert note["content"].encode("utf-8") == data, path
    assert note["revision"] == hashlib.sha256(data).hexdigest(), path


def test_saved_text_reaches_the_store_byte_for_byte(daemon: DaemonProcess, vault_dir: Path) -> None:
    for step in (0, 1):
        for name, texts in ROUND_TRIP.items():
            (vault_dir / name).write_bytes(texts[step].encode("utf-8"))
        for name, texts in ROUND_TRIP.items():
            daemon.wait_content(name, texts[step])
            _assert_stored_exactly(daemon, name, texts[step].encode("utf-8"))
    # The daemon wrote nothing back: the files hold exactly what was saved.
    for name, texts in ROUND_TRIP.items():
        assert (vault_dir / name).read_bytes() == texts[1].encode("utf-8")


# -- 2. settle before reading -------------------------------------------------------------

OLD = "".join(f"old line {i:02d}: the note as it stood before the save\n" for i in range(40))
NEW = "".join(
    f"new line {i:02d}: rewritten 😀 by the editor\n" if i % 3 else f"old line {i:02d}: kept\n"
    for i in range(40)
)
def _chunks(data: bytes, n: int = 4) -> list[bytes]:
    size = -(-len(data) // n)
    return [data[i : i + size] for i in range(0, len(data), size)]


def _vault(daemon: DaemonProcess) -> dict[str, int]:
    return dict(daemon.client.status()["vaults"][0])


def seen_mid_write(daemon: DaemonProcess) -> None:
    """Wait until the daemon holds the note as a read pending: it has seen the file
    mid-write and waits for the writer to finish (not a pause: an observed state)."""
    wait_until(lambda: _vault(daemon)["pendingReads"] >= 1, timeout=10,
               what="the daemon to see the file mid-write")


def editor_save(path: Path, data: bytes, daemon: DaemonProcess) -> None:
    """Atomic save: a temp file in the same folder (written in pieces), then os.replace."""
    tmp = path.with_name(f".goutputstream-{os.getpid()}")
    with open(tmp, "wb") as f:
        for chunk in _chunks(data):  # not a note: the daemon has nothing to see until the rename
            f.write(chunk)
            f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def vim_save(path: Path, data: bytes, daemon: DaemonProcess) -> None:
    """vim with `backupcopy=no`: rename note -> note~, write a new note, delete note~."""
    backup = path.with_name(path.name + "~")
    os.rename(path, backup)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.unlink(backup)


def vim_save_slow(path: Path, data: bytes, daemon: DaemonProcess) -> None:
    """The same, with the new file written in pieces (a big note, a slow disk)."""
    backup = path.with_name(path.name + "~")
    os.rename(path, backup)
    with open(path, "wb") as f:
        for chunk in _chunks(data):
            seen_mid_write(daemon)  # the new file is empty, then partial
            f.write(chunk)
            f.flush()
    os.unlink(backup)


def truncate_and_write_slowly(path: Path, data: bytes, daemon: DaemonProcess) -> None:
    """One open handle: truncate to empty, then write in four chunks, then close; before
    each chunk the daemon has seen the file as it stands (empty, then partial)."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.flush()
        for chunk in _chunks(data):
            seen_mid_write(daemon)
            f.write(chunk)
            f.flush()


def truncate_and_write_slowly_during_a_rescan(path: Path, data: bytes, daemon: DaemonProcess) -> None:
    """The same, with a rescan run while the file is partial, before each chunk: a folder
    holding one non-note file is moved into the vault (a rescan follows), and the chunk
    waits until the daemon counts that file (the rescan has run)."""
    outside = path.parent.parent / f"{path.parent.name}-incoming"
    with open(path, "r+b") as f:
        f.truncate(0)
        f.flush()
        for i, chunk in enumerate(_chunks(data)):
            folder = outside / f"folder-{i}"
            folder.mkdir(parents=True)
            (folder / "attachment.bin").write_bytes(b"\0")
            os.rename(folder, path.parent / f"folder-{i}")
            wait_until(lambda n=i + 1: _vault(daemon)["otherFiles"] >= n, timeout=10,
                       what="a rescan while the file is partial")
            f.write(chunk)
            f.flush()


@pytest.mark.parametrize(
    "save",
    [editor_save, vim_save, vim_save_slow, truncate_and_write_slowly,
     truncate_and_write_slowly_during_a_rescan],
    ids=lambda f: f.__name__,
)
def test_a_save_in_progress_never_becomes_an_edit(
    save: Callable[[Path, bytes, DaemonProcess], None], home: Path, vault_dir: Path,
    daemon_factory: list[DaemonProcess],
) -> None:
    note = vault_dir / "note.md"
    note.write_text(OLD, encoding="utf-8")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    daemon.wait_content("note.md", OLD)
    note_id = live_id(home, "note.md")

    with ThreadPoolExecutor(max_workers=1) as pool:
        work = pool.submit(save, note, NEW.encode("utf-8"), daemon)
        seen = watch_while(daemon, "note.md", {OLD, NEW}, NEW, work)
    assert set(seen) <= {OLD, NEW}

    # Every state the store ever held, replayed update by update from the store itself.
    texts = replayed_texts(home, note_id)
    assert texts[0] == OLD
    assert texts[-1] == NEW
    bad = [t for t in texts if t not in (OLD, NEW)]
    assert not bad, f"intermediate texts in the store: {[t[:60] for t in bad]}"
    # Same note (identity and history kept), nothing else was made of the save.
    assert live_id(home, "note.md") == note_id
    assert api_notes(daemon) == {"note.md": NEW}
    assert note.read_bytes() == NEW.encode("utf-8")


# -- 3. renames -----------------------------------------------------------------------------


MOVES = {"a.md": "sub1/b.md", "c.md": "sub2/d.md", "e.md": "sub3/deeper/f.md"}


@pytest.mark.parametrize("target_dir", ["existing", "created-just-before"])
def test_a_rename_on_disk_keeps_the_note(
    target_dir: str, home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess],
) -> None:
    for old in MOVES:
        (vault_dir / old).write_text(f"# {old}\nthe note that moves 😀\n", encoding="utf-8")
    if target_dir == "existing":
        for new in MOVES.values():
            (vault_dir / new).parent.mkdir(parents=True)
    (vault_dir / "stays.md").write_text("stays\n", encoding="utf-8")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    ids = {old: live_id(home, old) for old in MOVES}

    for old, new in MOVES.items():  # one at a time: each is its own try at the race below
        if target_dir == "created-just-before":
            # `mkdir -p sub && mv a.md sub/b.md`: the rename may beat the new folder's
            # watch and then arrive as a delete and a create, with a rescan in between.
            (vault_dir / new).parent.mkdir(parents=True)
        os.rename(vault_dir / old, vault_dir / new)
        daemon.wait_content(new, f"# {old}\nthe note that moves 😀\n")
        daemon.wait_content(old, None)
    for old, new in MOVES.items():
        assert live_id(home, new) == ids[old], f"{old} -> {new} lost the note's identity"
        assert [n.path for n in stored_notes(home) if n.id == ids[old]] == [new]
        assert not [n for n in stored_notes(home) if n.path == old], f"{old} left a row behind"
    assert api_notes(daemon) == folder_notes(vault_dir)


# -- 4. deletes -------------------------------------------------------------------------------


def test_a_delete_on_disk_deletes_the_note(
    home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess],
) -> None:
    (vault_dir / "gone.md").write_text("about to be deleted\n", encoding="utf-8")
    (vault_dir / "stays.md").write_text("stays\n", encoding="utf-8")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    note_id = live_id(home, "gone.md")

    (vault_dir / "gone.md").unlink()

    daemon.wait_content("gone.md", None)
    with pytest.raises(ApiError) as excinfo:
        daemon.read("gone.md")
    assert excinfo.value.code == "not_found"
    assert excinfo.value.http_status == 404
    rows = [(n.path, n.deleted) for n in stored_notes(home) if n.id == note_id]
    assert rows == [("gone.md", True)]
    assert api_notes(daemon) == {"stays.md": "stays\n"}


# -- 6. skipped files (created while the daemon runs; before start: test_bridge_offline) ---------

def test_unsyncable_files_created_while_running_are_skipped_and_left_alone(
    home: Path, vault_dir: Path, tmp_path: Path, daemon_factory: list[DaemonProcess],
) -> None:
    (vault_dir / "ok.md").write_text("a note that syncs\n", encoding="utf-8")
    daemon = start_daemon(home, vault_dir, daemon_factory, config=MAX_BYTES_CONFIG)
    outside = tmp_path / "outside"
    expected = make_unsyncable(vault_dir, outside)
    before = snapshot(vault_dir)

    def reported() -> set[str]:
        (vault,) = daemon.client.status()["vaults"]
        return {s["path"] for s in vault["skipped"]}

    wait_until(lambda: set(expected) <= reported(), what="every unsyncable file to be reported")
    assert_skipped(daemon, home, expected)
    # Edit the link targets outside the vault: whatever events reach us through the links,
    # nothing is imported (ok.md, saved last, is the barrier).
    (outside / "secret.md").write_text("outside, edited\n", encoding="utf-8")
    (outside / "dir" / "inner.md").write_text("inside, edited\n", encoding="utf-8")
    (vault_dir / "ok.md").write_text("a note that syncs\nbarrier\n", encoding="utf-8")
    daemon.wait_content("ok.md", "a note that syncs\nbarrier\n")
    assert api_notes(daemon) == {"ok.md": "a note that syncs\nbarrier\n"}
    after = snapshot(vault_dir)
    del before[vault_dir / "ok.md"], after[vault_dir / "ok.md"]
    assert after == before  # not one byte of a skipped file changed
    outside_before = snapshot(outside)

    # Once they are gone, they are no longer reported.
    for path in expected:
        (vault_dir / path).unlink()  # a symlink itself, never its target
    wait_until(lambda: not reported(), what="the skipped list to empty")
    assert daemon.stop() == 0
    assert snapshot(outside) == outside_before


# -- 8. ignore rules ----------------------------------------------------------------------------


def test_stetignore_present_at_start_keeps_a_folder_out(
    home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess],
) -> None:
    (vault_dir / ".stetignore").write_text("drafts/\n", encoding="utf-8")
    (vault_dir / "drafts").mkdir()
    (vault_dir / "drafts" / "wip.md").write_text("not for syncing\n", encoding="utf-8")
    (vault_dir / "ok.md").write_text("syncs\n", encoding="utf-8")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    assert api_notes(daemon) == {"ok.md": "syncs\n"}

    # A draft saved while running stays out too (ok.md, saved after it, is the barrier).
    (vault_dir / "drafts" / "later.md").write_text("also not\n", encoding="utf-8")
    (vault_dir / "ok.md").write_text("syncs\nagain\n", encoding="utf-8")
    daemon.wait_content("ok.md", "syncs\nagain\n")
    assert api_notes(daemon) == {"ok.md": "syncs\nagain\n"}
    assert [n.path for n in stored_notes(home)] == ["ok.md"]


def test_stetignore_saved_while_running_keeps_a_folder_out(
    home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess],
) -> None:
    (vault_dir / "drafts").mkdir()  # exists already: no folder event will trigger a rescan
    (vault_dir / "ok.md").write_text("syncs\n", encoding="utf-8")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    # Saved the way editors save: a temp file, renamed onto .stetignore.
    tmp = vault_dir / ".stetignore.part"
    tmp.write_text("drafts/\n", encoding="utf-8")
    os.replace(tmp, vault_dir / ".stetignore")
    (vault_dir / "drafts" / "wip.md").write_text("not for syncing\n", encoding="utf-8")
    (vault_dir / "ok.md").write_text("syncs\nagain\n", encoding="utf-8")  # the barrier
    daemon.wait_content("ok.md", "syncs\nagain\n")
    assert api_notes(daemon) == {"ok.md": "syncs\nagain\n"}
    assert [n.path for n in stored_notes(home)] == ["ok.md"]


# -- 9. clean shutdown ----------------------------------------------------------------------------


def test_clean_shutdown_removes_daemon_json(daemon: DaemonProcess, home: Path) -> None:
    assert (home / "daemon.json").exists()
    assert daemon.stop() == 0
    assert not (home / "daemon.json").exists()
    assert not (home / "stet.sock").exists()
