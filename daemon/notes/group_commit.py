"""Group commit: the appends that arrive in the same event-loop turns share one commit.

Each append is still its own nested unit of work (a SAVEPOINT of the group's unit):
its note change and its idempotency record commit together, an error inside it rolls
back that append alone (its caller gets the error, the others go on), and a refusal it
records (``stet conflicts``) commits with the group. Every caller is answered only after
the group's ``COMMIT`` -- durability is unchanged: what is acknowledged is in the WAL and
survives kill -9. If the ``COMMIT`` itself fails, every caller of the group gets the error.

Only appends are grouped (REST ``/append``, MCP ``append_note``), so the group is also an
append group (``NotesService.append_group``, daemon/notes/append_batch.py): the group's appends
to one note are inserted in one CRDT transaction, with one row write; each still answers
with its own revision and is logged as its own change.

Why: a commit writes the WAL pages of the note row, its update, the change log, the
revision state and the key -- work that does not grow with the group, so many concurrent
appends paying it once per loop turn instead of once each is the cheaper way to make them
all durable (P2; bench/history/rounds.md, round-1 P2 profile).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stet.daemon.notes.service import NotesService

logger = logging.getLogger(__name__)

MAX_GROUP = 64  # appends per commit at most; the rest go in the next turn's group
# Loop turns a group waits for more appends while more keep coming (each turn reads the
# sockets again without blocking): the clients a group answered together send their next
# appends together, a little apart. One turn, then more only while the group grew; none
# for a lone appender (the last group and this one of one append).
MAX_TURNS = 4


class GroupCommit:
    """Runs write callables in groups, one unit of work (one commit) per group."""

    def __init__(self, service: NotesService, *, max_group: int = MAX_GROUP) -> None:
        self.service = service
        self.max_group = max_group
        self._pending: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._scheduled = False
        self._seen = 0  # appends pending at the last turn the group waited
        self._turns = 0
        self._last = 1  # the size of the last group
        self.waited = 0  # loop turns groups waited for more appends (for tests)
        self.groups = 0  # groups run, each one commit at most (for tests and status)

    async def run(self, write: Callable[[], Any]) -> Any:
        """``write()`` inside this turn's group; its result once the group committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((write, future))
        if not self._scheduled:
            self._scheduled = True
            self._seen = self._turns = 0
            loop.call_soon(self._gather)  # after the handlers already woken in this turn
        return await future

    def _gather(self) -> None:
        """Flush, or wait one more loop turn while appends are still joining the group --
        only when appends come concurrently (this group or the last had more than one):
        a lone appender waiting for each answer would only be slowed by the wait."""
        pending = len(self._pending)
        concurrent = pending > 1 or self._last > 1
        if concurrent and self._seen < pending < self.max_group and self._turns < MAX_TURNS:
            self._seen = pending
            self._turns += 1
            self.waited += 1
            asyncio.get_running_loop().call_soon(self._gather)
            return
        self._flush()

    def _flush(self) -> None:
        group, self._pending = self._pending[: self.max_group], self._pending[self.max_group:]
        self._last = len(group)
        self._scheduled = bool(self._pending)
        if self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        outcomes: list[tuple[asyncio.Future[Any], bool, Any]] = []
        if len(group) == 1:  # alone: its own unit commits (no group unit, no extra SAVEPOINT)
            write, future = group[0]
            if not future.cancelled():
                try:
                    future.set_result(write())
                except Exception as exc:
                    future.set_exception(exc)
                self.groups += 1
            return
        try:
            with self.service.write(), self.service.append_group():
                for write, future in group:
                    if future.cancelled():  # its caller went away before it ran: never acknowledged
                        continue
                    try:
                        outcomes.append((future, True, write()))
                    except Exception as exc:  # that write alone; its savepoint rolled it back
                        outcomes.append((future, False, exc))
        except Exception as exc:  # the commit failed: nothing of the group is durable
            logger.exception("a group of %d writes failed to commit", len(group))
            for _write, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        self.groups += 1
        for future, ok, value in outcomes:
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)


_GROUPS: weakref.WeakKeyDictionary[NotesService, GroupCommit] = weakref.WeakKeyDictionary()


def group_for(service: NotesService) -> GroupCommit:
    """The group commit of a vault's write path (one per ``NotesService``)."""
    group = _GROUPS.get(service)
    if group is None:
        group = _GROUPS[service] = GroupCommit(service)
    return group
