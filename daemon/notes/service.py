"""The one place every write goes through, whatever its source.

Disk edits, agents, peers, restores and the CLI all end in ``NotesService``: it asks the
guards (the brake may refuse an agent's destructive write), remembers the state behind
the revision that is about to be replaced (``baseRevision``), turns the new text into a
minimal CRDT diff, persists the update (committed before the call returns), updates the
note's index row and tells listeners (the file bridge writes non-disk changes to disk;
the records keeper logs, indexes and publishes events; versions and the brake watch).
Every method is synchronous and runs on the daemon's event loop, so each write is
atomic with respect to every other.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace

from stet.daemon.base.memory import release_connection
from stet.daemon.notes.append_batch import AppendBatch
from stet.daemon.notes.changes import (
    Change,
    Destruction,
    Guard,
    Listener,
    MergedSides,
    NewFile,
    WriteResult,
    change_size,
    splices_size,
)
from stet.daemon.notes.remote_changes import RemoteChanges
from stet.daemon.notes.write_unit import WriteUnit, in_unit
from stet.sync.brake import GIT
from stet.sync.change_kinds import CONTENT_KINDS, ChangeKind, Source, is_git, made_on
from stet.sync.change_log import ChangeLog
from stet.sync.destruction import classify
from stet.sync.errors import AlreadyExists, BaseNotRebuilt, CrdtError, NotFound
from stet.sync.note_doc import NoteDoc, genesis_note_id, join_updates
from stet.sync.note_rows import NoteRow
from stet.sync.peer_merge import mark_here, mark_of, same_lines
from stet.sync.read_memory import ReadMemory
from stet.sync.revision_memory import RevisionMemory
from stet.sync.store import VaultStore
from stet.sync.text_diff import Splice, apply_splices
from stet.sync.text_merge import MergeResult, Side, merge_texts
from stet.sync.vault_import import genesis_row
from stet.sync.vault_index import INDEX_ID, Member, NoteEntry, VaultIndex
from stet.sync.versions import VersionPolicy

logger = logging.getLogger(__name__)

DOC_CACHE_SIZE = 256  # documents kept loaded (~10 KB each for a 5 KB note)
MAX_CLIENTS_KEPT = 20_000  # notes whose client id a reload goes on with (~150 B each)
DISK_SOURCE = Source.DISK
DISK_SOURCES = frozenset({DISK_SOURCE, GIT})  # what a file in the vault says (git: SPEC §3.16)
ManyListener = Callable[[Sequence[Change]], None]


class NotesService:
    _append_batch: AppendBatch | None = None  # a group of appends under way (append_batch.py)

    def __init__(
        self, vault_id: str, store: VaultStore, *, clock: Callable[[], float] = time.time, device_id: str = ""
    ):
        self.vault_id = vault_id
        self.store: VaultStore = store
        self.clock = clock
        self.device_id = device_id
        self.index = VaultIndex.from_updates(store.updates(INDEX_ID))
        self._docs: OrderedDict[str, NoteDoc] = OrderedDict()
        # Each note's client id (and the edits made with it) when its document left the
        # cache: the next load writes with it again, so a note evicted and edited 1,000
        # times has one client here, not 1,000 (each a state-vector entry in every snapshot,
        # revision state and disk base of it: issue 35, P13). Its clock goes on from the
        # store, which holds every update made with it that anyone saw (peers and live
        # editors hear of a change after its commit). Per process: a store restored from
        # a backup, whose clocks peers may have seen past, is opened by a new process.
        self._clients: dict[str, tuple[int, int]] = {}
        self._listeners: list[Listener] = []  # told after the unit's commit
        self._unit_listeners: list[Listener] = []  # told inside the unit (they keep records)
        # The same listeners' way to hear of many changes at once (None: one at a time).
        self._unit_many: list[ManyListener | None] = []
        self._units: list[WriteUnit] = []  # the open units, innermost last
        self.guards: list[Guard] = []
        # The rule of a large deletion (``[versions]``), set by the versions keeper: what
        # ``Change.destruction`` calls a shrink.
        self.shrink_policy: VersionPolicy | None = None
        self.revisions = RevisionMemory(store)
        self.reads = ReadMemory()  # the revision each token was last given (its rewrites' base)
        self._sv_cache: dict[str, bytes] = {}
        # Local deletes not yet published to the index (so not yet sent to peers):
        # note id -> when they may be. Derived again at start from the rows.
        self.delete_delay_s = 0.0
        # A burst recognised as git's reaches peers as soon as it is recognised (SPEC §3.16):
        # while ``[brake] trust_git`` the brake never holds it, so nothing is gained by waiting.
        self.git_skips_delay = True
        # note id -> (when it may be published, the state it deleted: edits beyond it win)
        self._pending_deletes: dict[str, tuple[float, str | None]] = {}
        self.remote = RemoteChanges(self)  # peers' changes in, local deletes out (composed)
        self._index_missing_entries()

    # -- peers (``remote_changes.RemoteChanges``) ---------------------------------------

    def set_delete_delay(self, seconds: float) -> None:
        self.remote.set_delete_delay(seconds)

    def pending_deletes(self) -> list[str]:
        return self.remote.pending_deletes()

    def delete_delay_for(self, source: str) -> float:
        """How long a local destructive change by ``source`` waits before peers hear of it:
        ``[peer] delete_delay_seconds`` (the brake's window), none for git's while trusted."""
        if self.git_skips_delay and is_git(source):
            return 0.0
        return self.delete_delay_s

    def waiting_deletes(self, now: float, is_held: Callable[[str], bool]) -> tuple[int, float]:
        return self.remote.waiting_deletes(now, is_held)

    def publish_due_deletes(self, now: float, is_held: Callable[[str], bool]) -> int:
        return self.remote.publish_due_deletes(now, is_held)

    def apply_remote_index(self, update: bytes, device: str) -> None:
        self.remote.apply_remote_index(update, device)

    def apply_remote_update(self, note_id: str, update: bytes, source: str, device: str,
                            peer_snapshot: bytes | None = None, peer_writer: str | None = None) -> None:
        self.remote.apply_remote_update(note_id, update, source, device, peer_snapshot, peer_writer)

    def apply_remote_slice(self, items: Sequence[tuple[str, bytes, str, str]], start: int,
                           over: Callable[[], bool], snapshots: Mapping[str, bytes] | None = None,
                           writers: Mapping[str, str] | None = None,
                           ) -> tuple[int, BaseException | None]:
        return self.remote.apply_remote_slice(items, start, over, snapshots, writers)

    def content_states(self) -> list[tuple[str, bytes]]:
        return self.remote.content_states()

    # -- the vault index ----------------------------------------------------------

    def _index_missing_entries(self) -> None:
        """Notes imported before the index existed (``stet init``) get their entries;
        notes deleted here whose delete was never published are queued again."""
        entries = self.index.entries()
        with self.store.transaction():
            for row in self.store.live_notes():
                if row.id not in entries:
                    self._index_put(NoteEntry(row.id, row.path, creator=self.device_id), Source.IMPORT)
        for row in self.store.deleted_notes():
            entry = entries.get(row.id)
            if entry is not None and not entry.deleted and self.store.note_at(entry.path) is None:
                self._pending_deletes[row.id] = (self.clock(), None)

    def _index_put(self, entry: NoteEntry, source: str) -> None:
        self._touch(INDEX_ID)
        update = self.index.put_note(entry)
        if update is None:
            return
        self.store.append_update(INDEX_ID, update, source)
        self._emit(Change(ChangeKind.INDEX, INDEX_ID, entry.path, source, None, None, at=self.clock(),
                          update=update))

    def put_index_update(self, update: bytes, source: str, path: str = "") -> None:
        """Persist and announce an index change made beside ``VaultIndex`` in its document
        (the attachment map, daemon/attachments/recording.py); call inside a ``write`` unit."""
        self._touch(INDEX_ID)
        self.store.append_update(INDEX_ID, update, source)
        self._emit(Change(ChangeKind.INDEX, INDEX_ID, path, source, None, None, at=self.clock(),
                          update=update))

    @in_unit
    def add_member(self, member: Member) -> None:
        self._touch(INDEX_ID)
        update = self.index.put_member(member)
        if update is None:
            return
        self.store.append_update(INDEX_ID, update, Source.PAIRING)
        self._emit(Change(ChangeKind.INDEX, INDEX_ID, "", Source.PAIRING, None, None, at=self.clock(),
                          update=update))

    def _entry(self, row: NoteRow) -> NoteEntry:
        return self.index.entry(row.id) or NoteEntry(row.id, row.path, creator=self.device_id)

    def _guard(self, source: str, row: NoteRow | None, before: str, after: str | None) -> None:
        for guard in self.guards:
            guard(source, row, before, after)

    def last_writer(self, row: NoteRow) -> str:
        """Who wrote the note's text last, as every device names it (``disk on D``): the
        log's newest change of it (a peer's live change names its device there), else the
        row's writer, made here."""
        return (ChangeLog(self.store).last_writer(row.id, row.path, here=self.device_id)
                or made_on(row.updated_by, self.device_id))

    def _remember_before(self, row: NoteRow, doc: NoteDoc) -> None:
        """Keep the state behind the revision that stops being current now (for an hour)."""
        self.revisions.remember(row.id, row.revision, doc.snapshot(), self.clock())

    def forget(self, note_id: str) -> None:
        """Drop a cached document (reloaded from the store when next needed, with a new
        client id: what it made in memory may not be in the store)."""
        doc = self._docs.pop(note_id, None)
        if doc is not None:
            doc.retired = True
        self._clients.pop(note_id, None)
        self._sv_cache.pop(note_id, None)

    def _evict_oldest(self) -> None:
        """The least recently used document leaves the cache; its client goes on."""
        note_id, doc = self._docs.popitem(last=False)
        self._retire(note_id, doc)

    def _retire(self, note_id: str, doc: NoteDoc) -> None:
        doc.retired = True
        client = doc.client
        if client[1] == 0:
            return  # it wrote nothing with that client: a new one next time costs nothing
        if len(self._clients) >= MAX_CLIENTS_KEPT:
            self._clients.pop(next(iter(self._clients)))  # the oldest: a new client next time
        self._clients[note_id] = client

    @property
    def writing(self) -> bool:
        """Whether a unit of work is open (a write under way)."""
        return bool(self._units)

    def release_store_cache(self) -> None:
        """Free SQLite's page cache and prepared statements of the vault's connection
        (refilled on demand; ``memory.release_connection``)."""
        release_connection(self.store.db)

    def shrink_documents(self, keep: int) -> int:
        """Drop all but the ``keep`` most recently used documents (reloaded from the store
        when next needed, as after an eviction); never inside a unit. How many went."""
        if self._units:
            return 0
        dropped = max(0, len(self._docs) - keep)
        for _ in range(dropped):
            self._evict_oldest()
        return dropped

    def preview_update(self, note_id: str, update: bytes) -> str:
        """The text the note would have after ``update``, without changing it."""
        copy = NoteDoc.from_updates([self.doc(note_id).full_update()])
        copy.apply_update(update)
        return copy.text

    def subscribe(self, listener: Listener, *, in_unit: bool = False,
                  many: ManyListener | None = None) -> None:
        """Hear of every applied change. By default after the unit of work that made it
        has committed (never, if it rolled back): for whoever acts outside the store (the
        file bridge, peers, SSE, live editors). ``in_unit``: inside the unit, before its
        commit, for listeners whose store writes belong to the change (versions, the
        brake, the change log); an error they raise is logged, not propagated. ``many``
        (``in_unit`` only): the same listener for a batch of changes (``create_many``),
        e.g. one statement for their records instead of one each."""
        if in_unit:
            self._unit_listeners.append(listener)
            self._unit_many.append(many)
        else:
            self._listeners.append(listener)

    # -- the unit of work ---------------------------------------------------------

    @contextlib.contextmanager
    def write(self, source: str = "") -> Iterator[WriteUnit]:
        """One unit of work: everything done inside commits once (nested units are
        savepoints of the outer one); its Changes go to listeners after that commit. An
        error raised inside rolls it back and forgets the documents it touched."""
        unit = WriteUnit(source)
        with self.store.transaction():
            self.store.on_rollback(functools.partial(self._undo_unit, unit))
            self._units.append(unit)
            try:
                yield unit
            finally:
                self._units.pop()
        if self._units:  # nested: the outer unit commits (or rolls back) this one's work too
            outer = self._units[-1]
            outer.changes.extend(unit.changes)
            outer.touched |= unit.touched

    def _undo_unit(self, unit: WriteUnit) -> None:
        for note_id in unit.touched:
            self.forget(note_id)
        if INDEX_ID in unit.touched:
            self.index = VaultIndex.from_updates(self.store.updates(INDEX_ID))

    def _drop_pending_delete(self, note_id: str) -> None:
        self._pending_deletes.pop(note_id, None)

    def _touch(self, note_id: str) -> None:
        if self._units:
            self._units[-1].touched.add(note_id)

    def _classify(self, change: Change) -> Destruction:
        """Classify a change once, for versions, the brake and peers (``Change.destruction``),
        by the one rule (``sync/destruction.py``)."""
        if change.kind not in CONTENT_KINDS:
            return Destruction.NONE
        after = None if change.kind == ChangeKind.DELETED else (change.text_after or "")
        return classify(change.text_before or "", after, self.shrink_policy,
                        nothing_taken=change.deleted == 0)

    def _emit(self, change: Change) -> None:
        if change.kind in CONTENT_KINDS and change.destruction is Destruction.NONE:
            kind = self._classify(change)
            if kind is not Destruction.NONE:
                change = replace(change, destruction=kind)
        for listener in self._unit_listeners:
            try:
                listener(change)
            except Exception:
                logger.exception("listener failed on %s of %s", change.kind, change.path)
        if self._units:
            self._units[-1].changes.append(change)
        self.store.after_commit(functools.partial(self._deliver, change))

    def _emit_many(self, changes: list[Change]) -> None:
        """``_emit`` of each (content changes with nothing destroyed: new notes), the
        in-unit listeners told once for them all where they can be."""
        for listener, many in zip(self._unit_listeners, self._unit_many, strict=True):
            try:
                if many is not None:
                    many(changes)
                else:
                    for change in changes:
                        listener(change)
            except Exception:
                logger.exception("listener failed on %d changes", len(changes))
        if self._units:
            self._units[-1].changes.extend(changes)
        self.store.after_commit(functools.partial(self._deliver_all, changes))

    def _deliver_all(self, changes: list[Change]) -> None:
        for change in changes:
            self._deliver(change)

    def _deliver(self, change: Change) -> None:
        for listener in self._listeners:
            try:
                listener(change)
            except Exception:
                logger.exception("listener failed on %s of %s", change.kind, change.path)

    # -- documents ---------------------------------------------------------------

    def doc(self, note_id: str) -> NoteDoc:
        batch = self._append_batch
        if batch is not None and note_id in batch.queued:  # a group's appends: applied first
            batch.flush_note(note_id)
        self._touch(note_id)  # may be changed in memory: forgotten if the unit rolls back
        doc = self._docs.get(note_id)
        if doc is not None:
            self._docs.move_to_end(note_id)
            return doc
        doc = NoteDoc.from_updates(self.store.updates(note_id), client=self._clients.pop(note_id, None))
        self._docs[note_id] = doc
        while len(self._docs) > DOC_CACHE_SIZE:
            self._evict_oldest()
        return doc

    def _keep_doc(self, note_id: str, doc: NoteDoc) -> None:
        """Cache a document built elsewhere on the write path (a peer's new note)."""
        self._touch(note_id)
        old = self._docs.get(note_id)
        if old is not None and old is not doc:
            old.retired = True
        self._docs[note_id] = doc
        self._docs.move_to_end(note_id)
        while len(self._docs) > DOC_CACHE_SIZE:
            self._evict_oldest()

    def text_of(self, note_id: str) -> str:
        """A note's text, without bringing its document into the cache (bulk readers)."""
        doc = self._docs.get(note_id)
        if doc is not None:
            return doc.text
        return NoteDoc.from_updates(self.store.updates(note_id)).text

    # -- reads -----------------------------------------------------------------------

    def note_at(self, path: str) -> NoteRow:
        row = self.store.note_at(path)
        if row is None:
            raise NotFound(f"no note at {path}", path=path)
        return row

    def read(self, path: str) -> tuple[NoteRow, str]:
        row = self.note_at(path)
        return row, self.doc(row.id).text

    # -- the write path -----------------------------------------------------------

    @in_unit
    def write_text(
        self,
        path: str,
        text: str,
        source: str,
        *,
        create: bool = True,
        must_create: bool = False,
    ) -> WriteResult:
        """Make the note at ``path`` hold ``text`` by a minimal diff (creating it if allowed).

        For writers that saw the current text (agents, the CLI, restores). A file edit
        goes through the folder replica instead (``FolderReplica.ingest``), which knows
        what the file was based on and applies it as a merged update.
        """
        row = self.store.note_at(path)
        if row is None:
            if not create:
                raise NotFound(f"no note at {path}", path=path)
            return self._create(path, text, source)
        if must_create:
            raise AlreadyExists(f"a note exists at {path}", path=path)
        doc = self.doc(row.id)
        old_text = doc.text
        if old_text == text:
            return WriteResult(row, False)
        self._guard(source, row, old_text, text)
        self._remember_before(row, doc)
        update = doc.set_text(text)
        assert update is not None
        return self._changed(row, doc, update, source, old_text)

    def _changed(
        self,
        row: NoteRow,
        doc: NoteDoc,
        update: bytes,
        source: str,
        old_text: str,
        *,
        device: str | None = None,
        size: tuple[int, int] | None = None,
        merged: MergedSides | None = None,
    ) -> WriteResult:
        before = row.revision
        row = self._persist(row, doc, update, source)
        new_text = doc.text
        ins, dels = size if size is not None else change_size(old_text, new_text)
        self._emit(
            Change(
                ChangeKind.CHANGED,
                row.id,
                row.path,
                source,
                before,
                row.revision,
                at=row.updated_at,
                text_before=old_text,
                text_after=new_text,
                inserted=ins,
                deleted=dels,
                update=update,
                device=device,
                merged=merged,
            )
        )
        return WriteResult(row, True)

    @in_unit
    def merge_fork(
        self, row: NoteRow, fork: NoteDoc, text: str, source: str
    ) -> tuple[WriteResult, bytes | None]:
        """``text`` was written by someone who saw the note as ``fork`` holds it (a file's
        base, an agent's ``baseRevision``): merge it with whatever changed since, by the one
        merge rule (``sync/text_merge.py``) rather than character by character, so two
        writers changing the same words leave both lines whole instead of a mix of them.

        The writer's edit is still made on the fork and taken in (so a state whose text is
        ``text`` exists in the document: the file's base), and the text is then set to the
        merge -- one change, one update. Returns the result and the snapshot of the
        writer's state, or None when nothing changed (its change was already there)."""
        doc = self.doc(row.id)
        current = doc.text
        base_text = fork.text
        merged = merge_texts(base_text, [Side(current, _CURRENT_SIDE), Side(text, _INCOMING_SIDE)])
        if merged.text == current:  # its change is already there
            return WriteResult(row, False), doc.snapshot() if text == current else None
        self._guard(source, row, current, merged.text)
        fork_update = fork.set_text(text)
        if fork_update is None:  # the writer changed nothing of what it saw
            return WriteResult(row, False), None
        self._remember_before(row, doc)
        current_state = doc.snapshot()
        taken = doc.apply_update(fork_update)
        # Where the CRDT's own merge holds the same lines (inserts at one point, in its
        # order) it stands: a repair rewrites characters others may be editing beside.
        repair = None if same_lines(doc.text, merged.text) else doc.set_text(merged.text)
        marked, writer = None, self.last_writer(row)
        if not merged.clean:
            # Every machine's note now holds both lines: the mark (both sides' states, the
            # writer's now in the document) lets every peer record the overlap too
            # (``sync/peer_merge.py``), keyed so they order the lines as here.
            me = self.device_id
            marked = mark_here(doc, mark_of({f"{me} {_CURRENT_SIDE}": current_state,
                                              f"{me} {_INCOMING_SIDE}": fork.snapshot()}),
                               {f"{me} {_CURRENT_SIDE}": writer,
                                f"{me} {_INCOMING_SIDE}": made_on(source, me)})
        update = join_updates([u for u in (taken, repair, marked) if u is not None])
        if update is None:
            return WriteResult(row, False), fork.snapshot()
        result = self._changed(row, doc, update, source, current,
                               merged=_merged_sides(writer, current, text, source, merged))
        return result, fork.snapshot()

    @in_unit
    def apply_splices(self, path: str, splices: list[Splice], source: str) -> WriteResult:
        """Apply splices computed against the note's current text (append, anchored edit)."""
        row = self.note_at(path)
        doc = self.doc(row.id)
        old_text = doc.text
        if not splices:
            return WriteResult(row, False)
        self._guard(source, row, old_text, apply_splices(old_text, splices))
        self._remember_before(row, doc)
        update = doc.apply_splices(old_text, splices)
        if update is None:
            return WriteResult(row, False)
        # what each splice changed (an append: its text), not the span from the first to the last
        return self._changed(row, doc, update, source, old_text, size=splices_size(old_text, splices))

    def appendable(self, path: str) -> tuple[NoteRow, str, int] | None:
        """The note at ``path`` as the next append sees it (row, text, size in bytes), the
        appends queued in a group included; None if there is none."""
        batch = self._append_batch
        row = batch.row_at(path) if batch is not None else None
        if row is None:
            row = self.store.note_at(path)
        if row is None:
            return None
        seen = batch.view(row) if batch is not None else None
        if seen is not None:
            return seen
        doc = self.doc(row.id)
        return row, doc.text, doc.byte_size

    @contextlib.contextmanager
    def append_group(self) -> Iterator[AppendBatch]:
        """Inside a unit (a group commit's): ``append_at_end`` queues its text, and each
        note's queued appends are applied at the end in one CRDT transaction (one row
        write, daemon/notes/append_batch.py). Nothing but appends may write inside it."""
        batch = self._append_batch = AppendBatch(self)
        try:
            yield batch
        finally:
            self._append_batch = None
        batch.flush()  # not after an error: the unit rolls back

    def flush_appends(self) -> None:
        """Apply a group's queued appends now (before a read of the store's rows)."""
        if self._append_batch is not None:
            self._append_batch.flush()

    def append_at_end(self, row: NoteRow, text: str, source: str) -> WriteResult:
        """Insert ``text`` at the end of the note ``row`` (read in this unit): an agent's
        append, the cheapest write there is -- no diff, no second row lookup, the new text
        made once (P2). In a group (``append_group``) it is queued and applied with the
        group's other appends to the note. Inside a unit (the agent's write) it adds no
        savepoint of its own: an error rolls back the caller's unit."""
        batch = self._append_batch
        if batch is not None and text:
            queued = batch.add(row, text, source)
            if queued is not None:
                return queued
        if self._units:
            return self._append_at_end(row, text, source)
        with self.write():
            return self._append_at_end(row, text, source)

    def _append_at_end(self, row: NoteRow, text: str, source: str) -> WriteResult:
        """The same update, text and revision as ``apply_splices`` with the splice at the
        end; if the document is not at ``row``'s revision (the row read before some
        change), the general path is taken with the row read again."""
        doc = self.doc(row.id)
        old_text = doc.text
        if doc.revision != row.revision:
            return self.apply_splices(row.path, [Splice(len(old_text), len(old_text), text)], source)
        if not text:
            return WriteResult(row, False)
        self._guard(source, row, old_text, old_text + text)
        self._remember_before(row, doc)
        update = doc.apply_splices(old_text, [Splice(len(old_text), len(old_text), text)])
        if update is None:
            return WriteResult(row, False)
        return self._changed(row, doc, update, source, old_text, size=(len(text), 0))

    @in_unit
    def rewrite_at(
        self, path: str, snapshot: bytes, base_revision: str, text: str, source: str
    ) -> WriteResult:
        """A full rewrite made by someone who last saw the note at ``base_revision``.

        The diff from that revision's text to ``text`` is applied on a fork at that
        revision and merged: whatever anyone changed since survives the rewrite.
        """
        row = self.note_at(path)
        doc = self.doc(row.id)
        try:
            fork: NoteDoc | None = doc.fork_at(snapshot, base_revision)
        except CrdtError:
            logger.warning("%s: cannot rebuild the note at baseRevision %s", path, base_revision,
                           exc_info=True)
            fork = None
        if fork is not None and fork.revision != base_revision:
            logger.warning("%s: the state remembered for baseRevision %s rebuilds %s (%d bytes)", path,
                           base_revision[:12], fork.revision[:12], fork.byte_size)
        if fork is None or fork.revision != base_revision:
            raise BaseNotRebuilt("that baseRevision cannot be rebuilt here; the rewrite is kept in "
                                 "stet conflicts", baseRevision=base_revision)
        return self.merge_fork(row, fork, text, source)[0]

    def preview_rewrite_at(self, path: str, snapshot: bytes, base_revision: str, text: str) -> MergeResult:
        """What ``rewrite_at`` would make of the note now (nothing changed): promotion's preview."""
        row = self.note_at(path)
        doc = self.doc(row.id)
        fork = doc.fork_at(snapshot, base_revision)
        if fork.revision != base_revision:
            raise BaseNotRebuilt("that baseRevision cannot be rebuilt here", baseRevision=base_revision)
        return merge_texts(fork.text, [Side(doc.text, _CURRENT_SIDE), Side(text, _INCOMING_SIDE)])

    def _create(self, path: str, text: str, source: str) -> WriteResult:
        note_id = genesis_note_id(path, text)
        existing = self.store.note(note_id)
        now = self.clock()
        if existing is not None:
            # The same text was a note here before and was deleted: bring that note back,
            # with its history, instead of starting a second one.
            doc = self.doc(note_id)
            self._guard(source, None, "", text)
            update = doc.set_text(text)
            # A row placed at a path starts with no file state: the folder replica records
            # one when it has read or written the file (``daemon/folder/replica.py``).
            row = replace(existing, path=path, deleted=False, updated_at=now, updated_by=source, disk=None)
            with self.store.transaction():
                self.store.put_note(row)
                self._index_put(replace(self._entry(row), path=path, deleted=False, deleted_sv=None), source)
                if update is not None:
                    row = self._persist(row, doc, update, source)
        else:
            self._guard(source, None, "", text)
            row, update = genesis_row(path, text, source, now, None)
            doc = NoteDoc()
            doc.apply_update(update)
            with self.store.transaction():
                self.store.put_note(row)
                self._index_put(NoteEntry(row.id, path, creator=self.device_id), source)
                self.store.append_update(row.id, update, source)
            self._keep_doc(row.id, doc)
            self._emit_created(row, source, text, now, whole=update)
            return WriteResult(row, True)
        self._emit_created(row, source, text, now)
        return WriteResult(row, True)

    @in_unit
    def create_many(self, files: Sequence[NewFile], source: str) -> list[NoteRow | None]:
        """Create a note for each new file at once (a bulk intake: an unzip, a checkout),
        as ``write_text`` creates one -- the guards asked, a genesis update each, the
        index entries, every change announced after the commit -- with one statement per
        table and one index update for them all, each row recording its file's base.
        A file whose note id this store knows (the same text at the same path was a note
        here, deleted since) is left out (None): ``write_text`` brings that note back.
        Every path must be free: a clash raises (IntegrityError), the unit rolls back, and
        the caller takes the files one by one. ``disk.revision`` and ``disk.size`` must be
        those of the text (a file's bytes decode exactly: ``decode_note``)."""
        now = self.clock()
        ids = [genesis_note_id(f.path, f.text) for f in files]
        held = self.store.held_notes(ids)
        out: list[NoteRow | None] = []
        rows: list[NoteRow] = []
        updates: list[tuple[str, bytes, str]] = []
        changes: list[Change] = []
        for f, note_id in zip(files, ids, strict=True):
            if note_id in held:
                out.append(None)
                continue
            self._guard(source, None, "", f.text)
            update, snapshot = NoteDoc.genesis_state(f.path, f.text)
            row = NoteRow(note_id, f.path, False, f.disk.revision, f.disk.size, now, now, source,
                          replace(f.disk, snapshot=snapshot), 1)
            out.append(row)
            rows.append(row)
            updates.append((row.id, update, source))
            changes.append(Change(ChangeKind.CREATED, row.id, row.path, source, None, row.revision, at=now,
                                  text_before="", text_after=f.text, inserted=len(f.text), update=update))
        if not rows:
            return out
        self.store.insert_new_notes(rows, updates)
        self._touch(INDEX_ID)
        index_update = self.index.put_notes([NoteEntry(r.id, r.path, creator=self.device_id) for r in rows])
        if index_update is not None:
            self.store.append_update(INDEX_ID, index_update, source)
            self._emit(Change(ChangeKind.INDEX, INDEX_ID, rows[0].path, source, None, None, at=now,
                              update=index_update))
        self._emit_many(changes)
        return out

    @in_unit
    def undelete(self, note_id: str, path: str, text: str, source: str) -> NoteRow:
        """Bring a deleted note back at ``path`` holding ``text`` (a restore, SPEC §5.4).

        The note keeps its identity and history; its text is set by a minimal diff from
        the text it had when deleted. Announced as ``created``.
        """
        row = self.store.note(note_id)
        if row is None:
            raise NotFound(f"unknown note {note_id}")
        if not row.deleted:
            raise AlreadyExists(f"that note is not deleted (it is at {row.path})", path=row.path)
        if self.store.note_at(path) is not None:
            raise AlreadyExists(f"a note exists at {path}", path=path)
        self._guard(source, None, "", text)
        now = self.clock()
        doc = self.doc(note_id)
        update = doc.set_text(text)
        row = replace(row, path=path, deleted=False, updated_at=now, updated_by=source, disk=None)
        self.store.put_note(row)
        self._index_put(replace(self._entry(row), path=path, deleted=False, deleted_sv=None), source)
        if update is not None:
            row = self._persist(row, doc, update, source)
        self._emit_created(row, source, text, now)
        return row

    def _emit_created(self, row: NoteRow, source: str, text: str, at: float,
                      device: str | None = None, *, whole: bytes | None = None) -> None:
        """Announce a note that now exists here, with its whole state (for peers);
        ``whole``: that state, if the caller has it (a new note: its first update)."""
        update = whole if whole is not None else self.doc(row.id).full_update()
        self._emit(Change(ChangeKind.CREATED, row.id, row.path, source, None, row.revision, at=at,
                          text_before="", text_after=text, inserted=len(text),
                          update=update, device=device))

    def _persist(self, row: NoteRow, doc: NoteDoc, update: bytes, source: str) -> NoteRow:
        row = replace(
            row,
            revision=doc.revision,
            size=doc.byte_size,
            updated_at=self.clock(),
            updated_by=source,
            update_count=row.update_count + 1,
        )
        self._sv_cache.pop(row.id, None)
        if self._units:  # inside a unit (every write method is one): its savepoint holds both
            self.store.append_update(row.id, update, source)
            self.store.put_note(row)
        else:
            with self.store.transaction():
                self.store.append_update(row.id, update, source)
                self.store.put_note(row)
        if self.store.needs_compaction(row):
            self.store.compact(row.id)
            row = replace(row, update_count=1)
        return row

    @in_unit
    def apply_update(self, note_id: str, update: bytes, source: str) -> WriteResult:
        """Apply a CRDT update made elsewhere (a peer, an agent's fork) to a known note."""
        row = self.store.note(note_id)
        if row is None:
            raise NotFound(f"unknown note {note_id}")
        doc = self.doc(note_id)
        old_text = doc.text
        snapshot = doc.snapshot()
        new_part = doc.apply_update(update)
        if new_part is None:
            return WriteResult(row, False)
        self.revisions.remember(row.id, row.revision, snapshot, self.clock())
        if row.deleted:
            return WriteResult(self._persist(row, doc, new_part, source), True)
        return self._changed(row, doc, new_part, source, old_text)

    @in_unit
    def delete(self, path: str, source: str, *, device: str | None = None,
               seen: bytes | None = None) -> NoteRow:
        """Delete the note at ``path``. ``seen``: the snapshot of the note as whoever deleted
        it last saw it (the folder replica: the deleted file's base); what came since (an
        agent's write, a peer's edit not written out yet) was not seen by the delete, so it
        wins over it (SPEC §3.9) instead of going with it."""
        row = self.note_at(path)
        text = self.doc(row.id).text
        self._guard(source, row, text, None)
        now = self.clock()
        basis = self.doc(row.id)
        if seen is not None and device is None:
            with contextlib.suppress(CrdtError):
                basis = basis.fork_at(seen)
        sv = base64.b64encode(basis.state_vector()).decode()
        deleted_row = replace(row, deleted=True, updated_at=now, updated_by=source, disk=None)
        with self.store.transaction():
            self.store.put_note(deleted_row)
            if device is None:
                delay = self.delete_delay_for(source)
                if delay > 0:
                    # Peers hear of it once the burst brake has had its say (SPEC §5.6).
                    self._pending_deletes[row.id] = (now + delay, sv)
                    self.store.on_rollback(functools.partial(self._drop_pending_delete, row.id))
                else:
                    self._index_put(replace(self._entry(row), deleted=True, deleted_sv=sv, deleted_by=source),
                                    source)
        row = deleted_row
        self._emit(
            Change(
                ChangeKind.DELETED,
                row.id,
                row.path,
                source,
                row.revision,
                None,
                at=now,
                text_before=text,
                deleted=len(text),
                device=device,
            )
        )
        return row

    @in_unit
    def move(
        self,
        old_path: str,
        new_path: str,
        source: str,
        *,
        device: str | None = None,
    ) -> NoteRow:
        """Move a note; its file state goes with it (the writer renames the file, or the
        folder replica records what it found at the new path)."""
        row = self.note_at(old_path)
        if old_path == new_path:
            return row
        if self.store.note_at(new_path) is not None:
            raise AlreadyExists(f"a note exists at {new_path}", path=new_path)
        now = self.clock()
        moved = replace(row, path=new_path, updated_at=now, updated_by=source)
        with self.store.transaction():
            self.store.put_note(moved)
            if device is None:
                self._index_put(replace(self._entry(row), path=new_path), source)
        self._emit(
            Change(
                ChangeKind.MOVED,
                moved.id,
                new_path,
                source,
                moved.revision,
                moved.revision,
                old_path=old_path,
                at=now,
                device=device,
            )
        )
        return moved


# A merge made here orders overlapping lines as the note had them, then the newcomer's
# (the keys only order; the sources are recorded in ``MergedSides``).
_CURRENT_SIDE = "1 current"
_INCOMING_SIDE = "2 incoming"


def _merged_sides(
    writer: str, current: str, text: str, source: str, merged: MergeResult
) -> MergedSides | None:
    """``writer``: who wrote the note's text last (``NotesService.last_writer``)."""
    if merged.clean:
        return None
    return MergedSides(((writer, current), (source, text)), merged.overlaps)
