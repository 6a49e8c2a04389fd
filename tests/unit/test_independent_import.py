"""SPEC §3.7 / §3.10 in-process: two stores that imported the same folder independently
merge to one copy of every text; where their copies differ, each side's text appears once."""

from __future__ import annotations

from pathlib import Path

import pytest

from stet.sync.note_doc import NoteDoc
from stet.sync.note_merge import join_update, winner_of
from stet.sync.store import VaultStore
from stet.sync.vault_import import import_folder

EXT = (".md", ".markdown", ".txt")

SHARED = {
    "same.md": "# Same\n\nIdentical on both machines 😀 世界.\n",
    "nested/deep.md": "line one\r\nline two\r\n",
    "empty.md": "",
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text.encode())


def _import(tmp_path: Path, name: str, files: dict[str, str]) -> VaultStore:
    root = tmp_path / name
    root.mkdir()
    _write(root, files)
    store = VaultStore(tmp_path / f"{name}.db")
    import_folder(store, root, extensions=EXT, max_bytes=1 << 20)
    return store


def _doc(store: VaultStore, note_id: str) -> NoteDoc:
    return NoteDoc.from_updates(store.updates(note_id))


def _merge_notes(a: VaultStore, b: VaultStore, path: str) -> tuple[str, str]:
    """What two peers do for one path; returns the final text on each side."""
    ra, rb = a.note_at(path), b.note_at(path)
    assert ra is not None
    assert rb is not None
    doc_a, doc_b = _doc(a, ra.id), _doc(b, rb.id)
    if ra.id == rb.id:
        # One note: exchange state like any two peers do.
        doc_a.apply_update(doc_b.update_since(doc_a.state_vector()))
        doc_b.apply_update(doc_a.update_since(doc_b.state_vector()))
        return doc_a.text, doc_b.text
    # Two notes at one path: both sides perform the same deterministic join.
    win = winner_of(ra.id, rb.id)
    side_a_winner, side_a_loser = (doc_a, doc_b) if win == ra.id else (doc_b, doc_a)
    # Each side receives the other's notes, then joins on its own.
    results = []
    for _side in ("a", "b"):
        winner = NoteDoc.from_updates([side_a_winner.full_update()])
        update = join_update(winner, side_a_loser.text)
        if update is not None:
            winner.apply_update(update)
        results.append((winner, update))
    (wa, ua), (wb, ub) = results
    assert ua == ub, "the join must be deterministic"
    # Applying the other side's join update too adds nothing.
    if ub is not None:
        assert wa.apply_update(ub) is None
    return wa.text, wb.text


def test_identical_copies_get_identical_notes_and_merge_to_one_copy(tmp_path: Path) -> None:
    a = _import(tmp_path, "a", SHARED)
    b = _import(tmp_path, "b", SHARED)
    for path, text in SHARED.items():
        ra, rb = a.note_at(path), b.note_at(path)
        assert ra is not None
        assert rb is not None
        assert ra.id == rb.id
        assert a.updates(ra.id) == b.updates(rb.id)
        ta, tb = _merge_notes(a, b, path)
        assert ta == tb == text


def test_merging_full_states_of_identical_imports_never_doubles(tmp_path: Path) -> None:
    a = _import(tmp_path, "a", SHARED)
    b = _import(tmp_path, "b", SHARED)
    path = "same.md"
    ra, rb = a.note_at(path), b.note_at(path)
    assert ra is not None
    assert rb is not None
    merged = NoteDoc.from_updates(a.updates(ra.id) + b.updates(rb.id))
    assert merged.text == SHARED[path]


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (
            "# Plan\n\nshared intro\n\nA's idea\n\nshared outro\n",
            "# Plan\n\nshared intro\n\nB's idea 🚀\n\nshared outro\n",
        ),
        ("only A wrote this\n", "only B wrote this\n"),
        ("common\n", "common\nB added a line\n"),
        ("no final newline on A", "no final newline on A\nand B went on"),
        ("日本語\r\nA\r\n", "日本語\r\nB\r\n"),
    ],
)
def test_differing_copies_keep_each_sides_text_once(tmp_path: Path, left: str, right: str) -> None:
    a = _import(tmp_path, "a", {"daily/2026-11-29.md": left})
    b = _import(tmp_path, "b", {"daily/2026-11-29.md": right})
    ta, tb = _merge_notes(a, b, "daily/2026-11-29.md")
    assert ta == tb
    for line in set(left.splitlines()) | set(right.splitlines()):
        if line:
            assert ta.count(line) >= 1, f"lost {line!r}"
    for line in set(left.splitlines()) ^ set(right.splitlines()):
        if line:
            assert ta.count(line) == 1, f"{line!r} appears {ta.count(line)} times in {ta!r}"
    for line in set(left.splitlines()) & set(right.splitlines()):
        if line:
            assert ta.count(line) == left.count(line), f"shared {line!r} duplicated"


def test_same_path_created_empty_on_both_then_typed_holds_both(tmp_path: Path) -> None:
    """Today's daily note created empty on two machines, then typed into offline."""
    a = _import(tmp_path, "a", {"d.md": ""})
    b = _import(tmp_path, "b", {"d.md": ""})
    ra, rb = a.note_at("d.md"), b.note_at("d.md")
    assert ra is not None
    assert rb is not None
    assert ra.id == rb.id
    doc_a, doc_b = _doc(a, ra.id), _doc(b, rb.id)
    doc_a.set_text("A typed this\n")
    doc_b.set_text("B typed that\n")
    doc_a.apply_update(doc_b.update_since(doc_a.state_vector()))
    doc_b.apply_update(doc_a.update_since(doc_b.state_vector()))
    assert doc_a.text == doc_b.text
    assert doc_a.text.count("A typed this") == 1
    assert doc_a.text.count("B typed that") == 1
