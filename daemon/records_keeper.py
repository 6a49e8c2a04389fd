"""Keeps the records every change leaves: the attributed log, the search index and
the event stream. A listener of ``NotesService``; search indexing is batched (a burst
of appends re-indexes a note once) and flushed before every search.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from stet.sync.change_kinds import ChangeKind
from stet.sync.change_log import ChangeLog, LogEntry
from stet.sync.search_index import SearchIndex

from .changes import Change
from .event_bus import EventBus
from .notes_service import NotesService

logger = logging.getLogger(__name__)

BULK_NOTES = 500  # this many notes waiting: texts are read again when indexed (memory)
DEFER_NOTES = 64  # this many notes waiting while changes keep coming is a bulk intake
QUIET_S = 2.0  # a bulk intake has paused when no note changed for this long
MAX_DEFER_S = 30.0  # ... or, at the latest, this long after it began
INDEX_CHUNK = 200  # notes indexed per turn of the loop
INDEX_SLICE_S = 0.01  # and for at most this long (the loop runs in between) ...
# ... and at most this much text per commit: FTS5 writes the batch's terms out as one
# segment at the commit (no savepoint per note: search_index), a cost the slice's clock
# does not see, proportional to the text.
INDEX_BYTES = 128 * 1024


class RecordsKeeper:
    def __init__(self, service: NotesService, events: EventBus, *, index_delay_s: float = 0.2) -> None:
        self.service = service
        self.events = events
        self.log = ChangeLog(service.store)
        self.index = SearchIndex(service.store)
        self.index_delay_s = index_delay_s
        # note -> its text as the change left it (None: read it from the note then); the
        # text travels with the change, so a burst of new notes is indexed without
        # loading each document again.
        self._to_index: dict[str, str | None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._last_mark = 0.0
        self._pending_since = 0.0
        # The log is written inside the change's unit of work (one commit); events and
        # indexing follow its commit (never for a change rolled back).
        service.subscribe(self.on_change, in_unit=True)

    def on_change(self, c: Change) -> None:
        if c.kind not in (ChangeKind.CHANGED, ChangeKind.CREATED, ChangeKind.MOVED, ChangeKind.DELETED):
            return  # index and stored-only updates are for peers
        self.log.append(LogEntry(
            note_id=c.note_id, path=c.path, kind=c.kind, source=c.source, at=c.at,
            revision_before=c.revision_before, revision_after=c.revision_after,
            inserted=c.inserted, deleted=c.deleted, old_path=c.old_path, device=c.device,
        ))
        self.service.store.after_commit(functools.partial(self._announce, c))

    def _announce(self, c: Change) -> None:
        vid = self.service.vault_id
        if c.kind in (ChangeKind.CHANGED, ChangeKind.CREATED):
            self._mark(c.note_id, c.text_after)
            self.events.publish(vid, "note.changed", {
                "path": c.path, "revision": c.revision_after, "revisionBefore": c.revision_before,
                "source": c.source, "created": c.kind == ChangeKind.CREATED,
                "inserted": c.inserted, "deleted": c.deleted,
            })
        elif c.kind == ChangeKind.MOVED:
            self._mark(c.note_id)
            self.events.publish(vid, "note.moved", {
                "path": c.path, "oldPath": c.old_path, "revision": c.revision_after, "source": c.source,
            })
        elif c.kind == ChangeKind.DELETED:
            self._to_index.pop(c.note_id, None)
            self.index.remove(c.note_id)
            self.events.publish(vid, "note.deleted", {
                "path": c.path, "revisionBefore": c.revision_before, "source": c.source,
            })

    def _mark(self, note_id: str, text: str | None = None) -> None:
        now = time.monotonic()
        self._last_mark = now
        if not self._to_index:
            self._pending_since = now
        if text is not None and len(self._to_index) < BULK_NOTES:  # latest text (a move changes none)
            self._to_index[note_id] = text
        else:  # many pending: hold no texts (memory), read them when indexing
            self._to_index[note_id] = None
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._timer = loop.call_later(self.index_delay_s, self._on_timer)

    def _on_timer(self) -> None:
        """Index what is pending -- unless a bulk intake (a first sync, a large import
        from a peer) is still going on: then its notes are indexed once it pauses (or
        after ``MAX_DEFER_S``), so the files reach the disk first. A search never sees
        the gap: it flushes the index before it runs."""
        self._timer = None
        now = time.monotonic()
        # (DEFER_NOTES, not BULK_NOTES: indexing kept pace with an unzip below 500 waiting,
        # and took a quarter of the intake's loop -- P8's profile)
        if (len(self._to_index) >= DEFER_NOTES and now - self._last_mark < QUIET_S
                and now - self._pending_since < MAX_DEFER_S):
            self._timer = asyncio.get_running_loop().call_later(QUIET_S, self._on_timer)
            return
        self._index(INDEX_CHUNK, budget_s=INDEX_SLICE_S)  # requests get their turn in between
        if self._to_index:
            self._timer = asyncio.get_running_loop().call_later(0, self._on_timer)

    def flush_index(self) -> None:
        """Index every pending note now (before a search, at shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._index(None)

    def _index(self, at_most: int | None, *, budget_s: float | None = None) -> None:
        store = self.service.store
        left = at_most
        deadline = time.monotonic() + budget_s if budget_s is not None else None
        size = 0
        with store.transaction():
            while self._to_index and (left is None or left > 0):
                if deadline is not None and (time.monotonic() >= deadline or size >= INDEX_BYTES):
                    break
                if left is not None:
                    left -= 1
                note_id, text = self._to_index.popitem()
                row = store.note(note_id)
                if row is None or row.deleted:
                    self.index.remove(note_id)
                else:
                    if text is None:
                        text = self.service.text_of(note_id)
                    self.index.put(note_id, row.path, text)
                    size += len(text)

    async def rebuild_index_if_needed(self) -> None:
        """Index every live note if the index is behind the notes (first run, old store)."""
        store = self.service.store
        if self.index.count() == store.count_live():
            return
        logger.info("building the search index for %d notes", store.count_live())
        with store.transaction():
            store.db.execute("DELETE FROM notes_fts")
        rows = store.live_notes()
        for start in range(0, len(rows), 200):
            with store.transaction():
                for row in rows[start : start + 200]:
                    self.index.put(row.id, row.path, self.service.doc(row.id).text)
            await asyncio.sleep(0)  # let requests through between batches
