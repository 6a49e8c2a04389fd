"""A note's document goes on with its client id when it is reloaded (issue 35, P13): a
note evicted from the cache and edited again 300 times has one writing client of this
daemon in its state vector, not 300 (each one an entry in every snapshot, revision state
and disk base of the note). And the three ways reusing a client id could lose a write
(decision 7342) each stay safe: a unit rolled back (its client is not reused), a store
restored from a backup (a new process: a new client), two documents of one note in
memory (the one no longer cached refuses a local edit instead of making items the other
makes too). Real SQLite, real pycrdt documents merged as a peer would."""

from __future__ import annotations

import shutil
from pathlib import Path

import pycrdt
import pytest

from stet.daemon.notes.service import NotesService
from stet.sync.errors import CrdtError
from stet.sync.note_doc import TEXT_NAME, NoteDoc
from stet.sync.state_vectors import decode_state_vector
from stet.sync.store import VaultStore


def service_at(path: Path) -> NotesService:
    return NotesService("v", VaultStore(path))


def clients_of(service: NotesService, note_id: str) -> dict[int, int]:
    return decode_state_vector(service.doc(note_id).state_vector())


def merged_text(*updates: bytes) -> str:
    doc: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc()
    for u in updates:
        doc.apply_update(u)
    return str(doc.get(TEXT_NAME, type=pycrdt.Text))


def test_a_note_reloaded_before_each_edit_keeps_one_client(tmp_path: Path) -> None:
    service = service_at(tmp_path / "v.db")
    row = service.write_text("log.md", "# log\n", "agent:a").note
    for i in range(300):
        service.shrink_documents(0)  # as the daemon's settles and a busy cache do
        service.write_text("log.md", service.text_of(row.id) + f"- entry {i}\n", "agent:a")
    text = service.doc(row.id).text
    assert text.count("- entry ") == 300
    assert text.endswith("- entry 299\n")
    # the genesis client (the deterministic first import) and this daemon's one
    assert len(clients_of(service, row.id)) == 2
    assert NoteDoc.from_updates(service.store.updates(row.id)).text == text
    service.store.close()


def test_a_rolled_back_unit_does_not_lend_its_client_to_the_next_document(tmp_path: Path) -> None:
    service = service_at(tmp_path / "v.db")
    row = service.write_text("a.md", "one\n", "disk").note
    service.shrink_documents(0)
    service.write_text("a.md", "one\ntwo\n", "disk")
    before = set(clients_of(service, row.id))

    def rolled_back() -> None:
        with service.write("agent:a"):
            service.write_text("a.md", "one\ntwo\nrolled back\n", "agent:a")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        rolled_back()
    after = service.write_text("a.md", "one\ntwo\nthree\n", "agent:a").note
    assert after.revision
    stored = NoteDoc.from_updates(service.store.updates(row.id))
    assert stored.text == "one\ntwo\nthree\n" == service.doc(row.id).text
    # the client that made the rolled-back items is not the one that made "three"
    assert len(set(clients_of(service, row.id)) - before) == 1
    service.store.close()


def test_a_store_restored_from_a_backup_writes_with_a_new_client(tmp_path: Path) -> None:
    """A peer saw clocks of the old process's client that the backup lacks: the restored
    store's daemon (a new process) writes with another client, so the peer keeps both."""
    first = service_at(tmp_path / "v.db")
    row = first.write_text("a.md", "base\n", "disk").note
    first.store.checkpoint()
    shutil.copy(tmp_path / "v.db", tmp_path / "backup.db")
    first.write_text("a.md", "base\nseen by the peer\n", "disk")
    peer_has = first.doc(row.id).full_update()
    first.store.close()
    restored = service_at(tmp_path / "backup.db")
    restored.write_text("a.md", "base\nwritten after the restore\n", "disk")
    text = merged_text(peer_has, restored.doc(row.id).full_update())
    assert "seen by the peer" in text
    assert "written after the restore" in text
    restored.store.close()


def test_a_document_that_left_the_cache_refuses_a_local_edit(tmp_path: Path) -> None:
    service = service_at(tmp_path / "v.db")
    row = service.write_text("a.md", "one\n", "disk").note
    service.write_text("a.md", "one\ntwo\n", "disk")
    stale = service.doc(row.id)
    service.shrink_documents(0)
    current = service.doc(row.id)
    assert current is not stale
    assert current.client[0] == stale.client[0]  # the reload goes on with the client
    current.set_text("one\ntwo\nthree\n")
    with pytest.raises(CrdtError, match="stopped being the note's document"):
        stale.set_text("one\ntwo\nother\n")
    # a peer's update still applies to it (no item of this client is made)
    other = NoteDoc()
    other.set_text("from a peer\n")
    stale.apply_update(other.full_update())
    service.store.close()
