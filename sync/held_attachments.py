"""Held attachment changes (SPEC §3.14, §5.6): the burst brake holds attachment deletions
and overwrites made on disk like notes'.

A held attachment change is a row of the brake's ``held`` table like a note's (one id
space for ``stet held/release/revert``), told apart by its ``note_id``: ``attachment:`` and
the attachment's id. Its ``version_id`` is the *attachment* version (pinned while held)
holding the bytes before the change. What was held -- the planner's ``IntakeAction``, to
hand back to the folder side on release -- is kept beside it in ``held_attachments``
(created here if missing: an older Stet opening the store ignores the table).

Pure: JSON forms of the intake actions, and the table's access.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from .attachment_entry import AttachmentEntry
from .attachment_plan import IntakeAction, OnDisk, RecordChange, RecordDelete, RecordMove, SeenFile, Touch
from .held_changes import COLS, HeldChange, held_of
from .store import VaultStore

PREFIX = "attachment:"  # the ``note_id`` of a held attachment change: PREFIX + attachment id

_TABLE = """CREATE TABLE IF NOT EXISTS held_attachments (
    held_id INTEGER PRIMARY KEY,
    attachment_id TEXT NOT NULL,
    action TEXT NOT NULL
)"""


def held_key(attachment_id: str) -> str:
    return PREFIX + attachment_id


def is_attachment_hold(h: HeldChange) -> bool:
    return h.note_id.startswith(PREFIX)


def attachment_of(h: HeldChange) -> str | None:
    return h.note_id[len(PREFIX):] if is_attachment_hold(h) else None


# -- the actions as JSON ------------------------------------------------------------------------


def action_to_json(a: IntakeAction) -> dict[str, Any]:
    if isinstance(a, RecordChange):
        return {"type": "change", **asdict(a)}
    if isinstance(a, RecordMove):
        return {"type": "move", "entry": {"id": a.entry.id, "device": a.entry.device, **a.entry.to_json()},
                "old_path": a.old_path, "new_path": a.new_path, "executable": a.executable}
    if isinstance(a, RecordDelete):
        return {"type": "delete", "path": a.path, "seen": asdict(a.seen)}
    return {"type": "touch", "path": a.path, "disk": asdict(a.disk)}


def action_from_json(data: dict[str, Any]) -> IntakeAction:
    """The action back (``ValueError`` if the JSON is not one this module wrote)."""
    try:
        kind = data["type"]
        if kind == "change":
            return RecordChange(data["path"], data["sha256"], int(data["size"]), bool(data["executable"]),
                                data["att_id"], data["base"])
        if kind == "move":
            e = dict(data["entry"])
            entry = AttachmentEntry.from_json(e.pop("id"), e.pop("device"), e)
            if entry is None:
                raise ValueError("a held move names a malformed entry")
            return RecordMove(entry, data["old_path"], data["new_path"], bool(data["executable"]))
        if kind == "delete":
            return RecordDelete(data["path"], SeenFile(**data["seen"]))
        if kind == "touch":
            return Touch(data["path"], OnDisk(**data["disk"]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a held attachment action: {exc}") from None
    raise ValueError(f"not a held attachment action: type {data.get('type')!r}")


def action_path(a: IntakeAction) -> str:
    """Where the action leaves a file (a move: its new path)."""
    return a.new_path if isinstance(a, RecordMove) else a.path


# -- the table ------------------------------------------------------------------------------------


class HeldAttachments:
    def __init__(self, store: VaultStore) -> None:
        self.store = store
        with store.transaction():
            store.db.execute(_TABLE)

    def add(self, held_id: int, attachment_id: str, action: IntakeAction) -> None:
        with self.store.transaction():
            self.store.db.execute(
                "INSERT OR REPLACE INTO held_attachments (held_id, attachment_id, action) VALUES (?, ?, ?)",
                (held_id, attachment_id, json.dumps(action_to_json(action), sort_keys=True)))

    def action(self, held_id: int) -> IntakeAction | None:
        r = self.store.db.execute("SELECT action FROM held_attachments WHERE held_id = ?",
                                  (held_id,)).fetchone()
        if r is None:
            return None
        try:
            return action_from_json(json.loads(r[0]))
        except ValueError:
            return None

    def held_with(self, action: IntakeAction) -> int | None:
        """The id of a change still held that holds exactly this action (the folder side
        planned it again: it is still held, not held twice)."""
        text = json.dumps(action_to_json(action), sort_keys=True)
        r = self.store.db.execute(
            "SELECT h.id FROM held_attachments a JOIN held h ON h.id = a.held_id "
            "WHERE a.action = ? AND h.state = 'held' ORDER BY h.id DESC LIMIT 1", (text,)).fetchone()
        return None if r is None else int(r[0])

    def held_at_path(self, path: str) -> list[HeldChange]:
        """Attachment changes still held whose file was at ``path``."""
        rows = self.store.db.execute(
            f"SELECT {COLS} FROM held WHERE state = 'held' AND path = ? AND note_id LIKE 'attachment:%' "
            "ORDER BY id", (path,)).fetchall()
        return [held_of(r) for r in rows]

    def held(self) -> list[HeldChange]:
        """Every attachment change still held, oldest first."""
        rows = self.store.db.execute(
            f"SELECT {COLS} FROM held WHERE state = 'held' AND note_id LIKE 'attachment:%' ORDER BY id"
        ).fetchall()
        return [held_of(r) for r in rows]

    def held_paths(self) -> set[str]:
        return {str(r[0]) for r in self.store.db.execute(
            "SELECT DISTINCT path FROM held WHERE state = 'held' AND note_id LIKE 'attachment:%'")}
