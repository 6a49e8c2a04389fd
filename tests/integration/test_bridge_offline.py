"""The file bridge across stops, restarts and kill -9 (SPEC §3.5, §3.6, §3.8, §6.6):
changes made while no daemon watched are picked up on start as diffs against the store.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.harness import DaemonProcess
from tests.integration.bridge_support import (
    MAX_BYTES_CONFIG,
    api_notes,
    assert_skipped,
    folder_notes,
    live_id,
    make_unsyncable,
    replayed_texts,
    restart,
    snapshot,
    start_daemon,
    stored_notes,
    stored_updates,
)


def test_a_rename_while_stopped_keeps_the_note(
    home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess],
) -> None:
    text = "# A\nrenamed while nobody watched 😀\n"
    (vault_dir / "a.md").write_text(text, encoding="utf-8")
    (vault_dir / "other.md").write_text("other\n", encoding="utf-8")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    note_id = live_id(home, "a.md")
    assert daemon.stop() == 0

    (vault_dir / "sub").mkdir()
    os.rename(vault_dir / "a.md", vault_dir / "sub" / "b.md")

    daemon = restart(home, daemon_factory)
    assert daemon.content("sub/b.md") == text
    assert daemon.content("a.md") is None
    assert live_id(home, "sub/b.md") == note_id
    assert not [n for n in stored_notes(home) if n.path == "a.md"]
    assert api_notes(daemon) == folder_notes(vault_dir)


def test_changes_made_while_stopped_are_picked_up_without_duplicating_text(
    home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess],
) -> None:
    edited_before = "# Edited\nfirst line 😀\nsecond line\n"
    edited_after = "# Edited\nfirst line 😀, longer now\nsecond line\nthird line 日本\n"
    moved_text = "# Moved\nthis one changes folders\n"
    files = {
        "edited.md": edited_before,
        "moved.md": moved_text,
        "deleted.md": "# Deleted\nremoved while stopped\n",
        "untouched.md": "# Untouched\n",
    }
    for name, text in files.items():
        (vault_dir / name).write_text(text, encoding="utf-8", newline="")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    assert api_notes(daemon) == files
    ids = {name: live_id(home, name) for name in files}
    assert daemon.stop() == 0

    (vault_dir / "edited.md").write_text(edited_after, encoding="utf-8", newline="")
    added = "# Added\nnew while stopped\r\n"
    (vault_dir / "added.md").write_text(added, encoding="utf-8", newline="")
    (vault_dir / "archive").mkdir()
    os.rename(vault_dir / "moved.md", vault_dir / "archive" / "moved.md")
    (vault_dir / "deleted.md").unlink()

    daemon = restart(home, daemon_factory)
    notes = api_notes(daemon)
    assert notes == folder_notes(vault_dir)
    assert sorted(notes) == ["added.md", "archive/moved.md", "edited.md", "untouched.md"]
    assert notes["edited.md"] == edited_after  # exactly: nothing doubled
    # The edit is a diff on the same note: its history is old text, then new text.
    assert live_id(home, "edited.md") == ids["edited.md"]
    assert replayed_texts(home, ids["edited.md"]) == [edited_before, edited_after]
    assert live_id(home, "archive/moved.md") == ids["moved.md"]
    assert live_id(home, "untouched.md") == ids["untouched.md"]
    assert [(n.path, n.deleted) for n in stored_notes(home) if n.id == ids["deleted.md"]] == [
        ("deleted.md", True)
    ]
    # A second restart with nothing changed changes nothing.
    counts = {name: len(stored_updates(home, i)) for name, i in ids.items()}
    assert daemon.stop() == 0
    daemon = restart(home, daemon_factory)
    assert api_notes(daemon) == notes
    assert {name: len(stored_updates(home, i)) for name, i in ids.items()} == counts


def test_an_ingested_edit_survives_kill_9(
    home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess],
) -> None:
    before = "# Durable\nline one\n"
    after = "# Durable\nline one\nline two, saved just before the crash 😀\n"
    (vault_dir / "durable.md").write_text(before, encoding="utf-8")
    daemon = start_daemon(home, vault_dir, daemon_factory)
    note_id = live_id(home, "durable.md")

    (vault_dir / "durable.md").write_text(after, encoding="utf-8")
    (vault_dir / "new.md").write_text("created just before the crash\n", encoding="utf-8")
    daemon.wait_content("durable.md", after)
    daemon.wait_content("new.md", "created just before the crash\n")
    daemon.kill9()

    # The store itself has both, before any restart could re-read them from disk.
    assert replayed_texts(home, note_id)[-1] == after
    assert replayed_texts(home, live_id(home, "new.md"))[-1] == "created just before the crash\n"
    updates = len(stored_updates(home, note_id))

    daemon = restart(home, daemon_factory)
    assert daemon.content("durable.md") == after
    assert daemon.content("new.md") == "created just before the crash\n"
    assert len(stored_updates(home, note_id)) == updates  # nothing re-imported
    assert api_notes(daemon) == folder_notes(vault_dir)


def test_unsyncable_files_present_at_start_are_skipped_and_left_alone(
    home: Path, vault_dir: Path, tmp_path: Path, daemon_factory: list[DaemonProcess],
) -> None:
    (vault_dir / "ok.md").write_text("a note that syncs\n", encoding="utf-8")
    outside = tmp_path / "outside"
    expected = make_unsyncable(vault_dir, outside)
    before = snapshot(vault_dir, outside)

    daemon = start_daemon(home, vault_dir, daemon_factory, config=MAX_BYTES_CONFIG)
    assert_skipped(daemon, home, expected)
    assert daemon.stop() == 0
    assert snapshot(vault_dir, outside) == before
