"""A power loss between the writer's renames and the batch's ``syncfs`` (issue 11 P4),
through a real daemon: the state such a loss leaves -- an agent's change committed, the
write of its file recorded as begun, the file renamed into place but come back empty or
cut short -- is made offline on the stopped daemon's store and folder, and the daemon
started again. The note keeps every acknowledged word, the file is written again, and
nothing is taken as the user's edit: no version of a destruction, nothing held by the
burst brake."""

from __future__ import annotations

from pathlib import Path

from stet.daemon.folder.replica import FolderReplica
from stet.daemon.notes.service import NotesService
from stet.sync.store import VaultStore
from stet.sync.text_diff import Splice
from tests.harness import DaemonProcess, wait_until
from tests.integration.bridge_support import restart, start_daemon, vault_db
from tests.integration.git_support import nothing_held


def test_files_cut_short_by_a_power_loss_are_written_again_not_taken_as_edits(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    (vault / "a.md").write_text("# A\nfirst line\n")
    (vault / "keep.md").write_text("# untouched\n")
    d = start_daemon(home, vault, daemon_factory)
    d.wait_content("a.md", "# A\nfirst line\n")
    assert d.stop() == 0

    # What the daemon had done when the power went: an agent's append committed and a
    # peer's new note taken in; both files' writes recorded as begun, renamed into place,
    # and -- not made durable yet -- back empty / cut short after the reboot.
    db = vault_db(home)
    store = VaultStore(db)
    service = NotesService(db.stem, store)
    replica = FolderReplica(service)
    text = service.read("a.md")[1]
    service.apply_splices("a.md", [Splice(len(text), len(text), "acknowledged\n")], "agent:a")
    service.write_text("from-peer.md", "a peer's note\n", "peer:B")
    for path in ("a.md", "from-peer.md"):
        row = store.note_at(path)
        assert row is not None
        replica.begin_write(row.id)
    store.close()
    (vault / "a.md").write_bytes(b"# A\nfirst li")  # cut short
    (vault / "from-peer.md").write_bytes(b"")  # empty

    d = restart(home, daemon_factory)
    d.wait_content("a.md", "# A\nfirst line\nacknowledged\n")
    d.wait_content("from-peer.md", "a peer's note\n")
    wait_until(lambda: (vault / "a.md").read_text() == "# A\nfirst line\nacknowledged\n",
               timeout=30, what="a.md written again")
    wait_until(lambda: (vault / "from-peer.md").read_text() == "a peer's note\n",
               timeout=30, what="from-peer.md written again")
    assert d.content("keep.md") == "# untouched\n"
    nothing_held(d)
    assert d.stop() == 0
