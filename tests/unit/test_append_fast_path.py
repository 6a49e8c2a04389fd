"""An append is an insertion at the end (``NotesService.append_at_end``; issue 18, P2):
no diff and no second row lookup, yet the same text, revision and CRDT content as the
general path (``apply_splices`` with the splice at the end); a row read before the note
changed is not trusted -- the general path is taken with the note as it is."""

from __future__ import annotations

from pathlib import Path

from stet.daemon.notes.service import NotesService
from stet.sync.note_doc import NoteDoc
from stet.sync.store import VaultStore
from stet.sync.text_diff import Splice

LINES = ["first line\n", "é and 🎉 outside the BMP\n", "no newline at the end", "\r\nafter a CRLF\r\n"]


def _service(tmp_path: Path, name: str) -> NotesService:
    svc = NotesService("v", VaultStore(tmp_path / f"{name}.db"))
    svc.write_text("log.md", "# log\n", "cli")
    return svc


def test_the_fast_path_gives_what_the_general_path_gives(tmp_path: Path) -> None:
    fast, general = _service(tmp_path, "fast"), _service(tmp_path, "general")
    statements: list[str] = []
    fast.store.db.set_trace_callback(statements.append)
    for line in LINES * 3:
        row = fast.note_at("log.md")
        statements.clear()
        got = fast.append_at_end(row, line, "agent:a")
        assert not [s for s in statements if s.lstrip().upper().startswith("SELECT")]  # no second lookup
        text = general.doc(general.note_at("log.md").id).text
        want = general.apply_splices("log.md", [Splice(len(text), len(text), line)], "agent:a")
        assert got.changed
        assert got.note.revision == want.note.revision
        assert got.note.size == want.note.size
    fast.store.db.set_trace_callback(None)
    assert fast.read("log.md")[1] == general.read("log.md")[1] == "# log\n" + "".join(LINES * 3)
    # What is stored rebuilds the same text, and the revision is its hash.
    for svc in (fast, general):
        row = svc.note_at("log.md")
        rebuilt = NoteDoc.from_updates(svc.store.updates(row.id))
        assert rebuilt.text == svc.read("log.md")[1]
        assert rebuilt.revision == row.revision


def test_a_row_read_before_the_note_changed_takes_the_general_path(tmp_path: Path) -> None:
    svc = _service(tmp_path, "stale")
    stale = svc.note_at("log.md")
    svc.write_text("log.md", "# log\nsomeone else's line\n", "disk")  # changed under the row
    got = svc.append_at_end(stale, "my line\n", "agent:a")
    assert got.changed
    assert svc.read("log.md")[1] == "# log\nsomeone else's line\nmy line\n"  # nothing lost, at the end
    assert got.note.revision == svc.note_at("log.md").revision != stale.revision
    assert got.note.update_count == svc.note_at("log.md").update_count


def test_an_empty_append_changes_nothing(tmp_path: Path) -> None:
    svc = _service(tmp_path, "empty")
    row = svc.note_at("log.md")
    assert not svc.append_at_end(row, "", "agent:a").changed
    assert svc.note_at("log.md").revision == row.revision
