"""The search index's writer: one worker thread per vault with its own connections.

Fed after commit from the change stream (``RecordsKeeper``): the latest state of each
note waiting, coalesced (a burst of appends to a note is indexed once), written in
batches of one transaction each (FTS5 writes a segment per commit). The loop only puts
an entry in a dict; the tokenising, and the reading of texts that did not travel with
their change (moves, a full queue, the catch-up at start), happen in the thread -- the
sqlite3 module lets go of the GIL while SQLite works.

Read-your-writes: every entry counts one mark; a search waits (bounded) until the worker
has committed everything marked before it asked (``wait_indexed`` on the loop,
``flush`` from synchronous code). At start (``start``) the worker first compares the
index with the store (``stale_notes``) and queues what is missing, stale or gone, so an
index deleted, damaged or left behind by a kill -9 is rebuilt or caught up, off the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from stet.daemon.base.memory import trim_heap
from stet.daemon.base.thread_priority import lower_this_thread
from stet.sync.search_index import SearchHit, SearchIndex, StoreTexts, search_db_path, stale_notes

logger = logging.getLogger(__name__)

BATCH_NOTES = 256  # notes per commit of the index ...
BATCH_BYTES = 1 << 20  # ... or this much text
MAX_PENDING_BYTES = 16 << 20  # memory of the texts held for the worker; past it, it reads them from the store


def held_bytes(text: str) -> int:
    """The memory a text takes (1, 2 or 4 bytes a character: one emoji makes a note's
    string four times its length), not its length."""
    return sys.getsizeof(text)
GATHER_S = 0.01  # woken, the worker lets a turn's changes gather first (one batch, one wake-up)
# A note indexed less than this long ago waits before it is indexed again, its changes
# coalescing meanwhile -- unless a search waits for the index (then everything goes at
# once). Why: indexing re-tokenises the whole note, so a note appended to many times a
# second would be re-tokenised for every append -- CPU taken from the loop's cores on a
# small machine, for an index nobody reads in between (P2; bench/history/rounds.md, issue 18).
HOT_NOTE_INTERVAL_S = 0.5
# A bulk (a peer's: a first sync, a big intake streamed from another device; the folder's:
# an unzip's new files, made notes a batch at a time) is indexed once it pauses: while its
# notes keep arriving (the last less than DEFER_QUIET_S ago) and this burst brought
# DEFER_MIN_NOTES different notes or more, the worker waits -- for at most DEFER_MAX_S per
# burst -- instead of tokenising beside the intake on the same cores, where it competes
# with the intake it indexes (P4, P8: bench/history/rounds.md). A search never waits for that: it makes the
# worker index everything marked before it at once (``_paced``). A live editor's
# keystrokes (one note) and an agent's notes (one at a time) are not a bulk.
DEFER_QUIET_S = 1.0
DEFER_MIN_NOTES = 64
DEFER_MAX_S = 30.0
RELEASE_AFTER_NOTES = 1000  # notes indexed after which, caught up, the worker frees its caches
IDLE_EXIT_S = 5.0  # a worker with nothing to do for this long ends (a new entry starts one)
WAIT_S = 10.0  # how long a search waits for the index at most (then searches what there is)

_READ = object()  # index the note as the store has it (text, path and revision read then)
_REMOVE = object()  # the note is gone: take it out of the index
Entry = tuple[str, str, str] | object  # (path, revision, text) | _READ | _REMOVE


class SearchIndexer:
    def __init__(self, store_path: Path, *, name: str = "") -> None:
        self.store_path = store_path
        self.index_path = search_db_path(store_path)
        self.name = name or store_path.stem
        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        self._pending: dict[str, Entry] = {}
        self._pending_bytes = 0
        self._marked = 0  # entries handed over so far
        self._done = 0  # of those, how many are committed to the index
        self._catch_up = False  # the next worker compares the index with the store first
        self._closing = False
        self._thread: threading.Thread | None = None
        self._idle = False  # the worker waits for work (and has not been woken yet)
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._reader: SearchIndex | None = None
        self.batches = 0  # commits made by the worker (tests, benchmarks)
        self.releases = 0  # caches released once caught up after a burst (``_release``)
        self._first_mark: dict[str, int] = {}  # note id -> the first mark its pending entry holds
        self._indexed_at: dict[str, float] = {}  # note id -> when it was last indexed (pacing)
        self._flushing = 0  # synchronous callers waiting in ``flush``
        self._since_release = 0  # notes indexed since (the worker's own)
        self.failures = 0
        self._defer_until = 0.0  # a bulk is arriving until then (``_deferred``)
        self._defer_started = 0.0  # when that burst began
        self._defer_notes: set[str] = set()  # the notes it brought (up to DEFER_MIN_NOTES)
        self.deferred_waits = 0  # times the worker waited for a bulk to pause (tests)
        # Asked from the worker's thread while a bulk is deferred: still busy with it (the
        # daemon: the folder's writer has files to write, or its intake files to take in).
        # Must be cheap and thread-safe.
        self.busy: Callable[[], bool] | None = None

    # -- the loop's side --------------------------------------------------------------

    def start(self) -> None:
        """Catch the index up with the store (missing, damaged, behind): in the worker."""
        with self._lock:
            self._catch_up = True
            self._marked += 1  # searches wait for it
            self._wake()

    def put(self, note_id: str, path: str, revision: str, text: str | None, *,
            bulk: bool = False) -> None:
        """A note's latest state (text None: read it from the store when indexing).
        ``bulk``: part of an intake that may be a bulk -- a peer's, or the folder's new
        files taken in together (``_deferred``)."""
        with self._lock:
            if bulk:
                now = time.monotonic()
                if now >= self._defer_until:
                    self._defer_started = now
                    self._defer_notes.clear()
                if len(self._defer_notes) < DEFER_MIN_NOTES:
                    self._defer_notes.add(note_id)
                self._defer_until = now + DEFER_QUIET_S
            old = self._pending.get(note_id)
            if isinstance(old, tuple):
                self._pending_bytes -= held_bytes(old[2])
            # A bulk waits for its pause (``_deferred``): its texts are read from the store
            # then, not held meanwhile (a first sync's 10,000 notes would all be here).
            waits = bulk and len(self._defer_notes) >= DEFER_MIN_NOTES
            size = 0 if text is None else held_bytes(text)
            if text is not None and not waits and self._pending_bytes + size <= MAX_PENDING_BYTES:
                self._pending[note_id] = (path, revision, text)
                self._pending_bytes += size
            else:
                self._pending[note_id] = _READ
            self._marked += 1
            if note_id in self._first_mark:  # already waiting: coalesced, the worker knows
                return
            self._first_mark[note_id] = self._marked
            self._wake()

    def remove(self, note_id: str) -> None:
        with self._lock:
            old = self._pending.get(note_id)
            if isinstance(old, tuple):
                self._pending_bytes -= held_bytes(old[2])
            self._pending[note_id] = _REMOVE
            self._marked += 1
            self._first_mark.setdefault(note_id, self._marked)
            self._wake()

    def _wake(self) -> None:  # holding the lock
        if self._closing:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"search-index:{self.name}", daemon=True)
            self._thread.start()
        elif self._idle and self._deferred(time.monotonic()) is None:
            # wake it once: a burst of changes is one wake-up, not one each (and none while
            # a bulk arrives: it wakes itself when that pauses)
            self._idle = False
            self._has_work.notify()

    @property
    def behind(self) -> int:
        """Entries handed over and not yet committed to the index."""
        with self._lock:
            return self._marked - self._done

    async def wait_indexed(self, at_most_s: float | None = None) -> bool:
        """Wait (without holding the loop) until everything marked so far is indexed
        (``WAIT_S`` at most unless told)."""
        at_most_s = WAIT_S if at_most_s is None else at_most_s
        loop = asyncio.get_running_loop()
        with self._lock:
            target = self._marked
            if self._done >= target:
                return True
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append((target, loop, fut))
            self._wake_now()  # a paced note waits no longer: a search wants it
        try:
            await asyncio.wait_for(asyncio.shield(fut), at_most_s)
            return True
        except TimeoutError:
            logger.warning("search index of %s still %d behind after %.0f s: searching what is indexed",
                           self.name, self.behind, at_most_s)
            return False

    def flush(self, timeout: float = WAIT_S) -> bool:
        """The same, blocking (synchronous callers; on the loop only after ``wait_indexed``)."""
        with self._lock:
            target = self._marked
            if self._thread is None and self._done < target:
                self._wake()
            self._flushing += 1
            self._wake_now()
            try:
                return self._progress.wait_for(lambda: self._done >= target, timeout)
            finally:
                self._flushing -= 1

    def _wake_now(self) -> None:  # holding the lock
        if self._idle and self._pending:  # sleeping on paced notes: index them now
            self._idle = False
            self._has_work.notify()

    def search(self, q: str, *, limit: int = 20) -> list[SearchHit]:
        if self._reader is None:
            self._reader = SearchIndex(self.index_path)
        return self._reader.search(q, limit=limit)

    def linking_to(self, keys: list[str]) -> list[tuple[str, str, str]]:
        """(note id, path, key) of the indexed notes linking by one of ``keys``."""
        if self._reader is None:
            self._reader = SearchIndex(self.index_path)
        return self._reader.linking_to(keys)

    def count(self) -> int:
        if self._reader is None:
            self._reader = SearchIndex(self.index_path)
        return self._reader.count()

    def close(self, timeout: float = 30.0) -> None:
        """Index what is pending (bounded), stop the worker, close the connections."""
        self.flush(timeout)
        with self._lock:
            self._closing = True
            thread = self._thread
            self._has_work.notify_all()
        if thread is not None:
            thread.join(timeout)
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- the worker -------------------------------------------------------------------

    def _run(self) -> None:
        index: SearchIndex | None = None
        texts: StoreTexts | None = None
        lower_this_thread()  # the loop first (daemon/base/thread_priority.py)
        try:
            index = SearchIndex(self.index_path)
            texts = StoreTexts(self.store_path)
            while True:
                with self._lock:
                    idle = not self._pending and not self._catch_up
                if idle and self._since_release >= RELEASE_AFTER_NOTES:
                    self._release(index, texts)  # caught up after a burst: let go of what it used
                with self._lock:
                    waited = False
                    while not self._catch_up:
                        due_in = self._due_in(time.monotonic())
                        if due_in is not None and due_in <= 0:
                            break
                        if self._closing and due_in is None:
                            self._thread = None
                            return
                        self._idle, waited = True, True
                        woken = self._has_work.wait(IDLE_EXIT_S if due_in is None else due_in)
                        self._idle = False
                        if not woken and not self._pending and not self._catch_up:
                            self._thread = None  # a new entry starts a new worker
                            return
                    catch_up, self._catch_up = self._catch_up, False
                if waited and not self._closing:
                    time.sleep(GATHER_S)  # the rest of the burst that woke it joins this batch
                if catch_up:
                    self._compare(index, texts)
                with self._lock:
                    if not catch_up and self._deferred(time.monotonic()) is not None:
                        # The burst became a bulk since it looked (a peer's slices taken in
                        # while this thread gathered or waited for the lock): it waits for
                        # its pause too, instead of being indexed whole beside the intake.
                        continue
                    work, upto = self._take_due(time.monotonic())
                self._since_release += len(work)
                try:
                    self._index(index, texts, work)
                except Exception:
                    self.failures += 1
                    logger.exception("indexing %d notes of %s for search failed (caught up at next start)",
                                     len(work), self.name)
                indexed_at = time.monotonic()
                with self._lock:
                    if len(self._indexed_at) > 4096:  # only the recent ones matter
                        self._indexed_at = {k: t for k, t in self._indexed_at.items()
                                            if indexed_at - t < HOT_NOTE_INTERVAL_S}
                    for note_id in work:
                        self._indexed_at[note_id] = indexed_at
                    self._finished_locked(upto)
        except Exception:
            self.failures += 1
            logger.exception("the search indexer of %s stopped", self.name)
            with self._lock:
                self._thread = None
                self._first_mark.clear()
                self._finished_locked(self._marked)
        finally:
            if index is not None:
                index.close()
            if texts is not None:
                texts.close()
            # Its connections' page caches and the batches it read are freed now: give the
            # heap back (P7; ctypes lets go of the interpreter lock for the call).
            trim_heap()

    def _paced(self) -> bool:  # holding the lock
        """Whether recently indexed notes may wait (no search waits, not closing)."""
        return not (self._waiters or self._flushing or self._closing)

    def _deferred(self, now: float) -> float | None:  # holding the lock
        """Seconds the worker waits for a bulk to pause; None: no such wait. The bulk is
        over once no note of it came for ``DEFER_QUIET_S`` and ``busy`` (the folder's
        writer still writing what the bulk brought, its intake still taking files in) says
        no."""
        if not self._defer_notes or not self._paced():
            return None
        if len(self._defer_notes) < DEFER_MIN_NOTES or now - self._defer_started >= DEFER_MAX_S:
            return None
        until = self._defer_until
        if now >= until:
            if not self._still_busy():
                return None
            until = now + DEFER_QUIET_S  # look again then
        return min(until, self._defer_started + DEFER_MAX_S) - now

    def _still_busy(self) -> bool:
        busy = self.busy
        if busy is None:
            return False
        try:
            return bool(busy())
        except Exception:  # never let a probe stop the index
            return False

    def _due_in(self, now: float) -> float | None:  # holding the lock
        """Seconds until some pending entry is due (<= 0: now); None: nothing pending."""
        if not self._pending:
            return None
        if not self._paced():
            return 0.0
        deferred = self._deferred(now)
        if deferred is not None:
            self.deferred_waits += 1
            return deferred
        last = self._indexed_at
        return min(last.get(k, -HOT_NOTE_INTERVAL_S) + HOT_NOTE_INTERVAL_S for k in self._pending) - now

    def _take_due(self, now: float) -> tuple[dict[str, Entry], int]:  # holding the lock
        """The entries due now (all of them if a search waits) and the mark the index is
        complete up to once they are indexed (held below a waiting entry's first mark)."""
        if not self._paced() or not self._indexed_at:
            work, self._pending, self._pending_bytes = self._pending, {}, 0
            self._first_mark.clear()
            return work, self._marked
        since = now - HOT_NOTE_INTERVAL_S
        work = {}
        for note_id, entry in list(self._pending.items()):
            if self._indexed_at.get(note_id, since) <= since:
                work[note_id] = self._pending.pop(note_id)
                self._first_mark.pop(note_id, None)
                if isinstance(entry, tuple):
                    self._pending_bytes -= held_bytes(entry[2])
        waiting = min(self._first_mark.values(), default=None)
        return work, self._marked if waiting is None else min(self._marked, waiting - 1)

    def _release(self, index: SearchIndex, texts: StoreTexts) -> None:
        """Caught up after indexing ``RELEASE_AFTER_NOTES`` notes or more (a first sync, the
        catch-up at start): free both connections' page caches and give the heap back --
        the worker lingers ``IDLE_EXIT_S`` before it ends (P7: a restarted daemon held
        ~5 MB more until then; bench/history/rounds.md, issue 18 item 2)."""
        self._since_release = 0
        for db in (index.db, texts.db):
            with contextlib.suppress(Exception):
                db.execute("PRAGMA shrink_memory")
        trim_heap()
        self.releases += 1

    def _compare(self, index: SearchIndex, texts: StoreTexts) -> None:
        started = time.monotonic()
        with texts.reading():
            live = texts.live()
        again, gone = stale_notes(live, index.indexed())
        self._since_release += len(live)  # read and compared: what a release gives back
        if again or gone:
            logger.info("search index of %s: %d notes to index, %d to remove (%d live)",
                        self.name, len(again), len(gone), len(live))
        with self._lock:
            for nid in again:  # an entry the loop handed over meanwhile is as new or newer
                self._pending.setdefault(nid, _READ)
                self._first_mark.setdefault(nid, self._marked)
            for nid in gone:
                self._pending.setdefault(nid, _REMOVE)
                self._first_mark.setdefault(nid, self._marked)
        logger.debug("search index of %s compared in %.3f s", self.name, time.monotonic() - started)

    def _index(self, index: SearchIndex, texts: StoreTexts, work: dict[str, Entry]) -> None:
        items = list(work.items())
        at = 0
        while at < len(items):
            size = 0
            with index.batch(), texts.reading():
                n = 0
                puts: list[tuple[str, str, str, str]] = []
                while at < len(items) and n < BATCH_NOTES and size < BATCH_BYTES:
                    note_id, entry = items[at]
                    at += 1
                    n += 1
                    if entry is _REMOVE:
                        index.remove(note_id)
                    elif isinstance(entry, tuple):
                        path, revision, text = entry
                        puts.append((note_id, path, revision, text))
                        size += len(text)
                    else:
                        stored = texts.note(note_id)
                        if stored is None:
                            index.remove(note_id)
                        else:
                            puts.append((note_id, stored.path, stored.revision, stored.text))
                            size += len(stored.text)
                index.put_many(puts)
            self.batches += 1

    def _finished(self, upto: int) -> None:
        with self._lock:
            self._finished_locked(upto)

    def _finished_locked(self, upto: int) -> None:
        self._done = max(self._done, upto)
        self._progress.notify_all()
        ready = [w for w in self._waiters if w[0] <= self._done]
        self._waiters = [w for w in self._waiters if w[0] > self._done]
        for _target, loop, fut in ready:
            with contextlib.suppress(RuntimeError):  # that loop is closed
                loop.call_soon_threadsafe(_resolve, fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
