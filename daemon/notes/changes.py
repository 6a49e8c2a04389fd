"""What the write path announces: one ``Change`` per applied change, and its result."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from stet.sync.change_kinds import ChangeKind, Source, source_kind
from stet.sync.destruction import Destruction as Destruction  # the write path's classification, re-exported
from stet.sync.note_rows import DiskState, NoteRow
from stet.sync.text_diff import Splice, common_affixes, diff_splices
from stet.sync.text_merge import Overlap


@dataclass(frozen=True, slots=True)
class MergedSides:
    """A merge whose sides changed the same words differently (``sync/text_merge.py``):
    each side's whole text before the merge and who wrote it, and the overlapping regions
    (each side's lines are in the note, one after the other). Versions keep every side's
    text; the records keeper lists the overlap in ``stet conflicts`` and announces it."""

    sides: tuple[tuple[str, str], ...]  # (source, that side's text before the merge)
    overlaps: tuple[Overlap, ...]
    # A peer merge's (``sync/peer_merge.py``): the device of each side and the snapshot its
    # text stood at, so the records keeper can fold a later merge of the same note (a third
    # machine's line) into the overlap already listed. Empty for a merge made here.
    devices: tuple[str, ...] = ()
    snapshots: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class Change:
    """One applied change, as listeners and the log see it."""

    # changed | created | deleted | moved; index (the vault index changed) and stored
    # (content kept for a note not shown here) only matter to peers.
    kind: ChangeKind
    note_id: str
    path: str
    source: str  # a ``Source`` value, or ``agent:NAME`` / ``peer:DEVICE`` / ``S on DEVICE``
    revision_before: str | None
    revision_after: str | None
    old_path: str | None = None
    at: float = 0.0
    text_before: str | None = None  # the note's text right before the change
    text_after: str | None = None
    inserted: int = 0  # characters, between the first and last changed position
    deleted: int = 0
    update: bytes | None = None  # the CRDT update that made it (content, or index for "index")
    device: str | None = None  # the device it came from (None: this one)
    destruction: Destruction = Destruction.NONE  # set by the write path for changed/deleted
    # A peer's new note (``RemoteChanges._apply_new_notes``): the snapshot of its state,
    # so the folder's writer can write ``text_after`` without loading the document.
    snapshot: bytes | None = None
    merged: MergedSides | None = None  # set where a merge kept overlapping sides whole

    @property
    def made_by(self) -> Source:
        """Who made it, whatever name or device its ``source`` string carries."""
        return source_kind(self.source)


def change_size(before: str, after: str) -> tuple[int, int]:
    """(inserted, deleted) characters a diff of the two finds -- not the span between the
    first and last change (two small edits far apart were counted +159 −171; issue 34).
    A pure insertion or deletion needs no diff; the diff is bounded in time (then its
    unrefined hunks count whole)."""
    p, q = common_affixes(before, after)
    inserted, deleted = len(after) - p - q, len(before) - p - q
    if inserted == 0 or deleted == 0:
        return inserted, deleted
    return splices_size(before, diff_splices(before, after, deadline_s=SIZE_DIFF_S))


SIZE_DIFF_S = 0.02  # the most a change's size may cost the write path


def splices_size(old: str, splices: Iterable[Splice]) -> tuple[int, int]:
    """(inserted, deleted) characters of splices of ``old`` (each trimmed of the text it
    keeps: an edit of "# alpha" to "# alpha12345678" inserts 8)."""
    inserted = deleted = 0
    for sp in splices:
        removed = old[sp.start : sp.end]
        p, q = common_affixes(removed, sp.text)
        inserted += len(sp.text) - p - q
        deleted += len(removed) - p - q
    return inserted, deleted


Guard = Callable[[str, "NoteRow | None", str, "str | None"], None]
"""guard(source, row, text_before, text_after or None for a delete): raise to refuse."""


@dataclass(frozen=True, slots=True)
class WriteResult:
    note: NoteRow
    changed: bool
    needs_write: bool = False  # the note now differs from its file (merged disk edit)


@dataclass(frozen=True, slots=True)
class NewFile:
    """A new file to become a note (``NotesService.create_many``): its text and the
    file's state (stat, size and revision -- of exactly these bytes: the text is the
    file's bytes decoded, ``decode_note``; the snapshot of its base is filled in there)."""

    path: str
    text: str
    disk: DiskState


Listener = Callable[[Change], None]
