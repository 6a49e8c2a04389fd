"""Keeps the records every change leaves: the attributed log, the search index and
the event stream. A listener of ``NotesService``; search indexing is batched (a burst
of appends re-indexes a note once) and flushed before every search.
"""

from __future__ import annotations

import asyncio
import logging

from stet.sync.change_log import ChangeLog, LogEntry
from stet.sync.search_index import SearchIndex

from .event_bus import EventBus
from .notes_service import Change, NotesService

logger = logging.getLogger(__name__)


class RecordsKeeper:
    def __init__(self, service: NotesService, events: EventBus, *, index_delay_s: float = 0.2) -> None:
        self.service = service
        self.events = events
        self.log = ChangeLog(service.store)
        self.index = SearchIndex(service.store)
        self.index_delay_s = index_delay_s
        self._to_index: set[str] = set()
        self._timer: asyncio.TimerHandle | None = None
        service.subscribe(self.on_change)

    def on_change(self, c: Change) -> None:
        if c.kind not in ("changed", "created", "moved", "deleted"):
            return  # index and stored-only updates are for peers
        self.log.append(LogEntry(
            note_id=c.note_id, path=c.path, kind=c.kind, source=c.source, at=c.at,
            revision_before=c.revision_before, revision_after=c.revision_after,
            inserted=c.inserted, deleted=c.deleted, old_path=c.old_path, device=c.device,
        ))
        vid = self.service.vault_id
        if c.kind in ("changed", "created"):
            self._mark(c.note_id)
            self.events.publish(vid, "note.changed", {
                "path": c.path, "revision": c.revision_after, "revisionBefore": c.revision_before,
                "source": c.source, "created": c.kind == "created",
                "inserted": c.inserted, "deleted": c.deleted,
            })
        elif c.kind == "moved":
            self._mark(c.note_id)
            self.events.publish(vid, "note.moved", {
                "path": c.path, "oldPath": c.old_path, "revision": c.revision_after, "source": c.source,
            })
        elif c.kind == "deleted":
            self._to_index.discard(c.note_id)
            self.index.remove(c.note_id)
            self.events.publish(vid, "note.deleted", {
                "path": c.path, "revisionBefore": c.revision_before, "source": c.source,
            })

    def _mark(self, note_id: str) -> None:
        self._to_index.add(note_id)
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._timer = loop.call_later(self.index_delay_s, self.flush_index)

    def flush_index(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        store = self.service.store
        with store.transaction():
            while self._to_index:
                note_id = self._to_index.pop()
                row = store.note(note_id)
                if row is None or row.deleted:
                    self.index.remove(note_id)
                else:
                    self.index.put(note_id, row.path, self.service.doc(note_id).text)

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
