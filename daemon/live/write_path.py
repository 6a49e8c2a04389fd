"""Live editors' one way into the write path: the only place ``yjs_*`` touches ``NotesService``.

A Yjs client's update is checked as an agent's write is (scope, size, the burst brake:
the service's guards see the text before and the text the update would make), then
applied with ``NotesService.apply_update`` -- versions, attribution, persistence before
the call returns, the disk (coalesced by the bridge) and peers all follow from there.
Reads: ``note_at`` and ``doc``. Each apply is one unit of work (``NotesService.write``):
a failed one rolls back and forgets the documents it touched. Changes come back through
``NotesService.subscribe``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from stet.daemon.notes.changes import Listener
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.service import NotesService
from stet.sync.conflict_log import ConflictLog
from stet.sync.errors import CrdtError, StetError
from stet.sync.live_updates import Preview, preview
from stet.sync.note_rows import NoteRow
from stet.sync.permissions import APPEND, WRITE, Scopes

logger = logging.getLogger(__name__)

# A token that may not change the note: its sync step 2 (what its document holds beyond
# the note's) is looked at only up to this size -- decoding it costs the loop up to
# ~130 ns a byte, and nothing it holds would be applied anyway (issue 33, finding 7).
READ_ONLY_CHECK_BYTES = 64 * 1024


class LiveWritePath:
    def __init__(self, service: NotesService, events: EventBus, *, max_bytes: int,
                 clock: Callable[[], float], max_update_bytes: int = 2 * 1024 * 1024) -> None:
        self.service = service
        self.events = events
        self.max_bytes = max_bytes
        self.max_update_bytes = max_update_bytes
        self.clock = clock

    @property
    def vault_id(self) -> str:
        return self.service.vault_id

    def subscribe(self, listener: Listener) -> None:
        self.service.subscribe(listener)

    def note_at(self, path: str) -> NoteRow:
        return self.service.note_at(path)

    def state_vector(self, note_id: str) -> bytes:
        return self.service.doc(note_id).state_vector()

    def update_since(self, note_id: str, state_vector: bytes) -> bytes:
        return self.service.doc(note_id).update_since(state_vector)

    def apply(self, note_id: str, update: bytes, *, source: str, token: str, scopes: Scopes,
              step2: bool = False) -> bool:
        """Apply a client's update as ``source``; False if it changed nothing.

        One unit of work (``NotesService.write``): the checks and the write see one state
        of the note, and an error rolls back and forgets whatever the unit touched.
        ``step2``: the client's answer to the server's sync step 1 (what its document
        holds beyond the note's), not an edit it just made.
        Raises ``StetError``: ``forbidden`` (no write scope, or an append-only scope and
        the update is not an append), ``too_large`` (the note, or the update over
        ``[live] max_update_bytes``), ``not_text`` (the update carries something besides
        the note's text), ``brake_engaged``, ``not_found``, ``bad_request`` (an update
        pycrdt cannot decode). Nothing is written then.
        """
        row = self.service.store.note(note_id)
        if row is None or row.deleted:
            raise StetError("the note was deleted", code="not_found")
        try:
            if not (scopes.allows(WRITE, row.path) or scopes.allows(APPEND, row.path)):
                return self._read_only(row, update, step2)
            if len(update) > self.max_update_bytes:
                raise StetError(f"an update of {len(update)} bytes is over [live] max_update_bytes "
                                f"({self.max_update_bytes}): nothing was written", code="too_large",
                                size=len(update), limit=self.max_update_bytes)
            with self.service.write(source):
                return self._checked_apply(row, update, source, scopes)
        except StetError as exc:
            if exc.code in ("forbidden", "brake_engaged"):
                self._record_refusal(row, token, exc.code, len(update), source)
            raise

    def _read_only(self, row: NoteRow, update: bytes, step2: bool) -> bool:
        """A token that may not change the note: nothing it sends is applied, and what it
        sends is decoded only when that is cheap. An update message is an edit the client
        made (y-websocket sends only its own): refused as it is. A step 2 is checked up to
        ``READ_ONLY_CHECK_BYTES`` (refused if it would change the text), past that ignored."""
        forbidden = StetError(f"this token may not write {row.path}", code="forbidden", path=row.path)
        if not step2:
            raise forbidden
        if len(update) > READ_ONLY_CHECK_BYTES:
            return False
        if self._preview(row, update).text != self.service.doc(row.id).text:
            raise forbidden
        return False

    def _preview(self, row: NoteRow, update: bytes) -> Preview:
        try:
            return preview(self.service.doc(row.id).full_update(), update)
        except CrdtError as exc:
            raise StetError(exc.message, code="bad_request") from None

    def _checked_apply(self, row: NoteRow, update: bytes, source: str, scopes: Scopes) -> bool:
        before = self.service.doc(row.id).text
        seen = self._preview(row, update)
        if seen.not_text is not None:
            raise StetError(f"only the note's text (Y.Text \"content\") may change; this update adds "
                            f"{seen.not_text}", code="not_text")
        after = seen.text
        if after == before:
            if scopes.allows(WRITE, row.path):
                # Text unchanged (an empty step 2, items already known, an insertion and
                # its deletion): still stored, so the note's state covers what the client has.
                return self.service.apply_update(row.id, update, source).changed
            return False
        if not scopes.allows(WRITE, row.path) and not (
                scopes.allows(APPEND, row.path) and after.startswith(before)):
            raise StetError(f"this token may not write {row.path}", code="forbidden", path=row.path)
        size = len(after.encode("utf-8"))
        if size > self.max_bytes:
            raise StetError(f"the note would be {size} bytes; the limit is {self.max_bytes}",
                            code="too_large", size=size, limit=self.max_bytes)
        for guard in self.service.guards:  # the burst brake (as for every write)
            guard(source, row, before, after)
        return self.service.apply_update(row.id, update, source).changed

    def _record_refusal(self, row: NoteRow, token: str, code: str, size: int, source: str) -> None:
        """A refused write is kept in the conflict log (SPEC §6.8), as for REST and MCP:
        in a unit of its own, after the refused one rolled back."""
        try:
            with self.service.write(source):
                conflict = ConflictLog(self.service.store).record(
                    at=self.clock(), token=token, path=row.path, operation="live_edit", code=code,
                    attempted={"yjsUpdateBytes": size}, current_revision=row.revision)
        except Exception:
            logger.exception("cannot record the refused live edit of %s", row.path)
            return
        self.events.publish(self.vault_id, "conflict.refused", conflict.to_json())
