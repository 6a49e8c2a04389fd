"""Access to the ``held`` and ``brakes`` tables of a vault store (SPEC §5.6).

A held change is a deletion, emptying or overwrite the burst brake kept back: it is applied here,
but not sent to peers until released; its note's text before the change is the version
``version_id`` (which retention never drops while the change is held). ``brakes`` lists
the sources whose brake is engaged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .store import VaultStore

HELD = "held"
RELEASED = "released"
REVERTED = "reverted"
CAME_BACK = "came-back"  # its note came back (the file reappeared, or was written again)

COLS = "id, note_id, path, source, kind, held_at, version_id, state, resolved_at, resolved_by"


@dataclass(frozen=True, slots=True)
class HeldChange:
    id: int
    note_id: str
    path: str
    source: str
    kind: str  # "deleted" | "emptied" | "overwritten"
    held_at: float
    version_id: int | None
    state: str  # "held" | "released" | "reverted" | "came-back"
    resolved_at: float | None
    resolved_by: str | None


def held_of(r: Sequence[Any]) -> HeldChange:
    return HeldChange(int(r[0]), r[1], r[2], r[3], r[4], float(r[5]), None if r[6] is None else int(r[6]),
                      r[7], r[8], r[9])


class HeldStore:
    def __init__(self, store: VaultStore) -> None:
        self.store = store

    @property
    def _db(self) -> Any:
        return self.store.db

    # -- held changes ---------------------------------------------------------------

    def add(self, *, note_id: str, path: str, source: str, kind: str, held_at: float,
            version_id: int | None) -> HeldChange:
        with self.store.transaction():
            cur = self._db.execute(
                "INSERT INTO held (note_id, path, source, kind, held_at, version_id, state) "
                "VALUES (?, ?, ?, ?, ?, ?, 'held')",
                (note_id, path, source, kind, held_at, version_id),
            )
        return HeldChange(int(cur.lastrowid), note_id, path, source, kind, held_at, version_id,
                          HELD, None, None)

    def get(self, held_id: int) -> HeldChange | None:
        r = self._db.execute(f"SELECT {COLS} FROM held WHERE id = ?", (held_id,)).fetchone()
        return None if r is None else held_of(r)

    def changes(self, *, state: str | None = HELD, limit: int = 10000) -> list[HeldChange]:
        """Held changes (oldest first); ``state=None`` lists every state, newest first."""
        if state is None:
            rows = self._db.execute(f"SELECT {COLS} FROM held ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        else:
            rows = self._db.execute(
                f"SELECT {COLS} FROM held WHERE state = ? ORDER BY id LIMIT ?", (state, limit)
            ).fetchall()
        return [held_of(r) for r in rows]

    def held_note_ids(self) -> set[str]:
        return {str(r[0]) for r in self._db.execute("SELECT DISTINCT note_id FROM held WHERE state = 'held'")}

    def count_held(self, source: str | None = None) -> int:
        if source is None:
            return int(self._db.execute("SELECT count(*) FROM held WHERE state = 'held'").fetchone()[0])
        return int(self._db.execute(
            "SELECT count(*) FROM held WHERE state = 'held' AND source = ?", (source,)
        ).fetchone()[0])

    def held_before(self, held_before: float) -> list[HeldChange]:
        rows = self._db.execute(
            f"SELECT {COLS} FROM held WHERE state = 'held' AND held_at <= ? ORDER BY id", (held_before,)
        ).fetchall()
        return [held_of(r) for r in rows]

    def held_for_note(self, note_id: str, path: str) -> list[HeldChange]:
        """The held changes of a note, or of any note that was at ``path``."""
        rows = self._db.execute(
            f"SELECT {COLS} FROM held WHERE state = 'held' AND (note_id = ? OR path = ?) ORDER BY id",
            (note_id, path),
        ).fetchall()
        return [held_of(r) for r in rows]

    def came_back_after(self, after: float) -> list[HeldChange]:
        """Changes that left ``held`` because their note came back, after ``after``."""
        rows = self._db.execute(
            f"SELECT {COLS} FROM held WHERE state = ? AND resolved_at > ? ORDER BY id",
            (CAME_BACK, after),
        ).fetchall()
        return [held_of(r) for r in rows]

    def last_resolved_by(self, by: str) -> float:
        """When changes were last resolved by ``by`` (0 if never)."""
        r = self._db.execute("SELECT max(resolved_at) FROM held WHERE resolved_by = ?", (by,)).fetchone()
        return float(r[0]) if r is not None and r[0] is not None else 0.0

    def resolve(self, ids: Iterable[int], state: str, at: float, by: str) -> None:
        with self.store.transaction():
            self._db.executemany(
                "UPDATE held SET state = ?, resolved_at = ?, resolved_by = ? WHERE id = ? AND state = 'held'",
                [(state, at, by, i) for i in ids],
            )

    # -- engaged sources ------------------------------------------------------------------

    def engage(self, source: str, at: float) -> None:
        with self.store.transaction():
            self._db.execute("INSERT OR IGNORE INTO brakes (source, engaged_at) VALUES (?, ?)", (source, at))

    def disengage(self, source: str) -> None:
        with self.store.transaction():
            self._db.execute("DELETE FROM brakes WHERE source = ?", (source,))

    def engaged(self) -> dict[str, float]:
        rows = self._db.execute("SELECT source, engaged_at FROM brakes ORDER BY engaged_at").fetchall()
        return {str(r[0]): float(r[1]) for r in rows}
