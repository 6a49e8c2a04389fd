"""The burst brake of SPEC §5.6, on the one write path: a listener and a guard of
``NotesService`` (the rule itself is ``stet.sync.brake``).

- Every deletion, emptying or overwrite (a large deletion, SPEC §5.1) of a populated
  note is counted per source; the
  ``notes``-th (10th) within ``window_seconds`` engages the brake for that source. The
  changes in the window and every further one from the engaged source are *held*: they
  are applied here (the file is gone, the note is empty) but recorded in ``held`` with
  the version holding the text before (saved now if the versions rule had not already),
  and ``is_held(note_id)`` tells the peer layer not to send them. ``brake.held`` is
  published for each.
- ``release`` lets held changes go (``brake.released``); ``revert`` puts the notes back
  as they were (a restore through the service: the file bridge writes the files).
  Held changes are released by themselves after ``hold_minutes`` unless
  ``on_timeout = "hold"``.
- An agent whose brake is engaged gets ``brake_engaged`` (423) for every further
  destructive write (the guard) until a person releases or reverts: a timeout releases
  the held changes but leaves an agent's brake engaged (``stet release --all`` clears it).
  Other sources (the disk, the CLI, a peer) cannot be refused after the fact; their brake
  ends when none of their changes is held any more.
- A held change whose note came back (recreated at its id or path, or written again by a
  change that is not itself held) leaves ``held`` by itself (state ``came-back``), and
  ``revert`` skips such a note instead of overwriting it, saying which (SPEC §5.6).
- Git's changes (source ``git``, told by the file bridge: SPEC §3.16) are not counted while
  ``[brake] trust_git``; their versions are kept by ``VersionsKeeper`` as for any source.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from stet.daemon.base.timestamps import iso
from stet.daemon.notes.changes import Change, Destruction
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.service import NotesService
from stet.daemon.safety.versions_keeper import VersionsKeeper, origin
from stet.sync.brake import (
    DELETED,
    EMPTIED,
    OVERWRITTEN,
    BrakePolicy,
    BurstRule,
    destruction,
    is_destructive_write,
)
from stet.sync.change_kinds import ChangeKind, is_local_agent
from stet.sync.errors import NotFound, StetError
from stet.sync.held_attachments import attachment_of, is_attachment_hold
from stet.sync.held_changes import CAME_BACK, HELD, RELEASED, REVERTED, HeldChange, HeldStore
from stet.sync.note_rows import NoteRow
from stet.sync.versions import BEFORE_DELETION, BEFORE_LARGE_DELETION

logger = logging.getLogger(__name__)

# How a held change is recorded, by what the write path classified (``Change.destruction``).
_HELD_KIND = {Destruction.DELETED: DELETED, Destruction.EMPTIED: EMPTIED, Destruction.SHRINK: OVERWRITTEN}

PERSON = "person"
TIMEOUT = "timeout"
# Why a held change left ``held`` by itself (SPEC §5.6), or why ``revert`` skipped it.
REAPPEARED = "the note is back at its path"
WRITTEN_AGAIN = "the note was written again since"


def is_agent(source: str) -> bool:
    """A local agent token (an agent on another device reaches us as a peer's change)."""
    return is_local_agent(source)


@dataclass(frozen=True, slots=True)
class _Destroyed:
    """One destructive change, remembered while its source's window is open."""

    note_id: str
    path: str
    source: str
    kind: str  # "deleted" | "emptied" | "overwritten"
    revision: str
    text: str  # the note's text before the change


def held_json(h: HeldChange, policy: BrakePolicy) -> dict[str, Any]:
    releases_at = policy.releases_at(h.held_at) if h.state == "held" else None
    att = attachment_of(h)  # an attachment's change (daemon/attachments/brake.py)
    return {
        "id": h.id, "path": h.path, "noteId": h.note_id if att is None else None,
        "attachmentId": att, "target": "note" if att is None else "attachment",
        "source": h.source, "kind": h.kind,
        "heldAt": iso(h.held_at), "versionId": h.version_id, "state": h.state,
        "resolvedAt": iso(h.resolved_at) if h.resolved_at is not None else None,
        "resolvedBy": h.resolved_by,
        "releasesAt": iso(releases_at) if releases_at is not None else None,
    }


class Brake:
    def __init__(self, service: NotesService, events: EventBus, versions: VersionsKeeper,
                 policy: BrakePolicy) -> None:
        self.service = service
        self.store = service.store
        self.events = events
        self.versions = versions
        self.policy = policy
        self.held = HeldStore(service.store)
        # Notes' changes (``_Destroyed``) and attachments' (daemon/attachments/brake.py)
        # share the window.
        self.rule: BurstRule[object] = BurstRule(policy.notes, policy.window_seconds)
        self._engaged = self.held.engaged()
        self._held_notes = self.held.held_note_ids()
        # Notes whose change the guard has just let through from an engaged source: held
        # from before the change is announced (a listener that sends changes to peers
        # may run before this one's).
        self._holding: set[str] = set()
        self._reverting = False  # a revert's own overwrites are not a burst
        self._reported_at = 0.0  # when `revert --all` last told which changes came back
        # Called with the ids of notes no longer held (released or reverted): the peer
        # layer sends their state then (it held their updates back meanwhile).
        self.on_unheld: list[Callable[[list[str]], None]] = []
        # Attachments (daemon/attachments/brake.py): called with the window's other items
        # when a note trips the brake, and with every resolved change (release, revert,
        # came back, timeout).
        self.on_trip: list[Callable[[list[object], float], None]] = []
        self.on_resolved: list[Callable[[list[HeldChange], str], None]] = []
        service.guards.append(self.guard)
        service.subscribe(self.on_change, in_unit=True)  # held before any peer hears of it

    # -- what others ask ----------------------------------------------------------------

    def is_held(self, note_id: str) -> bool:
        """Whether a change of this note is held (the peer layer must not send it)."""
        return note_id in self._held_notes or note_id in self._holding

    def is_engaged(self, source: str) -> bool:
        return source in self._engaged

    def engaged(self) -> dict[str, float]:
        return dict(self._engaged)

    # -- the guard and the listener --------------------------------------------------------

    def check(self, source: str, before: str, after: str | None) -> None:
        """Refuse a destructive write by an agent whose brake is engaged."""
        if (source in self._engaged and is_agent(source)
                and is_destructive_write(before, after, self.versions.policy)):
            raise StetError(
                f"the burst brake is engaged for {source}: destructive writes are refused until a "
                "person releases it (stet held, stet release, stet revert)",
                code="brake_engaged", source=source,
            )

    def guard(self, source: str, row: NoteRow | None, before: str, after: str | None) -> None:
        self.check(source, before, after)
        if (row is not None and source in self._engaged
                and destruction(before, after, self.versions.policy) is not None):
            self._holding.add(row.id)

    def on_change(self, c: Change) -> None:
        if self._reverting:
            return
        if c.kind == ChangeKind.CREATED:
            if self._held_notes:
                self._came_back(c.note_id, c.path, REAPPEARED)
            return
        if c.kind not in (ChangeKind.CHANGED, ChangeKind.DELETED):
            return
        self._holding.discard(c.note_id)
        if not self._observe(c) and c.kind == ChangeKind.CHANGED and c.note_id in self._held_notes:
            self._came_back(c.note_id, c.path, WRITTEN_AGAIN)

    def _observe(self, c: Change) -> bool:
        """Count a destructive change; returns whether it is held."""
        before = c.text_before or ""
        kind = _HELD_KIND.get(c.destruction)  # classified once, on the write path
        if kind is None or c.revision_before is None:
            return False
        source = origin(c)
        if not self.policy.counts(source):
            return False  # git's own bursts (SPEC §3.16): versions are kept, nothing held
        item = _Destroyed(c.note_id, c.path, source, kind, c.revision_before, before)
        now = self.service.clock()
        if source in self._engaged:
            self._hold([item], now)
            return True
        tripped = self.rule.observe(source, c.note_id, now, item)
        if tripped:
            self._engage(source, now, len(tripped))
            self._hold([t for t in tripped if isinstance(t, _Destroyed)], now)
            others = [t for t in tripped if not isinstance(t, _Destroyed)]
            for callback in self.on_trip if others else ():
                callback(others, now)
            return True
        return False

    def _engage(self, source: str, now: float, n: int) -> None:
        self.held.engage(source, now)
        self._engaged[source] = now
        logger.warning("burst brake engaged for %s: %d files deleted, emptied or overwritten "
                       "within %gs; holding them (stet held)", source, n, self.policy.window_seconds)

    def count_other(self, source: str, key: str, item: object) -> list[object]:
        """Count a destructive change of something else than a note (an attachment, ``key``)
        in the same window: returns the other items to hold now (this one while the source
        is engaged; the window's if it trips: its notes are held here), else nothing."""
        if not self.policy.counts(source):
            return []
        now = self.service.clock()
        if source in self._engaged:
            return [item]
        tripped = self.rule.observe(source, key, now, item)
        if not tripped:
            return []
        self._engage(source, now, len(tripped))
        self._hold([t for t in tripped if isinstance(t, _Destroyed)], now)
        return [t for t in tripped if not isinstance(t, _Destroyed)]

    def refresh_held(self) -> None:
        """Changes were held elsewhere (attachments'): the timeout covers them too."""
        self._held_notes = self.held.held_note_ids()

    def resolve(self, changes: list[HeldChange], state: str, by: str, *, person: bool = False,
                engaged_too: bool = False) -> None:
        """Resolve held changes handled elsewhere (attachments'), as ``revert`` and
        ``_came_back`` do (``person``: a person acted); ``engaged_too``: also settle every
        engaged source (``--all``)."""
        with self.store.transaction():
            self.held.resolve([h.id for h in changes], state, self.service.clock(), by)
            self._settle({h.source for h in changes} | (set(self._engaged) if engaged_too else set()),
                         PERSON if person else by)
        self._after_resolve(changes, state, by)

    def _came_back(self, note_id: str, path: str, why: str) -> None:
        """The note of held changes is back (its file reappeared, or it was written
        again): they leave ``held`` by themselves, and a revert will not touch it."""
        changes = self.held.held_for_note(note_id, path)
        if not changes:
            return
        with self.store.transaction():
            self.held.resolve([h.id for h in changes], CAME_BACK, self.service.clock(), why)
            self._settle({h.source for h in changes}, why)
        logger.info("%d held change(s) of %s left held: %s", len(changes), path, why)
        self._after_resolve(changes, CAME_BACK, why)

    def _hold(self, items: Iterable[_Destroyed], now: float) -> None:
        with self.store.transaction():
            for it in items:
                kind = BEFORE_DELETION if it.kind == DELETED else BEFORE_LARGE_DELETION
                version_id = self.versions.version_of(it.note_id, it.path, kind, it.source,
                                                      it.revision, it.text)
                h = self.held.add(note_id=it.note_id, path=it.path, source=it.source, kind=it.kind,
                                  held_at=now, version_id=version_id)
                self._held_notes.add(it.note_id)
                self.store.after_commit(functools.partial(
                    self.events.publish, self.service.vault_id, "brake.held", held_json(h, self.policy)))

    # -- release, revert, timeout ------------------------------------------------------------

    def changes(self, *, include_resolved: bool = False) -> list[HeldChange]:
        return self.held.changes(state=None if include_resolved else "held")

    def _select(self, ids: Iterable[int] | None) -> list[HeldChange]:
        if ids is None:
            return self.held.changes()
        out = []
        for i in dict.fromkeys(ids):
            h = self.held.get(i)
            if h is None or h.state != "held":
                raise NotFound(f"no held change {i} (see stet held)", id=i)
            out.append(h)
        return out

    def release(self, ids: Iterable[int] | None, *, by: str = PERSON) -> list[HeldChange]:
        """Let held changes go (``ids=None``: all of them, and every engaged source)."""
        changes = self._select(ids)
        now = self.service.clock()
        with self.store.transaction():
            self.held.resolve([h.id for h in changes], RELEASED, now, by)
            self._settle({h.source for h in changes} | (set(self._engaged) if ids is None else set()), by)
        self._after_resolve(changes, RELEASED, by)
        return changes

    def revert(self, ids: Iterable[int] | None) -> list[dict[str, Any]]:
        """Put held notes back as they were before the change (a restore each)."""
        return self.revert_or_skip(ids)[0]

    def _why_not_revert(self, changes: list[HeldChange]) -> dict[int, str]:
        """Held changes whose note came back since (recreated at its path, or written
        again after its last held change): a revert must not overwrite it (SPEC §5.6)."""
        last_held: dict[str, float] = {}
        for h in self.held.changes():
            last_held[h.note_id] = max(last_held.get(h.note_id, h.held_at), h.held_at)
        why: dict[int, str] = {}
        for h in changes:
            row = self.store.note(h.note_id)
            if h.kind == DELETED:
                if (row is not None and not row.deleted) or self.store.note_at(h.path) is not None:
                    why[h.id] = REAPPEARED
            elif row is not None and not row.deleted and row.updated_at > last_held.get(h.note_id, h.held_at):
                why[h.id] = WRITTEN_AGAIN
        return why

    def _select_for_revert(self, ids: Iterable[int] | None) -> tuple[list[HeldChange], list[HeldChange]]:
        """(held changes to revert, changes that came back and are skipped)."""
        if ids is None:
            # Those that left held by themselves since a person last acted (within the
            # hold time): say so, once.
            now = self.service.clock()
            after = max(self._reported_at, self.held.last_resolved_by(PERSON), now - self.policy.hold_s)
            self._reported_at = now
            return self.held.changes(), self.held.came_back_after(after)
        selected: list[HeldChange] = []
        came_back: list[HeldChange] = []
        for i in dict.fromkeys(ids):
            h = self.held.get(i)
            if h is not None and h.state == CAME_BACK:
                came_back.append(h)
            elif h is None or h.state != HELD:
                raise NotFound(f"no held change {i} (see stet held)", id=i)
            else:
                selected.append(h)
        return selected, came_back

    def revert_or_skip(self, ids: Iterable[int] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Revert held changes, except those whose note came back since (skipped:
        ``[{id, path, reason}]``)."""
        selected, came_back = self._select_for_revert(ids)
        skipped = [{"id": h.id, "path": h.path, "reason": h.resolved_by or REAPPEARED} for h in came_back]
        why = self._why_not_revert(selected)
        for h in selected:
            if h.id in why:
                self._came_back_now(h, why[h.id])
                skipped.append({"id": h.id, "path": h.path, "reason": why[h.id]})
        # Newest first: a note held twice ends at the text before its first held change.
        # (Attachments' are reverted by daemon/attachments/brake.py.)
        changes = sorted((h for h in selected if h.id not in why and not is_attachment_hold(h)),
                         key=lambda h: h.id, reverse=True)
        return self._revert(changes, ids), skipped

    def _came_back_now(self, h: HeldChange, why: str) -> None:
        with self.store.transaction():
            self.held.resolve([h.id], CAME_BACK, self.service.clock(), why)
            self._settle({h.source}, PERSON)
        self._after_resolve([h], CAME_BACK, why)

    def _revert(self, changes: list[HeldChange], ids: Iterable[int] | None) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        reverted: list[HeldChange] = []
        for h in changes:
            version = self.versions.versions.get(h.version_id) if h.version_id is not None else None
            try:
                if version is None:  # cannot happen: retention never drops a held change's version
                    raise NotFound(f"the version of held change {h.id} is missing", id=h.id)
                self._reverting = True
                with self.store.transaction():
                    restored = self.versions.restore(version)
                    self.held.resolve([h.id], REVERTED, self.service.clock(), PERSON)
            except StetError as exc:
                logger.error("cannot revert held change %d (%s): %s", h.id, h.path, exc.message)
                results.append({"id": h.id, "path": h.path, "error": exc.to_dict()})
                continue
            finally:
                self._reverting = False
            reverted.append(h)
            results.append({"id": h.id, **restored.to_json()})
        sources = {h.source for h in reverted} | (set(self._engaged) if ids is None else set())
        with self.store.transaction():
            self._settle(sources, PERSON)
        self._after_resolve(reverted, REVERTED, PERSON)
        return results

    def _settle(self, sources: set[str], by: str) -> None:
        """Disengage the sources none of whose changes is held any more (an agent's only
        when a person acted)."""
        for source in sources:
            if source not in self._engaged:
                continue
            if self.held.count_held(source) > 0 or (is_agent(source) and by != PERSON):
                continue
            self.held.disengage(source)
            del self._engaged[source]
            self.rule.forget(source)
            logger.info("burst brake for %s released (%s)", source, by)

    def _after_resolve(self, changes: list[HeldChange], state: str, by: str) -> None:
        self._held_notes = self.held.held_note_ids()
        for h in changes:
            data = held_json(self.held.get(h.id) or h, self.policy)
            data.update(reverted=state == REVERTED, by=by)
            self.events.publish(self.service.vault_id, "brake.released", data)
        for resolved in self.on_resolved if changes else ():
            try:
                resolved(changes, state)
            except Exception:
                logger.exception("a listener of resolved held changes failed")
        unheld = sorted({h.note_id for h in changes if not is_attachment_hold(h)} - self._held_notes)
        for callback in self.on_unheld if unheld else ():
            try:
                callback(unheld)
            except Exception:
                logger.exception("a listener of released notes failed")

    def tick(self, now: float) -> int:
        """Release what has been held for ``hold_minutes`` (unless configured to hold)."""
        self.rule.prune(now)
        # Writes run to completion on the loop: a mark the guard left for a change that
        # then failed (so no listener cleared it) is stale by now.
        self._holding.clear()
        if self.policy.on_timeout != "release" or not self._held_notes:
            return 0
        due = self.held.held_before(now - self.policy.hold_s)
        if not due:
            return 0
        logger.info("releasing %d held change(s) after %g minutes", len(due), self.policy.hold_minutes)
        return len(self.release([h.id for h in due], by=TIMEOUT))
