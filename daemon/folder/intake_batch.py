"""New files of one intake slice, waiting to become notes together (issue 11, P8).

An unzip or a checkout lands thousands of new files at once. Taken in one by one, each
was a unit of its own inside the slice's: its row, its genesis update, its own vault
index update, its change-log row and version mark, ~20 SQLite calls and a document
built and kept. Taken together (``NotesService.create_many``), a slice's new files are
one statement per table and one index update, as ``stet init`` imports them. Only plain
new files wait here: a path whose note exists, a rename, a case clash with a waiting
file or a change of source makes the bridge take in what waits first, so every file is
still judged against the store as the files before it left it.
"""

from __future__ import annotations

from dataclasses import dataclass

from stet.sync.folder_scan import FileStat
from stet.sync.note_paths import casefold_key
from stet.sync.note_rows import DiskState

BATCH_MAX = 64  # new files taken in together (one statement per table, one index update)


@dataclass(frozen=True, slots=True)
class NewFileRead:
    """A new file read and checked by the bridge, waiting to become a note."""

    path: str
    text: str
    disk: DiskState
    source: str
    seen_at: float | None
    stat: FileStat
    data: bytes  # kept to hand back to a one-by-one retry without reading again


class IntakeBatch:
    def __init__(self, limit: int = BATCH_MAX) -> None:
        self.limit = limit
        self.items: list[NewFileRead] = []
        self._keys: set[str] = set()
        self._inos: set[int] = set()

    def __len__(self) -> int:
        return len(self.items)

    @property
    def full(self) -> bool:
        return len(self.items) >= self.limit

    def must_wait(self, path: str, ino: int, source: str) -> bool:
        """Whether ``path`` must be judged after the waiting files are notes: it differs
        from one of them only by case, is the same file (a rename or a hard link), or
        comes from another source (git)."""
        if not self.items:
            return False
        return (ino in self._inos or self.items[0].source != source
                or casefold_key(path) in self._keys)

    def add(self, item: NewFileRead) -> None:
        self.items.append(item)
        self._keys.add(casefold_key(item.path))
        self._inos.add(item.stat.ino)

    def take(self) -> list[NewFileRead]:
        items, self.items = self.items, []
        self._keys.clear()
        self._inos.clear()
        return items
