"""The replicated attachment index: a pycrdt Map of per-device slots (SPEC §3.14).

Map ``attachments``: ``"<attachment id>/<device id>"`` → that device's latest entry for
the attachment (``attachment_entry.AttachmentEntry``, replaced whole). A device writes
only its own slots, so concurrent writers never race on one key; what an attachment is
comes from ``attachment_entry.winner`` over its slots, the same on every replica.

The Map can live in a document of its own or in another one (pass ``doc``): placed in
the vault index's document it replicates through the index sync that already exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pycrdt

from .attachment_entry import (
    AttachmentEntry,
    attachment_id,
    concurrent_losers,
    fresh_attachment_id,
    path_owners,
    path_set_at,
    winner,
)
from .hlc import ZERO, Hlc, HybridClock, wall_ms
from .index_doc import IndexDoc

MAP_NAME = "attachments"


def slot_key(att_id: str, device: str) -> str:
    return f"{att_id}/{device}"


class AttachmentIndex(IndexDoc):
    """One slot per (attachment, device); ``apply_update``'s keys are attachment ids."""

    def __init__(self, doc: pycrdt.Doc[Any] | None = None) -> None:
        # The slots and what lives where, parsed once and kept until the document changes
        # (any transaction of it, ours or a peer's): a receiver's passes read the whole
        # index each while blobs land, and parsing it was most of their CPU (P9, issue 14).
        self._slots: list[AttachmentEntry] | None = None
        self._by_id: dict[str, list[AttachmentEntry]] = {}  # the same slots by attachment
        self._live: dict[str, AttachmentEntry] | None = None
        super().__init__(doc, what="attachment index update")
        self._map: pycrdt.Map[Any] = self.doc.get(MAP_NAME, type=pycrdt.Map)
        self._map_subscription = self._map.observe(self._on_map)

    def _on_map(self, event: pycrdt.MapEvent) -> None:
        self._forget()
        if self._changed is not None:
            keys: dict[str, Any] = getattr(event, "keys", {})
            self._changed.update(k.split("/", 1)[0] for k in keys)

    def _on_tx(self, event: pycrdt.TransactionEvent) -> None:
        self._forget()
        super()._on_tx(event)

    def _forget(self) -> None:
        self._slots = None
        self._live = None

    def _write(self, fn: Callable[[], None]) -> bytes | None:
        self._forget()
        try:
            return super()._write(fn)
        finally:
            self._forget()

    def apply_update(self, update: bytes) -> tuple[bytes | None, set[str]]:
        self._forget()
        try:
            return super().apply_update(update)
        finally:
            self._forget()

    # -- reading -------------------------------------------------------------------

    def slots(self, att_id: str | None = None) -> list[AttachmentEntry]:
        """Every well-formed slot (of one attachment, or of all)."""
        if self._slots is None:
            out = []
            for key, value in self._map.items():
                aid, sep, device = key.partition("/")
                if not sep:
                    continue
                entry = AttachmentEntry.from_json(aid, device, value)
                if entry is not None:
                    out.append(entry)
            self._slots = out
            by_id: dict[str, list[AttachmentEntry]] = {}
            for e in out:
                by_id.setdefault(e.id, []).append(e)
            self._by_id = by_id
        if att_id is None:
            return list(self._slots)
        # By id, not a scan: the outflow asks once per file it removes (a peer's 1,300
        # deletions asked 1,300 times over 3,400 slots).
        return list(self._by_id.get(att_id, ()))

    def _grouped(self) -> dict[str, list[AttachmentEntry]]:
        self.slots()
        return {aid: list(slots) for aid, slots in self._by_id.items()}

    def current(self, att_id: str) -> AttachmentEntry | None:
        return winner(self.slots(att_id))

    def winners(self) -> dict[str, AttachmentEntry]:
        """Every attachment's winning entry (deleted ones included), by id."""
        out = {}
        for aid, slots in self._grouped().items():
            w = winner(slots)
            if w is not None:
                out[aid] = w
        return out

    def live(self) -> dict[str, AttachmentEntry]:
        """What should be in the folder: path → entry (one per path, see ``path_owners``)."""
        if self._live is None:
            self._live = path_owners(self.winners().values())[0]
        return dict(self._live)

    def losers(self, att_id: str) -> list[AttachmentEntry]:
        return concurrent_losers(self.slots(att_id))

    def at_path(self, path: str) -> AttachmentEntry | None:
        return self.live().get(path)

    def with_sha(self, sha256: str) -> list[AttachmentEntry]:
        """Live attachments holding these bytes (a file that vanished and reappears with
        the same hash elsewhere is a move of one of them)."""
        return sorted((e for e in self.live().values() if e.sha256 == sha256), key=lambda e: e.path)

    def latest_hlc(self) -> Hlc:
        """The latest time any slot holds (ZERO when empty)."""
        return max((Hlc.unpack(e.hlc) for e in self.slots()), default=ZERO)

    def clock(self, now_ms: Callable[[], int] = wall_ms) -> HybridClock:
        """This replica's clock, seeded with every time it has seen: after a restart (even
        with the wall clock stepped back) no local change can be stamped before one it
        already recorded or received. Nothing else needs to be persisted."""
        return HybridClock(now_ms, last=self.latest_hlc())

    def put(self, entry: AttachmentEntry) -> bytes | None:
        """Write ``entry`` into its device's slot; returns the update (None: no change)."""
        key = slot_key(entry.id, entry.device)
        if AttachmentEntry.from_json(entry.id, entry.device, self._map.get(key)) == entry:
            return None
        return self._write(lambda: self._map.__setitem__(key, entry.to_json()))

    def record(self, path: str, *, sha256: str, size: int, executable: bool, hlc: str, device: str,
               deleted: bool = False, att_id: str | None = None,
               base: str | None = None) -> tuple[AttachmentEntry, bytes | None]:
        """A local change at ``path`` (made at ``hlc`` by ``device``): a change to the
        attachment there (or ``att_id``), or a new attachment. ``base``: the HLC of the
        change it was made on (default: what this replica shows now; a file changed on
        disk passes the change the file held, so an unseen remote change stays concurrent)."""
        if att_id is None:
            here = self.at_path(path)
            if here is not None:
                att_id = here.id
            else:
                att_id = attachment_id(path)
                taken = self.current(att_id)
                if taken is not None and (taken.path != path or not taken.deleted):
                    att_id = fresh_attachment_id(path, hlc, device)
        if base is None:
            current = self.current(att_id)
            base = current.hlc if current is not None else ZERO.pack()
        # A change of the bytes keeps the path's stamp (a concurrent move composes with it).
        path_at = None if deleted else path_set_at(self.slots(att_id), path, base)
        entry = AttachmentEntry(att_id, path, sha256, size, executable, hlc, device, deleted, base,
                                path_at=path_at)
        return entry, self.put(entry)
