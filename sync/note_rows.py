"""A note's row in the vault store (``NoteRow``) and what the daemon last saw of its file
(``DiskState``): plain values, and their mapping to the ``notes`` table's columns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class DiskState:
    """What the daemon last saw of a note's file (or wrote to it).

    ``snapshot`` is the CRDT snapshot whose text equals the file: the base of a
    three-way merge when the file and the note both changed since.
    """

    revision: str
    mtime_ns: int
    size: int
    ino: int
    snapshot: bytes | None = None

    def same_file(self, other: DiskState | None) -> bool:
        return other is not None and (self.revision, self.mtime_ns, self.size, self.ino) == (
            other.revision,
            other.mtime_ns,
            other.size,
            other.ino,
        )


@dataclass(frozen=True, slots=True)
class NoteRow:
    id: str
    path: str
    deleted: bool
    revision: str
    size: int
    created_at: float
    updated_at: float
    updated_by: str
    disk: DiskState | None
    update_count: int


NOTE_COLUMNS = (
    "id, path, deleted, revision, size, created_at, updated_at, updated_by, "
    "disk_revision, disk_mtime_ns, disk_size, disk_ino, disk_snapshot, update_count"
)


def note_row(r: Sequence[Any]) -> NoteRow:
    """A ``notes`` row, read as ``SELECT {NOTE_COLUMNS}``, as a ``NoteRow``."""
    disk = (
        DiskState(r[8], r[9], r[10], r[11], None if r[12] is None else bytes(r[12]))
        if r[8] is not None
        else None
    )
    return NoteRow(r[0], r[1], bool(r[2]), r[3], r[4], r[5], r[6], r[7], disk, r[13])


def note_values(row: NoteRow) -> tuple[Any, ...]:
    """The values of ``row`` in ``NOTE_COLUMNS`` order (an INSERT's parameters)."""
    disk = row.disk
    return (row.id, row.path, int(row.deleted), row.revision, row.size, row.created_at, row.updated_at,
            row.updated_by, disk.revision if disk else None, disk.mtime_ns if disk else None,
            disk.size if disk else None, disk.ino if disk else None, disk.snapshot if disk else None,
            row.update_count)
