"""Bulk work in batches (issue 11 P8, issue 18 P4): what a bulk intake or a first sync
does once per batch, not once per note.

- The search index takes a batch of notes in one commit of its own database (a worker
  thread's): FTS5 writes a segment per commit (it used to be a segment per note, and
  then a quarter of the loop, on the loop: P8's profiles).
- A turn of the loop's changes leave for a peer as one INDEX_UPDATE and one NOTE_UPDATES
  batch (an unzip of 10,000 files made 20,000 frames, each a unit of work on the peer).
- A peer applies a frame of notes in time slices, one unit per slice, the loop running
  between them (a first sync's 4 MB frame held the receiver's loop for seconds).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stet.daemon.base import loop_slices
from stet.daemon.base.loop_slices import TimeSlice
from stet.daemon.notes.changes import Change
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.peers import change_frames
from stet.daemon.peers.change_frames import BULK_CHANGES, ChangeFrames
from stet.daemon.peers.session import PeerLink, PeerSession, VaultAccess
from stet.sync import peer_protocol as pp
from stet.sync.search_index import SearchIndex, search_db_path
from stet.sync.store import VaultStore

from .test_write_unit import counting_commits


def test_a_batch_of_notes_is_indexed_in_one_commit_of_its_own_database(tmp_path: Path) -> None:
    # The index is written by its worker thread into its own database: the vault store
    # sees no commit for it, and the worker commits a batch at once, not a note.
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    keeper = RecordsKeeper(service, EventBus())
    n = 200
    with counting_commits(store) as counter:
        with service.write("cli"):
            for i in range(n):
                service.write_text(f"n{i}.md", f"word{i} common\n", "peer:B")
        keeper.flush_index()
    assert counter.commits == 1  # the notes' one unit; indexing commits elsewhere
    assert keeper.index.count() == n
    assert [h.path for h in keeper.index.search("word199")] == ["n199.md"]
    assert len(keeper.index.search("common", limit=1000)) == n
    keeper.close()
    store.close()


def test_a_put_alone_is_one_commit_and_a_failed_batch_indexes_nothing(tmp_path: Path) -> None:
    index = SearchIndex(search_db_path(tmp_path / "v.db"))
    index.put("a", "a.md", "r1", "alpha\n")
    try:
        with index.batch():
            index.put("b", "b.md", "r1", "beta\n")
            raise RuntimeError("the batch fails")
    except RuntimeError:
        pass
    assert [h.path for h in index.search("alpha")] == ["a.md"]
    assert index.search("beta") == []  # rolled back with its batch
    index.remove("a")
    assert index.search("alpha") == []
    assert index.count() == 0
    index.close()


# -- peers: a turn's changes as few frames, a frame applied in slices ------------------


def _session(service: NotesService, peer: str, me: str) -> tuple[PeerSession, list[bytes]]:
    sent: list[bytes] = []

    async def send(data: bytes) -> None:
        sent.append(data)

    link = PeerLink(peer, send, initiator=True, vaults={"v"})
    return PeerSession(link, me, {"v": VaultAccess("v", service, lambda device: True)}), sent


Peers = tuple[VaultStore, VaultStore, NotesService, dict[str, str], list[pp.Frame]]


def _peers_with_a_turn_of_notes(tmp_path: Path, n: int) -> Peers:
    """A's ``n`` new notes made in one unit, the frames they leave as, and B (not given them yet)."""
    store_a, store_b = VaultStore(tmp_path / "a.db"), VaultStore(tmp_path / "b.db")
    a, b = NotesService("v", store_a, device_id="A"), NotesService("v", store_b, device_id="B")
    heard: list[tuple[str, Change]] = []
    a.subscribe(lambda c: heard.append(("v", c)))
    texts = {f"d{i % 7}/n{i}.md": f"# note {i}\n\nbody {i}\n" for i in range(n)}
    with a.write("disk"):
        for path, text in texts.items():
            a.write_text(path, text, "disk")
    session, _ = _session(a, "B", "A")
    return store_a, store_b, b, texts, [pp.decode(f) for f in session.frames_for_changes(heard)]


def test_a_turns_changes_leave_as_one_index_frame_and_one_batch_and_converge(tmp_path: Path) -> None:
    store_a, store_b, b, texts, frames = _peers_with_a_turn_of_notes(tmp_path, 300)
    assert [f.type for f in frames] == [pp.INDEX_UPDATE, pp.NOTE_UPDATES]  # not 600 frames
    assert len(pp.decode_updates(frames[1]).items) == len(texts)
    b.apply_remote_index(frames[0].payload, "A")
    receiver, _ = _session(b, "A", "B")
    asyncio.run(receiver.handle(pp.encode(pp.NOTE_UPDATES, frames[1].header, frames[1].payload)))
    assert {r.path: b.doc(r.id).text for r in store_b.live_notes()} == texts
    store_a.close()
    store_b.close()


async def test_a_frame_cut_for_a_request_in_flight_waits_instead_of_a_unit_per_note(tmp_path: Path) -> None:
    """P8: while an agent's request was in flight, the receiving peer applied one note per
    turn, each its own unit (a commit): 956 units for 10,000 notes, half of one note. A
    slice cut before it began now does nothing that turn, as the folder's intake does; the
    frame is applied in a few units once the request is answered, and nothing is lost."""
    store_a, store_b, b, texts, (index_frame, notes_frame) = _peers_with_a_turn_of_notes(tmp_path, 200)
    b.apply_remote_index(index_frame.payload, "A")
    receiver, _ = _session(b, "A", "B")
    loop = asyncio.get_running_loop()
    token = loop_slices.request_arrived(loop)
    turns_in_flight = 30

    async def answer_later() -> None:
        for _ in range(turns_in_flight):
            await asyncio.sleep(0)
        loop_slices.request_answered(loop, token)

    answering = asyncio.create_task(answer_later())
    with counting_commits(store_b) as counter:
        await receiver.handle(pp.encode(pp.NOTE_UPDATES, notes_frame.header, notes_frame.payload))
    await answering
    assert {r.path: b.doc(r.id).text for r in store_b.live_notes()} == texts
    # One note a turn while the request was in flight made 30 units or more.
    assert counter.commits <= 200 // 64 + 3
    store_a.close()
    store_b.close()


async def test_while_a_bulk_flows_a_few_turns_of_changes_leave_as_one_pair_of_frames(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """P8: the intake made ~20 notes a turn, each turn's two small frames a unit of work on
    the peer. After a flush of a bulk's size, changes gather for ``BULK_GATHER_S``; after
    a quiet moment a change leaves in the next turn, as before."""
    monkeypatch.setattr(change_frames, "BULK_GATHER_S", 60.0)  # the timer is not waited for here
    store = VaultStore(tmp_path / "a.db")
    a = NotesService("v", store, device_id="A")
    heard: list[Change] = []
    a.subscribe(heard.append)
    session, _ = _session(a, "B", "A")
    sent: list[bytes] = []
    frames = ChangeFrames(session, sent.append)
    turn = 0

    def one_turn(n: int) -> None:
        nonlocal turn
        heard.clear()
        with a.write("disk"):
            for i in range(n):
                a.write_text(f"t{turn}/n{i}.md", f"note {turn} {i}\n", "disk")
        turn += 1
        for change in heard:
            frames.add("v", change)

    one_turn(1)  # quiet: the next turn
    assert isinstance(frames._handle, asyncio.Handle)
    assert not isinstance(frames._handle, asyncio.TimerHandle)
    await asyncio.sleep(0)
    assert len(sent) == 2  # its index update and its note
    one_turn(BULK_CHANGES)
    await asyncio.sleep(0)
    assert len(sent) == 4  # a bulk's first turn leaves at once
    for _ in range(3):  # three more turns of the bulk: gathered
        one_turn(20)
        await asyncio.sleep(0)
    assert len(sent) == 4
    assert isinstance(frames._handle, asyncio.TimerHandle)
    frames.flush()  # (its timer's doing)
    assert len(sent) == 6  # one index frame and one batch for the three turns, not six frames
    assert len(pp.decode_updates(pp.decode(sent[5])).items) == 60
    store.close()


def test_a_frame_of_notes_is_applied_in_slices_with_the_loop_running_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_a, store_b = VaultStore(tmp_path / "a.db"), VaultStore(tmp_path / "b.db")
    a, b = NotesService("v", store_a, device_id="A"), NotesService("v", store_b, device_id="B")
    heard: list[tuple[str, Change]] = []
    a.subscribe(lambda c: heard.append(("v", c)))
    with a.write("disk"):
        for i in range(40):
            a.write_text(f"n{i}.md", f"note {i}\n", "disk")
    session, _ = _session(a, "B", "A")
    index_frame, notes_frame = session.frames_for_changes(heard)
    b.apply_remote_index(pp.decode(index_frame).payload, "A")
    monkeypatch.setattr(TimeSlice, "over", lambda self: True)  # a slice per note
    receiver, _ = _session(b, "A", "B")
    applied_when_loop_ran: list[int] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()

        def tick() -> None:  # runs whenever the loop gets a turn
            applied_when_loop_ran.append(store_b.count_live())
            if store_b.count_live() < 40:
                loop.call_soon(tick)

        loop.call_soon(tick)
        with counting_commits(store_b) as counter:
            await receiver.handle(notes_frame)
        assert counter.commits >= 40  # one unit per slice
        await asyncio.sleep(0)

    asyncio.run(run())
    assert any(0 < n < 40 for n in applied_when_loop_ran)  # the loop ran mid-frame
    assert store_b.count_live() == 40
    store_a.close()
    store_b.close()


async def test_folders_made_for_our_own_writes_do_not_rescan_the_vault(tmp_path: Path) -> None:
    """A first sync writes notes into new folders: their ``dir_created`` events are ours
    (a rescan of the whole vault each, before); a folder someone else makes still is."""
    from stet.daemon.folder.bridge import FileBridge
    from stet.daemon.folder.watcher import FsEvent

    root = tmp_path / "vault"
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=(".md",), max_bytes=1 << 20)
    rescans: list[int] = []
    bridge.on_reconcile_needed = lambda: rescans.append(1)
    service.write_text("deep/sub/n.md", "from a peer\n", "peer:B")
    for _ in range(1000):  # bounded: ~10 s
        row = store.note_at("deep/sub/n.md")
        if row is not None and row.disk is not None and row.disk.revision == row.revision:
            break
        await asyncio.sleep(0.01)
    assert (root / "deep" / "sub" / "n.md").read_text() == "from a peer\n"
    bridge.on_fs_event(FsEvent("dir_created", "deep"))
    bridge.on_fs_event(FsEvent("dir_created", "deep/sub"))
    assert rescans == []
    (root / "theirs").mkdir()
    bridge.on_fs_event(FsEvent("dir_created", "theirs"))
    assert rescans == [1]
    bridge.close()
    store.close()


async def test_a_folder_of_ours_reported_twice_does_not_rescan_the_vault(tmp_path: Path) -> None:
    """watchdog reports a folder made just after it began to watch its parent twice (the
    kernel's event, and the one it makes up walking the parent): the second one, taken
    for a stranger's folder, rescanned the receiving peer's vault during P8's bulk. Once
    the folder goes, one made again at its path is a stranger's."""
    from stet.daemon.folder.bridge import FileBridge
    from stet.daemon.folder.watcher import FsEvent

    root = tmp_path / "vault"
    root.mkdir()
    store = VaultStore(tmp_path / "v.db")
    service = NotesService("v", store)
    bridge = FileBridge(root, service, extensions=(".md",), max_bytes=1 << 20)
    rescans: list[str] = []
    bridge.on_reconcile_needed = lambda: rescans.append("rescan")
    bridge.writer.folders.make_parents(root / "a" / "b")
    for _ in range(2):
        bridge.on_fs_event(FsEvent("dir_created", "a"))
        bridge.on_fs_event(FsEvent("dir_created", "a/b"))
    assert rescans == []
    (root / "a" / "b").rmdir()
    (root / "a").rmdir()
    bridge.on_fs_event(FsEvent("dir_deleted", "a"))  # (a folder's delete rescans, as before)
    assert rescans == ["rescan"]
    (root / "a" / "b").mkdir(parents=True)
    bridge.on_fs_event(FsEvent("dir_created", "a"))
    bridge.on_fs_event(FsEvent("dir_created", "a/b"))
    assert rescans == ["rescan"] * 3
    bridge.close()
    store.close()
