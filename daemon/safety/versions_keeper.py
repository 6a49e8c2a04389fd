"""Keeps the versions of SPEC §5: a listener on ``NotesService``, so every source is covered.

- A change that is a large deletion (``stet.sync.versions``) saves the note as it stood
  right before, kind ``before-large-deletion``, with the source that made the cut —
  whoever that is (disk, an agent, a peer, a restore, the CLI): the rule sits on the one
  write path, not in the adapters.
- Deleting a note of ``shrink_min_chars`` (200) or more saves ``before-deletion``.
- A note left alone for ``idle_minutes`` gets an ``idle`` version (``tick``, driven by
  the runtime's periodic task and the service's injectable clock). Which notes await one
  is kept in the store, so a restart does not forget them.
- Retention runs on every insert and, for the time limit on kept shrink versions, about
  hourly from ``tick``.
- ``restore`` is an edit (SPEC §5.4): it saves the current text as ``before-restore``,
  then applies the old text through the service as a minimal diff (source ``restore``);
  a deleted note comes back at its path, or beside it when that path is taken.

Every saved version is published as ``version.created``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stet.daemon.base.timestamps import iso
from stet.daemon.notes.changes import Change, Destruction
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.service import NotesService
from stet.sync.change_kinds import ChangeKind, Source, is_peer, on_device
from stet.sync.errors import NotFound, StetError
from stet.sync.note_doc import text_revision
from stet.sync.note_paths import casefold_key
from stet.sync.note_rows import NoteRow
from stet.sync.version_store import Version, VersionInfo, VersionStore
from stet.sync.versions import (
    BEFORE_DELETION,
    BEFORE_LARGE_DELETION,
    BEFORE_RESTORE,
    CONCURRENT,
    IDLE,
    SHRINK_KINDS,
    VersionKind,
    VersionPolicy,
    first_free_path,
)

if TYPE_CHECKING:
    from stet.daemon.safety.brake import Brake

logger = logging.getLogger(__name__)

RESTORE_SOURCE = Source.RESTORE
SWEEP_EVERY_S = 3600.0
TICK_BATCH = 64  # idle versions saved per commit
TICK_SLICE_S = 0.02  # the ticker saves idle versions for this long, then lets the loop run
_SAVED_MEMORY = 4096


def origin(c: Change) -> str:
    """Who made a change, as versions and the brake name it: a change that came from a
    peer carries the device, so a remote ``agent:x`` is never taken for the local one."""
    if c.device and not is_peer(c.source):
        return on_device(c.source, c.device)
    return c.source


def version_json(v: Version | VersionInfo, *, note_deleted: bool | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": v.id, "kind": v.kind, "createdAt": iso(v.created_at), "source": v.source,
        "revision": v.revision, "noteId": v.note_id, "savedAtPath": v.path,
    }
    if isinstance(v, VersionInfo):
        data.update(size=v.size, chars=v.chars, preview=v.preview)
    else:
        data.update(size=len(v.text.encode("utf-8")), chars=len(v.text))
    if note_deleted is not None:
        data["noteDeleted"] = note_deleted
    return data


def keep_kind(existing: Version | None, kind: VersionKind) -> str:
    """The kind of a version kept again: a deletion's kind wins over an ordinary one, so
    retention keeps it as long as it keeps the versions taken before deletions."""
    if existing is not None and existing.kind in SHRINK_KINDS and kind not in SHRINK_KINDS:
        return existing.kind
    return kind


@dataclass(frozen=True, slots=True)
class RestoreResult:
    note_id: str
    path: str
    revision: str
    changed: bool
    restored_from: int
    before_restore: int | None
    undeleted: bool
    original_path: str

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "revision": self.revision, "changed": self.changed,
            "restoredFrom": self.restored_from, "beforeRestore": self.before_restore,
            "undeleted": self.undeleted, "originalPath": self.original_path,
            "pathWasTaken": self.path != self.original_path,
        }


class VersionsKeeper:
    def __init__(self, service: NotesService, events: EventBus, policy: VersionPolicy) -> None:
        self.service = service
        self.store = service.store
        self.events = events
        self.policy = policy
        service.shrink_policy = policy  # Change.destruction uses this rule
        self.versions = VersionStore(service.store)
        # Notes waiting for their idle version -> when they last changed (as far as this
        # keeper heard; the row has the last word). In memory, so a tick finds what is due
        # without a query over every waiting note (10,000 after an unzip: 25-50 ms a tick).
        self._due: dict[str, float] = self.versions.due_times()
        self.more_due = False  # a tick given a budget left due notes for the next slice
        # (note id, revision) -> the version saved of that text by the last changes, so
        # the brake can point a held change at it instead of saving the text twice.
        self._saved: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._last_sweep = -math.inf
        # Its versions commit with the change.
        service.subscribe(self.on_change, in_unit=True, many=self.on_changes)

    # -- the rules, on every change ----------------------------------------------------

    def on_change(self, c: Change) -> None:
        if c.kind == ChangeKind.CHANGED:
            before = c.text_before
            # A large deletion: classified once on the write path (an emptying counts when
            # the note was long enough for the rule).
            long_enough = len(before or "") >= self.policy.shrink_min_chars
            emptied = c.destruction is Destruction.EMPTIED and long_enough
            shrunk = c.destruction is Destruction.SHRINK or emptied
            if before is not None and c.revision_before is not None and shrunk:
                self.save(c.note_id, c.path, BEFORE_LARGE_DELETION, origin(c), c.revision_before, before)
            if c.merged is not None:
                # Overlapping edits are both in the note now: each side's text as it was
                # written is kept too, so a person can go back to either whole.
                for source, text in c.merged.sides:
                    self.save(c.note_id, c.path, CONCURRENT, source, text_revision(text), text)
            self._mark_due(c.note_id, c.at)
        elif c.kind == ChangeKind.CREATED:
            self._mark_due(c.note_id, c.at)
        elif c.kind == ChangeKind.MOVED:
            if c.note_id in self._due:  # a move is an edit too (the row's time says so)
                self._due[c.note_id] = max(self._due[c.note_id], c.at)
        elif c.kind == ChangeKind.DELETED:
            before = c.text_before or ""
            if len(before) >= self.policy.shrink_min_chars and c.revision_before is not None:
                self.save(c.note_id, c.path, BEFORE_DELETION, origin(c), c.revision_before, before)
            self._clear_due(c.note_id)

    def on_changes(self, changes: Sequence[Change]) -> None:
        """``on_change`` of each; new notes (a bulk intake) marked due in one statement."""
        new = {c.note_id: c.at for c in changes
               if c.kind == ChangeKind.CREATED and c.note_id not in self._due}
        if new:
            self.versions.mark_due_many(list(new))
            self._due.update(new)
        for c in changes:
            if c.kind != ChangeKind.CREATED:
                self.on_change(c)

    def _mark_due(self, note_id: str, at: float) -> None:
        known = self._due.get(note_id)
        if known is None:
            self.versions.mark_due(note_id)
        self._due[note_id] = at if known is None else max(known, at)

    def _clear_due(self, note_id: str) -> None:
        if note_id in self._due:
            self.versions.clear_due(note_id)
            del self._due[note_id]

    # -- saving ----------------------------------------------------------------------------

    def save(
        self, note_id: str, path: str, kind: VersionKind, source: str, revision: str, text: str
    ) -> Version:
        """Save a version now, apply retention to the note, publish ``version.created``."""
        now = self.service.clock()
        with self.store.transaction():
            same = self.versions.same_text(note_id, text)
            if same is not None:  # SPEC §5.7: kept once, its time refreshed
                kept = keep_kind(self.versions.get(same), kind)
                version = self.versions.refresh(same, path=path, kind=kept, source=source, created_at=now)
            else:
                version = self.versions.add(note_id=note_id, path=path, kind=kind, source=source,
                                            created_at=now, revision=revision, text=text)
            self.versions.apply_retention(note_id, now, self.policy)
        self._saved[(note_id, revision)] = version.id
        while len(self._saved) > _SAVED_MEMORY:
            self._saved.popitem(last=False)
        logger.info("version %d of %s %s (%s, by %s, %d characters)",
                    version.id, path, "kept again" if same is not None else "saved", kind, source, len(text))
        payload = {**version_json(version), "path": path}
        self.store.after_commit(functools.partial(
            self.events.publish, self.service.vault_id, "version.created", payload))
        return version

    def version_of(
        self, note_id: str, path: str, kind: VersionKind, source: str, revision: str, text: str
    ) -> int:
        """The id of a version holding exactly ``text`` saved by the latest changes, or a
        new one of ``kind`` (the brake: every held note has its version)."""
        vid = self._saved.get((note_id, revision))
        if vid is not None and self.versions.get(vid) is not None:
            return vid
        return self.save(note_id, path, kind, source, revision, text).id

    # -- idle versions and time-based retention -------------------------------------------

    def tick(self, now: float, budget_s: float | None = None) -> int:
        """Save the idle versions that are due at ``now``; returns how many were saved.
        ``budget_s``: stop after about that long, a batch at a time (one commit each), and
        set ``more_due`` if some are left (the caller lets the loop run, then goes on):
        the idle versions of an unzip's 10,000 notes held the loop 3.4 s in one tick."""
        saved = 0
        cutoff = now - self.policy.idle_s
        due = [note_id for note_id, at in self._due.items() if at <= cutoff]
        deadline = None if budget_s is None else time.monotonic() + budget_s
        self.more_due = False
        for start in range(0, len(due), TICK_BATCH):
            if deadline is not None and start > 0 and time.monotonic() >= deadline:
                self.more_due = True
                break
            with self.store.transaction():
                for note_id in due[start:start + TICK_BATCH]:
                    row = self.store.note(note_id)
                    if row is not None and not row.deleted and row.updated_at > cutoff:
                        self._due[note_id] = row.updated_at  # changed since (unheard): not idle yet
                        continue
                    if row is not None and not row.deleted and self._save_idle(row):
                        saved += 1
                    self.versions.clear_due(note_id)
                    self._due.pop(note_id, None)
        if now - self._last_sweep >= SWEEP_EVERY_S or now < self._last_sweep:
            self._last_sweep = now
            self.sweep(now)
        return saved

    def _save_idle(self, row: NoteRow) -> bool:
        text = self.service.text_of(row.id)  # not kept loaded: a tick may visit thousands
        if not text:
            return False
        newest = self.versions.newest(row.id)
        if newest is not None and newest.revision == row.revision:
            return False  # this exact text is already kept
        self.save(row.id, row.path, IDLE, row.updated_by, row.revision, text)
        return True

    def sweep(self, now: float) -> int:
        """Retention for every note over the cap (kept shrink versions expire with time)."""
        dropped = 0
        for note_id in self.versions.notes_over(self.policy.keep):
            dropped += len(self.versions.apply_retention(note_id, now, self.policy))
        return dropped

    # -- restore (SPEC §5.4) ----------------------------------------------------------------

    def _path_taken(self, path: str) -> bool:
        if self.store.note_at(path) is not None:
            return True
        key = casefold_key(path)
        parent = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
        return any(casefold_key(r.path) == key for r in self.store.live_notes(prefix=parent))

    def restore(self, version: Version, *, allow_path: Callable[[str], None] | None = None) -> RestoreResult:
        """Bring a note back to ``version``'s text, as an edit."""
        row = self.store.note(version.note_id)
        if row is None:
            raise NotFound(f"the note of version {version.id} is gone")
        if not row.deleted:
            current = self.service.doc(row.id).text
            if current == version.text:
                return RestoreResult(row.id, row.path, row.revision, False, version.id, None, False, row.path)
            with self.service.write(RESTORE_SOURCE):
                before = self.save(row.id, row.path, BEFORE_RESTORE, RESTORE_SOURCE,
                                   row.revision, current)
                result = self.service.write_text(row.path, version.text, RESTORE_SOURCE, create=False)
            return RestoreResult(row.id, row.path, result.note.revision, result.changed, version.id,
                                 before.id, False, row.path)
        target = first_free_path(row.path, self._path_taken)
        if target is None:
            raise StetError(f"no free path to restore {row.path} to", code="already_exists", path=row.path)
        if allow_path is not None:
            allow_path(target)
        restored = self.service.undelete(row.id, target, version.text, RESTORE_SOURCE)
        return RestoreResult(row.id, restored.path, restored.revision, True, version.id, None, True, row.path)


async def tick_forever(keeper: VersionsKeeper, brake: Brake | None, period_s: float) -> None:
    """The periodic task of one vault: idle versions, retention, held changes' timeout."""
    while True:
        await asyncio.sleep(period_s)
        try:
            now = keeper.service.clock()
            keeper.tick(now, TICK_SLICE_S)
            while keeper.more_due:  # many at once (after an unzip): a slice at a time
                await asyncio.sleep(0)
                keeper.tick(now, TICK_SLICE_S)
            if brake is not None:
                brake.tick(now)
        except Exception:
            logger.exception("versions tick failed")


def tick_period(versions: VersionPolicy, hold_minutes: float) -> float:
    """Tick often enough for both timers (a quarter of the shorter), 50 ms to 30 s."""
    shortest = min(versions.idle_s, hold_minutes * 60.0)
    return max(0.05, min(30.0, shortest / 4))


def start_versions(service: NotesService, events: EventBus, config: Any
                   ) -> tuple[VersionsKeeper, Brake, asyncio.Task[None]]:
    """Versions and the brake for one vault (``config``: the daemon's ``Config``), and the
    periodic task that drives their timers. Call before the vault's first reconcile, so
    files deleted while the daemon was stopped are covered too."""
    from stet.daemon.safety.brake import Brake
    from stet.sync.brake import BrakePolicy

    keeper = VersionsKeeper(service, events, VersionPolicy.from_config(config.versions))
    brake = Brake(service, events, keeper, BrakePolicy.from_config(config.brake))
    period = tick_period(keeper.policy, brake.policy.hold_minutes)
    task = asyncio.create_task(tick_forever(keeper, brake, period), name=f"versions:{service.vault_id}")
    return keeper, brake, task
