"""Writing big files past the page cache (``O_DIRECT``), for attachment bytes (SPEC §3.14).

A buffered ``write`` copies every byte into a freshly allocated page-cache page, and the
kernel writes it out later: on the machines measured (P9, a VM on ext4) that copy was the
receiver's largest cost -- about 2.3 CPU-seconds of kernel time per GB, and a gigabyte of
dirty pages that a note's ``fsync`` then waits behind. ``O_DIRECT`` hands the user buffer to
the disk instead (0.3 CPU-seconds per GB, and the disk ran 3x faster: ``dd`` 1 GiB, 7.5 s
buffered + fsync against 2.1 s direct).

``O_DIRECT`` wants the file offset, the length and the memory aligned (``ALIGN`` covers
every common logical block size), so:

- ``DirectWriter`` takes a stream of bytes at increasing offsets: the unaligned head up to
  the first ``ALIGN`` boundary and the unaligned tail after the last go through the
  ordinary descriptor, the aligned middle is gathered in a page-aligned buffer (``BUFFER``
  bytes, reused by the next writer) and written through the direct one -- or, when a
  piece's bytes already sit at an aligned address (a received chunk in a buffer laid out
  for it: ``daemon/peers/blobs/frame_buffers.py``), written direct from where they are, no copy.
- ``copy_direct`` copies a whole file the same way, reading it direct too.

Where the file system or the kernel will not (``open`` or the first write refuses with
``EINVAL``, e.g. tmpfs), everything goes through the ordinary descriptor: same bytes, the
old cost. ``enabled = False`` turns it off (tests of the fallback), and so does the
environment variable ``STET_DIRECT_IO=0`` at start (a file system whose direct I/O
misbehaves; a before/after measurement). Every call writes
everything it was given before it returns: a file is never left with bytes held back.

Blocking file I/O: the daemon runs these in worker threads.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

ALIGN = 4096
# Bytes gathered per direct write (and read), per thread: one chunk. A note saved during a
# transfer waits in the disk's queue behind these writes: 4 MiB ones made P1 during P9's
# 1 GB transfer ~20-50 ms slower at the median than 1 MiB ones, for no gain in speed.
BUFFER = 1 << 20
O_DIRECT: int = getattr(os, "O_DIRECT", 0)
_REFUSED = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP)

enabled = os.environ.get("STET_DIRECT_IO", "1") != "0"  # False: never direct


_free: list[mmap.mmap] = []  # buffers not in use (one per direct I/O at once, at most)
_free_lock = threading.Lock()


def _take() -> mmap.mmap:
    """A page-aligned buffer (an anonymous mapping is page-aligned), reused: the daemon's
    memory holds one per direct write or copy under way, not one per worker thread."""
    with _free_lock:
        if _free:
            return _free.pop()
    return mmap.mmap(-1, BUFFER)


def _give(buf: mmap.mmap) -> None:
    with _free_lock:
        _free.append(buf)


def open_direct(path: Path | str, flags: int) -> int | None:
    """A descriptor of ``path`` with ``O_DIRECT`` added to ``flags`` (never following a
    symlink), or None where direct I/O is off or not supported there."""
    if not enabled or not O_DIRECT:
        return None
    try:
        return os.open(path, flags | O_DIRECT | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno in _REFUSED:
            return None
        raise


def address(view: memoryview) -> int | None:
    """Where ``view``'s bytes start in memory; None for a read-only view (``ctypes`` can
    only point into a writable one)."""
    if view.readonly or not view.c_contiguous:
        return None
    pointer = ctypes.c_char.from_buffer(view)
    try:
        return ctypes.addressof(pointer)
    finally:
        del pointer  # the view's export ends with it


def _aligned(view: memoryview) -> bool:
    at = address(view)
    return at is not None and at % ALIGN == 0


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class DirectWriter:
    """Writes bytes at ``offset`` and on: through ``direct_fd`` where aligned, ``fd`` else.

    ``close`` it (also after an error: that returns its buffer): that writes what is
    gathered. ``direct_bytes``: how many went past the page cache."""

    def __init__(self, fd: int, direct_fd: int | None, offset: int) -> None:
        self.fd = fd
        self.direct_fd = direct_fd
        self.offset = offset  # where the next byte given goes
        self.direct_bytes = 0
        self.cached_bytes = 0  # written through the page cache (dirty until flushed)
        self._fill = 0  # bytes gathered in the buffer, for ``self.offset - self._fill`` on
        self._buf = _take() if direct_fd is not None else None
        self._held = self._buf  # returned at close

    def _cached(self, view: memoryview, offset: int) -> None:
        pwrite_all(self.fd, view, offset)
        self.cached_bytes += len(view)

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            buf = self._buf
            if buf is None:
                self._cached(view, self.offset)
                self.offset += len(view)
                return
            if self._fill == 0 and self.offset % ALIGN:
                n = min(len(view), ALIGN - self.offset % ALIGN)  # the unaligned head
                self._cached(view[:n], self.offset)
                self.offset += n
                view = view[n:]
                continue
            if self._fill == 0 and len(view) >= ALIGN and _aligned(view):
                n = len(view) - len(view) % ALIGN  # aligned where it is: no copy
                self._direct(view[:n], self.offset)
                self.offset += n
                view = view[n:]
                continue
            n = min(len(view), BUFFER - self._fill)
            buf[self._fill:self._fill + n] = view[:n]
            self._fill += n
            self.offset += n
            view = view[n:]
            if self._fill == BUFFER:
                self._flush()

    def _direct(self, view: memoryview, offset: int) -> None:
        """Write aligned bytes through the direct descriptor (refused: through the page
        cache, from now on)."""
        assert self.direct_fd is not None
        try:
            pwrite_all(self.direct_fd, view, offset)
            self.direct_bytes += len(view)
        except OSError as exc:
            if exc.errno not in _REFUSED:
                raise
            logger.info("direct writes refused here (%s): writing through the page cache", exc)
            self._buf = None  # from now on (the buffer is returned at close)
            self._cached(view, offset)

    def _flush(self) -> None:
        """Write the gathered bytes: the aligned part direct, an unaligned rest ordinarily."""
        buf, fill = self._buf, self._fill
        if buf is None or not fill:
            return
        start = self.offset - fill
        aligned = fill - fill % ALIGN
        self._fill = 0
        view = memoryview(buf)
        try:
            if aligned:
                self._direct(view[:aligned], start)
            if fill > aligned:
                self._cached(view[aligned:fill], start + aligned)
        finally:
            view.release()

    def close(self) -> None:
        try:
            self._flush()
        finally:
            if self._held is not None:
                _give(self._held)
                self._held = self._buf = None


def copy_direct(src: Path, fd: int, dst: Path) -> int | None:
    """Copy the file ``src`` into the empty file ``dst`` (open as ``fd``), reading and
    writing past the page cache; returns the bytes copied, or None (nothing done) where
    either side cannot do direct I/O."""
    src_fd = open_direct(src, os.O_RDONLY)
    if src_fd is None:
        return None
    try:
        dst_fd = open_direct(dst, os.O_WRONLY)
        if dst_fd is None:
            return None
        try:
            size = os.fstat(src_fd).st_size
            buf = _take()
            view = memoryview(buf)
            done = 0
            try:
                while done < size:
                    try:
                        n = os.preadv(src_fd, [buf], done)
                        if n <= 0:
                            raise OSError(errno.EIO, f"{src} ended at {done} of {size} bytes")
                        aligned = n - n % ALIGN
                        if aligned:
                            pwrite_all(dst_fd, view[:aligned], done)
                    except OSError as exc:
                        if exc.errno not in _REFUSED or done:
                            raise
                        return None  # refused at the first step: nothing written yet
                    if n > aligned:  # the end of the file (an unaligned size)
                        pwrite_all(fd, view[aligned:n], done + aligned)
                    done += n
                    if n % ALIGN:
                        break
            finally:
                view.release()
                _give(buf)
            if done != size:
                raise OSError(errno.EIO, f"{src} changed size while copied ({done} of {size} bytes)")
            return done
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
