"""What to do about attachments, folder ↔ index (SPEC §3.14): pure decisions, no I/O.

The caller (the file bridge, next session) keeps per path a ``SeenFile``: the bytes and
stat the daemon last saw there or wrote there, and the index change (HLC) they reflect.
Then, from a stat-only look at the folder:

1. ``needs_hash``: the paths whose stat differs from what was seen (only these are read).
2. ``plan_intake`` (folder → index): new, modified, renamed (same hash at a new path,
   the old one gone: identity kept) and deleted files, each made on the change the path
   showed (``base``), so the winner rule can tell a concurrent change from a later one.
3. ``plan_outflow`` (index → folder), after the intake is recorded: write what the index
   shows where the folder does not hold it yet (or fetch the blob first), move files the
   index moved, remove files the index deleted, fix the executable bit. A path whose file
   changed since it was seen is never written over: the intake records that change first
   (modify beats delete; concurrent changes get one winner, the loser kept as a version).
   An attachment the index moved keeps its file at the old path until the new path is
   written (its bytes fetched first): the new path is written, then the old one removed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .attachment_entry import AttachmentEntry
from .attachment_versions import BEFORE_DELETION, BEFORE_OVERWRITE, CONCURRENT
from .hlc import ZERO


@dataclass(frozen=True, slots=True)
class OnDisk:
    """A stat of a file in the folder."""

    size: int
    mtime_ns: int
    ino: int
    executable: bool


@dataclass(frozen=True, slots=True)
class SeenFile:
    """What the daemon last saw at a path (or wrote there)."""

    att_id: str
    sha256: str
    size: int
    mtime_ns: int
    ino: int
    executable: bool
    hlc: str  # the index change these bytes are (the base of a local change made on them)

    def same_stat(self, d: OnDisk) -> bool:
        return (self.size, self.mtime_ns, self.ino, self.executable) == (d.size, d.mtime_ns, d.ino,
                                                                           d.executable)


# -- folder → index ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordChange:
    """A file added or modified here: record it (``att_id`` None: a new attachment)."""

    path: str
    sha256: str
    size: int
    executable: bool
    att_id: str | None
    base: str  # the HLC of the change the path showed (ZERO: a new file)


@dataclass(frozen=True, slots=True)
class RecordMove:
    """A file that vanished from ``old_path`` and reappeared, same bytes, at ``new_path``."""

    entry: AttachmentEntry
    old_path: str
    new_path: str
    executable: bool


@dataclass(frozen=True, slots=True)
class RecordDelete:
    path: str
    seen: SeenFile


@dataclass(frozen=True, slots=True)
class Touch:
    """The stat changed, the bytes did not: only remember the new stat."""

    path: str
    disk: OnDisk


IntakeAction = RecordChange | RecordMove | RecordDelete | Touch


def needs_hash(disk: Mapping[str, OnDisk], seen: Mapping[str, SeenFile]) -> list[str]:
    """Paths whose file must be read (hashed) before planning: new or changed since seen."""
    return sorted(p for p, d in disk.items() if p not in seen or not seen[p].same_stat(d))


def plan_intake(disk: Mapping[str, OnDisk], hashes: Mapping[str, str], seen: Mapping[str, SeenFile],
                live: Mapping[str, AttachmentEntry]) -> list[IntakeAction]:
    """Changes made in the folder, as index records. ``hashes`` holds the SHA-256 of every
    path ``needs_hash`` named (a path missing from it is not ready: left for later)."""
    actions: list[IntakeAction] = []
    vanished = {p: s for p, s in seen.items() if p not in disk}
    by_sha: dict[str, list[str]] = {}
    source_entry: dict[str, AttachmentEntry] = {}  # vanished path -> the attachment it held
    live_at = {e.id: (p, e) for p, e in live.items()}
    for p, gone in sorted(vanished.items()):
        entry = live.get(p)
        if entry is None or entry.id != gone.att_id:
            # The index moved its attachment elsewhere (a peer's rename not carried out here
            # yet): still its file, while no file here is seen as it at that other path.
            there = live_at.get(gone.att_id)
            if there is None or (there[0] in seen and seen[there[0]].att_id == gone.att_id):
                continue
            entry = there[1]
        source_entry[p] = entry
        by_sha.setdefault(gone.sha256, []).append(p)
    moved_from: set[str] = set()
    for path in needs_hash(disk, seen):
        sha = hashes.get(path)
        if sha is None:
            continue
        d, s = disk[path], seen.get(path)
        if s is not None:
            if sha == s.sha256 and d.executable == s.executable:
                actions.append(Touch(path, d))
            else:
                actions.append(RecordChange(path, sha, d.size, d.executable, s.att_id, s.hlc))
            continue
        here = live.get(path)
        candidates = by_sha.get(sha)
        if here is None and candidates:
            old = candidates.pop(0)
            moved_from.add(old)
            actions.append(RecordMove(source_entry[old], old, path, d.executable))
        else:
            # A new file; at a path the index fills from elsewhere (not yet written here),
            # it is a change of that attachment made without seeing it: concurrent.
            actions.append(RecordChange(path, sha, d.size, d.executable, here.id if here else None,
                                        ZERO.pack()))
    for path, s in sorted(vanished.items()):
        if path in moved_from:
            continue
        here = live.get(path)
        if here is not None and here.id == s.att_id:
            actions.append(RecordDelete(path, s))
    return actions


# -- index → folder ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteFile:
    """Put the blob ``entry.sha256`` at ``path`` (temp + fsync + rename, with the executable
    bit). ``replaces``: what the path held, to keep as a version of ``version_kind``."""

    path: str
    entry: AttachmentEntry
    replaces: SeenFile | None
    version_kind: str | None


@dataclass(frozen=True, slots=True)
class MoveFile:
    old_path: str
    new_path: str
    entry: AttachmentEntry


@dataclass(frozen=True, slots=True)
class RemoveFile:
    """The index deleted (or moved away) what ``path`` holds: keep it as a version, remove it."""

    path: str
    seen: SeenFile
    version_kind: str


@dataclass(frozen=True, slots=True)
class SetExecutable:
    path: str
    entry: AttachmentEntry


@dataclass(frozen=True, slots=True)
class Fetch:
    """The blob is needed from a peer before ``path`` can be written."""

    sha256: str
    size: int
    path: str


@dataclass(frozen=True, slots=True)
class Forget:
    """Nothing at the path and nothing the index wants there: drop what was seen."""

    path: str


@dataclass(frozen=True, slots=True)
class Relabel:
    """The file at ``path`` holds the bytes the index shows there, but was seen as another
    attachment (twins: a peer moved that one away and put a copy's attachment here): it is
    ``entry``'s file now. Else a later deletion of the file found no deletion to record (the
    seen attachment lives elsewhere) and the outflow wrote ``entry`` back (issue 37)."""

    path: str
    entry: AttachmentEntry


OutflowAction = WriteFile | MoveFile | RemoveFile | SetExecutable | Fetch | Forget | Relabel


def _replaced_kind(seen: SeenFile, winner: AttachmentEntry) -> str:
    """Bytes the winner was made without seeing are a concurrent loser's."""
    return CONCURRENT if seen.hlc > winner.base else BEFORE_OVERWRITE


def plan_outflow(disk: Mapping[str, OnDisk], seen: Mapping[str, SeenFile],
                 live: Mapping[str, AttachmentEntry],
                 have_blob: Callable[[str], bool]) -> list[OutflowAction]:
    actions: list[OutflowAction] = []
    settled = {p for p, d in disk.items() if p in seen and seen[p].same_stat(d)}
    move_sources: dict[str, str] = {}  # att id -> a settled path holding it that the index left
    for p in sorted(settled):
        held = seen[p]
        if p not in live or live[p].id != held.att_id:
            move_sources.setdefault(held.att_id, p)
    used_sources: set[str] = set()
    # Attachments this plan does not put at their path yet (bytes to fetch, a file there to
    # take in first): a file of theirs at another path stays until they are placed, so the
    # folder always shows them somewhere (issue 14: a peer's winning move, its bytes awaited).
    unplaced: set[str] = set()
    relabel: list[AttachmentEntry] = []  # files holding the bytes shown, seen as another attachment
    for path, entry in sorted(live.items()):
        d, s = disk.get(path), seen.get(path)
        if d is not None and path not in settled:
            unplaced.add(entry.id)
            continue  # changed since seen (or never seen): the intake records it first
        if s is not None and d is not None and s.sha256 == entry.sha256:
            if s.att_id != entry.id:
                relabel.append(entry)
            if s.executable != entry.executable:
                actions.append(SetExecutable(path, entry))
            continue
        source = move_sources.get(entry.id)
        if (d is None and source is not None and source not in used_sources
                and seen[source].sha256 == entry.sha256):
            used_sources.add(source)
            actions.append(MoveFile(source, path, entry))
            if seen[source].executable != entry.executable:
                actions.append(SetExecutable(path, entry))
            continue
        if not have_blob(entry.sha256):
            actions.append(Fetch(entry.sha256, entry.size, path))
            unplaced.add(entry.id)
            continue
        replaces = s if d is not None else None
        kind = _replaced_kind(replaces, entry) if replaces is not None else None
        actions.append(WriteFile(path, entry, replaces, kind))
    # After the moves: a file one of them takes away keeps its old label until it goes.
    actions.extend(Relabel(e.path, e) for e in relabel if e.path not in used_sources)
    for path, s in sorted(seen.items()):
        if path in used_sources or (path in live and live[path].id == s.att_id):
            continue
        if path in live:
            continue  # another attachment took the path: handled by its WriteFile above
        if path not in disk:
            actions.append(Forget(path))
        elif path in settled and s.att_id not in unplaced:
            # After the WriteFile of its new path above: write new, then remove old.
            actions.append(RemoveFile(path, s, BEFORE_DELETION))
    return actions
