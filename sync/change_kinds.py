"""What a change is and who made it, as str-valued enums (issue 11: classify once).

``ChangeKind`` is what a ``Change`` did; ``Source`` is who made it. Both are ``StrEnum``s,
so a member compares equal to its value, is JSON as it, and goes into SQLite as it: the
store, the API and the log keep their strings.

A change's ``source`` as stored and shown is a string that may carry a name or a device:
``agent:NAME`` (a local agent token), ``peer:DEVICE`` (a peer's sync), ``SOURCE on DEVICE``
(a change made on another device, e.g. ``git on D``). ``source_kind`` tells which ``Source``
such a string is; ``agent_source``, ``peer_source`` and ``on_device`` make them.
"""

from __future__ import annotations

from enum import StrEnum


class ChangeKind(StrEnum):
    """What one applied change did."""

    CHANGED = "changed"
    CREATED = "created"
    DELETED = "deleted"
    MOVED = "moved"
    INDEX = "index"  # the vault index changed (peers only)
    STORED = "stored"  # content kept for a note not shown here (peers only)


# The kinds that change a note's text or existence (what versions and the brake weigh).
CONTENT_KINDS = frozenset({ChangeKind.CHANGED, ChangeKind.DELETED})


class Source(StrEnum):
    """Who made a change (the first word of its ``source`` string)."""

    DISK = "disk"  # a file in the vault
    GIT = "git"  # git, in the vault (SPEC §3.16)
    AGENT = "agent"  # ``agent:NAME``
    PEER = "peer"  # ``peer:DEVICE``
    RESTORE = "restore"
    CLI = "cli"
    UI = "ui"  # the web page
    PAIRING = "pairing"  # a member added to the vault index
    IMPORT = "import"  # an index entry for a note ``stet init`` imported
    SYNC = "sync"  # a peer frame's item with no source of its own
    RELEASE = "release"  # a note's full state sent to peers when the brake lets it go
    OTHER = "other"  # not one of these (an older store's string)


DISK_SOURCES = frozenset({Source.DISK, Source.GIT})  # what a file in the vault says
_SEP = ":"
_ON = " on "


def agent_source(name: str) -> str:
    """The source string of a local agent token's change."""
    return f"{Source.AGENT}{_SEP}{name}"


def peer_source(device: str) -> str:
    """The source string of a change a peer's sync brought."""
    return f"{Source.PEER}{_SEP}{device}"


def on_device(source: str, device: str) -> str:
    """The source string of a change made as ``source`` on another device."""
    return f"{source}{_ON}{device}"


def made_on(source: str, device: str) -> str:
    """``source`` (a device's own source string) as other devices name it: ``disk`` made on
    ``D`` is ``disk on D``; a peer's sync (``peer:E``) or a change already made on another
    device (``git on E``) stays as it is."""
    if is_peer(source) or _ON in source:
        return source
    return on_device(source, device)


def source_kind(source: str) -> Source:
    """Which ``Source`` a source string is (``agent:x on D`` is an agent's)."""
    head = source.split(_ON, 1)[0].split(_SEP, 1)[0]
    try:
        return Source(head)
    except ValueError:
        return Source.OTHER


def is_local_agent(source: str) -> bool:
    """A local agent token (an agent on another device reaches us as ``... on DEVICE``)."""
    return source_kind(source) is Source.AGENT and _ON not in source


def is_git(source: str) -> bool:
    """Git's changes, here or on another device (``git on DEVICE``)."""
    return source == Source.GIT or source.startswith(Source.GIT + _ON)


def is_peer(source: str) -> bool:
    return source.startswith(Source.PEER + _SEP)
