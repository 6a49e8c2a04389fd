"""How ``NotesService`` takes in what peers send, and when it tells them of deletes.

Composed into ``NotesService`` (``service.remote``; the service's public methods of the
same names call it), on the same single write path: what it needs of the service is
``RemoteCore``, typed, not the whole service. Kept apart so the service file stays
readable: applying a peer's index and content updates, bringing a
note's local row in line with its index entry (moves, deletes, edit-beats-delete,
two notes at one path), the state vectors a sync session compares, and the delayed
publication of local deletes that lets the burst brake hold a mass deletion before any
peer hears of it.
"""

from __future__ import annotations

import base64
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Protocol

import pycrdt

from stet.daemon.notes.changes import Change, MergedSides, WriteResult
from stet.daemon.notes.write_unit import WriteUnit, in_unit
from stet.sync.change_kinds import ChangeKind, peer_source
from stet.sync.errors import CrdtError
from stet.sync.note_doc import NoteDoc, join_updates, text_revision
from stet.sync.note_merge import join_update, winner_of
from stet.sync.note_rows import NoteRow
from stet.sync.peer_merge import includes_snapshot, mark_ids, merge_catch_up, name_sides, replay_mark
from stet.sync.revision_memory import RevisionMemory
from stet.sync.store import VaultStore
from stet.sync.text_merge import Overlap
from stet.sync.vault_index import INDEX_ID, NoteEntry, VaultIndex, should_resurrect

logger = logging.getLogger(__name__)

NEW_NOTES_BATCH = 64  # new notes looked up and written together (``_apply_new_notes``)


class RemoteCore(Protocol):
    """What peer intake needs of ``NotesService``: its store, index and documents, the
    unit of work, and the write path's own primitives (persist a note's update, put an
    index entry, announce a change) -- private to the write path: only the service and
    this module use them."""

    store: VaultStore
    index: VaultIndex
    device_id: str
    delete_delay_s: float
    clock: Callable[[], float]
    revisions: RevisionMemory
    _pending_deletes: dict[str, tuple[float, str | None]]
    _sv_cache: dict[str, bytes]

    @property
    def _docs(self) -> Mapping[str, NoteDoc]: ...

    def write(self, source: str = "") -> AbstractContextManager[WriteUnit]: ...

    def doc(self, note_id: str) -> NoteDoc: ...

    def _keep_doc(self, note_id: str, doc: NoteDoc) -> None: ...

    def delete(self, path: str, source: str, *, device: str | None = None,
               seen: bytes | None = None) -> NoteRow: ...

    def move(self, old_path: str, new_path: str, source: str, *, device: str | None = None) -> NoteRow: ...

    def _touch(self, note_id: str) -> None: ...

    def _emit(self, change: Change) -> None: ...

    def _emit_many(self, changes: list[Change]) -> None: ...

    def _emit_created(self, row: NoteRow, source: str, text: str, at: float,
                      device: str | None = None, *, whole: bytes | None = None) -> None: ...

    def _persist(self, row: NoteRow, doc: NoteDoc, update: bytes, source: str) -> NoteRow: ...

    def _changed(self, row: NoteRow, doc: NoteDoc, update: bytes, source: str, old_text: str, *,
                 device: str | None = None, size: tuple[int, int] | None = None,
                 merged: MergedSides | None = None) -> WriteResult: ...

    def _index_put(self, entry: NoteEntry, source: str) -> None: ...

    def _entry(self, row: NoteRow) -> NoteEntry: ...

    def last_writer(self, row: NoteRow) -> str: ...


class RemoteChanges:
    """Peers' changes taken in, and local deletes published to them once due."""

    def __init__(self, core: RemoteCore) -> None:
        self.core = core

    # What this uses of the core, by the names the methods below were written with.
    @property
    def store(self) -> VaultStore:
        return self.core.store

    @property
    def index(self) -> VaultIndex:
        return self.core.index

    @property
    def device_id(self) -> str:
        return self.core.device_id

    @property
    def revisions(self) -> RevisionMemory:
        return self.core.revisions

    @property
    def _pending_deletes(self) -> dict[str, tuple[float, str | None]]:
        return self.core._pending_deletes

    @property
    def _sv_cache(self) -> dict[str, bytes]:
        return self.core._sv_cache

    @property
    def _docs(self) -> Mapping[str, NoteDoc]:
        return self.core._docs

    def clock(self) -> float:
        return self.core.clock()

    def write(self, source: str = "") -> AbstractContextManager[WriteUnit]:
        return self.core.write(source)

    def doc(self, note_id: str) -> NoteDoc:
        return self.core.doc(note_id)

    def delete(self, path: str, source: str, *, device: str | None = None) -> NoteRow:
        return self.core.delete(path, source, device=device)

    def move(self, old_path: str, new_path: str, source: str, *, device: str | None = None) -> NoteRow:
        return self.core.move(old_path, new_path, source, device=device)

    def _touch(self, note_id: str) -> None:
        self.core._touch(note_id)

    def _emit(self, change: Change) -> None:
        self.core._emit(change)

    def _keep_doc(self, note_id: str, doc: NoteDoc) -> None:
        self.core._keep_doc(note_id, doc)

    def _emit_created(self, row: NoteRow, source: str, text: str, at: float,
                      device: str | None = None, *, whole: bytes | None = None) -> None:
        self.core._emit_created(row, source, text, at, device, whole=whole)

    def _persist(self, row: NoteRow, doc: NoteDoc, update: bytes, source: str) -> NoteRow:
        return self.core._persist(row, doc, update, source)

    def _changed(self, row: NoteRow, doc: NoteDoc, update: bytes, source: str, old_text: str, *,
                 device: str | None = None, merged: MergedSides | None = None) -> WriteResult:
        return self.core._changed(row, doc, update, source, old_text, device=device, merged=merged)

    def _index_put(self, entry: NoteEntry, source: str) -> None:
        self.core._index_put(entry, source)

    def _entry(self, row: NoteRow) -> NoteEntry:
        return self.core._entry(row)

    # -- local deletes, published to peers once due ------------------------------------

    def set_delete_delay(self, seconds: float) -> None:
        self.core.delete_delay_s = seconds
        now = self.clock()
        for note_id, (_due, basis) in self._pending_deletes.items():
            self._pending_deletes[note_id] = (now + seconds, basis)

    def pending_deletes(self) -> list[str]:
        return sorted(self._pending_deletes)

    def waiting_deletes(self, now: float, is_held: Callable[[str], bool]) -> tuple[int, float]:
        """Local deletes peers have not heard of yet and will once their delay passes
        (not held by the brake, not brought back): (how many, seconds until the last goes)."""
        count, last = 0, now
        for note_id, (due, _basis) in self._pending_deletes.items():
            if is_held(note_id):
                continue
            row = self.store.note(note_id)
            if row is None or not row.deleted:
                continue
            count += 1
            last = max(last, due)
        return count, last - now

    @in_unit
    def publish_due_deletes(self, now: float, is_held: Callable[[str], bool]) -> int:
        """Publish local deletes whose delay has passed and that the brake does not hold."""
        published = 0
        for note_id, (due, basis) in sorted(self._pending_deletes.items()):
            if due > now or is_held(note_id):
                continue
            del self._pending_deletes[note_id]
            undo = functools.partial(self._pending_deletes.__setitem__, note_id, (due, basis))
            self.store.on_rollback(undo)
            row = self.store.note(note_id)
            if row is None or not row.deleted:
                continue  # brought back (revert, restore) before anyone heard of the delete
            # The state the delete saw, recorded when it happened: edits that arrived
            # during the delay were not seen by it and bring the note back (SPEC §3.9).
            sv = basis or base64.b64encode(self.doc(note_id).state_vector()).decode()
            self._index_put(replace(self._entry(row), deleted=True, deleted_sv=sv,
                                    deleted_by=row.updated_by), row.updated_by)
            published += 1
        return published

    # -- changes from peers ----------------------------------------------------------

    @in_unit
    def apply_remote_index(self, update: bytes, device: str) -> None:
        """Apply a peer's index update and bring the notes it touched in line."""
        self._touch(INDEX_ID)
        new, changed = self.index.apply_update(update)
        if new is None:
            return
        self.store.append_update(INDEX_ID, new, f"peer:{device}")
        self._emit(
            Change(
                ChangeKind.INDEX,
                INDEX_ID,
                "",
                f"peer:{device}",
                None,
                None,
                at=self.clock(),
                update=new,
                device=device,
            )
        )
        # Only notes held here can need bringing in line: the others' content has not
        # arrived (their first content update brings them in). Found in one lookup per
        # batch of ids, not two queries and an index read per note (a first sync's
        # index names every note of the vault).
        ids = sorted(changed)
        held = self.store.held_notes(ids)
        for note_id in ids:
            if note_id in held:
                self._reconcile_entry(note_id, device)

    @in_unit
    def apply_remote_update(self, note_id: str, update: bytes, source: str, device: str,
                            peer_snapshot: bytes | None = None, peer_writer: str | None = None) -> None:
        """Apply a peer's content update (``source`` is who made it on ``device``).
        ``peer_snapshot``: a catch-up's, the peer's state when it built ``update``;
        ``peer_writer``: who last wrote the peer's text then, as the peer names it."""
        self._apply_remote_update(note_id, update, source, device, peer_snapshot, peer_writer)

    def apply_remote_slice(self, items: Sequence[tuple[str, bytes, str, str]], start: int,
                           over: Callable[[], bool], snapshots: Mapping[str, bytes] | None = None,
                           writers: Mapping[str, str] | None = None,
                           ) -> tuple[int, BaseException | None]:
        """Apply ``items[start:]`` -- (note id, update, source, device) each -- in one unit
        of work until ``over()``; returns (the index to go on from, the error of a bad item).
        ``snapshots`` and ``writers``: a catch-up's, by note (``apply_remote_update``).

        The notes share the unit without a unit (SAVEPOINT) each: that was a seventh of the
        receiving peer's loop in a first sync. If one fails, the whole unit rolls back and
        the slice is applied again one unit per note, so the notes before the bad one are
        kept (one commit, then announced) and the bad one's own unit undone, as before."""
        i = reached = start
        try:
            with self.write():
                while i < len(items):
                    # Notes never seen here, at free paths (a first sync): ``stet init``'s
                    # way, in a batch; any other item the careful way, one at a time.
                    reached = i + NEW_NOTES_BATCH
                    taken = self._apply_new_notes(items, i, over)
                    if taken:
                        i += taken
                    else:
                        reached = i + 1
                        self._apply_remote_update(*items[i], (snapshots or {}).get(items[i][0]),
                                                  (writers or {}).get(items[i][0]))
                        i += 1
                    if over():
                        break
            return i, None
        except BaseException:  # noqa: S110 -- (a pycrdt panic is one) applied again below, a unit per note
            pass
        end, i = min(reached, len(items)), start
        with self.write():
            while i < end:
                try:
                    self.apply_remote_update(*items[i], (snapshots or {}).get(items[i][0]),
                                             (writers or {}).get(items[i][0]))
                except BaseException as exc:  # (as the whole slice's was)
                    return i, exc
                i += 1
        return i, None

    def _apply_new_notes(self, items: Sequence[tuple[str, bytes, str, str]], start: int,
                         over: Callable[[], bool]) -> int:
        """Take in the run of ``items[start:]`` that are new notes here, the way ``stet
        init`` imports files; returns how many (0: the first item is not one).

        A new note is one this store holds nothing of (no row, no update, no document in
        memory), whose index entry is here, live, at a path no live note holds (nor an
        earlier note of the run), named once in the run. For it there is nothing to
        reconcile: its document is built once from the update, its row is live at once,
        and the run's rows and updates are two ``executemany`` statements. Any other item
        (a note that exists, was created meanwhile by an agent or a file here, a second
        update of the same note, a deleted entry, a path taken) ends the run and goes the
        careful way (``_apply_remote_update``). The run's Changes are announced after the
        unit's commit, as every change is."""
        # A slice already over (cut for a request waiting: requests first) takes one note:
        # look up that one, not the batch's 64 entries and rows for it (with an agent
        # polling, most of a receiving peer's slices were cut so, P8).
        batch = items[start : start + (1 if over() else NEW_NOTES_BATCH)]
        ids = [item[0] for item in batch]
        held = self.store.held_notes(ids)
        entries: list[NoteEntry] = []
        for note_id in ids:
            entry = None if note_id in held or note_id in self._docs else self.index.entry(note_id)
            if entry is None or entry.deleted:
                break
            entries.append(entry)
        if not entries:
            return 0
        taken_paths = self.store.live_paths([entry.path for entry in entries])
        rows: list[NoteRow] = []
        updates: list[tuple[str, bytes, str]] = []
        created: list[tuple[NoteRow, NoteDoc, bytes, str]] = []
        seen_ids: set[str] = set()
        now = self.clock()
        for (note_id, update, source, device), entry in zip(batch, entries, strict=False):
            if entry.path in taken_paths or note_id in seen_ids:
                break
            doc = NoteDoc()
            new_part = doc.apply_update(update)  # a bad update raises: the careful retry names it
            if new_part is None:
                break  # nothing in it: the careful way keeps what it does with that
            seen_ids.add(note_id)
            taken_paths.add(entry.path)
            row = NoteRow(note_id, entry.path, False, doc.revision, doc.byte_size, now, now, source, None, 1)
            rows.append(row)
            updates.append((note_id, new_part, source))
            created.append((row, doc, new_part, device))
            if over():
                break
        if not rows:
            return 0
        self.store.insert_new_notes(rows, updates)
        changes: list[Change] = []
        for row, doc, new_part, device in created:
            self._touch(row.id)  # forgotten if the unit rolls back
            self._keep_doc(row.id, doc)
            self._sv_cache.pop(row.id, None)
            text = doc.text
            changes.append(Change(ChangeKind.CREATED, row.id, row.path, row.updated_by, None, row.revision,
                                  at=now, text_before="", text_after=text, inserted=len(text),
                                  update=new_part, device=device, snapshot=doc.snapshot()))
        self.core._emit_many(changes)  # the in-unit records of the run in one statement (the log)
        return len(rows)

    def _apply_remote_update(self, note_id: str, update: bytes, source: str, device: str,
                             peer_snapshot: bytes | None = None, peer_writer: str | None = None) -> None:
        row = self.store.note(note_id)
        if row is None:
            # Content before its index entry: keep it; the entry creates the row.
            doc = self.doc(note_id)
            new_part = doc.apply_update(update)
            if new_part is not None:
                self._sv_cache.pop(note_id, None)
                self.store.append_update(note_id, new_part, source)
                self._emit(
                    Change(
                        ChangeKind.STORED,
                        note_id,
                        "",
                        source,
                        None,
                        None,
                        at=self.clock(),
                        update=new_part,
                        device=device,
                    )
                )
            self._reconcile_entry(note_id, device, have_content=True, source=source, absent=True)
            return
        if row.deleted:
            doc = self.doc(note_id)
            new_part = doc.apply_update(update)
            if new_part is None:
                return
            self._persist(row, doc, new_part, source)
            # Not shown here (deleted), but other peers may still need it: forward it.
            self._emit(
                Change(
                    ChangeKind.STORED,
                    note_id,
                    row.path,
                    source,
                    None,
                    None,
                    at=self.clock(),
                    update=new_part,
                    device=device,
                )
            )
            self._reconcile_entry(note_id, device, source=source)
            return
        doc = self.doc(note_id)
        old_text = doc.text
        snapshot = doc.snapshot()
        marks_before = mark_ids(doc)
        new_part = doc.apply_update(update)
        if new_part is None:
            return
        self.revisions.remember(row.id, row.revision, snapshot, self.clock())
        if peer_snapshot is not None:
            new_part = self._merge_catch_up(row, doc, snapshot, old_text, peer_snapshot, new_part,
                                            device, peer_writer)
        # Every overlap this device learns of now -- the one it just merged, or one a peer
        # merged and sent (this device's text one of its sides, or a third's) -- recorded
        # here once: a mark already held was recorded when it came.
        merged = self._overlaps_learnt(row, doc, mark_ids(doc) - marks_before, device)
        self._changed(row, doc, new_part, source, old_text, device=device, merged=merged)

    def _merge_catch_up(self, row: NoteRow, doc: NoteDoc, own_snapshot: bytes, own_text: str,
                        peer_snapshot: bytes, new_part: bytes, device: str,
                        peer_writer: str | None) -> bytes:
        """A catch-up both sides changed since they last met: the CRDT's text made the
        readable merge (``sync/peer_merge.py``), by the repair both devices make alike; an
        overlap's mark (in that repair) named with who wrote each side."""
        try:
            merge = merge_catch_up(doc, own_snapshot, own_text, peer_snapshot, self.device_id, device)
        except CrdtError:
            logger.warning("%s: cannot rebuild what this device and %s both had; keeping the CRDT's "
                           "merge", row.path, device[:7], exc_info=True)
            return new_part
        if merge is None or merge.repair is None:
            return new_part
        parts = [new_part, doc.apply_update(merge.repair)]
        if merge.mark is not None:
            # This side's text was last written by the log's newest writer of it (``disk on
            # D``: a person's save here); the peer's by whom it said (older peers say
            # nothing: its sync).
            parts.append(name_sides(doc, merge.mark.id, {
                self.device_id: self.core.last_writer(row),
                device: peer_writer or peer_source(device)}))
        return join_updates([u for u in parts if u is not None]) or new_part

    def _overlaps_learnt(self, row: NoteRow, doc: NoteDoc, new_marks: frozenset[str],
                         device: str) -> MergedSides | None:
        """The sides of the merge marks new to this device, as one record's: each device's
        earliest text among them (a later mark's side of a device that merged before holds
        that merge, whose sides are already here), with who wrote it."""
        chosen: dict[str, tuple[str, str, bytes]] = {}  # device -> (source, text, snapshot)
        overlaps: list[Overlap] = []
        for mark_id in sorted(new_marks):
            try:
                replayed = replay_mark(doc, mark_id)
            except CrdtError:
                logger.warning("%s: a merge mark from %s cannot be rebuilt; not recorded", row.path,
                               device[:7], exc_info=True)
                continue
            overlaps.extend(replayed.result.overlaps)
            for (key, text), (_, snap) in zip(replayed.sides, replayed.mark.sides, strict=True):
                known = chosen.get(key)
                if known is not None and not includes_snapshot(known[2], snap):
                    continue  # (the one kept is as early or earlier)
                mine = key == self.device_id
                fallback = self.core.last_writer(row) if mine else peer_source(key)
                chosen[key] = (replayed.sources.get(key, fallback), text, snap)
        if len(chosen) < 2 or not overlaps:
            return None
        keys = sorted(chosen)
        return MergedSides(tuple((chosen[k][0], chosen[k][1]) for k in keys), tuple(overlaps),
                           devices=tuple(keys), snapshots=tuple(chosen[k][2] for k in keys))


    def _reconcile_entry(
        self, note_id: str, device: str, *, have_content: bool = False, source: str | None = None,
        absent: bool = False,
    ) -> None:
        """Make the local row of a note match its index entry (path, deleted).

        A note whose content has not arrived yet is not materialised (no empty file
        written first and filled later); its first content message brings it in.
        ``absent``: the caller knows the note has no row (no need to look).
        """
        entry = self.index.entry(note_id)
        if entry is None:
            return
        source = source or f"peer:{device}"
        row = None if absent else self.store.note(note_id)
        if row is None and not have_content and self.store.update_rows(note_id) == 0:
            return
        doc = self.doc(note_id)
        if entry.deleted and should_resurrect(entry, doc.state_vector()):
            # Edited where the delete had not been seen: the edit wins, the note stays.
            entry = replace(entry, deleted=False, deleted_sv=None)
            self._index_put(entry, "resurrect")
        if row is None:
            text = doc.text
            now = self.clock()
            row = NoteRow(
                note_id,
                entry.path,
                True,
                text_revision(text),
                len(text.encode()),
                now,
                now,
                source,
                None,
                self.store.update_rows(note_id),
            )
            if not entry.deleted and self.store.note_at(entry.path) is None:
                # A new note at a free path (every note of a first sync): its live row at
                # once -- what a hidden row brought back by ``_bring_back`` ends as, with
                # one upsert and one lookup instead of two each.
                live = replace(row, deleted=False)
                self.store.put_note(live)
                self._emit_created(live, source, text, now, device)
                return
            self.store.put_note(row)
        if entry.deleted:
            if not row.deleted:
                self.delete(row.path, entry.deleted_by or source, device=device)
            return
        if row.deleted:
            self._bring_back(row, entry, source, device)
        elif row.path != entry.path:
            occupant = self.store.note_at(entry.path)
            if occupant is None:
                self.move(row.path, entry.path, source, device=device)
            else:
                self._path_clash(self.store.note(note_id) or row, occupant, entry.path, device)

    def _bring_back(self, row: NoteRow, entry: NoteEntry, source: str, device: str) -> None:
        occupant = self.store.note_at(entry.path)
        if occupant is not None and occupant.id != row.id:
            self._path_clash(row, occupant, entry.path, device)
            return
        doc = self.doc(row.id)
        text = doc.text
        now = self.clock()
        live = replace(
            row,
            path=entry.path,
            deleted=False,
            revision=text_revision(text),
            size=len(text.encode()),
            updated_at=now,
            updated_by=source,
            disk=None,
        )
        self.store.put_note(live)
        self._emit_created(live, source, text, now, device)

    def _path_clash(self, incoming: NoteRow, occupant: NoteRow, path: str, device: str) -> None:
        """Two notes claim one path (created on two machines, SPEC §3.7/§3.10).

        The smaller id wins the path. The loser's text is joined into the winner (pure
        inserts, deterministic) by the device that created the loser -- one writer, so
        the join is never made twice -- and the loser is marked merged. Until then the
        loser stays hidden here, never lost. The file keeps its bytes meanwhile: the
        winner has never been written there, so the bridge merges what the file holds
        additively (``FolderReplica.ingest`` with no known base) before writing the winner.
        """
        winner_id = winner_of(incoming.id, occupant.id)
        winner, loser = (incoming, occupant) if winner_id == incoming.id else (occupant, incoming)
        loser_entry = self.index.entry(loser.id) or NoteEntry(loser.id, path, creator=self.device_id)
        source = f"peer:{device}"
        now = self.clock()
        with self.store.transaction():
            self.store.put_note(replace(self.store.note(loser.id) or loser, deleted=True))
            current = self.store.note(winner.id) or winner
            if current.deleted or current.path != path:
                text = self.doc(winner.id).text
                current = replace(
                    current,
                    path=path,
                    deleted=False,
                    revision=text_revision(text),
                    size=len(text.encode()),
                    updated_at=now,
                    disk=None,
                )
                self.store.put_note(current)
            joined_here = loser_entry.creator in (self.device_id, "")
            if joined_here:
                update = join_update(self.doc(winner.id), self.doc(loser.id).text)
                if update is not None:
                    doc = self.doc(winner.id)
                    doc.apply_update(update)
                    current = self._persist(current, doc, update, "join")
                self._index_put(replace(loser_entry, deleted=True, merged_into=winner.id), "join")
        text = self.doc(winner.id).text
        logger.info("%s was created on two devices: joined into one note", path)
        # The join made here is ours to send to every peer, the one that caused it included.
        self._emit_created(current, "join" if joined_here else source, text, now,
                           None if joined_here else device)

    def content_states(self) -> list[tuple[str, bytes]]:
        """(note id, state vector) of every note this vault holds content for.

        Cached per note (a reconnect with nothing changed computes nothing twice); a
        note's entry is dropped whenever an update is persisted for it.
        """
        ids = [r[0] for r in self.store.db.execute("SELECT DISTINCT note_id FROM updates").fetchall()]
        out = []
        for note_id in ids:
            if note_id == INDEX_ID:
                continue
            sv = self._sv_cache.get(note_id)
            if sv is None:
                if note_id in self._docs:
                    sv = self._docs[note_id].state_vector()
                else:
                    updates = self.store.updates(note_id)
                    merged = updates[0] if len(updates) == 1 else pycrdt.merge_updates(*updates)
                    sv = bytes(pycrdt.get_state(merged))
                self._sv_cache[note_id] = sv
            out.append((note_id, sv))
        return out

