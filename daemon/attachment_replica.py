"""The folder side of attachments (SPEC §3.14): one ``AttachmentReplica`` per vault.

A *pass* (debounced after folder events, a peer's index update or a blob's arrival;
at start; and every ``rescan_seconds``) does, under one lock:

1. **Scan** the folder's attachments, stat-only, in a thread (``sync/attachment_scan``);
   files over ``attachments.max_bytes`` are skipped and counted.
2. **Intake** (folder → index): the files whose stat differs from what was seen are
   copied into the blob store while hashed (a thread); ``plan_intake`` turns the folder's
   changes into records; Touches are remembered, the rest pass ``gate.admit`` (the brake;
   what it holds stays out of the index and is not written over until released or
   reverted). Admitted changes are recorded in the attachment map of the vault index's
   document -- so they reach peers through the index sync -- with the seen state and the
   versions of what they replaced, in one unit of work (``NotesService.write``: one commit).
3. **Outflow** (index → folder): ``plan_outflow`` over what the index shows (paths a peer
   sent that cannot hold an attachment here are left alone): blobs held are written to
   their paths (``daemon/attachment_disk``: temp + fsync + rename, never over a file that
   changed since seen); missing blobs are asked of the ``BlobFetcher``; moves, removals,
   the executable bit; each replaced or removed file is first kept as a version. After
   each step the seen state is what was written, so our own writes never come back as
   changes.
4. **Concurrent losers**: a change that lost to a concurrent one keeps its bytes as an
   attachment version of kind ``concurrent`` (fetched first when this home lacks them):
   that row is the conflict record ``stet conflicts`` lists.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import stat
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pycrdt

from stet.sync.attachment_entry import (
    AttachmentEntry,
    attachment_id,
    bytes_winner,
    concurrent_losers,
    fresh_attachment_id,
    made_on,
    moved,
    path_set_at,
    saw_bytes,
)
from stet.sync.attachment_files import AttachmentFiles
from stet.sync.attachment_index import MAP_NAME, AttachmentIndex
from stet.sync.attachment_plan import (
    Fetch,
    Forget,
    IntakeAction,
    MoveFile,
    OnDisk,
    RecordChange,
    RecordDelete,
    RecordMove,
    RemoveFile,
    SeenFile,
    SetExecutable,
    Touch,
    WriteFile,
    needs_hash,
    plan_intake,
    plan_outflow,
)
from stet.sync.attachment_scan import ingest, is_attachment_path, on_disk, scan_attachments
from stet.sync.attachment_versions import (
    BEFORE_DELETION,
    BEFORE_OVERWRITE,
    CONCURRENT,
    AttachmentVersionStore,
)
from stet.sync.blob_store import BlobStore
from stet.sync.change_kinds import ChangeKind
from stet.sync.errors import NotFound, StetError
from stet.sync.hlc import HybridClock
from stet.sync.ignore_rules import IgnoreRules
from stet.sync.note_doc import join_updates
from stet.sync.note_paths import InvalidPath, is_note_name, resolve_inside

from .attachment_delete_delay import DeferredDeletes
from .attachment_disk import move_file, remove_file, set_executable, write_blob
from .attachment_log import AttachmentLog
from .attachment_seams import AttachmentGate, BlobFetcher
from .attachment_sources import ChangeTimes, by_source, sources_of
from .changes import Change
from .emptied_folders import remove_emptied_folders
from .folder_watcher import FsEvent
from .git_watch import GitWatch
from .notes_service import NotesService

if TYPE_CHECKING:
    from .writer_folders import WriterFolders

logger = logging.getLogger(__name__)

DEBOUNCE_S = 0.25  # passes are at least this far apart: a burst of events (an unzip) costs few
# A file being written (modified, not closed yet) is read once closed, or after this
# without a close, as notes are (SPEC §3.2).
UNCLOSED_WRITE_S = 2.0
MAX_GAP_S = 5.0  # the most a long pass delays the next (half of it, doubled)
RETRY_S = (0.5, 10.0)  # a file that changed while read, or a path changed before a write:
# looked at again after the first delay, doubling (to the second) while it keeps changing
# Blobs still awaited are asked for again after these many seconds (doubling up to the
# last): a member that lacked one when first asked may have fetched it since.
REWANT_S = (1.0, 30.0)
RECORD_BATCH = 256  # changes recorded per unit of work
DISK = "disk"
RESTORE = "restore"


class AttachmentReplica:
    def __init__(self, vault_id: str, root: Path, service: NotesService, blobs: BlobStore, *,
                 fetcher: BlobFetcher, gate: AttachmentGate, max_bytes: int, keep_bytes: int,
                 extensions: tuple[str, ...], rules: Callable[[], IgnoreRules], device_id: str,
                 rescan_s: float = 3600.0, blob_in_use: Callable[[str], bool] | None = None,
                 sweep: Callable[[], Awaitable[object]] | None = None,
                 unshare: Callable[[str, OnDisk], None] | None = None,
                 folders: WriterFolders | None = None) -> None:
        self.vault_id = vault_id
        self.root = root
        self.service = service
        self.blobs = blobs
        self.fetcher = fetcher
        self.gate = gate
        self.max_bytes = max_bytes
        self.extensions = extensions
        self.rules = rules
        self.device_id = device_id
        self.rescan_s = rescan_s
        self.blob_in_use = blob_in_use or self.holds_blob
        self.sweep = sweep  # the home's blob store, swept of unreferenced blobs after periodic passes
        # Set: a blob lands at its path as a hard link of the store's file, then this is told
        # (the store gets its own copy: ``blob_unsharing``); None: copied.
        self.unshare = unshare
        # The vault's folders made by the daemon (the notes' writer's, shared): the folders
        # a blob's file needs are made through it, so their ``dir_created`` events are
        # known for echoes here and by the notes' side (which rescanned the notes for each
        # new folder of a first sync's attachments); None: a plain mkdir, every folder's
        # event a walk.
        self.folders = folders
        self.files = AttachmentFiles(service.store)
        self.versions = AttachmentVersionStore(service.store, keep_bytes)
        self._seen: dict[str, SeenFile] = self.files.all()
        self._index: AttachmentIndex | None = None
        self._map: pycrdt.Map[Any] | None = None  # the index map observed (kept: see ``index``)
        self._map_subscription: Any = None
        self._changed_ids: set[str] = set()  # attachments whose slots changed: check their losers
        self._writing: dict[str, float] = {}  # path -> when to read it anyway (monotonic): open for writing
        self._check_all = True  # at start (and after the index document was rebuilt): every one
        # A pass woken only by blobs landing (and the watcher's echo of our own writes) does
        # not walk the folder: the last walk's files, with what this replica wrote since, are
        # what the folder holds unless an event named a path we did not write (then, and at
        # start, every periodic pass, any other wake, a folder's event, a retry: a walk).
        # While 200 blobs landed, each pass walked the folder again (P9, issue 14).
        self._walk = True
        self._walked: dict[str, OnDisk] | None = None  # the last walk's files, and our writes since
        self._walked_rules: IgnoreRules | None = None
        self._ours: dict[str, OnDisk | None] = {}  # path -> what we left there since that walk
        self._dirty: set[str] = set()  # paths events named since the last pass
        self._clock = HybridClock(last=self.index.latest_hlc())
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._held: set[IntakeAction] = set()  # given to the gate, not admitted (yet)
        self._released: set[IntakeAction] = set()  # released by the gate: recorded as they are
        self._wanted: dict[str, int] = {}  # sha256 -> size, asked of the fetcher
        self._to_write: dict[str, int] = {}  # of those: blobs the folder waits for
        self._losers: dict[tuple[str, str], int] = {}  # of those: (id, sha) of losers' bytes to keep
        self._rewant: asyncio.TimerHandle | None = None
        # Wanted blobs that landed since asked; once every one has, the next pass is not
        # spaced out (the last file of a transfer goes to its path at once).
        self._landed_wanted: set[str] = set()
        self._all_landed = asyncio.Event()
        self._rewant_s = REWANT_S[0]
        self._too_large: dict[str, int] = {}
        self._counts = {"attachments": 0, "bytes": 0}
        # For `stet join` (SPEC §7): files the index shows that are not in place yet after the
        # last outflow, and whether the index changed since (a pass will look again).
        self._to_place = 0
        self._map_changed = False
        self.passes = 0
        self._last_pass_s = 0.0
        self._last_pass_end = -math.inf  # time.monotonic() when the last pass ended
        self._retry_s = RETRY_S[0]
        self._unreadable: set[str] = set()  # logged once each
        self.git = GitWatch(root)  # was a change git's? (SPEC §3.16: attachment_sources)
        self._times = ChangeTimes()
        self.log = AttachmentLog(service.store)
        # Local deletions wait the delete delay in the outbound gate (``outbound``, set by
        # the runtime) before they are recorded (SPEC §5.6).
        self.deletes = DeferredDeletes(vault_id, lambda: service.delete_delay_s, self.wake)
        service.subscribe(self._on_change)

    # -- the index, in the vault index's document ------------------------------------------

    @property
    def index(self) -> AttachmentIndex:
        """The attachment map of the vault index's document (rebuilt with it after a
        rolled-back unit of work)."""
        doc = self.service.index.doc
        if self._index is None or self._index.doc is not doc:
            self._index = AttachmentIndex(doc)
            # The wrapper is kept: pycrdt drops a subscription with the wrapper it was made on
            # (a temporary one went at once, and no change of the map was ever noted).
            self._map = doc.get(MAP_NAME, type=pycrdt.Map)
            self._map_subscription = self._map.observe(self._on_map)
            self._check_all = True
        return self._index

    def _on_map(self, event: Any) -> None:
        keys: dict[str, Any] = getattr(event, "keys", {})
        self._changed_ids.update(k.split("/", 1)[0] for k in keys)
        self._map_changed = True

    def _on_change(self, change: Change) -> None:
        if change.kind == ChangeKind.INDEX and change.device is not None and self._index_touched():
            self.wake()  # a peer's index update: what it changed may need writing here

    def _index_touched(self) -> bool:
        """The attachments' map changed since the last outflow (or its document was
        rebuilt, unobserved). A peer's bulk of notes sends an index update per batch that
        touches only notes: each woke a pass here -- a walk of the whole folder, ~7 % of the
        receiving peer's CPU during P8 (issue 11)."""
        index = self._index
        return self._map_changed or index is None or index.doc is not self.service.index.doc

    # -- running -------------------------------------------------------------------------

    def start(self) -> None:
        self.wake()  # the first pass (a walk): what changed while the daemon was down
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"attachments:{self.vault_id}")

    async def stop(self) -> None:
        if self._rewant is not None:
            self._rewant.cancel()
        if self._task is not None:
            task = self._task
            while not task.done():
                # Again if need be: Python 3.11's ``wait_for`` drops a cancel that comes as
                # what it waits for completes, and the loop then waited an hour (a test's
                # stop hung right after a pass had been woken).
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._task = None
        async with self._lock:  # a pass in a worker thread finishes first
            pass

    def wake(self) -> None:
        """A pass soon, with a walk of the folder."""
        self._walk = True
        self._wake.set()

    def _wake_for(self, paths: tuple[str | None, ...]) -> None:
        """A pass soon; these paths are looked at (a walk unless each holds what we wrote)."""
        self._dirty.update(p for p in paths if p)
        self._wake.set()

    def on_fs_event(self, event: FsEvent) -> None:
        """From the folder watcher: wake for anything about a non-note, non-ignored path.
        A folder created or deleted brings the events of its files (watchdog reports the
        files of a folder moved in; ``rm -r`` deletes each file): only a folder moved (its
        files move without events of their own) and an overflow wake a pass by themselves,
        so a burst of notes in new folders costs no pass here."""
        if event.kind in ("overflow", "dir_moved"):
            self._times.saw(())
            self.wake()
            return
        if event.kind in ("dir_created", "dir_deleted"):
            if not self._own_or_ignored_folder(event):
                self._walk = True  # the next pass walks (its files' events wake it)
            return
        try:
            rules = self.rules()
            paths = tuple(p for p in (event.path, event.dest)
                          if p and not is_note_name(p, self.extensions) and not rules.is_ignored(p))
            if paths:
                self._times.saw((event.path, event.dest))
                self._note_writing(event)
                self._wake_for(paths)  # (a temp file of ours renamed to its path: that path)
        except Exception:
            logger.exception("attachment event %s", event)

    def _own_or_ignored_folder(self, event: FsEvent) -> bool:
        """A folder event that cannot hide an attachment: a folder the daemon made (for a
        blob's or a note's file: whatever lands in it has events of its own), or an ignored
        one made or removed (the notes' writer's temp folder, at each of its batches). A
        first sync walked the folder again for each new folder of its files (P9)."""
        path = event.path
        if not path:
            return False
        try:
            if self.rules().is_ignored(path, is_dir=True):
                return True
        except Exception:
            logger.exception("attachment event %s", event)
            return False
        return event.kind == "dir_created" and self.folders is not None and self.folders.created_dir(path)

    def _note_writing(self, event: FsEvent) -> None:
        """Which files someone is still writing: a half-written file is never taken in. A
        write shows as a modification, a new file as created empty; a file that only
        appears (moved in, renamed here) is whole at once."""
        path = event.path
        if path is None:
            return
        if event.kind == "modified" or (event.kind == "created" and self._empty(path)):
            # A new empty file is being written (its first write's event comes after the
            # write): a file moved or renamed in has its bytes already.
            self._writing[path] = time.monotonic() + UNCLOSED_WRITE_S
        elif event.kind in ("closed", "deleted", "moved"):
            self._writing.pop(path, None)
            if event.dest:
                self._writing.pop(event.dest, None)

    def _empty(self, path: str) -> bool:
        try:
            return os.lstat(self.root / path).st_size == 0
        except OSError:
            return False

    def _still_writing(self) -> set[str]:
        now = time.monotonic()
        self._writing = {p: t for p, t in self._writing.items() if t > now}
        return set(self._writing)

    def blob_arrived(self, sha256: str) -> None:
        """``BlobArrived`` for this vault: a wanted blob landed; write what waited for it."""
        if sha256 in self._wanted:
            self._landed_wanted = {s for s in self._landed_wanted if s in self._wanted}
            self._landed_wanted.add(sha256)
            if len(self._landed_wanted) == len(self._wanted):
                self._all_landed.set()
            self._wake.set()  # no walk needed for it: it lands at paths we write

    async def _run(self) -> None:
        while True:
            periodic = False
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.rescan_s or None)
            except TimeoutError:
                periodic = True
            # A burst of events (or a long pass) spaces the passes out: each starts at least
            # DEBOUNCE_S, and twice as long as the last one took, after the last one ended.
            # Counted from that end, not from this wake: the first wake after a quiet spell
            # runs a pass at once (a first sync's wanted blobs were asked for a whole
            # DEBOUNCE_S late: P9, issue 14).
            since = time.monotonic() - self._last_pass_end
            await self._spacing(max(DEBOUNCE_S, 2 * self._last_pass_s) - since)
            self._wake.clear()
            started = time.monotonic()
            try:
                async with self._lock:
                    await self._pass(walk=periodic)
                if periodic and self.sweep is not None:
                    await self.sweep()
            except Exception:
                logger.exception("attachment pass of %s failed", self.vault_id)
                self._seen = self.files.all()  # memory as the store has it again
                self._walked = None
                await asyncio.sleep(RETRY_S[1])
            self._last_pass_end = time.monotonic()
            self._last_pass_s = min(self._last_pass_end - started, MAX_GAP_S)

    async def _spacing(self, seconds: float) -> None:
        """Wait ``seconds`` before a pass, or less once every blob waited for has landed."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_landed.wait(), seconds)
        self._all_landed.clear()

    async def sync_now(self) -> None:
        """One pass now (intake, then outflow), after any pass under way."""
        async with self._lock:
            await self._pass()

    # -- the pass --------------------------------------------------------------------------

    async def _pass(self, walk: bool = True) -> None:
        self.passes += 1
        times, first = self._times.take()
        rules = self.rules()
        disk = await self._folder(rules, walk)
        for path, size in self._too_large.items():
            s = self._seen.get(path)
            if s is not None:
                # Synced before, over the limit now: left alone -- not taken in (nor recorded
                # as deleted), never written over -- until it is back under the limit.
                disk[path] = OnDisk(size, -1, -1, s.executable)
        retry = False
        hashes: dict[str, str] = {}
        writing = self._still_writing()
        for path in needs_hash(disk, self._seen):
            if path in self._too_large:
                continue
            if path in writing:
                retry = True  # read once closed (its event wakes a pass) or once it is late
                continue
            try:
                got = await asyncio.to_thread(ingest, self.blobs, self.root, path, self.max_bytes)
            except OSError as exc:
                if path not in self._unreadable:
                    self._unreadable.add(path)
                    logger.warning("attachment %s cannot be read: %s", path, exc)
                continue  # left out until an event or the periodic pass
            if got is None:
                retry = True  # changed while read (or gone): the next pass looks again
                continue
            info, stat_now = got
            disk[path] = stat_now
            self._walked = None  # this stat was not the walk's: the next pass walks
            hashes[path] = info.sha256
        actions = plan_intake(disk, hashes, self._seen, self.index.live())
        self._held &= set(actions)  # held changes the folder no longer shows are moot
        self.deletes.planned(actions)  # waiting deletions whose file is back are dropped
        touches = [a for a in actions if isinstance(a, Touch)]
        changes = [a for a in actions if not isinstance(a, Touch) and a not in self._held]
        due = self.deletes.take_due()  # deletions that waited the delay: recorded now
        released = [a for a in changes if a in self._released]
        to_gate = [a for a in changes
                   if a not in self._released and a not in due and not self.deletes.waiting(a)]
        self._released.clear()
        sources = (await asyncio.to_thread(sources_of, self.git, to_gate, times, first, time.time())
                   if to_gate else [])
        admitted: dict[str, list[IntakeAction]] = {}
        for source, group in by_source(to_gate, sources).items():
            admitted[source] = self.gate.admit(self.vault_id, group, source)
            self._held.update(a for a in group if a not in admitted[source])
            record_now = self.deletes.defer(admitted[source], source)  # deletions wait (SPEC §5.6)
            await self._keep_deleted([a for a in admitted[source] if a not in record_now], source)
            admitted[source] = record_now
        for a in changes:
            if a in due and a not in released:
                admitted.setdefault(due[a], []).append(a)
        await self._record([*touches, *released, *admitted.pop(DISK, [])], DISK, disk)
        for source, group in admitted.items():
            await self._record(group, source, disk)  # git's (SPEC §3.16)
        retry |= await self._outflow(disk, rules)
        await self._keep_losers()
        if retry:
            self._walked = None  # looked at again by a walk
            asyncio.get_running_loop().call_later(self._retry_s, self.wake)
            self._retry_s = min(self._retry_s * 2, RETRY_S[1])
        else:
            self._retry_s = RETRY_S[0]

    async def _folder(self, rules: IgnoreRules, walk: bool) -> dict[str, OnDisk]:
        """The folder's attachments now: a walk, or (``walk`` False, nothing but our own
        writes named by events since the last one) that walk's files with our writes."""
        dirty, self._dirty = self._dirty, set()
        if (not walk and not self._walk and self._walked is not None
                and _same_rules(rules, self._walked_rules)
                and await asyncio.to_thread(self._only_ours, dirty)):
            return dict(self._walked)
        self._walk = False
        scan = await asyncio.to_thread(scan_attachments, self.root, rules, self.extensions, self.max_bytes)
        if scan.too_large.keys() != self._too_large.keys():
            for path, size in sorted(scan.too_large.items()):
                if path not in self._too_large:
                    logger.warning("attachment %s skipped: %d bytes, over attachments.max_bytes (%d)",
                                   path, size, self.max_bytes)
        self._too_large = scan.too_large
        self._walked, self._walked_rules, self._ours = dict(scan.files), rules, {}
        return scan.files

    def _only_ours(self, paths: set[str]) -> bool:
        """Whether each path holds just what this replica left there since the last walk
        (a file it wrote, nothing where it removed one). In a worker thread."""
        for path in paths:
            if path not in self._ours:
                return False
            ours = self._ours[path]
            try:
                st = os.lstat(self.root / path)
            except FileNotFoundError:
                if ours is not None:
                    return False
                continue
            except OSError:
                return False
            if (ours is None or not stat.S_ISREG(st.st_mode) or st.st_size > self.max_bytes
                    or on_disk(st) != ours):
                return False
        return True

    @property
    def _make_parents(self) -> Callable[[Path], None] | None:
        return self.folders.make_parents if self.folders is not None else None

    def _wrote(self, path: str, st: OnDisk | None) -> None:
        """The outflow left ``st`` at ``path`` (None: removed it)."""
        self._ours[path] = st
        if self._walked is not None:
            if st is None:
                self._walked.pop(path, None)
            else:
                self._walked[path] = st

    def _held_paths(self) -> set[str]:
        paths: set[str] = set()
        for a in self._held:
            if isinstance(a, RecordMove):
                paths.update((a.old_path, a.new_path))
            elif isinstance(a, RecordChange | RecordDelete | Touch):
                paths.add(a.path)
        return paths | self.deletes.paths()

    # -- folder → index --------------------------------------------------------------------

    def _new_id(self, path: str, hlc: str, winners: dict[str, AttachmentEntry]) -> str:
        att_id = attachment_id(path)
        taken = winners.get(att_id)
        if taken is not None and (taken.path != path or not taken.deleted):
            att_id = fresh_attachment_id(path, hlc, self.device_id)
        return att_id

    async def _record(self, actions: Sequence[IntakeAction], source: str, disk: dict[str, OnDisk]) -> None:
        """Record changes made in the folder: index entries, seen state and the versions of
        what they replaced; a unit of work (one commit, one index update) per
        ``RECORD_BATCH`` changes, the loop free in between (a bulk intake stays responsive)."""
        if not actions:
            return
        index = self.index
        changes_index = any(not isinstance(a, Touch) for a in actions)
        winners = index.winners() if changes_index else {}
        if changes_index:
            self._clock.observe(index.latest_hlc())  # later than every change seen here
        released: set[str] = set()
        for i in range(0, len(actions), RECORD_BATCH):
            if i:
                await asyncio.sleep(0)
            self._record_batch(actions[i:i + RECORD_BATCH], source, disk, winners, released)
        await self._drop_blobs(released)

    def _record_batch(self, actions: Sequence[IntakeAction], source: str, disk: dict[str, OnDisk],
                      winners: dict[str, AttachmentEntry], released: set[str]) -> None:
        index = self.index
        seen = dict(self._seen)
        now = time.time()
        entries: list[AttachmentEntry] = []

        def put(entry: AttachmentEntry) -> None:
            entries.append(entry)  # into the index once the store writes are done
            winners[entry.id] = entry

        def keep(s: SeenFile, path: str, kind: str) -> None:
            _version, gone = self.versions.add(attachment_id=s.att_id, path=path, kind=kind, source=source,
                                               created_at=now, sha256=s.sha256, size=s.size,
                                               executable=s.executable)
            released.update(gone)

        with self.service.write(source):
            for a in actions:
                if isinstance(a, Touch):
                    s = seen[a.path]
                    seen[a.path] = replace(s, size=a.disk.size, mtime_ns=a.disk.mtime_ns, ino=a.disk.ino,
                                           executable=a.disk.executable)
                    self.files.put(a.path, seen[a.path])
                    continue
                hlc = self._clock.now().pack()
                if isinstance(a, RecordChange):
                    d = disk[a.path]
                    att_id = a.att_id or self._new_id(a.path, hlc, winners)
                    old = seen.get(a.path)
                    if old is not None and old.sha256 != a.sha256:
                        keep(old, a.path, BEFORE_OVERWRITE)
                    shown = winners.get(att_id)
                    if (shown is not None and not shown.deleted and shown.path == a.path
                            and (shown.sha256, shown.executable) == (a.sha256, a.executable)):
                        # The file holds just what the index shows (a copy that was here
                        # before joining, a write of ours a crash kept us from recording):
                        # nothing to record, and the bytes are that change's.
                        hlc = shown.hlc
                    else:
                        # Its ancestry: that of the change the file showed, while its slot is here.
                        slots = index.slots(att_id)
                        shown_sha = old.sha256 if old else None
                        ancestry = made_on(slots, a.base, shown_sha)
                        # A change of the bytes keeps the path's stamp: a concurrent move
                        # of the attachment composes with it (issue 14).
                        path_at = path_set_at(slots, a.path, a.base, shown_sha)
                        put(AttachmentEntry(att_id, a.path, a.sha256, a.size, a.executable, hlc,
                                            self.device_id, False, a.base, ancestry, path_at))
                        self.log.recorded(a, att_id, old, a.sha256, source, now)
                    seen[a.path] = SeenFile(att_id, a.sha256, d.size, d.mtime_ns, d.ino, d.executable, hlc)
                    self.files.put(a.path, seen[a.path])
                elif isinstance(a, RecordMove):
                    d = disk[a.new_path]
                    entry = moved(a.entry, a.new_path, hlc=hlc, device=self.device_id,
                                  executable=a.executable)
                    put(entry)
                    self.log.recorded(a, entry.id, seen.get(a.old_path), entry.sha256, source, now)
                    gone = seen.pop(a.old_path, None)
                    self.files.remove(a.old_path)
                    if gone is not None and gone.sha256 != entry.sha256:
                        # The file holds older bytes than the index shows (a peer's change not
                        # written here yet): it is seen as what it holds, so the outflow still
                        # writes the peer's bytes at the new path (issue 18, mixed R1).
                        seen[a.new_path] = SeenFile(entry.id, gone.sha256, d.size, d.mtime_ns, d.ino,
                                                    d.executable, gone.hlc)
                    else:
                        seen[a.new_path] = SeenFile(entry.id, entry.sha256, d.size, d.mtime_ns, d.ino,
                                                    d.executable, hlc)
                    self.files.put(a.new_path, seen[a.new_path])
                elif isinstance(a, RecordDelete):
                    s = a.seen
                    if not self._has_version(s.att_id, s.sha256, BEFORE_DELETION):  # kept while it waited
                        keep(s, a.path, BEFORE_DELETION)
                    put(AttachmentEntry(s.att_id, a.path, s.sha256, s.size, s.executable, hlc, self.device_id,
                                        True, s.hlc))
                    self.log.recorded(a, s.att_id, s, None, source, now)
                    seen.pop(a.path, None)
                    self.files.remove(a.path)
            updates = [u for u in map(index.put, entries) if u is not None]
            update = join_updates(updates)
            if update is not None:
                self.service.put_index_update(update, source, entries[0].path if len(entries) == 1 else "")
        self._seen = seen

    # -- index → folder --------------------------------------------------------------------

    def _live_here(self, rules: IgnoreRules) -> dict[str, AttachmentEntry]:
        live = {}
        for path, entry in self.index.live().items():
            if is_attachment_path(path, rules, self.extensions):
                live[path] = entry
            else:
                logger.debug("attachment %s cannot be placed in this folder: left out", path)
        return live

    def _source_of(self, entry: AttachmentEntry) -> str:
        return DISK if entry.device == self.device_id else f"peer:{entry.device}"

    def _keep_version(self, s: SeenFile, path: str, kind: str, source: str) -> set[str]:
        if kind == CONCURRENT and self._has_concurrent(s.att_id, s.sha256):
            return set()
        _version, released = self.versions.add(attachment_id=s.att_id, path=path, kind=kind, source=source,
                                               created_at=time.time(), sha256=s.sha256, size=s.size,
                                               executable=s.executable)
        return released

    def _has_concurrent(self, att_id: str, sha256: str) -> bool:
        return self._has_version(att_id, sha256, CONCURRENT)

    def _has_version(self, att_id: str, sha256: str, kind: str) -> bool:
        return any(v.kind == kind and v.sha256 == sha256 for v in self.versions.for_attachment(att_id))

    async def _keep_deleted(self, waiting: Sequence[IntakeAction], source: str) -> None:
        """Deletions that wait the delete delay keep their ``before-deletion`` version now
        (``stet versions`` shows it at once, as for notes); recorded later without another."""
        released: set[str] = set()
        with self.service.store.transaction():
            for a in waiting:
                if isinstance(a, RecordDelete) and not self._has_version(a.seen.att_id, a.seen.sha256,
                                                                         BEFORE_DELETION):
                    released |= self._keep_version(a.seen, a.path, BEFORE_DELETION, source)
        await self._drop_blobs(released)

    def _set_seen(self, path: str, seen: SeenFile | None) -> None:
        """Remember (or forget) what a path holds, in the store and here."""
        if seen is None:
            self.files.remove(path)
            self._seen.pop(path, None)
        else:
            self.files.put(path, seen)
            self._seen[path] = seen

    async def _outflow(self, disk: dict[str, OnDisk], rules: IgnoreRules) -> bool:
        """Write what the index shows; returns whether something must be tried again."""
        held = self._held_paths()
        self._map_changed = False  # what changes the index from here on is looked at again
        live = self._live_here(rules)
        self._counts = {"attachments": len(live), "bytes": sum(e.size for e in live.values())}
        live = {p: e for p, e in live.items() if p not in held}
        disk = {p: d for p, d in disk.items() if p not in held}
        self._adopt_same_bytes(disk, live)
        seen = {p: s for p, s in self._seen.items() if p not in held}
        actions = plan_outflow(disk, seen, live, self.blobs.has)
        retry = False
        fetch: dict[str, int] = {}
        released: set[str] = set()
        unplaced: set[str] = set()  # attachments not written at their path in this pass
        for a in actions:
            try:
                if isinstance(a, Fetch):
                    fetch[a.sha256] = a.size
                elif isinstance(a, WriteFile):
                    if not await self._write(a, released):
                        retry = True
                        unplaced.add(a.entry.id)
                elif isinstance(a, MoveFile):
                    st = await asyncio.to_thread(move_file, self.root, a.old_path, a.new_path,
                                                 seen[a.old_path])
                    if st is None:
                        retry = True
                        continue
                    self._wrote(a.old_path, None)
                    self._wrote(a.new_path, st)
                    await asyncio.to_thread(remove_emptied_folders, self.root, a.old_path, rules.is_ignored)
                    e = a.entry
                    with self.service.store.transaction():
                        self._set_seen(a.old_path, None)
                        self._set_seen(a.new_path, SeenFile(e.id, e.sha256, st.size, st.mtime_ns, st.ino,
                                                            st.executable, e.hlc))
                elif isinstance(a, RemoveFile):
                    if a.seen.att_id in unplaced:
                        retry = True  # its new path is not written: the old file stays meanwhile
                        continue
                    winner = self.index.current(a.seen.att_id)
                    source = self._source_of(winner) if winner is not None else DISK
                    with self.service.store.transaction():
                        released |= self._keep_version(a.seen, a.path, a.version_kind, source)
                    if not await asyncio.to_thread(remove_file, self.root, a.path, a.seen):
                        retry = True
                        continue
                    self._wrote(a.path, None)
                    self._set_seen(a.path, None)
                    await asyncio.to_thread(remove_emptied_folders, self.root, a.path, rules.is_ignored)
                elif isinstance(a, SetExecutable):
                    s = seen[a.path]
                    st = await asyncio.to_thread(set_executable, self.root, a.path, a.entry.executable, s)
                    if st is None:
                        retry = True
                        continue
                    self._wrote(a.path, st)
                    self._set_seen(a.path, replace(s, size=st.size, mtime_ns=st.mtime_ns, ino=st.ino,
                                                   executable=st.executable, hlc=a.entry.hlc))
                elif isinstance(a, Forget):
                    self._set_seen(a.path, None)
            except (OSError, InvalidPath, StetError) as exc:
                # Not a race with the user (those return None above): a file where a folder
                # should be, no permission... Tried again at the next event or periodic pass.
                logger.warning("attachment %s: %s not done: %s", getattr(a, "path", "?"), type(a).__name__,
                               exc)
                self._walked = None  # what the step left is not known: the next pass walks
                if isinstance(a, WriteFile):
                    unplaced.add(a.entry.id)
        self._to_write = fetch
        self._to_place = sum(1 for p, e in live.items()
                             if (placed := self._seen.get(p)) is None or placed.sha256 != e.sha256)
        self._want({**self._to_write, **self._loser_blobs()})
        await self._drop_blobs(released)
        return retry

    def _adopt_same_bytes(self, disk: dict[str, OnDisk], live: dict[str, AttachmentEntry]) -> None:
        """A file that holds the bytes of a later change of its attachment (the same bytes
        recorded by another device too, e.g. both had a copy before joining) reflects that
        change: a local change made on it later is made on it (its ``base``), so those
        same-bytes entries never count as a concurrent change it had not seen."""
        adopted = []
        for path, entry in live.items():
            s, d = self._seen.get(path), disk.get(path)
            if (s is not None and d is not None and s.same_stat(d) and s.att_id == entry.id
                    and s.sha256 == entry.sha256 and s.hlc < entry.hlc):
                adopted.append((path, replace(s, hlc=entry.hlc)))
        if adopted:
            with self.service.store.transaction():
                for path, s in adopted:
                    self._set_seen(path, s)

    async def _write(self, a: WriteFile, released: set[str]) -> bool:
        e = a.entry
        if a.replaces is not None and a.version_kind is not None:
            kind = a.version_kind
            r = a.replaces
            slots = self.index.slots(e.id)
            shown = next((x for x in slots if (x.hlc, x.sha256) == (r.hlc, r.sha256)), None)
            judge = bytes_winner(slots)  # the change whose bytes won: did it see these?
            if shown is not None and judge is not None and judge.sha256 == e.sha256 and judge.seen:
                # its ancestry says whether it saw them
                kind = BEFORE_OVERWRITE if saw_bytes(judge, shown) else CONCURRENT
            # The bytes it replaces are kept first (they are in the blob store since intake).
            with self.service.store.transaction():
                released |= self._keep_version(a.replaces, a.path, kind, self._source_of(e))
        st = await asyncio.to_thread(write_blob, self.blobs, self.root, a.path, e.sha256, e.executable,
                                     a.replaces, link=self.unshare is not None,
                                     make_parents=self._make_parents)
        if st is None:
            return False
        self._wrote(a.path, st)
        if self.unshare is not None:
            self.unshare(e.sha256, st)
        self._set_seen(a.path, SeenFile(e.id, e.sha256, st.size, st.mtime_ns, st.ino, st.executable, e.hlc))
        return True

    def _want(self, fetch: dict[str, int]) -> None:
        """Ask the fetcher for what is missing now; drop what is no longer needed."""
        for sha in sorted(self._wanted.keys() - fetch.keys()):
            self.fetcher.unwant(self.vault_id, sha)
        new = bool(fetch.keys() - self._wanted.keys())
        if new:
            self._rewant_s = REWANT_S[0]
        for sha, size in sorted(fetch.items()):
            if sha not in self._wanted:
                self.fetcher.want(self.vault_id, sha, size)
        self._wanted = fetch
        # A pending ask-again stays: passes come more often than it when the folder or the
        # index is busy, and putting it off at each one asked a link that lacked a blob
        # never again while they came (issue 14).
        if self._rewant is not None and (new or not fetch):
            self._rewant.cancel()
            self._rewant = None
        if fetch and self._rewant is None:
            self._rewant = asyncio.get_running_loop().call_later(self._rewant_s, self._want_again)

    def _want_again(self) -> None:
        """Still waiting: ask again (``want`` is idempotent; the fetcher may try links that
        lacked the blob before), less often the longer it takes."""
        self._rewant = None
        for sha, size in sorted(self._wanted.items()):
            self.fetcher.want(self.vault_id, sha, size)
        self._rewant_s = min(self._rewant_s * 2, REWANT_S[1])
        if self._wanted:
            self._rewant = asyncio.get_running_loop().call_later(self._rewant_s, self._want_again)

    # -- concurrent losers -----------------------------------------------------------------

    async def _keep_losers(self) -> None:
        """Keep the bytes of changes that lost to a concurrent one as ``concurrent``
        versions (the conflict record); fetch them first when this home lacks them."""
        index = self.index
        ids = None if self._check_all else set(self._changed_ids)
        self._check_all = False
        self._changed_ids.clear()
        if ids is not None and not ids:
            return
        groups: dict[str, list[AttachmentEntry]] = {}
        for e in index.slots():
            if ids is None or e.id in ids:
                groups.setdefault(e.id, []).append(e)
        released: set[str] = set()
        self._losers = {k: v for k, v in self._losers.items() if k[0] not in groups}
        with self.service.store.transaction():
            for att_id, slots in sorted(groups.items()):
                for loser in concurrent_losers(slots):
                    if self._has_concurrent(att_id, loser.sha256):
                        continue
                    if not self.blobs.has(loser.sha256):
                        self._losers[(att_id, loser.sha256)] = loser.size
                        self._changed_ids.add(att_id)  # looked at again once it arrives
                        continue
                    logger.info("attachment %s: the concurrent change of %s lost; kept as a version",
                                loser.path, loser.device[:7])
                    s = SeenFile(att_id, loser.sha256, loser.size, 0, 0, loser.executable, loser.hlc)
                    released |= self._keep_version(s, loser.path, CONCURRENT, self._source_of(loser))
        self._want({**self._to_write, **self._loser_blobs()})
        await self._drop_blobs(released)

    def _loser_blobs(self) -> dict[str, int]:
        return {sha: size for (_att_id, sha), size in self._losers.items()}

    # -- blobs -----------------------------------------------------------------------------

    def holds_blob(self, sha256: str) -> bool:
        """Whether this vault still needs the blob (a live attachment, a file, a version,
        or one being fetched)."""
        if sha256 in self._wanted or any(s.sha256 == sha256 for s in self._seen.values()):
            return True
        if any(e.sha256 == sha256 for e in self.index.live().values()):
            return True
        return self.versions.holds(sha256)

    def referenced_blobs(self) -> set[str]:
        """Every blob this vault may still need: any slot of its index (a loser's too: a
        peer may fetch it to keep it), its files, its versions, what it waits for."""
        shas = {e.sha256 for e in self.index.slots()} | {s.sha256 for s in self._seen.values()}
        shas |= {v.sha256 for v in self.versions.all()}
        return shas | set(self._wanted)

    async def _drop_blobs(self, shas: set[str]) -> None:
        gone = [s for s in sorted(shas) if not self.blob_in_use(s)]
        for sha in gone:
            await asyncio.to_thread(self.blobs.remove, sha)

    # -- AttachmentReplicaApi ------------------------------------------------------------

    def counts(self, vault: str) -> dict[str, int]:
        pending = self._map_changed or self._wake.is_set() or self._lock.locked()
        return {**self._counts, "skipped": len(self._too_large), "toPlace": self._to_place + int(pending)}

    def deleted_waiting(self, vault: str) -> set[str]:
        return self.deletes.paths()

    def too_large(self) -> dict[str, int]:
        return dict(self._too_large)

    async def record_held(self, vault: str, actions: Sequence[IntakeAction]) -> None:
        """The gate released these: record them if the folder still shows them."""
        self._held.difference_update(actions)
        self.deletes.release(actions)
        self._released.update(actions)
        await self.sync_now()

    async def write_back(self, vault: str, path: str, sha256: str, executable: bool) -> None:
        """Put a blob's bytes at ``path`` (revert, restore) and record that like a change
        made in the folder (source ``restore``; not asked of the gate)."""
        if not self.blobs.has(sha256):
            raise NotFound(f"the bytes {sha256[:12]}… are not in this home", sha256=sha256)
        async with self._lock:
            await self._pass()  # what the folder holds now is recorded (and kept) first
            full = resolve_inside(self.root, path)
            exists = await asyncio.to_thread(os.path.lexists, full)
            expect = self._seen.get(path) if exists else None
            if exists and expect is not None and path in self._held_paths():
                # A held change's file (a revert: the gate checked it holds the held bytes):
                # what is there now is what may be replaced, not what was last recorded.
                now = on_disk(await asyncio.to_thread(os.lstat, full))
                expect = replace(expect, size=now.size, mtime_ns=now.mtime_ns, ino=now.ino,
                                 executable=now.executable)
            self._walked = None  # written here, not by the outflow: the next pass walks
            st = await asyncio.to_thread(write_blob, self.blobs, self.root, path, sha256, executable, expect,
                                         make_parents=self._make_parents)
            if st is None:
                raise StetError(f"{path} changed while it was being restored; try again", code="conflict")
            self._held = {a for a in self._held if path not in _paths_of(a)}
            self.deletes.drop_path(path)
            disk = {path: st}
            seen = {path: self._seen[path]} if path in self._seen else {}
            actions = plan_intake(disk, {path: sha256}, seen, self.index.live())
            await self._record(actions, RESTORE, disk)
            await self._outflow(await self._scan_disk(), self.rules())

    async def _scan_disk(self) -> dict[str, OnDisk]:
        scan = await asyncio.to_thread(scan_attachments, self.root, self.rules(), self.extensions,
                                       self.max_bytes)
        return scan.files


def _same_rules(rules: IgnoreRules, walked: IgnoreRules | None) -> bool:
    """The rules of the last walk: the same object, or the same patterns loaded again (the
    notes' side reloads them at each rescan; the new object made the next pass walk)."""
    return walked is not None and (rules is walked or rules.user_patterns == walked.user_patterns)


def _paths_of(a: IntakeAction) -> tuple[str, ...]:
    if isinstance(a, RecordMove):
        return (a.old_path, a.new_path)
    return (a.path,)
