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

**Path and bytes are judged apart** (issue 14, found by the mixed R1 run): a move and a
concurrent change of the bytes compose -- the file ends at the moved path *with* the
changed bytes, as an edit follows a renamed note. Each entry says which change set its path
(``path_at``) and which set its bytes and executable bit (``bytes_at``): its own (None,
what every entry of older daemons says) or one it inherited from the change it was made on
(a move keeps the bytes' stamp, a change of the bytes the path's). ``winner`` takes the
path of the survivor with the latest path stamp and the bytes of the one with the latest
bytes stamp (each a last-writer-wins register: HLC, then device ID), on the entry of the
latest change (its time, ancestry, device). Two concurrent changes of the bytes still have
one winner, the other's bytes a ``concurrent`` loser; a move is never a loser of the bytes.
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
    # (packed Hlc, device) of the change that set the path / the bytes and executable bit;
    # None: this change itself (normalised so: an entry equals itself after a round trip).
    path_at: tuple[str, str] | None = None
    bytes_at: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        own = (self.hlc, self.device)
        if self.path_at == own:
            object.__setattr__(self, "path_at", None)
        if self.bytes_at == own:
            object.__setattr__(self, "bytes_at", None)

    @property
    def order_key(self) -> tuple[str, str]:
        """Later HLC first, then the larger device ID (packed HLCs sort as text)."""
        return (self.hlc, self.device)

    @property
    def path_stamp(self) -> tuple[str, str]:
        """The change that set this entry's path: (packed HLC, device)."""
        return self.path_at if self.path_at is not None else (self.hlc, self.device)

    @property
    def bytes_stamp(self) -> tuple[str, str]:
        """The change that set this entry's bytes and executable bit: (packed HLC, device)."""
        return self.bytes_at if self.bytes_at is not None else (self.hlc, self.device)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        del d["id"], d["device"], d["path_at"], d["bytes_at"]
        if self.seen:
            d["seen"] = dict(self.seen)
        else:
            del d["seen"]  # as entries were before it existed
        # Only when inherited: an entry that set both is written as before they existed.
        if self.path_at is not None:
            d["pathAt"] = _pack_stamp(self.path_at)
        if self.bytes_at is not None:
            d["bytesAt"] = _pack_stamp(self.bytes_at)
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
            path_at = _unpack_stamp(data.get("pathAt"))
            bytes_at = _unpack_stamp(data.get("bytesAt"))
        except (KeyError, TypeError, HlcError):
            return None
        if _ID_RE.match(att_id) is None or not device:
            return None
        seen = tuple(sorted((str(k), str(v)) for k, v in seen_in.items()))
        return cls(att_id, path, sha, int(size), executable, hlc, device, deleted, base, seen, path_at,
                   bytes_at)


def _pack_stamp(stamp: tuple[str, str]) -> str:
    return f"{stamp[0]}/{stamp[1]}"


def _unpack_stamp(value: Any) -> tuple[str, str] | None:
    """None for absent; raises HlcError for a malformed stamp (the entry is then ignored)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise HlcError(f"not a stamp: {value!r}")
    hlc, sep, device = value.partition("/")
    Hlc.unpack(hlc)
    if not sep or not device:
        raise HlcError(f"not a stamp: {value!r}")
    return hlc, device


def _survivors(entries: list[AttachmentEntry]) -> list[AttachmentEntry]:
    deletes = [e for e in entries if e.deleted]
    return [e for e in entries if not e.deleted and not any(e.hlc <= d.base for d in deletes)]


def _path_key(e: AttachmentEntry) -> tuple[tuple[str, str], tuple[str, str]]:
    return (e.path_stamp, e.order_key)


def _bytes_key(e: AttachmentEntry) -> tuple[tuple[str, str], tuple[str, str]]:
    return (e.bytes_stamp, e.order_key)


def winner(slots: Iterable[AttachmentEntry]) -> AttachmentEntry | None:
    """The entry every replica holding these slots agrees on (see the module doc): the
    latest surviving change, with the path of the latest path change and the bytes of the
    latest bytes change among the survivors (itself when it made both)."""
    entries = list(slots)
    if not entries:
        return None
    survivors = _survivors(entries)
    if not survivors:
        return max((e for e in entries if e.deleted), key=lambda e: e.order_key)
    top = max(survivors, key=lambda e: e.order_key)
    by_path = max(survivors, key=_path_key)
    by_bytes = max(survivors, key=_bytes_key)
    if by_path is top and by_bytes is top:
        return top
    seen = top.seen
    known = [e.history() for e in (by_path, by_bytes) if e is not top]
    if top.history() and all(known):  # the ancestry of both sides, when both are known
        merged = dict(top.seen)
        for h in known:
            for device, packed in h:
                if packed > merged.get(device, ""):
                    merged[device] = packed
        seen = tuple(sorted(merged.items()))
    return replace(top, path=by_path.path, path_at=by_path.path_stamp, sha256=by_bytes.sha256,
                   size=by_bytes.size, executable=by_bytes.executable, bytes_at=by_bytes.bytes_stamp,
                   seen=seen)


def bytes_winner(slots: Iterable[AttachmentEntry]) -> AttachmentEntry | None:
    """The surviving slot whose bytes the winner holds (None: deleted, or no slots)."""
    survivors = _survivors(list(slots))
    return max(survivors, key=_bytes_key) if survivors else None


def saw_bytes(judge: AttachmentEntry, other: AttachmentEntry) -> bool:
    """Whether ``judge`` (the slot whose bytes won) was made knowing ``other``'s bytes: the
    change that set them is in its ancestry (or is the one that set its own)."""
    stamp = other.bytes_stamp
    if stamp == judge.bytes_stamp:
        return True
    if judge.seen or judge.base == ZERO.pack():
        return stamp[0] <= dict(judge.seen).get(stamp[1], "")
    return stamp[0] <= judge.base  # no ancestry recorded: one step, by the clock


def concurrent_losers(slots: Iterable[AttachmentEntry]) -> list[AttachmentEntry]:
    """Live changes of the bytes that lost to the winner's without its maker having seen
    them, with other bytes than the winner's: kept as ``concurrent`` versions. A move that
    carried older bytes did not change them: its bytes are never a loser."""
    entries = list(slots)
    win = winner(entries)
    judge = bytes_winner(entries)
    if win is None or judge is None:
        return []
    out: dict[tuple[str, str], AttachmentEntry] = {}
    for e in sorted(_survivors(entries), key=lambda e: e.order_key):
        if e.sha256 != win.sha256 and not saw_bytes(judge, e):
            out.setdefault(e.bytes_stamp, e)  # one per change of the bytes
    return sorted(out.values(), key=lambda e: e.order_key)


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


def moved(entry: AttachmentEntry, new_path: str, *, hlc: str, device: str,
          executable: bool | None = None) -> AttachmentEntry:
    """A rename: same identity and content, a new path, made on ``entry``. The bytes keep
    the stamp of the change that set them (a move does not change them), unless the
    executable bit changed with the move."""
    bytes_at = entry.bytes_stamp if executable is None or executable == entry.executable else None
    return replace(entry, path=new_path, hlc=hlc, device=device, base=entry.hlc, deleted=False,
                   seen=entry.history(), path_at=None, bytes_at=bytes_at,
                   executable=entry.executable if executable is None else executable)


def base_entry(slots: Iterable[AttachmentEntry], base: str,
               sha256: str | None = None) -> AttachmentEntry | None:
    """The change ``base`` (an HLC; ``sha256``: the bytes it showed) among ``slots`` or as
    their winner (a composed one is no slot), or None where it is gone."""
    entries = list(slots)
    for e in [*entries, *filter(None, [winner(entries)])]:
        if e.hlc == base and (sha256 is None or e.sha256 == sha256):
            return e
    return None


def made_on(slots: Iterable[AttachmentEntry], base: str,
            sha256: str | None = None) -> tuple[tuple[str, str], ...]:
    """The ``seen`` of a change made on the change ``base`` (an HLC) among ``slots``: that
    change's history, or () where its slot is gone (then ``base`` alone judges)."""
    e = base_entry(slots, base, sha256)
    return e.history() if e is not None else ()


UNKNOWN_DEVICE = "-"  # sorts before every device ID: a stamp known only by its time


def path_set_at(slots: Iterable[AttachmentEntry], path: str, base: str,
                sha256: str | None = None) -> tuple[str, str] | None:
    """The path stamp a change of the bytes at ``path``, made on ``base``, inherits: the
    base's when it was at that path; where the base's slot is gone, the base's time (the
    path was set no later than the change the file showed, so a move made after it still
    wins the path); for a file new here at a path the index fills, the latest of the
    changes that put the attachment there; else None (the change sets the path itself)."""
    entries = list(slots)
    e = base_entry(entries, base, sha256)
    if e is not None and e.path == path:
        return e.path_stamp
    if base != ZERO.pack():
        return (base, UNKNOWN_DEVICE)
    stamps = [x.path_stamp for x in entries if x.path == path and not x.deleted]
    return max(stamps) if stamps else None
