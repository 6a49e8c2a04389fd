"""The burst brake for attachments (SPEC §3.14, §5.6): the folder side's ``AttachmentGate``.

Before the folder side records changes made on disk, it asks ``admit``. Attachment
deletions, emptyings and overwrites (bytes replaced; an empty file destroys nothing) count
in the brake's window beside notes', per source (git's bursts pass while ``trust_git``):

- a change that trips the brake, and every further one while its source is engaged, is
  *held*: not admitted (so not recorded in the index, so peers never hear of it), a row of
  the brake's ``held`` table (kind ``deleted``/``emptied``/``overwritten``, target
  ``attachment``), the bytes before kept as an attachment version pinned while held. The
  destructive changes of the same batch counted before the trip are held with it; those
  the window holds from earlier batches (already recorded) are held too, so ``revert``
  brings their bytes back.
- ``release`` (a person's, ``--all``, or the hold timeout) hands the held actions back to
  ``AttachmentReplicaApi.record_held`` (re-checked there against the folder).
- ``revert`` puts the bytes before back through ``write_back`` (byte-identical, executable
  bit), newest hold first -- except where the file came back since (reappeared, or written
  again): then it skips it and says so, never overwriting it.
- A held change whose file came back (an admitted change at its path) leaves ``held`` by
  itself (``came-back``).

The folder side must call ``admit`` before it updates its seen state (the bytes before an
overwrite are read from ``attachment_files``), and must not write back over a path of a held
change (``held_paths``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stet.daemon.attachments.seams import AttachmentReplicaApi
from stet.daemon.safety.brake import Brake, held_json
from stet.sync.attachment_files import AttachmentFiles
from stet.sync.attachment_plan import IntakeAction, RecordChange, RecordDelete, RecordMove, Touch
from stet.sync.attachment_versions import BEFORE_DELETION, BEFORE_OVERWRITE, AttachmentVersionStore
from stet.sync.brake import DELETED, EMPTIED, OVERWRITTEN
from stet.sync.errors import NotFound, StetError
from stet.sync.held_attachments import (
    HeldAttachments,
    action_path,
    attachment_of,
    held_key,
    is_attachment_hold,
)
from stet.sync.held_changes import CAME_BACK, HELD, RELEASED, REVERTED, HeldChange
from stet.sync.hlc import ZERO
from stet.sync.note_paths import InvalidPath, resolve_inside

logger = logging.getLogger(__name__)

REAPPEARED = "the attachment is back at its path"
WRITTEN_AGAIN = "the attachment was written again since"
_READ = 1 << 20


@dataclass(frozen=True, slots=True)
class _AttDestroyed:
    """One destructive attachment change, while its source's window is open."""

    attachment_id: str
    path: str
    source: str
    kind: str  # deleted | emptied | overwritten
    sha256: str  # the bytes before
    size: int
    executable: bool
    action: IntakeAction


def _hash_file(path: Path) -> str | None:
    """SHA-256 of a regular file (None if there is none), never following a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return None
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_READ):
            h.update(chunk)
    return h.hexdigest()


class AttachmentGates:
    """The home's ``AttachmentGate``: each vault's ``AttachmentBrake``, by vault id."""

    def __init__(self) -> None:
        self.by_vault: dict[str, AttachmentBrake] = {}

    def add(self, gate: AttachmentBrake) -> None:
        self.by_vault[gate.vault] = gate

    def admit(self, vault: str, actions: Sequence[IntakeAction], source: str) -> list[IntakeAction]:
        gate = self.by_vault.get(vault)
        return list(actions) if gate is None else gate.admit(vault, actions, source)

    def held_paths(self, vault: str) -> set[str]:
        gate = self.by_vault.get(vault)
        return set() if gate is None else gate.held_paths(vault)


def start_attachment_brake(brake: Brake, config: Any, root: Path) -> AttachmentBrake:
    """The gate of one vault (``config``: the daemon's ``Config``); the folder side
    ``attach``es itself when it starts."""
    return AttachmentBrake(brake, AttachmentVersionStore(brake.store, config.attachments.keep_bytes), root)


class AttachmentBrake:
    """One vault's attachment gate, beside its ``Brake`` (same window, same ``held``)."""

    def __init__(self, brake: Brake, versions: AttachmentVersionStore, root: Path,
                 replica: AttachmentReplicaApi | None = None) -> None:
        self.brake = brake
        self.store = brake.store
        self.vault = brake.service.vault_id
        self.versions = versions
        self.root = root.resolve()
        self.replica = replica
        self.holds = HeldAttachments(brake.store)
        self.files = AttachmentFiles(brake.store)
        self._to_record: list[IntakeAction] = []
        self._recording: asyncio.Task[None] | None = None
        brake.on_trip.append(self._held_by_note_trip)
        brake.on_resolved.append(self._resolved)

    def attach(self, replica: AttachmentReplicaApi) -> None:
        """The folder side, once it exists (it is built with this gate)."""
        self.replica = replica

    # -- the gate -------------------------------------------------------------------------------

    def admit(self, vault: str, actions: Sequence[IntakeAction], source: str) -> list[IntakeAction]:
        if vault != self.vault:
            raise ValueError(f"the attachment gate of vault {self.vault} asked about vault {vault}")
        destroyed: dict[int, _AttDestroyed] = {}
        still_held: set[int] = set()
        held_paths = self.holds.held_paths()
        for i, a in enumerate(actions):
            if action_path(a) in held_paths and self.holds.held_with(a) is not None:
                still_held.add(i)  # planned again: still held, not held twice
                continue
            if isinstance(a, RecordChange) and a.path in held_paths:
                continue  # written again after a held change: the bytes it destroyed are kept
            d = self._destroyed(a, source)
            if d is not None:
                destroyed[i] = d
        to_hold: list[_AttDestroyed] = []
        for d in destroyed.values():
            got = self.brake.count_other(source, held_key(d.attachment_id), d)
            to_hold.extend(x for x in got if isinstance(x, _AttDestroyed))
        if destroyed and self.brake.is_engaged(source):
            # The whole batch's destructive changes are held, those before the trip too.
            seen = {id(x) for x in to_hold}
            to_hold.extend(d for d in destroyed.values() if id(d) not in seen)
        held_now = {id(x) for x in to_hold}
        if to_hold:
            self._hold(to_hold, self.brake.service.clock())
        admitted = [a for i, a in enumerate(actions)
                    if i not in still_held and not (i in destroyed and id(destroyed[i]) in held_now)]
        self._came_back(admitted)
        return admitted

    def held_paths(self, vault: str) -> set[str]:
        """Paths of held changes: the folder side must not write the index's bytes there."""
        return self.holds.held_paths() if vault == self.vault else set()

    def _destroyed(self, a: IntakeAction, source: str) -> _AttDestroyed | None:
        if isinstance(a, RecordDelete):
            s = a.seen
            if s.size == 0:
                return None  # an empty file: nothing is destroyed
            return _AttDestroyed(s.att_id, a.path, source, DELETED, s.sha256, s.size, s.executable, a)
        if isinstance(a, RecordChange) and a.att_id is not None and a.base != ZERO.pack():
            before = self.files.get(a.path)
            if before is None or before.att_id != a.att_id or before.sha256 == a.sha256 or before.size == 0:
                return None
            kind = EMPTIED if a.size == 0 else OVERWRITTEN
            return _AttDestroyed(a.att_id, a.path, source, kind, before.sha256, before.size,
                                 before.executable, a)
        return None

    def _hold(self, items: Iterable[_AttDestroyed], now: float) -> None:
        brake = self.brake
        with self.store.transaction():
            for it in items:
                if self.holds.held_with(it.action) is not None:
                    continue
                version_id = self._pinned_version(it, now)
                h = brake.held.add(note_id=held_key(it.attachment_id), path=it.path, source=it.source,
                                   kind=it.kind, held_at=now, version_id=version_id)
                self.holds.add(h.id, it.attachment_id, it.action)
                self.store.after_commit(functools.partial(
                    brake.events.publish, self.vault, "brake.held", held_json(h, brake.policy)))
        brake.refresh_held()
        logger.info("holding attachment changes of %s (stet held)", self.vault)

    def _pinned_version(self, it: _AttDestroyed, now: float) -> int | None:
        """The version holding the bytes before (kept now unless one already holds them),
        pinned while the change is held."""
        kind = BEFORE_DELETION if it.kind == DELETED else BEFORE_OVERWRITE
        for v in self.versions.for_attachment(it.attachment_id):
            if v.sha256 == it.sha256 and v.kind == kind:
                self.versions.set_pinned(v.id, True)
                return v.id
        version, _released = self.versions.add(
            attachment_id=it.attachment_id, path=it.path, kind=kind, source=it.source, created_at=now,
            sha256=it.sha256, size=it.size, executable=it.executable, pinned=True)
        return version.id if version is not None else None

    def _held_by_note_trip(self, others: list[object], now: float) -> None:
        """A note's change tripped the brake: the window's attachment changes are held too."""
        self._hold([o for o in others if isinstance(o, _AttDestroyed)], now)

    def _came_back(self, admitted: Iterable[IntakeAction]) -> None:
        """Admitted changes at the path of a held change: its file came back."""
        paths = self.holds.held_paths()
        if not paths:
            return
        for a in admitted:
            path = action_path(a)
            if path not in paths:
                continue
            changes = [h for h in self.holds.held_at_path(path)
                       if h.kind == DELETED or not isinstance(a, Touch)]
            why = REAPPEARED if isinstance(a, RecordMove | Touch) or any(h.kind == DELETED for h in changes) \
                else WRITTEN_AGAIN
            if changes:
                logger.info("%d held change(s) of %s left held: %s", len(changes), path, why)
                self.brake.resolve(changes, CAME_BACK, why)

    # -- release, revert -----------------------------------------------------------------------

    def _resolved(self, changes: list[HeldChange], state: str) -> None:
        mine = [h for h in changes if is_attachment_hold(h)]
        if not mine:
            return
        with self.store.transaction():
            for h in mine:
                if h.version_id is not None:
                    self.versions.set_pinned(h.version_id, False)
            self.versions.apply_retention()
        if state != RELEASED:
            return
        for h in mine:
            action = self.holds.action(h.id)
            if action is not None:
                self._to_record.append(action)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a test): ``flush`` hands them over
        if self._recording is None or self._recording.done():
            self._recording = asyncio.create_task(self.flush(), name=f"attachments-released:{self.vault}")

    async def flush(self) -> None:
        """Hand released changes to the folder side (``record_held``)."""
        while self._to_record:
            batch, self._to_record = self._to_record, []
            if self.replica is None:
                logger.warning("%d released attachment change(s) of %s: no folder side to record them",
                               len(batch), self.vault)
                return
            try:
                await self.replica.record_held(self.vault, batch)
            except Exception:
                logger.exception("recording %d released attachment change(s) of %s failed",
                                 len(batch), self.vault)

    async def settled(self) -> None:
        """Wait until released changes are recorded (the REST release answers after)."""
        task = self._recording
        if task is not None:
            await task
        await self.flush()

    def _select(self, ids: Iterable[int] | None) -> tuple[list[HeldChange], list[HeldChange]]:
        """(attachment changes held, those among ``ids`` that came back already)."""
        if ids is None:
            return self.holds.held(), []
        held: list[HeldChange] = []
        came_back: list[HeldChange] = []
        for i in dict.fromkeys(ids):
            h = self.brake.held.get(i)
            if h is None or not is_attachment_hold(h):
                continue
            if h.state == CAME_BACK:
                came_back.append(h)
            elif h.state == HELD:
                held.append(h)
            else:
                raise NotFound(f"no held change {i} (see stet held)", id=i)
        return held, came_back

    def _why_not_revert(self, h: HeldChange, action: IntakeAction | None) -> str | None:
        """Blocking (a worker thread): the file came back since the hold?"""
        try:
            where = resolve_inside(self.root, h.path)
        except InvalidPath:
            return REAPPEARED  # something else (a folder, a link) took the path: leave it
        if h.kind == DELETED:
            return REAPPEARED if os.path.lexists(where) else None
        now = _hash_file(where)
        if now is None:
            return None
        if isinstance(action, RecordChange) and now != action.sha256:
            return WRITTEN_AGAIN
        return None

    async def revert(self, ids: Iterable[int] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Put held attachments back (newest hold first), except those that came back:
        ``(reverted, skipped)`` as the brake's ``revert_or_skip``."""
        selected, came_back = self._select(ids)
        skipped = [{"id": h.id, "path": h.path, "reason": h.resolved_by or REAPPEARED} for h in came_back]
        results: list[dict[str, Any]] = []
        for h in sorted(selected, key=lambda h: h.id, reverse=True):
            why = await asyncio.to_thread(self._why_not_revert, h, self.holds.action(h.id))
            if why is not None:
                self.brake.resolve([h], CAME_BACK, why, person=True)
                skipped.append({"id": h.id, "path": h.path, "reason": why})
                continue
            try:
                version = self.versions.get(h.version_id) if h.version_id is not None else None
                if version is None:
                    raise NotFound(f"the bytes of held change {h.id} were not kept", id=h.id)
                if self.replica is None:
                    raise StetError("attachments are not synced for this vault", code="not_found")
                await self.replica.write_back(self.vault, h.path, version.sha256, version.executable)
            except StetError as exc:
                logger.error("cannot revert held change %d (%s): %s", h.id, h.path, exc.message)
                results.append({"id": h.id, "path": h.path, "error": exc.to_dict()})
                continue
            except OSError as exc:
                logger.error("cannot revert held change %d (%s): %s", h.id, h.path, exc)
                results.append({"id": h.id, "path": h.path,
                                "error": {"code": "io_error", "message": str(exc)}})
                continue
            self.brake.resolve([h], REVERTED, "person", person=True)
            results.append({"id": h.id, "path": h.path, "attachmentId": attachment_of(h),
                            "versionId": version.id, "sha256": version.sha256, "changed": True})
        if ids is None:
            self.brake.resolve([], REVERTED, "person", person=True, engaged_too=True)
        return results, skipped
