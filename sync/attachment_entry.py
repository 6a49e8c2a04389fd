"""An attachment's replicated entry and the pure rule that picks one winner (SPEC §3.14).

Each device records its latest change of an attachment as one ``AttachmentEntry`` (its
own slot in the index, so two devices never overwrite each other's record). What the
attachment *is* everywhere is ``winner(slots)``, a function of the set of slots alone:
every replica that holds the same slots picks the same winner, whatever order they came
in.

The rule:
- **Modify beats delete.** A delete records in ``base`` the time of the change it saw
  as current. It removes only changes no later than that (what the deleter saw, or what
  lost to it anyway); a change made after ``base`` -- a modification the deleter had not
  seen -- survives it.
- Among the surviving changes, **the later HLC wins, then the larger device ID**.
- If no change survives, the attachment is deleted (the latest delete is the winner).

Whether a losing change was *seen* by the winner's maker (a loser it was not made after is
a concurrent one, kept as a ``concurrent`` version): ``base`` is one step of ancestry, not
enough once the winner was made on a change that was itself concurrent with the loser (B
changes a file twice while A's change of it is on its way: A's is older than B's second
change's base, yet B never saw it). So a change also records ``seen``: for each device, the
latest of its changes in the change's ancestry (the base's own ``seen`` and the base
itself). An entry without it (older daemons, or a change made where the base's slot was
gone) is judged by ``base`` as before (``saw``). Found by the mixed R1 run (issue 18).

A rename is an entry with the same id (identity) and a new path; the content (sha256)
travels with it. Concurrent changes that lost keep their bytes as ``concurrent`` versions
(``concurrent_losers``), never as conflict-copy files.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from .hlc import ZERO, Hlc, HlcError

_SHA_RE = re.compile(r"[0-9a-f]{64}\Z")
_ID_RE = re.compile(r"[0-9a-f]{32}\Z")


@dataclass(frozen=True, slots=True)
class AttachmentEntry:
    id: str  # identity: kept across renames
    path: str
    sha256: str
    size: int
    executable: bool  # the mode's executable bit (the only mode bit that syncs)
    hlc: str  # packed Hlc of this change
    device: str  # who made it
    deleted: bool = False
    base: str = ZERO.pack()  # packed Hlc of the winner this change was made on
    # (device, packed Hlc) pairs, sorted: the latest change of each device in this change's
    # ancestry (empty: not known, judged by ``base``).
    seen: tuple[tuple[str, str], ...] = ()

    @property
    def order_key(self) -> tuple[str, str]:
        """Later HLC first, then the larger device ID (packed HLCs sort as text)."""
        return (self.hlc, self.device)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        del d["id"], d["device"]
        if self.seen:
            d["seen"] = dict(self.seen)
        else:
            del d["seen"]  # as entries were before it existed
        return d

    def saw(self, other: AttachmentEntry) -> bool:
        """Whether this change was made after ``other`` (it is in its ancestry)."""
        if self.seen or self.base == ZERO.pack():
            return other.hlc <= dict(self.seen).get(other.device, "")
        return other.hlc <= self.base  # no ancestry recorded: one step, by the clock

    def history(self) -> tuple[tuple[str, str], ...]:
        """What a change made on this one has seen: this one's ``seen`` and itself (() when
        this one's ancestry is not known: a change made on it is then judged by ``base``)."""
        if not self.seen and self.base != ZERO.pack():
            return ()
        out = dict(self.seen)
        if self.hlc > out.get(self.device, ""):
            out[self.device] = self.hlc
        return tuple(sorted(out.items()))

    @classmethod
    def from_json(cls, att_id: str, device: str, data: Any) -> AttachmentEntry | None:
        """The entry, or None when a peer sent something malformed (it is then ignored)."""
        if not isinstance(data, dict):
            return None
        try:
            path, sha, size = data["path"], data["sha256"], data["size"]
            hlc, base = data["hlc"], data.get("base", ZERO.pack())
            executable, deleted = data.get("executable", False), data.get("deleted", False)
            if not (isinstance(path, str) and path and isinstance(sha, str) and _SHA_RE.match(sha)):
                return None
            # Numbers from a pycrdt Map come back as floats.
            if isinstance(size, bool) or not isinstance(size, int | float) or size < 0 or size != int(size):
                return None
            if not (isinstance(executable, bool) and isinstance(deleted, bool)):
                return None
            Hlc.unpack(hlc)
            Hlc.unpack(base)
            seen_in = data.get("seen", {})
            if not isinstance(seen_in, dict) or not all(isinstance(k, str) and k for k in seen_in):
                return None
            for packed in seen_in.values():
                Hlc.unpack(packed)
        except (KeyError, TypeError, HlcError):
            return None
        if _ID_RE.match(att_id) is None or not device:
            return None
        seen = tuple(sorted((str(k), str(v)) for k, v in seen_in.items()))
        return cls(att_id, path, sha, int(size), executable, hlc, device, deleted, base, seen)


def winner(slots: Iterable[AttachmentEntry]) -> AttachmentEntry | None:
    """The entry every replica holding these slots agrees on (see the module doc)."""
    entries = list(slots)
    if not entries:
        return None
    deletes = [e for e in entries if e.deleted]
    survivors = [e for e in entries if not e.deleted and not any(e.hlc <= d.base for d in deletes)]
    if survivors:
        return max(survivors, key=lambda e: e.order_key)
    return max(deletes, key=lambda e: e.order_key)


def concurrent_losers(slots: Iterable[AttachmentEntry]) -> list[AttachmentEntry]:
    """Live changes that lost to the winner without its maker having seen them, with other
    bytes than the winner's: their bytes are kept as ``concurrent`` versions."""
    entries = list(slots)
    win = winner(entries)
    if win is None:
        return []
    deletes = [e for e in entries if e.deleted]
    out = [
        e for e in entries
        if e != win and not e.deleted and e.sha256 != win.sha256 and not win.saw(e)
        and not any(e.hlc <= d.base for d in deletes)
    ]
    return sorted(out, key=lambda e: e.order_key)


def attachment_id(path: str) -> str:
    """The id of an attachment first seen at ``path``: derived from the path, so two
    machines that add a file at the same path make one attachment (their contents then
    compete by the winner rule instead of producing two files at one path)."""
    return hashlib.sha256(b"stet-attachment\0" + path.encode("utf-8")).hexdigest()[:32]


def fresh_attachment_id(path: str, hlc: str, device: str) -> str:
    """An id for a new file at a path whose derived id is already taken (by an attachment
    that moved away or was deleted)."""
    seed = b"\0".join((b"stet-attachment", path.encode(), hlc.encode(), device.encode()))
    return hashlib.sha256(seed).hexdigest()[:32]


def path_owners(
        winners: Iterable[AttachmentEntry]) -> tuple[dict[str, AttachmentEntry], list[AttachmentEntry]]:
    """Live winners by path. When several attachments claim one path, the later change
    (HLC, then device) takes it; the others are returned as displaced (the caller keeps
    their bytes as ``concurrent`` versions)."""
    owners: dict[str, AttachmentEntry] = {}
    displaced: list[AttachmentEntry] = []
    for e in sorted((w for w in winners if not w.deleted), key=lambda e: e.order_key, reverse=True):
        if e.path in owners:
            displaced.append(e)
        else:
            owners[e.path] = e
    return owners, displaced


def moved(entry: AttachmentEntry, new_path: str, *, hlc: str, device: str) -> AttachmentEntry:
    """A rename: same identity and content, a new path, made on ``entry``."""
    return replace(entry, path=new_path, hlc=hlc, device=device, base=entry.hlc, deleted=False,
                   seen=entry.history())


def made_on(slots: Iterable[AttachmentEntry], base: str,
            sha256: str | None = None) -> tuple[tuple[str, str], ...]:
    """The ``seen`` of a change made on the change ``base`` (an HLC) among ``slots``: that
    change's history, or () where its slot is gone (then ``base`` alone judges)."""
    for e in slots:
        if e.hlc == base and (sha256 is None or e.sha256 == sha256):
            return e.history()
    return ()
