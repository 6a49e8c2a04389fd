"""What ``PeerHub`` uses of the daemon: a narrow Protocol, not the whole ``Daemon``.

The hub reads the open vaults (their service, store and brake), publishes peer events to
every vault's stream, and checks invites in the home's registry. ``Daemon`` satisfies
``PeerHost`` as it is (mypy checks it where the hub is made); a test can hand the hub
anything else that does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from stet.daemon.notes.service import NotesService
from stet.sync.home import VaultEntry
from stet.sync.store import VaultStore

if TYPE_CHECKING:
    from stet.daemon.attachments.home_parts import Attachments


class HeldNotes(Protocol):
    """The burst brake, as the hub asks it: is this note's content held back?"""

    def is_held(self, note_id: str) -> bool: ...


class HubVault(Protocol):
    """One open vault, as the hub sees it."""

    @property
    def entry(self) -> VaultEntry: ...

    @property
    def service(self) -> NotesService: ...

    @property
    def store(self) -> VaultStore: ...

    @property
    def brake(self) -> HeldNotes | None: ...

    def settle_soon(self, also: Callable[[], bool] | None = None) -> None:
        """Give back what a burst (a first sync) left behind once its work is over."""

    async def room_for_new_notes(self) -> None:
        """Before a slice of a peer's notes: let the folder's writer catch up if it must."""

class InviteBook(Protocol):
    """The home registry's invites (joining devices prove they hold one)."""

    def open_invites(self, vault_id: str, now: float) -> list[str]: ...

    def use_invite(self, key_hash: str, device_id: str) -> bool: ...


class PeerHost(Protocol):
    """What the hub needs of the daemon that runs it."""

    @property
    def vaults(self) -> Mapping[str, HubVault]: ...

    @property
    def registry(self) -> InviteBook: ...

    @property
    def attachments(self) -> Attachments: ...  # the home's blobs and the folder side's fetcher

    def publish_all(self, type_: str, data: dict[str, Any]) -> None: ...
