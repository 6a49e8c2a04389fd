"""The blob store's own copy of blobs landed in a vault by hard link (SPEC §3.14, P9).

A received blob reaches its path as a hard link of the store's file (``attachment_disk``
``write_blob(link=True)``): its bytes are written once on the way in, and the file appears
at its path as soon as it is verified. The store must not change with the vault's file,
so right after, off the folder side's pass, ``BlobStore.unshare`` copies the bytes to a
file of the store's own (past the page cache) and renames it over the store's name --
verified by the stat taken at the landing, or by hash. One at a time, in a worker thread.

While blobs are arriving (``busy``: the transfers have one in flight or landing) the copies
wait, at most ``DEFER_MAX_S`` since the oldest waiting landing: a copy reads and writes the
whole blob again, on the same disk and cores the transfer needs, so done during a transfer
it slows the transfer it follows (P9). ``resume`` (the transfers went idle) lets them run.

Nothing is lost meanwhile: the peer that sent the blob still holds it. A ``kill -9``
before the copy leaves a store file with two links; ``start`` finds those (``shared``)
and unshares them, hashed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from stet.sync.attachment_plan import OnDisk
from stet.sync.blob_store import BlobStore

logger = logging.getLogger(__name__)
DEFER_MAX_S = 30.0  # a landing's own copy waits for the transfers at most this long


class Unsharing:
    def __init__(self, blobs: BlobStore, *, defer_max_s: float = DEFER_MAX_S) -> None:
        self.blobs = blobs
        self.busy: Callable[[], bool] = lambda: False  # blobs arriving now: the copies wait
        self.defer_max_s = defer_max_s
        self._idle = asyncio.Event()
        self._since: float | None = None  # when the oldest landing now waiting was queued
        self._queue: dict[str, tuple[int, int, int] | None] = {}  # sha256 -> the stat at landing
        self._task: asyncio.Task[None] | None = None
        self._scanned = False
        self.done = 0  # blobs given their own copy
        self.dropped = 0  # blobs written to through the vault first: not kept

    def start(self) -> None:
        """Once, with the home's lock held: what a crash left shared is unshared (hashed)."""
        if self._scanned:
            return
        self._scanned = True
        self._queue.setdefault("", None)  # the scan, first
        self._wake()

    def landed(self, sha256: str, written: OnDisk) -> None:
        """``write_blob`` linked the blob at a path; ``written``: the file's stat then."""
        self._queue[sha256] = (written.ino, written.size, written.mtime_ns)
        if self._since is None:
            self._since = time.monotonic()
        self._wake()

    def resume(self) -> None:
        """The transfers went idle: the waiting copies run now."""
        self._idle.set()

    def pending(self) -> int:
        return len(self._queue)

    async def wait_idle(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _wake(self) -> None:
        if self._task is None or self._task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not in the daemon's loop (a test): at the next call in it
                return
            self._task = loop.create_task(self._run(), name="blob-unsharing")

    async def _until_idle(self) -> None:
        """Wait while blobs arrive, up to ``defer_max_s`` after the oldest landing waiting."""
        while self.busy() and self._since is not None:
            left = self._since + self.defer_max_s - time.monotonic()
            if left <= 0:
                return
            self._idle.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), left)

    async def _run(self) -> None:
        while self._queue:
            if "" not in self._queue:  # the scan at start is not held back
                await self._until_idle()
            if not self._queue:
                break
            sha = next(iter(self._queue))
            expect = self._queue.pop(sha)
            try:
                if not sha:
                    for each in await asyncio.to_thread(self.blobs.shared):
                        self._queue.setdefault(each, None)
                    continue
                if await asyncio.to_thread(self.blobs.unshare, sha, expect):
                    self.done += 1
                else:
                    self.dropped += 1
            except OSError as exc:
                logger.warning("blob %s: the store's own copy not made: %s (tried again at start)",
                               sha[:12], exc)
        self._since = None  # all caught up: the next landing may wait its own full delay
