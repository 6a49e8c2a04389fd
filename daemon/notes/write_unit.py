"""The unit of work of the write path (issue 11).

Every write -- disk, agent, peer, restore, cli, live editors -- runs inside one
``NotesService.write()`` unit: the store writes of the change and of the listeners that
keep records with it (versions, the brake, the change log) are one SQLite transaction,
committed once; only then are its ``Change``s handed to the listeners that act outside
the store (the file bridge, peers, SSE, live editors): an after-commit outbox. An error
raised inside a unit rolls it back (a SAVEPOINT when nested), drops its queued Changes
and forgets the documents it touched, so memory matches the store again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from stet.daemon.notes.changes import Change

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(slots=True)
class WriteUnit:
    """What one unit of work did: its Changes, in order (announced after its commit)."""

    source: str = ""
    changes: list[Change] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)  # documents changed in memory


class HasWrite(Protocol):
    def write(self, source: str = "") -> AbstractContextManager[WriteUnit]: ...


S = TypeVar("S", bound=HasWrite)


def in_unit(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run a write method of the service inside its own unit (nested in the caller's)."""

    def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.write():
            return method(self, *args, **kwargs)

    functools.update_wrapper(wrapper, method)
    return wrapper
