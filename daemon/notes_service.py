"""The one place every write goes through, whatever its source.

Disk edits, agents, peers, restores and the CLI all end in ``NotesService``: it turns
the new text into a minimal CRDT diff, persists the update (committed before the call
returns), updates the note's index row and tells listeners (the file bridge writes
non-disk changes to disk; later: versions, the brake, peers, the event stream).
Every method is synchronous and runs on the daemon's event loop, so each write is
atomic with respect to every other.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from stet.sync.errors import AlreadyExists, CrdtError, NotFound
from stet.sync.note_doc import NoteDoc, genesis_note_id, text_revision
from stet.sync.vault_import import genesis_row
from stet.sync.store import DiskState, NoteRow, VaultStore

logger = logging.getLogger(__name__)

DOC_CACHE_SIZE = 512
DISK_SOURCE = "disk"


@dataclass(frozen=True, slots=True)
class Change:
    """One applied change, as listeners and the log see it."""

    kind: str  # "changed" | "created" | "deleted" | "moved"
    note_id: str
    path: str
    source: str
    revision_before: str | None
    revision_after: str | None
    old_path: str | None = None
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class WriteResult:
    note: NoteRow
    changed: bool
    needs_write: bool = False  # the note now differs from its file (merged disk edit)


Listener = Callable[[Change], None]


class NotesService:
    def __init__(self, vault_id: str, store: VaultStore, *, clock: Callable[[], float] = time.time):
        self.vault_id = vault_id
        self.store = store
        self.clock = clock
        self._docs: OrderedDict[str, NoteDoc] = OrderedDict()
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _emit(self, change: Change) -> None:
        for listener in self._listeners:
            try:
                listener(change)
            except Exception:
                logger.exception("listener failed on %s of %s", change.kind, change.path)

    # -- documents ---------------------------------------------------------------

    def doc(self, note_id: str) -> NoteDoc:
        doc = self._docs.get(note_id)
        if doc is not None:
            self._docs.move_to_end(note_id)
            return doc
        doc = NoteDoc.from_updates(self.store.updates(note_id))
        self._docs[note_id] = doc
        while len(self._docs) > DOC_CACHE_SIZE:
            self._docs.popitem(last=False)
        return doc

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
        goes through ``ingest_disk`` instead, which knows what the file was based on.
        """
        row = self.store.note_at(path)
        if row is None:
            if not create:
                raise NotFound(f"no note at {path}", path=path)
            return self._create(path, text, source, None)
        if must_create:
            raise AlreadyExists(f"a note exists at {path}", path=path)
        doc = self.doc(row.id)
        before = row.revision
        update = doc.set_text(text)
        if update is None:
            return WriteResult(row, False)
        row = self._persist(row, doc, update, source, disk=None)
        self._emit(Change("changed", row.id, row.path, source, before, row.revision, at=row.updated_at))
        return WriteResult(row, True)

    def ingest_disk(self, path: str, text: str, disk: DiskState) -> WriteResult:
        """Take in the text a file now holds.

        If the note changed since the file was last in sync with it (a peer's or an
        agent's edit not yet written out), the file's change is merged as a concurrent
        edit made on the note as the file knew it (three-way), so neither side is lost;
        ``needs_write`` then says the file must be rewritten with the merged text.
        """
        row = self.store.note_at(path)
        if row is None:
            return self._create(path, text, DISK_SOURCE, disk)
        doc = self.doc(row.id)
        before = row.revision
        base = row.disk
        fork = None
        if base is not None and base.snapshot is not None and row.revision != base.revision:
            try:
                fork = doc.fork_at(base.snapshot)
            except CrdtError:
                logger.warning("%s: cannot rebuild what the file was based on; taking it as is", path)
            if fork is not None and text_revision(fork.text) != base.revision:
                fork = None
        if fork is not None:
            fork_update = fork.set_text(text)
            file_state = replace(disk, snapshot=fork.snapshot())
            update = doc.apply_update(fork_update) if fork_update is not None else None
        else:
            update = doc.set_text(text)
            file_state = replace(disk, snapshot=doc.snapshot())
        if update is None:
            if not file_state.same_file(row.disk) or row.disk is None or row.disk.snapshot != file_state.snapshot:
                self.store.set_disk_state(row.id, file_state)
                row = replace(row, disk=file_state)
            return WriteResult(row, False, needs_write=row.revision != disk.revision)
        row = self._persist(row, doc, update, DISK_SOURCE, disk=file_state)
        self._emit(Change("changed", row.id, row.path, DISK_SOURCE, before, row.revision, at=row.updated_at))
        return WriteResult(row, True, needs_write=row.revision != disk.revision)

    def mark_disk_synced(self, note_id: str, disk: DiskState) -> None:
        """The file now holds the note's current text (we just wrote or checked it)."""
        self.store.set_disk_state(note_id, replace(disk, snapshot=self.doc(note_id).snapshot()))

    def _create(self, path: str, text: str, source: str, disk: DiskState | None) -> WriteResult:
        note_id = genesis_note_id(path, text)
        existing = self.store.note(note_id)
        now = self.clock()
        if existing is not None:
            # The same text was a note here before and was deleted: bring that note back,
            # with its history, instead of starting a second one.
            doc = self.doc(note_id)
            update = doc.set_text(text)
            file_state = replace(disk, snapshot=doc.snapshot()) if disk is not None else None
            row = replace(existing, path=path, deleted=False, updated_at=now, updated_by=source, disk=file_state)
            with self.store.transaction():
                self.store.put_note(row)
                if update is not None:
                    row = self._persist(row, doc, update, source, disk=file_state)
        else:
            row, update = genesis_row(path, text, source, now, None)
            doc = NoteDoc()
            doc.apply_update(update)
            if disk is not None:
                row = replace(row, disk=replace(disk, snapshot=doc.snapshot()))
            with self.store.transaction():
                self.store.put_note(row)
                self.store.append_update(row.id, update, source)
            self._docs[row.id] = doc
        self._emit(Change("created", row.id, row.path, source, None, row.revision, at=now))
        return WriteResult(row, True)

    def _persist(
        self, row: NoteRow, doc: NoteDoc, update: bytes, source: str, *, disk: DiskState | None
    ) -> NoteRow:
        text = doc.text
        data = text.encode("utf-8")
        row = replace(
            row,
            revision=text_revision(text),
            size=len(data),
            updated_at=self.clock(),
            updated_by=source,
            disk=disk if disk is not None else row.disk,
            update_count=row.update_count + 1,
        )
        with self.store.transaction():
            self.store.append_update(row.id, update, source)
            self.store.put_note(row)
        if self.store.needs_compaction(row):
            self.store.compact(row.id)
            row = replace(row, update_count=1)
        return row

    def apply_update(self, note_id: str, update: bytes, source: str) -> WriteResult:
        """Apply a CRDT update made elsewhere (a peer, an agent's fork) to a known note."""
        row = self.store.note(note_id)
        if row is None:
            raise NotFound(f"unknown note {note_id}")
        doc = self.doc(note_id)
        before = row.revision
        new_part = doc.apply_update(update)
        if new_part is None:
            return WriteResult(row, False)
        row = self._persist(row, doc, new_part, source, disk=None)
        if not row.deleted:
            self._emit(Change("changed", row.id, row.path, source, before, row.revision, at=row.updated_at))
        return WriteResult(row, True)

    def delete(self, path: str, source: str) -> NoteRow:
        row = self.note_at(path)
        now = self.clock()
        row = replace(row, deleted=True, updated_at=now, updated_by=source, disk=None)
        self.store.put_note(row)
        self._emit(Change("deleted", row.id, row.path, source, row.revision, None, at=now))
        return row

    def move(self, old_path: str, new_path: str, source: str, *, disk: DiskState | None = None) -> NoteRow:
        row = self.note_at(old_path)
        if old_path == new_path:
            return row
        if self.store.note_at(new_path) is not None:
            raise AlreadyExists(f"a note exists at {new_path}", path=new_path)
        now = self.clock()
        if disk is not None:  # the file at the new path holds the note's current text
            disk = replace(disk, snapshot=self.doc(row.id).snapshot())
        row = replace(row, path=new_path, updated_at=now, updated_by=source,
                      disk=disk if disk is not None else row.disk)
        self.store.put_note(row)
        self._emit(Change("moved", row.id, new_path, source, row.revision, row.revision,
                          old_path=old_path, at=now))
        return row

