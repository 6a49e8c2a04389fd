"""The first flush to an empty folder, planned a batch at once (issue 18 P4): each folder's
components checked once per batch (``FolderChecks``, with ``resolve_inside``'s answers),
one ``lstat`` per file, the batch's rows looked up together and its files recorded in
sync in one unit -- with every file whole and recorded as our own write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stet.daemon.folder.bridge import FileBridge
from stet.daemon.folder.checks import FolderChecks
from stet.daemon.notes.service import NotesService
from stet.sync.note_paths import InvalidPath, resolve_inside
from stet.sync.store import VaultStore
from tests.harness import until

from .test_write_unit import counting_commits


def _answer(fn, rel: str) -> tuple[str, object]:  # type: ignore[no-untyped-def]
    try:
        return "ok", fn(rel)
    except InvalidPath as exc:
        return "refused", exc.reason


def _count_loads(store: VaultStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids whose documents are loaded from ``store`` from now on (in order)."""
    loads: list[str] = []
    real_updates = store.updates

    def counting_updates(note_id: str) -> list[bytes]:
        loads.append(note_id)
        return real_updates(note_id)

    monkeypatch.setattr(store, "updates", counting_updates)
    return loads


def test_folder_checks_answer_as_resolve_inside_does(tmp_path: Path) -> None:
    root = (tmp_path / "vault").resolve()
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "n.md").write_text("x")
    (root / "a" / "file.md").write_text("x")
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "e.md").write_text("x")
    os.symlink(root / "elsewhere", root / "linked")
    os.symlink(root / "a" / "file.md", root / "a" / "link.md")
    (root / "a" / "dir.md").mkdir()
    (root / "plain").write_text("a file where a folder is asked for")
    paths = ["a/b/n.md", "a/b/new.md", "a/missing/deeper/n.md", "top.md", "a/file.md",
             "linked/e.md", "linked/deeper/x.md", "a/link.md", "a/dir.md", "plain/x.md",
             "a/b/../n.md", "Cafe\u0301.md", "a/b/new.md"]
    checks = FolderChecks(root)
    for rel in paths:
        want = _answer(lambda p: resolve_inside(root, p), rel)
        got = _answer(lambda p: checks.target(p)[0], rel)
        assert got == want, rel
    target, st = checks.target("a/b/n.md")
    assert st is not None
    assert st.size == 1
    assert checks.target("a/b/new.md")[1] is None


async def test_a_first_flush_checks_each_folder_once_and_records_the_batch_together(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=(".md",), max_bytes=1 << 20)
    n = 200
    texts = {f"d{i % 4}/deep/er/n{i}.md": f"note {i}\n" + "line\n" * (i % 13) for i in range(n)}
    lstats = 0
    real_lstat = os.lstat

    def counting_lstat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal lstats
        if str(path).startswith(str(root)):
            lstats += 1
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counting_lstat)
    with counting_commits(store) as counter:
        with service.write("peer:A"):  # as a peer's slice arrives: one unit, then announced
            for path, text in texts.items():
                service.write_text(path, text, "peer:A")
        await until(lambda: store.db.execute(
            "SELECT count(*) FROM notes WHERE disk_revision = revision").fetchone()[0] == n,
            "every file written and recorded")
    # resolve_inside asked every folder of every path at the plan and again at the rename,
    # and the file was asked again after each: 11 per note (2,200 here). Now the file's
    # own lstat at the plan (none while its folder is missing), at the rename check, the
    # written temp file's, and each folder once per slice: ~3 per note.
    assert lstats <= 4 * n, lstats
    # The intake's commit, then per batch of 256: the writes begun (a unit per 20 ms slice
    # of planning: more slices on a loaded machine), the files in sync (128 per unit).
    assert counter.commits < n // 10, counter.commits
    for path, text in texts.items():
        assert (root / path).read_text() == text
        row = store.note_at(path)
        assert row is not None
        assert row.disk is not None
        st = real_lstat(root / path)
        assert (row.disk.mtime_ns, row.disk.size, row.disk.ino) == (st.st_mtime_ns, st.st_size, st.st_ino)
        assert row.disk.snapshot  # the base a later edit of the file is merged against
    # No write left marked as begun (a crash now would not take any file for ours half-done).
    assert store.db.execute("SELECT count(*) FROM meta WHERE key LIKE 'file_write:%'").fetchone()[0] == 0
    assert not list(root.rglob(".stet-*.tmp"))
    bridge.close()
    store.close()


async def test_a_peers_new_notes_are_written_without_loading_their_documents_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sender = NotesService("v", VaultStore(tmp_path / "a.db"), device_id="A")
    n = 300  # more than the service keeps loaded (256): the intake's copies are gone
    with sender.write("disk"):
        for i in range(n):
            sender.write_text(f"f{i % 3}/n{i}.md", f"note {i}\n" + "text\n" * (i % 7), "disk")
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    store = VaultStore(tmp_path / "b.db")
    receiver = NotesService("v", store, device_id="B")
    bridge = FileBridge(root, receiver, extensions=(".md",), max_bytes=1 << 20)
    receiver.apply_remote_index(sender.index.full_update(), "A")
    rows = sorted(sender.store.live_notes(), key=lambda r: r.id)
    items = [(r.id, sender.doc(r.id).full_update(), "peer:A", "A") for r in rows]
    loads = _count_loads(store, monkeypatch)
    done, failed = receiver.apply_remote_slice(items, 0, lambda: False)
    assert (done, failed) == (n, None)
    # One note is edited here before the writer gets to it: written with the edit.
    edited = rows[7]
    receiver.write_text(edited.path, receiver.text_of(edited.id) + "edited on B\n", "agent:x")
    await until(lambda: store.db.execute(
        "SELECT count(*) FROM notes WHERE disk_revision = revision").fetchone()[0] == n,
        "every file written and recorded")
    assert set(loads) <= {edited.id}  # no document loaded from the store to write a new note
    assert len(bridge.writer.fresh_notes) == 0  # nothing kept once written
    for row in rows:
        want = sender.text_of(row.id) + ("edited on B\n" if row.id == edited.id else "")
        assert (root / row.path).read_text() == want
        got = store.note(row.id)
        assert got is not None
        assert got.disk is not None
        assert got.disk.snapshot
        # the recorded base is the note's state: a file edit made now merges cleanly
        assert receiver.doc(row.id).fork_at(got.disk.snapshot).text == want
    bridge.close()
    store.close()
    sender.store.close()


def test_folder_checks_proven_looks_at_the_folders_only(tmp_path: Path) -> None:
    root = (tmp_path / "vault").resolve()
    (root / "a").mkdir(parents=True)
    (root / "elsewhere").mkdir()
    os.symlink(root / "elsewhere", root / "linked")
    os.symlink(root / "elsewhere", root / "a" / "link.md")
    checks = FolderChecks(root)
    assert checks.proven("a/new.md")
    assert checks.proven("a/link.md")  # the file is the rename's to check
    assert not checks.proven("missing/x.md")  # (made again by the rename: WriteRenames._place)
    with pytest.raises(InvalidPath):
        checks.proven("linked/x.md")
    # Only paths ``target`` took (validated) are asked again: target refuses the rest.
    with pytest.raises(InvalidPath):
        checks.target("a/../x.md")


def test_the_writer_takes_the_notes_whose_texts_it_kept_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiving peer's writer lags its intake by more new notes than ``FreshNotes``
    keeps: taken in id order, a flush loaded the documents of most of them again; the
    kept ones go first, so a flush of as many notes as are kept loads none."""
    from stet.daemon.folder.writer.fresh_notes import FreshNotes

    sender = NotesService("v", VaultStore(tmp_path / "a.db"), device_id="A")
    n = 120
    with sender.write("disk"):
        for i in range(n):
            sender.write_text(f"f{i % 3}/n{i}.md", f"note {i:03d}\n" + "text\n" * 4, "disk")
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    store = VaultStore(tmp_path / "b.db")
    receiver = NotesService("v", store, device_id="B")
    bridge = FileBridge(root, receiver, extensions=(".md",), max_bytes=1 << 20)
    writer = bridge.writer
    writer.fresh_notes = FreshNotes(max_bytes=40 * len("note 000\n" + "text\n" * 4))  # 40 of the 120
    receiver.apply_remote_index(sender.index.full_update(), "A")
    rows = sorted(sender.store.live_notes(), key=lambda r: r.path)  # arrival order: not the ids'
    items = [(r.id, sender.doc(r.id).full_update(), "peer:A", "A") for r in rows]
    assert receiver.apply_remote_slice(items, 0, lambda: False) == (n, None)
    kept = len(writer.fresh_notes)
    assert kept == 40
    receiver._docs.clear()  # (the intake's copies long gone, as in a bulk)
    loads = _count_loads(store, monkeypatch)
    todo = writer.take_dirty(busy_wait=True, at_most=kept)
    assert writer._write_batch(todo) == kept
    assert loads == []  # every one written from what the intake brought
    assert len(writer.fresh_notes) == 0
    assert len(writer.dirty) == n - kept
    bridge.close()
    store.close()


async def test_a_peers_intake_waits_for_the_writer_rather_than_outrun_what_it_keeps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """B applied a streamed bulk faster than its writer wrote it: past the 2 MB
    ``FreshNotes`` keeps, each note's document was loaded again to write it (P8: 4,700 of
    10,000). Before each slice of a peer's notes, while the kept texts crowd the cache, the
    flush in flight finishes first: every note is written from what its change brought."""
    from stet.daemon.base.loop_slices import TimeSlice
    from stet.daemon.folder.writer.fresh_notes import FreshNotes
    from stet.daemon.peers.session import PeerLink, PeerSession, VaultAccess
    from stet.sync import peer_protocol as pp

    sender = NotesService("v", VaultStore(tmp_path / "a.db"), device_id="A")
    n = 400  # more than the service keeps loaded (256): the intake's copies go
    with sender.write("disk"):
        for i in range(n):
            sender.write_text(f"f{i % 3}/n{i}.md", f"note {i:03d}\n" + "text\n" * 4, "disk")
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    store = VaultStore(tmp_path / "b.db")
    receiver = NotesService("v", store, device_id="B")
    bridge = FileBridge(root, receiver, extensions=(".md",), max_bytes=1 << 20, write_delay_s=0.0)
    writer = bridge.writer
    writer.fresh_notes = FreshNotes(max_bytes=20 * len("note 000\n" + "text\n" * 4))  # 20 of the 400
    receiver.apply_remote_index(sender.index.full_update(), "A")
    rows = sorted(sender.store.live_notes(), key=lambda r: r.path)
    batch = pp.UpdateBatch("v", [pp.UpdateItem(r.id, sender.doc(r.id).full_update(), "peer:A", "A")
                                 for r in rows])
    loads = _count_loads(store, monkeypatch)
    asked: dict[int, int] = {}  # a slice's over() calls since it began
    real_restart = TimeSlice.restart

    def ten_a_slice(self: TimeSlice) -> bool:  # slices of ten notes (half what is kept)
        asked[id(self)] = asked.get(id(self), 0) + 1
        return asked[id(self)] > 10

    def restart(self: TimeSlice) -> None:
        asked[id(self)] = 0
        real_restart(self)

    monkeypatch.setattr(TimeSlice, "over", ten_a_slice)
    monkeypatch.setattr(TimeSlice, "restart", restart)

    async def no_send(data: bytes) -> None:
        return None

    vault = VaultAccess("v", receiver, lambda device: True, room=writer.room_for_new_notes)
    link = PeerLink("A", no_send, initiator=True, vaults={"v"})
    session = PeerSession(link, "B", {"v": vault})
    await session.handle(pp.encode_updates(batch))
    await until(lambda: store.db.execute(
        "SELECT count(*) FROM notes WHERE disk_revision = revision").fetchone()[0] == n,
        "every file written and recorded")
    assert loads == []  # none loaded again to be written
    bridge.close()
    store.close()


def test_a_peers_new_notes_are_planned_without_a_unit_each_and_a_failed_plan_undoes_its_own_part(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A note planned from what its change brought (``FreshNotes``) records nothing, so its
    plan opens no nested unit (a SAVEPOINT and a RELEASE per note written); a plan that
    may record something still has one, and its failure undoes its part only."""
    sender = NotesService("v", VaultStore(tmp_path / "a.db"), device_id="A")
    n = 30
    with sender.write("disk"):
        for i in range(n):
            sender.write_text(f"f{i % 3}/n{i}.md", f"note {i:03d}\n", "disk")
    root = (tmp_path / "vault").resolve()
    root.mkdir()
    store = VaultStore(tmp_path / "b.db")
    receiver = NotesService("v", store, device_id="B")
    bridge = FileBridge(root, receiver, extensions=(".md",), max_bytes=1 << 20)
    writer = bridge.writer
    receiver.apply_remote_index(sender.index.full_update(), "A")
    rows = sorted(sender.store.live_notes(), key=lambda r: r.path)
    items = [(r.id, sender.doc(r.id).full_update(), "peer:A", "A") for r in rows]
    assert receiver.apply_remote_slice(items, 0, lambda: False) == (n, None)
    statements: list[str] = []
    store.db.set_trace_callback(statements.append)
    assert writer._write_batch(writer.take_dirty(busy_wait=False)) == n
    store.db.set_trace_callback(None)
    assert not [s for s in statements if s.startswith("SAVEPOINT")], statements
    # Not kept (edited here since): planned from its document, in a unit of its own.
    bad, good = rows[3], rows[4]
    for row in (bad, good):
        receiver.write_text(row.path, receiver.text_of(row.id) + "edited on B\n", "agent:x")
    real_plan = writer.plans._plan_from_doc

    def failing_for_bad(row, target, checked):  # type: ignore[no-untyped-def]
        store.set_meta(f"trace:{row.id}", "recorded by the plan")
        if row.id == bad.id:
            raise RuntimeError("this plan fails")
        return real_plan(row, target, checked)

    monkeypatch.setattr(writer.plans, "_plan_from_doc", failing_for_bad)
    assert writer._write_batch(writer.take_dirty(busy_wait=False)) == 1
    assert store.get_meta(f"trace:{bad.id}") is None  # undone with its own unit
    assert store.get_meta(f"trace:{good.id}") == "recorded by the plan"
    assert (root / good.path).read_text().endswith("edited on B\n")
    assert not (root / bad.path).read_text().endswith("edited on B\n")
    bridge.close()
    store.close()
    sender.store.close()
