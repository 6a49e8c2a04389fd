"""Chunk frame buffers reused from one frame to the next (issue 14, P9).

Every CHUNK frame is about a MiB. Allocated fresh for each frame, a buffer is zeroed by
``bytearray(n)`` and faults its pages in again (glibc hands a freed MiB back to the OS and
the next one is fresh pages): on the sender that was about half of its ``blob-read``
thread's CPU, and a memset of every byte; on the receiver the same for its channel thread
(bench/history/rounds.md, "P9 round 6" and "P9 round 7"). A ``FramePool`` keeps a few buffers of
the largest frame's size and hands out views of them:

- ``take(n)`` is a ``memoryview`` of ``n`` bytes: a kept buffer if one is free (its old
  bytes are there until overwritten: the caller fills all ``n``), else a new one. The view
  starts where its byte ``lead`` falls on a page boundary: a received CHUNK's bytes (behind
  a header of ``lead`` bytes) are then aligned for a direct write straight from the buffer
  (``sync/direct_io.py``: no copy into an aligned one).
- ``give(view)`` takes it back once the bytes are written (sent, or on disk and hashed).
  It releases ``view`` and keeps the buffer only if nothing else still holds a view of it
  (a transport that kept the bytes to send later, a frame still queued): a buffer is never
  reused while anyone can still read it -- it is then simply left to the garbage collector.
  A bytearray with a view into it cannot be resized, and that is the test.
- ``clear()`` drops the kept ones; ``wait_or_clear(get)`` does so once its user has waited
  ``IDLE_S`` for its next piece of work (memory after a sync stays low).

Only views are handed out, never the buffers themselves, so a view is the only way anyone
can hold on to one. Thread-safe: the receiver's channel thread takes, its main loop gives.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from stet.sync.direct_io import ALIGN, address

T = TypeVar("T")
IDLE_S = 2.0  # nothing to send or write for this long: the kept buffers go


class FramePool:
    def __init__(self, size: int, keep: int) -> None:
        self.size = size  # the largest frame
        self.keep = keep  # buffers kept at most
        self.lead = 0  # the bytes before the part of a frame to align (a CHUNK's header)
        self._room = size + ALIGN  # every kept buffer's length: a frame at any alignment
        self._free: list[tuple[bytearray, int]] = []  # (buffer, its address)
        self._lock = threading.Lock()
        self.made = 0  # buffers allocated (for tests and measurements)
        self.reused = 0

    def take(self, length: int) -> memoryview:
        """A writable view of ``length`` bytes (contents undefined: fill all of them)."""
        if length > self.size:
            self.made += 1
            return memoryview(bytearray(length))
        with self._lock:
            kept = self._free.pop() if self._free else None
        if kept is None:
            self.made += 1
            buf = bytearray(self._room + 1)  # one byte of room, for ``_unshared``'s resize
            del buf[-1]
            at = _address(buf)
        else:
            self.reused += 1
            buf, at = kept
        start = -(at + self.lead) % ALIGN
        return memoryview(buf)[start:start + length]

    def give(self, view: memoryview) -> bool:
        """``view`` (from ``take``) is done with; True if its buffer is kept for reuse."""
        buf = view.obj
        if not isinstance(buf, bytearray) or len(buf) != self._room:
            return False  # not one of ours (a frame of the main link, an oversized one)
        try:
            view.release()
        except BufferError:  # someone made a view of this view and holds it
            return False
        if not _unshared(buf):
            return False
        at = _address(buf)
        with self._lock:
            if len(self._free) >= self.keep:
                return False
            self._free.append((buf, at))
        return True

    def clear(self) -> None:
        with self._lock:
            self._free.clear()

    async def wait_or_clear(self, get: Callable[[], Awaitable[T]]) -> T:
        """``await get()``; if nothing comes within ``IDLE_S``, the kept buffers go first
        (``get`` is called again: it must be safe to cancel, as ``Queue.get`` and
        ``Event.wait`` are)."""
        try:
            return await asyncio.wait_for(get(), IDLE_S)
        except TimeoutError:
            self.clear()
            return await get()

    def kept(self) -> int:
        with self._lock:
            return len(self._free)


def _address(buf: bytearray) -> int:
    """Where ``buf``'s bytes start (stable: a kept buffer is never resized past its room)."""
    with memoryview(buf) as view:  # the export ends with the block
        at = address(view)
    assert at is not None  # a bytearray is writable and contiguous
    return at


def _unshared(buf: bytearray) -> bool:
    """Whether no view of ``buf`` is alive: resizing a bytearray with one raises."""
    try:
        buf.append(0)  # within the room ``take`` made: no reallocation
    except BufferError:
        return False
    del buf[-1]
    return True
