"""Attachment changes in the attributed change log (SPEC §6.10, §3.14, §3.16): ``stet log``
lists a recorded attachment change beside notes' -- who (``disk``, ``git``, ``restore``),
what (``created``/``changed``/``moved``/``deleted``), when -- so a checkout's attachments
are named ``git`` as its notes are. The log's ``note_id`` is the attachment's held key
(``attachment:<id>``); its revisions are the bytes' SHA-256 (what a note's revision is).

Written inside the folder side's unit of work (one commit with the record itself).
"""

from __future__ import annotations

from stet.sync.attachment_plan import IntakeAction, RecordChange, RecordDelete, RecordMove, SeenFile
from stet.sync.change_kinds import ChangeKind
from stet.sync.change_log import ChangeLog, LogEntry
from stet.sync.held_attachments import held_key
from stet.sync.store import VaultStore


class AttachmentLog:
    def __init__(self, store: VaultStore) -> None:
        self.log = ChangeLog(store)

    def recorded(self, a: IntakeAction, att_id: str, before: SeenFile | None, sha256: str | None,
                 source: str, at: float) -> None:
        """One recorded action: ``before`` what the path held (None: nothing), ``sha256``
        the bytes after (None: deleted)."""
        if isinstance(a, RecordMove):
            entry = LogEntry(held_key(att_id), a.new_path, ChangeKind.MOVED, source, at, a.entry.sha256,
                             a.entry.sha256, old_path=a.old_path)
        elif isinstance(a, RecordDelete):
            entry = LogEntry(held_key(att_id), a.path, ChangeKind.DELETED, source, at, a.seen.sha256, None)
        elif isinstance(a, RecordChange):
            kind = ChangeKind.CREATED if before is None else ChangeKind.CHANGED
            entry = LogEntry(held_key(att_id), a.path, kind, source, at,
                             before.sha256 if before is not None else None, sha256)
        else:
            return
        self.log.append(entry)
