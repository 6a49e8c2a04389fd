"""The one gate for what peers may not hear yet (issue 11: classify once, one outbound gate).

Two things wait before a peer hears of them, for the same reason: the burst brake must be
able to hold a mass destruction before any other device has it (SPEC §5.6).

- A **local delete** is published to the vault index (what peers hear) only after
  ``[peer] delete_delay_seconds`` (the brake's window) and never while the brake holds it.
  The service keeps which deletes wait (``NotesService.publish_due_deletes``); the gate
  says when to publish.
- A **local emptying or overwrite** of a populated note (``Change.destruction``) waits as
  long as a delete does, and every later change of that note waits behind it; the peer hub
  hands them to the gate (``defer``).

Both wait in one ``OutboundWaits`` (the pure rule, in sync/) and are let go by one timer,
``loop.call_at`` at the next due time: nothing polls. The brake's release (``Brake.on_unheld``)
calls ``wake``: what it held and is due goes at once (a released note's content goes as its
full state instead: ``supersede``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from stet.daemon.notes.changes import Change, Listener
from stet.sync.change_kinds import ChangeKind
from stet.sync.outbound_waits import OutboundWaits

logger = logging.getLogger(__name__)

# Least time between two openings of the gate: a burst of deletes made over a second is
# published in a few index updates, not one per note (each walks the waiting deletes).
MIN_SPACING_S = 0.05

# (vault id, note id, lane): a note's content changes wait in order in one lane; its
# local delete waits in another, so a later change (a note brought back) never waits
# behind a delete peers have not heard of.
Key = tuple[str, str, str]
CONTENT, DELETE = "content", "delete"


class DeleteSource(Protocol):
    """What the gate needs of a vault's ``NotesService`` for its deletes."""

    delete_delay_s: float

    def delete_delay_for(self, source: str) -> float: ...

    def pending_deletes(self) -> list[str]: ...

    def subscribe(self, listener: Listener, *, in_unit: bool = False) -> None: ...


@dataclass(frozen=True, slots=True)
class _Send:
    """A change's frames for the peers, sent when let go."""

    send: Callable[[], None]


@dataclass(frozen=True, slots=True)
class _Delete:
    """A local delete: the vault's publisher is asked once its delay has passed."""


_DELETE = _Delete()


@dataclass(frozen=True, slots=True)
class _Vault:
    is_held: Callable[[str], bool]
    publish_deletes: Callable[[float], object]


class OutboundGate:
    """What peers may not hear yet, per vault and note, let go at its time by ``call_at``."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._waits: OutboundWaits[Key, _Send | _Delete] = OutboundWaits()
        self._vaults: dict[str, _Vault] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due: float | None = None
        self._last_open = float("-inf")
        self.opened = 0  # times the timer let something go (tests, logs)

    # -- vaults --------------------------------------------------------------------------

    def open_vault(
        self, vault_id: str, *, is_held: Callable[[str], bool], publish_deletes: Callable[[float], object]
    ) -> None:
        """``is_held(note)``: the brake holds it; ``publish_deletes(now)``: publish the vault's
        local deletes that are due and not held (idempotent)."""
        self._vaults[vault_id] = _Vault(is_held, publish_deletes)

    def close_vault(self, vault_id: str) -> None:
        self._vaults.pop(vault_id, None)
        for key in self._waits.waiting_keys():
            if key[0] == vault_id:
                self._waits.drop(key)
        self._arm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_due = None
        self._vaults.clear()

    # -- what waits ----------------------------------------------------------------------

    def defer(self, vault_id: str, note_id: str, send: Callable[[], None], due: float | None) -> None:
        """Send ``send`` to peers at ``due`` (None: behind what already waits for the note,
        or at once if nothing does), not while the brake holds the note."""
        key = (vault_id, note_id, CONTENT)
        if due is None and key not in self._waits:
            send()
            return
        self._waits.add(key, _Send(send), due)
        self._arm()

    def defer_delete(self, vault_id: str, note_id: str, due: float) -> None:
        """A local delete of the note may reach peers at ``due`` (its vault publishes it)."""
        self._waits.add((vault_id, note_id, DELETE), _DELETE, due)
        self._arm()

    def waiting(self, vault_id: str, note_id: str) -> bool:
        """A content change of the note waits here (so its content may not go out yet)."""
        return (vault_id, note_id, CONTENT) in self._waits

    def supersede(self, vault_id: str, note_ids: list[str]) -> None:
        """The notes' full state goes out now: drop their waiting content changes (a
        waiting delete stays: the vault still publishes it when due)."""
        for note_id in note_ids:
            self._waits.drop((vault_id, note_id, CONTENT))
        self._arm()

    def wake(self) -> None:
        """Something held was let go (the brake's release, revert or timeout): what is due
        goes now."""
        self._open()

    def __len__(self) -> int:
        return len(self._waits)

    # -- the timer -----------------------------------------------------------------------

    def _is_held(self, key: Key) -> bool:
        vault = self._vaults.get(key[0])
        return vault is not None and vault.is_held(key[1])

    def _open(self) -> None:
        if self._timer is not None:
            self._timer.cancel()  # when woken before it fired
        self._timer = self._timer_due = None
        now = self.clock()
        self._last_open = now
        released = self._waits.release(now, self._is_held)
        if released:
            self.opened += 1
        publish: list[str] = []
        for (vault_id, _note_id, _lane), item in released:
            if isinstance(item, _Delete):
                if vault_id not in publish:
                    publish.append(vault_id)
                continue
            try:
                item.send()
            except Exception:
                logger.exception("sending a change that waited failed")
        for vault_id in publish:
            vault = self._vaults.get(vault_id)
            if vault is None:
                continue
            try:
                vault.publish_deletes(now)
            except Exception:
                logger.exception("publishing the deletes of vault %s failed", vault_id)
        self._arm()

    def _arm(self) -> None:
        """Set the one timer at the next due time (or leave it if it is already that)."""
        due = self._waits.next_due()
        if due is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = self._timer_due = None
            return
        due = max(due, self._last_open + MIN_SPACING_S)
        if self._timer is not None and self._timer_due is not None and self._timer_due <= due:
            return  # it fires first, then arms again
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (offline tools): nothing reaches peers; armed at the next call
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        self._timer = loop.call_at(loop.time() + max(0.0, due - self.clock()), self._open)

    def timer_due(self) -> float | None:
        """When the timer fires next (wall clock), if armed."""
        return self._timer_due


def watch_deletes(gate: OutboundGate, vault_id: str, service: DeleteSource) -> None:
    """Hand the vault's local deletes to the gate: each may reach peers once the service's
    delete delay has passed (the service publishes it, ``publish_due_deletes``)."""

    def on_change(change: Change) -> None:
        delay = service.delete_delay_for(change.source)  # none for git's (SPEC §3.16)
        if change.kind == ChangeKind.DELETED and change.device is None and delay > 0:
            gate.defer_delete(vault_id, change.note_id, change.at + delay)

    service.subscribe(on_change)


def gate_pending_deletes(gate: OutboundGate, vault_id: str, service: DeleteSource) -> None:
    """The deletes the service found unpublished at start (or re-timed by
    ``set_delete_delay``): due one delay from now."""
    due = gate.clock() + service.delete_delay_s
    for note_id in service.pending_deletes():
        gate.defer_delete(vault_id, note_id, due)
