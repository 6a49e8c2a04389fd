"""The names of a vault some member's file system cannot hold, for `stet status`
(issue 37 item 6): the rule is ``stet.sync.member_names``'s, the members and their declared
platforms the vault index's, the paths the live notes'. This device's own refusals are its
skips (``skipped``); these are the other members'."""

from __future__ import annotations

from typing import Any

from stet.daemon.notes.service import NotesService
from stet.sync.attribution import device_label
from stet.sync.member_names import DeclaredMember, holds_every_name, names_members_cannot_hold


def members_cannot_hold(service: NotesService) -> list[dict[str, Any]]:
    members = {d: m for d, m in service.index.members().items()
               if not m.removed and d != service.device_id}
    names = {d: m.name for d, m in members.items()}
    declared = [DeclaredMember(d, device_label(d, names), m.platform) for d, m in members.items()]
    if all(holds_every_name(m.platform) for m in declared):
        return []  # every member POSIX: no path to look at
    refusals = names_members_cannot_hold(service.store.live_path_list(), declared)
    return [r.to_json() for r in refusals]
