"""The burst brake's held changes, released or reverted (SPEC §5.6): one implementation for
the REST routes (``api/brake_routes.py``) and the web page's held page (``ui/routes.py``).
Held attachment changes are rows of the same list, released to the folder side and reverted
by their gate (``attachments/brake.py``). The owner-only check is the face's.
"""

from __future__ import annotations

from typing import Any

from stet.daemon.ops.host import VaultHost
from stet.daemon.safety.brake import Brake
from stet.sync.errors import StetError
from stet.sync.held_attachments import is_attachment_hold
from stet.sync.held_changes import HeldChange


def brake_of(runtime: VaultHost) -> Brake:
    """The vault's brake; not found when the burst brake is off for it."""
    if runtime.brake is None:
        raise StetError("the burst brake is not running for this vault", code="not_found")
    return runtime.brake


async def release_held(runtime: VaultHost, ids: list[int] | None) -> list[HeldChange]:
    """Release ``ids`` (None: everything held) to the other devices."""
    released = brake_of(runtime).release(ids)
    gate = runtime.attachment_brake
    if gate is not None:
        await gate.settled()  # released attachment changes are recorded before the answer
    return released


async def revert_held(runtime: VaultHost,
                      ids: list[int] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Revert held changes of notes (the brake) and of attachments (their gate): what was
    reverted, and what was skipped because it came back after the hold."""
    brake = brake_of(runtime)
    gate = runtime.attachment_brake
    if ids is None:
        # The notes first: the brake also reports what came back by itself since a person
        # last acted (attachments' too).
        reverted, skipped = brake.revert_or_skip(None)
        if gate is not None:
            more, more_skipped = await gate.revert(None)  # attachments' bytes, written back
            reverted, skipped = reverted + more, skipped + more_skipped
        return reverted, skipped
    mine = {i for i in ids if gate is not None and (h := brake.held.get(i)) is not None
            and is_attachment_hold(h)}
    reverted, skipped = await gate.revert(sorted(mine)) if gate is not None and mine else ([], [])
    rest = [i for i in ids if i not in mine]
    if rest:
        notes_reverted, notes_skipped = brake.revert_or_skip(rest)
        reverted, skipped = reverted + notes_reverted, skipped + notes_skipped
    return reverted, skipped
