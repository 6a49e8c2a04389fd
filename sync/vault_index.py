"""The vault index: which notes exist, where they live, and who the members are.

A pycrdt document replicated between peers like a note: Map ``notes`` (note id →
entry) and Map ``members`` (device id → member). Each entry is replaced whole
(last writer wins per key), so a move and a delete of the same note converge to one of
them; an edit beats a concurrent delete by the rule in ``should_resurrect``.
"""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass
from typing import Any

import pycrdt

from .index_doc import IndexDoc
from .state_vectors import has_unseen

INDEX_ID = "__index__"
# Entries a peer's updates brought, kept as the update's event gave them until first read
# (``VaultIndex.entry``), at most this many: a first sync's index names every note, and
# each note's intake reads its entry once -- a map lookup each was as costly as applying
# the note's content (P8 on the receiving peer). Past the cap, entries are read from the map.
MAX_ARRIVED_ENTRIES = 16384


@dataclass(frozen=True, slots=True)
class NoteEntry:
    id: str
    path: str
    deleted: bool = False
    creator: str = ""
    # The note's content state vector when it was deleted (base64): edits beyond it
    # were made without seeing the delete, and bring the note back.
    deleted_sv: str | None = None
    # Set when two notes claimed one path and this one was joined into another.
    merged_into: str | None = None
    # Who deleted it (a change's source: "disk", "git", "agent:x"), so a peer's log and
    # brake see who it was (SPEC §4.6); absent in entries written before it existed.
    deleted_by: str | None = None

    @classmethod
    def from_json(cls, note_id: str, data: Any) -> NoteEntry | None:
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            return None
        return cls(
            id=note_id, path=data["path"], deleted=bool(data.get("deleted", False)),
            creator=str(data.get("creator", "")), deleted_sv=data.get("deleted_sv"),
            merged_into=data.get("merged_into"),
            deleted_by=data["deleted_by"] if isinstance(data.get("deleted_by"), str) else None,
        )

    def to_json(self) -> dict[str, Any]:
        # By hand, not ``asdict`` (a third of a new note's index entry, made for each
        # file of a bulk intake); the same keys in the same order.
        d: dict[str, Any] = {"path": self.path, "deleted": self.deleted, "creator": self.creator,
                             "deleted_sv": self.deleted_sv, "merged_into": self.merged_into}
        if self.deleted_by is not None:  # entries stay as they were written before the field
            d["deleted_by"] = self.deleted_by
        return d


@dataclass(frozen=True, slots=True)
class Member:
    device_id: str
    cert_pem: str
    added_by: str
    added_at: float
    removed: bool = False
    name: str = ""
    # The member's ``sys.platform``, declared at its start: which names its file system
    # cannot hold (``stet.sync.member_names``). "": not declared yet (an older Stet).
    platform: str = ""

    @classmethod
    def from_json(cls, device_id: str, data: Any) -> Member | None:
        if not isinstance(data, dict) or not isinstance(data.get("cert_pem"), str):
            return None
        return cls(device_id, data["cert_pem"], str(data.get("added_by", "")), float(data.get("added_at", 0)),
                   bool(data.get("removed", False)), str(data.get("name", "")), str(data.get("platform", "")))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        del d["device_id"]
        return d


def should_resurrect(entry: NoteEntry, content_sv: bytes) -> bool:
    """A deleted note comes back if its content holds edits the deleter had not seen."""
    if not entry.deleted or entry.merged_into or entry.deleted_sv is None:
        return False
    return has_unseen(content_sv, base64.b64decode(entry.deleted_sv))


class VaultIndex(IndexDoc):
    """Note entries and members; ``apply_update``'s keys are note ids."""

    def __init__(self) -> None:
        # A peer's one-client update that starts past what we hold of that client waits
        # for the ones before it: yrs 0.14 loses a Map entry for good when two later
        # updates of its writer arrive first (tests/unit/test_vault_index_order.py).
        super().__init__(what="index update")
        self._notes: pycrdt.Map[Any] = self.doc.get("notes", type=pycrdt.Map)
        self._members: pycrdt.Map[Any] = self.doc.get("members", type=pycrdt.Map)
        self._live: set[str] | None = None  # ids of live entries, once counted
        self._arrived: dict[str, NoteEntry] = {}  # a peer's update's live entries, unread
        self._notes.observe(self._on_notes)

    def _on_notes(self, event: pycrdt.MapEvent) -> None:
        keys: dict[str, Any] = getattr(event, "keys", {})
        remote = self._changed is not None  # a peer's update (``apply_update``)
        if self._changed is not None:
            self._changed.update(keys)
        live, arrived = self._live, self._arrived
        if live is None and not remote:
            return
        # Each changed entry parsed once from the event's own new value (converted
        # already): the live count kept up, and a peer's live entries kept until their
        # first ``entry`` -- a first sync's index names 10,000 notes, and looking each one
        # up again in the map cost as much as taking its content in (P8 on the receiver).
        for key, change in keys.items():
            gone = not isinstance(change, dict) or change.get("action") == "delete"
            entry = None if gone else NoteEntry.from_json(key, change.get("newValue"))
            is_live = entry is not None and not entry.deleted and not entry.merged_into
            if live is not None:
                if is_live:
                    live.add(key)
                else:
                    live.discard(key)
            if remote:
                # Live entries only: a new note's is read when its content comes; a
                # deleted one's may never be read here, and would only take room.
                if entry is not None and is_live and (key in arrived or len(arrived) < MAX_ARRIVED_ENTRIES):
                    arrived[key] = entry
                else:
                    arrived.pop(key, None)

    @classmethod
    def from_updates(cls, updates: list[bytes]) -> VaultIndex:
        index = cls()
        for u in updates:
            index.apply_update(u)
        return index

    # -- reading -------------------------------------------------------------------

    def entry(self, note_id: str) -> NoteEntry | None:
        arrived = self._arrived.pop(note_id, None)
        if arrived is not None:
            return arrived
        return NoteEntry.from_json(note_id, self._notes.get(note_id))

    def entries(self) -> dict[str, NoteEntry]:
        out = {}
        for key, value in self._notes.items():
            e = NoteEntry.from_json(key, value)
            if e is not None:
                out[key] = e
        return out

    def live_count(self) -> int:
        """How many notes the index lists as live (not deleted, not merged into another).
        Counted once; after that kept up by the map's observer from each change (counting
        them all on every status call made a bulk intake quadratic)."""
        if self._live is None:
            self._live = {k for k, e in self.entries().items() if not e.deleted and not e.merged_into}
        return len(self._live)

    def members(self) -> dict[str, Member]:
        out = {}
        for key, value in self._members.items():
            m = Member.from_json(key, value)
            if m is not None:
                out[key] = m
        return out

    def put_note(self, entry: NoteEntry) -> bytes | None:
        if self.entry(entry.id) == entry:  # (an arrived value of it read, and dropped)
            return None
        return self._write(lambda: self._notes.__setitem__(entry.id, entry.to_json()))

    def put_notes(self, entries: list[NoteEntry]) -> bytes | None:
        """``put_note`` of each, in one transaction: one update for them all (a bulk
        intake's slice of new notes)."""
        entries = [e for e in entries if self.entry(e.id) != e]  # (arrived values dropped)
        if not entries:
            return None

        def put_all() -> None:
            for e in entries:
                self._notes[e.id] = e.to_json()

        return self._write(put_all)

    def put_member(self, member: Member) -> bytes | None:
        current = self.members().get(member.device_id)
        if current == member:
            return None
        return self._write(lambda: self._members.__setitem__(member.device_id, member.to_json()))

