"""Keeps the records every change leaves: the attributed log, the search index and
the event stream. A listener of ``NotesService``. Search indexing happens off the loop
(``search_indexer``: a worker thread writing the vault's own index database), fed after
each commit with the note's latest text; a search waits until it has caught up.
"""

from __future__ import annotations

import base64
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from stet.daemon.notes.changes import Change
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.search_indexer import SearchIndexer
from stet.daemon.notes.service import NotesService
from stet.sync.attribution import attribution
from stet.sync.change_kinds import ChangeKind, Source
from stet.sync.change_log import KEEP_PER_PATH, PRUNE_STRIDE, ChangeLog, LogEntry
from stet.sync.conflict_log import ConflictLog
from stet.sync.errors import CrdtError
from stet.sync.peer_merge import includes_snapshot

logger = logging.getLogger(__name__)

_LOGGED = (ChangeKind.CHANGED, ChangeKind.CREATED, ChangeKind.MOVED, ChangeKind.DELETED)
_FROM_PEERS = (Source.PEER, Source.SYNC)  # a peer's intake: indexed once its bulk pauses


def _entry(c: Change) -> LogEntry:
    return LogEntry(
        note_id=c.note_id, path=c.path, kind=c.kind, source=c.source, at=c.at,
        revision_before=c.revision_before, revision_after=c.revision_after,
        inserted=c.inserted, deleted=c.deleted, old_path=c.old_path, device=c.device,
    )


class RecordsKeeper:
    def __init__(self, service: NotesService, events: EventBus) -> None:
        self.service = service
        self.events = events
        self.log = ChangeLog(service.store)
        self.conflicts = ConflictLog(service.store)
        self.index = SearchIndexer(service.store.path, name=service.vault_id)
        # The log is written inside the change's unit of work (one commit); events and
        # indexing follow its commit (never for a change rolled back).
        service.subscribe(self.on_change, in_unit=True, many=self.on_changes)

    def on_change(self, c: Change) -> None:
        if c.kind not in _LOGGED:
            return  # index and stored-only updates are for peers
        self.log.append(_entry(c))
        self._keep_at_cap(c)
        if c.merged is not None:
            self._record_overlap(c)
        self.service.store.after_commit(functools.partial(self._announce, c))

    def _keep_at_cap(self, c: Change) -> None:
        picked = c.revision_after is not None and int(c.revision_after[:8], 16) % PRUNE_STRIDE == 0
        if c.kind == ChangeKind.CHANGED and picked:
            self.log.prune_path(c.path, KEEP_PER_PATH)

    def _record_overlap(self, c: Change) -> None:
        """A merge that kept overlapping sides whole is listed in ``stet conflicts`` (code
        ``merged``: nothing to apply, a person picks a line or restores a version) and
        announced as ``note.merged``. A peer merge of a note whose overlap is still listed
        and still in the note (a third machine's line met the first two's) grows that
        record by the new device's side instead: one overlap, every machine's line in it."""
        assert c.merged is not None
        m = c.merged
        sides: list[dict[str, Any]] = [{"source": source, "text": text} for source, text in m.sides]
        for side, device, snapshot in zip(sides, m.devices, m.snapshots, strict=False):
            side.update(device=device, snapshot=base64.b64encode(snapshot).decode())
        overlaps = [{"base": o.base, "sides": [{"key": k, "lines": lines} for k, lines in o.sides]}
                    for o in m.overlaps]
        grown = self._grow_listed(c, sides, overlaps) if m.devices else None
        if grown is None:
            mine = [s["source"] for s in sides if s.get("device") not in (None, self.service.device_id)]
            conflict = self.conflicts.record(
                at=c.at, token=(mine or [m.sides[-1][0]])[0], path=c.path, operation="merge", code="merged",
                attempted={"sides": sides, "overlaps": overlaps}, current_revision=c.revision_after,
                note_id=c.note_id)
            conflict_id = conflict.id
        else:
            conflict_id, sides = grown
        payload = {"path": c.path, "revision": c.revision_after, "conflict": conflict_id,
                   "sources": [side["source"] for side in sides],
                   "overlaps": len(m.overlaps)}
        self.service.store.after_commit(functools.partial(
            self.events.publish, self.service.vault_id, "note.merged", payload))

    def _grow_listed(self, c: Change, sides: list[dict[str, Any]], overlaps: list[dict[str, Any]],
                     ) -> tuple[int, list[dict[str, Any]]] | None:
        """Fold a peer merge's sides into the note's last ``merged`` record when that one is
        a peer merge's too and its overlap is still in the note (some line of it is in the
        text before this change: not resolved yet); returns (its id, its sides now)."""
        last = self.conflicts.latest(c.note_id, "merged")
        if last is None or last.promoted_at is not None:
            return None
        listed = last.attempted.get("sides")
        if not isinstance(listed, list) or not all(isinstance(s, dict) and "device" in s for s in listed):
            return None
        before = c.text_before or ""
        lines = [line for o in last.attempted.get("overlaps", []) for side in o.get("sides", [])
                 for line in side.get("lines", []) if line.strip()]
        if not any(line in before for line in lines):
            return None
        by_device = {s["device"]: s for s in listed}
        for side in sides:
            known = by_device.get(side["device"])
            # A device's earliest text stands (a later one holds a merge already listed).
            if known is None or _earlier(side["snapshot"], known.get("snapshot")):
                by_device[side["device"]] = side
        grown = [by_device[d] for d in sorted(by_device)]
        self.conflicts.revise(last.id, attempted={"sides": grown, "overlaps": [
            *last.attempted.get("overlaps", []), *overlaps]}, current_revision=c.revision_after)
        return last.id, grown

    def on_changes(self, changes: Sequence[Change]) -> None:
        """``on_change`` of each: one statement for their log entries (a bulk intake)."""
        logged = [c for c in changes if c.kind in _LOGGED]
        if not logged:
            return
        self.log.append_many([_entry(c) for c in logged])
        for c in logged:
            self._keep_at_cap(c)
        self.service.store.after_commit(functools.partial(self._announce_all, logged))

    def _announce_all(self, changes: list[Change]) -> None:
        # New notes made together (the folder's new files of a batch, a peer's run of new
        # notes) are a bulk's: indexed once it pauses (``SearchIndexer._deferred``). A
        # group of appends to one note (``append_batch``) is not.
        by = self._attribute()
        for c in changes:
            self._announce(c, bulk=c.kind == ChangeKind.CREATED, by=by)

    def _attribute(self) -> Callable[[Change], str]:
        """``by`` of an event: ``disk on laptop``, as `stet log` words it (issue 37 item 7).
        The members' names are read once per call: once for a bulk's events."""
        names = {device: m.name for device, m in self.service.index.members().items()}
        here = self.service.device_id
        return lambda c: attribution(c.source, c.device, here=here, names=names)

    def _announce(self, c: Change, *, bulk: bool = False, by: Callable[[Change], str] | None = None) -> None:
        vid = self.service.vault_id
        if c.kind not in _LOGGED:
            return
        who = (by or self._attribute())(c)
        if c.kind in (ChangeKind.CHANGED, ChangeKind.CREATED):
            # The text travels with the change (None: the worker reads it from the store).
            self.index.put(c.note_id, c.path, c.revision_after or "", c.text_after,
                           bulk=bulk or c.device is not None or c.made_by in _FROM_PEERS)
            self.events.publish(vid, "note.changed", {
                "path": c.path, "revision": c.revision_after, "revisionBefore": c.revision_before,
                "source": c.source, "by": who, "created": c.kind == ChangeKind.CREATED,
                "inserted": c.inserted, "deleted": c.deleted,
            })
        elif c.kind == ChangeKind.MOVED:
            self.index.put(c.note_id, c.path, c.revision_after or "", None)
            self.events.publish(vid, "note.moved", {
                "path": c.path, "oldPath": c.old_path, "revision": c.revision_after, "source": c.source,
                "by": who,
            })
        elif c.kind == ChangeKind.DELETED:
            self.index.remove(c.note_id)
            self.events.publish(vid, "note.deleted", {
                "path": c.path, "revisionBefore": c.revision_before, "source": c.source, "by": who,
            })

    def start_indexing(self) -> None:
        """Catch the index up with the store (missing, damaged, behind), in its worker."""
        self.index.start()

    async def wait_indexed(self) -> bool:
        """Until every change so far is searchable (bounded; the loop keeps running)."""
        return await self.index.wait_indexed()

    def flush_index(self) -> None:
        """Block until every change so far is searchable (bounded): synchronous callers."""
        self.index.flush()

    def close(self) -> None:
        self.index.close()


def _earlier(snapshot: str, than: object) -> bool:
    """Whether the encoded snapshot ``snapshot`` is strictly before ``than`` (both base64)."""
    if not isinstance(than, str) or snapshot == than:
        return False
    try:
        return includes_snapshot(base64.b64decode(than), base64.b64decode(snapshot))
    except (ValueError, CrdtError):
        return False
