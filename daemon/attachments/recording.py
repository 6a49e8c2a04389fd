"""Recording the folder's attachment changes (SPEC §3.14): admitted changes become entries
of the attachment map of the vault index's document -- so they reach peers through the index
sync -- with the seen state, the versions of what they replaced and their ``stet log`` lines,
in one unit of work (``NotesService.write``: one commit, one index update) per
``RECORD_BATCH`` changes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Protocol

from stet.daemon.attachments.index_watch import IndexWatch
from stet.daemon.attachments.keeping import AttachmentKeeping
from stet.daemon.attachments.log import AttachmentLog
from stet.daemon.attachments.seen import SeenFiles
from stet.daemon.notes.write_unit import WriteUnit
from stet.sync.attachment_entry import (
    AttachmentEntry,
    attachment_id,
    fresh_attachment_id,
    made_on,
    moved,
    path_set_at,
)
from stet.sync.attachment_plan import (
    IntakeAction,
    OnDisk,
    RecordChange,
    RecordDelete,
    RecordMove,
    SeenFile,
    Touch,
)
from stet.sync.attachment_versions import BEFORE_DELETION, BEFORE_OVERWRITE
from stet.sync.hlc import HybridClock
from stet.sync.note_doc import join_updates

RECORD_BATCH = 256  # changes recorded per unit of work


class IndexWrites(Protocol):
    """What recording needs of the write path (``NotesService``): a unit of work, and the
    index update it persists and announces."""

    def write(self, source: str = "") -> AbstractContextManager[WriteUnit]: ...

    def put_index_update(self, update: bytes, source: str, path: str = "") -> None: ...


class AttachmentRecorder:
    def __init__(self, service: IndexWrites, watch: IndexWatch, seen: SeenFiles, keeping: AttachmentKeeping,
                 log: AttachmentLog, device_id: str) -> None:
        self.service = service
        self.watch = watch
        self.seen = seen
        self.keeping = keeping
        self.versions = keeping.versions
        self.files = seen.files
        self.log = log
        self.device_id = device_id
        self._clock = HybridClock(last=watch.index.latest_hlc())

    def _new_id(self, path: str, hlc: str, winners: dict[str, AttachmentEntry]) -> str:
        att_id = attachment_id(path)
        taken = winners.get(att_id)
        if taken is not None and (taken.path != path or not taken.deleted):
            att_id = fresh_attachment_id(path, hlc, self.device_id)
        return att_id

    async def record(self, actions: Sequence[IntakeAction], source: str, disk: dict[str, OnDisk]) -> None:
        """Record changes made in the folder: index entries, seen state and the versions of
        what they replaced; a unit of work (one commit, one index update) per
        ``RECORD_BATCH`` changes, the loop free in between (a bulk intake stays responsive)."""
        if not actions:
            return
        index = self.watch.index
        changes_index = any(not isinstance(a, Touch) for a in actions)
        winners = index.winners() if changes_index else {}
        if changes_index:
            self._clock.observe(index.latest_hlc())  # later than every change seen here
        released: set[str] = set()
        for i in range(0, len(actions), RECORD_BATCH):
            if i:
                await asyncio.sleep(0)
            self._record_batch(actions[i:i + RECORD_BATCH], source, disk, winners, released)
        await self.keeping.drop_blobs(released)

    def _record_batch(self, actions: Sequence[IntakeAction], source: str, disk: dict[str, OnDisk],
                      winners: dict[str, AttachmentEntry], released: set[str]) -> None:
        index = self.watch.index
        seen = dict(self.seen.by_path)
        now = time.time()
        entries: list[AttachmentEntry] = []

        def put(entry: AttachmentEntry) -> None:
            entries.append(entry)  # into the index once the store writes are done
            winners[entry.id] = entry

        def keep(s: SeenFile, path: str, kind: str) -> None:
            _version, gone = self.versions.add(attachment_id=s.att_id, path=path, kind=kind, source=source,
                                               created_at=now, sha256=s.sha256, size=s.size,
                                               executable=s.executable)
            released.update(gone)

        with self.service.write(source):
            for a in actions:
                if isinstance(a, Touch):
                    s = seen[a.path]
                    seen[a.path] = replace(s, size=a.disk.size, mtime_ns=a.disk.mtime_ns, ino=a.disk.ino,
                                           executable=a.disk.executable)
                    self.files.put(a.path, seen[a.path])
                    continue
                hlc = self._clock.now().pack()
                if isinstance(a, RecordChange):
                    d = disk[a.path]
                    att_id = a.att_id or self._new_id(a.path, hlc, winners)
                    old = seen.get(a.path)
                    if old is not None and old.sha256 != a.sha256:
                        keep(old, a.path, BEFORE_OVERWRITE)
                    shown = winners.get(att_id)
                    if (shown is not None and not shown.deleted and shown.path == a.path
                            and (shown.sha256, shown.executable) == (a.sha256, a.executable)):
                        # The file holds just what the index shows (a copy that was here
                        # before joining, a write of ours a crash kept us from recording):
                        # nothing to record, and the bytes are that change's.
                        hlc = shown.hlc
                    else:
                        # Its ancestry: that of the change the file showed, while its slot is here.
                        slots = index.slots(att_id)
                        shown_sha = old.sha256 if old else None
                        ancestry = made_on(slots, a.base, shown_sha)
                        # A change of the bytes keeps the path's stamp: a concurrent move
                        # of the attachment composes with it (issue 14).
                        path_at = path_set_at(slots, a.path, a.base, shown_sha)
                        put(AttachmentEntry(att_id, a.path, a.sha256, a.size, a.executable, hlc,
                                            self.device_id, False, a.base, ancestry, path_at))
                        self.log.recorded(a, att_id, old, a.sha256, source, now)
                    seen[a.path] = SeenFile(att_id, a.sha256, d.size, d.mtime_ns, d.ino, d.executable, hlc)
                    self.files.put(a.path, seen[a.path])
                elif isinstance(a, RecordMove):
                    d = disk[a.new_path]
                    entry = moved(a.entry, a.new_path, hlc=hlc, device=self.device_id,
                                  executable=a.executable)
                    put(entry)
                    self.log.recorded(a, entry.id, seen.get(a.old_path), entry.sha256, source, now)
                    gone = seen.pop(a.old_path, None)
                    self.files.remove(a.old_path)
                    if gone is not None and gone.sha256 != entry.sha256:
                        # The file holds older bytes than the index shows (a peer's change not
                        # written here yet): it is seen as what it holds, so the outflow still
                        # writes the peer's bytes at the new path (issue 18, mixed R1).
                        seen[a.new_path] = SeenFile(entry.id, gone.sha256, d.size, d.mtime_ns, d.ino,
                                                    d.executable, gone.hlc)
                    else:
                        seen[a.new_path] = SeenFile(entry.id, entry.sha256, d.size, d.mtime_ns, d.ino,
                                                    d.executable, hlc)
                    self.files.put(a.new_path, seen[a.new_path])
                elif isinstance(a, RecordDelete):
                    s = a.seen
                    # (kept while it waited, if it did)
                    if not self.keeping.has_version(s.att_id, s.sha256, BEFORE_DELETION):
                        keep(s, a.path, BEFORE_DELETION)
                    put(AttachmentEntry(s.att_id, a.path, s.sha256, s.size, s.executable, hlc, self.device_id,
                                        True, s.hlc))
                    self.log.recorded(a, s.att_id, s, None, source, now)
                    seen.pop(a.path, None)
                    self.files.remove(a.path)
            updates = [u for u in map(index.put, entries) if u is not None]
            update = join_updates(updates)
            if update is not None:
                self.service.put_index_update(update, source, entries[0].path if len(entries) == 1 else "")
        self.seen.by_path = seen
