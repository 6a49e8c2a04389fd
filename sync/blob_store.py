"""Content-addressed attachment blobs in the home (SPEC §3.14): ``blobs/ab/cdef…``.

A blob is named by the lowercase hex SHA-256 of its bytes, so one content is stored once
however many paths (or vaults) hold it. Every way in is streaming (never a whole file in
memory) and lands atomically:

- ``put_file`` / ``put_stream``: copied into ``blobs/tmp/`` while hashed, fsynced, the
  hash checked against what the caller expects (if it said), renamed to its name, the
  folder fsynced. A crash at any point leaves at most a temp file, removed at the next
  open; a name in the store always holds exactly the bytes it names.
- a *partial receive* (a peer sending chunks): ``blobs/partial/<sha>.partial`` grows by
  ``append`` at an offset that must equal its current size, so a transfer cut anywhere
  resumes from ``partial_size`` without starting over; ``finish`` checks size and hash and
  only then renames it into place. A partial is never visible under its hash.

All calls are blocking file I/O: the daemon runs them in a worker thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from . import direct_io
from .errors import StetError

logger = logging.getLogger(__name__)

CHUNK = 1 << 20  # read/write unit: 1 MiB, never more of a file in memory at once
WRITE_BEHIND = 8 * CHUNK  # a partial receive is flushed to disk every this many bytes (flush_partial)
_SHA_RE = re.compile(r"[0-9a-f]{64}\Z")
# The home is private (SPEC R4: folders 0700, files 0600). The store makes its folders and
# files so from the start: made wider (0755 shards, 0444 blobs, as before), every CLI call
# after the daemon ran fixed them and said so ("made N item(s) ... private", issue 33).
FOLDER_MODE = 0o700
FILE_MODE = 0o600


class BlobError(StetError):
    code = "bad_request"


class BlobMismatch(BlobError):
    """The bytes do not hash (or size) to what was announced: nothing was stored."""


def check_sha(sha256: str) -> str:
    if not isinstance(sha256, str) or _SHA_RE.match(sha256) is None:
        raise BlobError(f"not a SHA-256 (64 lowercase hex digits): {sha256!r}")
    return sha256


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


@dataclass(frozen=True, slots=True)
class BlobInfo:
    sha256: str
    size: int
    added: bool  # False: the store already held this content (deduplicated)


class BlobStore:
    """The blobs of one home. Safe to use from several threads for different blobs."""

    def __init__(self, root: Path, *, clean: bool = True) -> None:
        """``clean=False``: leave ``tmp/`` alone until ``clean_tmp`` (a daemon opens its
        blob store before it holds the home's lock; cleaning then would delete another,
        running daemon's writes in progress)."""
        self.root = root
        self.direct_bytes = 0  # received bytes written past the page cache (direct_io)
        self.unflushed: dict[str, int] = {}  # sha256 -> bytes of its partial in the page cache, not flushed
        # (st_dev, st_ino) of store files ``unshare`` left to the vault's files that shared
        # them: those files had the store's mode (``unsharing.repair_shared_inodes``).
        self.unshared_inodes: set[tuple[int, int]] = set()
        self.tmp_dir = root / "tmp"
        self.partial_dir = root / "partial"
        for d in (self.root, self.tmp_dir, self.partial_dir):
            d.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
        if clean:
            self.clean_tmp()

    def clean_tmp(self) -> None:
        """Temp files are only ever a write in progress: leftovers are a crash's."""
        for entry in os.scandir(self.tmp_dir):
            try:
                os.unlink(entry.path)
                logger.info("removed an unfinished blob write %s", entry.name)
            except FileNotFoundError:
                pass

    # -- names ---------------------------------------------------------------------------

    def path_of(self, sha256: str) -> Path:
        sha = check_sha(sha256)
        return self.root / sha[:2] / sha[2:]

    def has(self, sha256: str) -> bool:
        return self.path_of(sha256).is_file()

    def size(self, sha256: str) -> int:
        """The blob's size; ``FileNotFoundError`` if the store does not hold it."""
        return os.stat(self.path_of(sha256)).st_size

    def open(self, sha256: str) -> BinaryIO:
        """The blob for reading (the caller closes it)."""
        return open(self.path_of(sha256), "rb")

    def read_chunks(self, sha256: str, offset: int = 0, chunk: int = CHUNK) -> Iterator[bytes]:
        with self.open(sha256) as f:
            f.seek(offset)
            while data := f.read(chunk):
                yield data

    def read_range(self, sha256: str, offset: int, length: int) -> bytes:
        """At most ``length`` bytes from ``offset`` (a chunk for a peer)."""
        with self.open(sha256) as f:
            f.seek(offset)
            return f.read(length)

    def all(self) -> Iterator[str]:
        for top in sorted(os.scandir(self.root), key=lambda e: e.name):
            if len(top.name) != 2 or not top.is_dir(follow_symlinks=False):
                continue
            for entry in sorted(os.scandir(top.path), key=lambda e: e.name):
                sha = top.name + entry.name
                if _SHA_RE.match(sha):
                    yield sha

    def verify(self, sha256: str) -> bool:
        """Whether the blob's bytes still hash to its name (reads it all, streaming)."""
        with open(self.path_of(sha256), "rb", buffering=0) as f:
            return hashlib.file_digest(f, "sha256").hexdigest() == sha256

    def remove(self, sha256: str) -> bool:
        path = self.path_of(sha256)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    def remove_unreferenced(self, referenced: set[str], *, older_than: float, now: float) -> list[str]:
        """Remove blobs nobody refers to any more (``referenced``: every vault's live
        attachments and versions), but only those last written before ``older_than``
        seconds ago: a blob just stored for a change not yet recorded is never taken."""
        removed = []
        for sha in self.all():
            if sha in referenced:
                continue
            try:
                if now - os.stat(self.path_of(sha)).st_mtime < older_than:
                    continue
            except FileNotFoundError:
                continue
            if self.remove(sha):
                removed.append(sha)
        if removed:
            logger.info("removed %d blobs no attachment or version holds", len(removed))
        return removed

    # -- a store file that is also a vault's file (older Stet) --------------------------------

    def shared(self) -> list[str]:
        """Blobs whose file has other names: a vault's file that an older Stet landed as a
        hard link of it, and a crash kept from getting a copy of its own (issue 37)."""
        out = []
        for sha in self.all():
            with contextlib.suppress(FileNotFoundError):
                if os.stat(self.path_of(sha)).st_nlink > 1:
                    out.append(sha)
        return out

    def unshare(self, sha256: str) -> bool:
        """Give the store its own copy of a blob whose file has other names (``shared``).

        The bytes are copied to a new file, hashed, and renamed over the store's name, so
        the other names (a vault's files) keep the old inode to themselves. Bytes that no
        longer hash to the name (written to through a vault's file) are not kept: the
        store's name goes (the blob is fetched or taken in again when needed) and False is
        returned. True: the store holds the blob, alone (also when nothing shared it)."""
        path = self.path_of(sha256)
        try:
            before = os.stat(path)
        except FileNotFoundError:
            return False
        if before.st_nlink <= 1:
            return True
        self.unshared_inodes.add((before.st_dev, before.st_ino))
        tmp = self.tmp_dir / f"{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            try:
                if direct_io.copy_direct(path, fd, tmp) is None:
                    with open(path, "rb") as src:
                        while data := src.read(CHUNK):
                            _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            with open(tmp, "rb", buffering=0) as f:
                if hashlib.file_digest(f, "sha256").hexdigest() != sha256:
                    logger.warning("blob %s was written to through a vault's file that shared it: "
                                   "dropped from the store", sha256[:12])
                    if os.stat(path).st_ino == before.st_ino:
                        os.unlink(path)
                    return False
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return True

    # -- whole files ------------------------------------------------------------------------

    def put_file(self, src: Path, *, expected: str | None = None, max_bytes: int | None = None) -> BlobInfo:
        """Store the bytes of ``src`` (never following a symlink), streaming."""
        fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise BlobError(f"{src} is not a regular file")
            return self.put_stream(iter(lambda: f.read(CHUNK), b""), expected=expected, max_bytes=max_bytes)

    def put_bytes(self, data: bytes, *, expected: str | None = None) -> BlobInfo:
        return self.put_stream([data[i:i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""],
                               expected=expected)

    def put_stream(self, chunks: Iterable[bytes], *, expected: str | None = None,
                   max_bytes: int | None = None) -> BlobInfo:
        """Hash and write ``chunks`` to a temp file; land it under its hash when complete."""
        if expected is not None:
            check_sha(expected)
        tmp = self.tmp_dir / f"{secrets.token_hex(8)}.tmp"
        h = hashlib.sha256()
        size = 0
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                for chunk in chunks:
                    size += len(chunk)
                    if max_bytes is not None and size > max_bytes:
                        raise BlobError(f"over the size limit of {max_bytes} bytes", code="too_large",
                                        limit=max_bytes)
                    h.update(chunk)
                    _write_all(fd, chunk)
                os.fsync(fd)
            finally:
                os.close(fd)
            sha = h.hexdigest()
            if expected is not None and sha != expected:
                raise BlobMismatch(f"the bytes hash to {sha}, not the expected {expected}")
            added = self._land(tmp, sha)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return BlobInfo(sha, size, added)

    def _land(self, src: Path, sha: str) -> bool:
        """Rename a complete, fsynced, verified file to its name (unless already there)."""
        final = self.path_of(sha)
        if final.is_file():
            return False
        new_dir = not final.parent.is_dir()
        final.parent.mkdir(exist_ok=True, mode=FOLDER_MODE)
        os.chmod(src, FILE_MODE)
        os.replace(src, final)
        _fsync_dir(final.parent)
        if new_dir:
            _fsync_dir(self.root)  # the ab/ folder is new
        return True

    # -- partial receive (resumable) ----------------------------------------------------------

    def _partial_path(self, sha256: str) -> Path:
        return self.partial_dir / f"{check_sha(sha256)}.partial"

    def partial_size(self, sha256: str) -> int:
        """How many bytes of ``sha256`` were received so far (0: none): resume from here."""
        try:
            return os.stat(self._partial_path(sha256)).st_size
        except FileNotFoundError:
            return 0

    def partials(self) -> dict[str, int]:
        out = {}
        for entry in os.scandir(self.partial_dir):
            sha = entry.name.removesuffix(".partial")
            if entry.name.endswith(".partial") and _SHA_RE.match(sha):
                out[sha] = entry.stat(follow_symlinks=False).st_size
        return out

    def _open_partial_at(self, sha256: str, offset: int, end: int, total: int) -> int:
        """The partial's descriptor for bytes ``offset:end``, after the checks every write of
        received chunks makes: the blob not complete yet, ``offset`` equal to what is held (no
        hole, no repeat), ``end`` within the announced ``total``. Refused: ``BlobError``."""
        if self.has(sha256):
            raise BlobError(f"blob {sha256} is already complete")
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self._partial_path(sha256), flags, 0o600)
        try:
            have = os.fstat(fd).st_size
            if offset != have:
                raise BlobError(f"chunk at offset {offset}, but {have} bytes are held: resume from {have}",
                                have=have)
            if end > total:
                raise BlobError(f"chunk ends at {end}, past the announced size {total}")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def append(self, sha256: str, offset: int, data: bytes, *, total: int) -> int:
        """Write a received chunk at ``offset``; returns the partial's new size.

        ``offset`` must equal what was received so far (``partial_size``): a chunk that
        would leave a hole, or that repeats bytes already held, is refused, so the file is
        always a prefix of the blob. ``total`` is the announced size, never exceeded.
        """
        fd = self._open_partial_at(sha256, offset, offset + len(data), total)
        try:
            os.lseek(fd, offset, os.SEEK_SET)
            _write_all(fd, data)
            return offset + len(data)
        finally:
            os.close(fd)

    def finish(self, sha256: str, total: int, *, digest: str | None = None) -> BlobInfo:
        """Verify a fully received partial and land it under its hash.

        A partial of the wrong size is left for more chunks (``BlobError``); one whose bytes
        do not hash to ``sha256`` is deleted (``BlobMismatch``: start over). ``digest``: the
        SHA-256 of the bytes as they were appended (the receiver hashed each chunk on its way
        to the file, ``PartialHash``), so a gigabyte is not read back from disk to verify it;
        without it the file is read and hashed here."""
        path = self._partial_path(sha256)
        self.unflushed.pop(sha256, None)  # the fsync below covers it
        if self.has(sha256):
            self.discard(sha256)
            return BlobInfo(sha256, self.size(sha256), False)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size != total:
                raise BlobError(f"{size} of {total} bytes received; not complete", have=size)
            if digest is None:
                digest = hashlib.file_digest(f, "sha256").hexdigest()
            os.fsync(f.fileno())
        if digest != sha256:
            self.discard(sha256)
            raise BlobMismatch(f"the received bytes hash to {digest}, not {sha256}; discarded")
        # The rename is the commit: before it the partial (complete, verified again by the
        # next finish) is all there is; after it, the blob under its name.
        added = self._land(path, sha256)
        if not added:
            self.discard(sha256)
        return BlobInfo(sha256, total, added)

    def append_run(self, sha256: str, offset: int, chunks: Sequence[bytes | memoryview], *, total: int,
                   hashing: PartialHash, hash_in: Executor | None = None) -> int:
        """``append`` each chunk in turn from ``offset`` (one call for several: one trip to a
        worker thread), feeding ``hashing`` the bytes written; returns the new size.

        The bytes go past the page cache where the file system allows (``direct_io``: the
        receiver's largest cost was copying them into it), the unaligned ends through it;
        all of them are in the file, and hashed, when this returns. ``hash_in``: a thread
        that hashes the run while this one writes it (both release the GIL; the write
        waits on the disk and the hash on a core, so the run takes the longer of the two,
        not their sum -- P9: about 0.9 + 1.0 s a gigabyte on this machine)."""
        if hash_in is None:
            hashing.catch_up(self, offset)
            return self._write_run(sha256, offset, chunks, total, hashing)
        hashed = hash_in.submit(hashing.feed, self, offset, chunks)
        try:
            end = self._write_run(sha256, offset, chunks, total, None)
        except BaseException:
            with contextlib.suppress(Exception):
                hashed.result()  # the chunks stay the caller's until hashed
            hashing.forget()  # it may hold bytes the file does not: read them from the file
            raise
        try:
            hashed.result()
        except BaseException:
            hashing.forget()
            raise
        return end

    def _write_run(self, sha256: str, offset: int, chunks: Sequence[bytes | memoryview], total: int,
                   hashing: PartialHash | None) -> int:
        path = self._partial_path(sha256)
        length = sum(len(c) for c in chunks)
        fd = self._open_partial_at(sha256, offset, offset + length, total)
        try:
            direct = direct_io.open_direct(path, os.O_WRONLY) if length >= direct_io.ALIGN else None
            writer = direct_io.DirectWriter(fd, direct, offset)
            try:
                try:
                    for data in chunks:
                        writer.write(data)
                        if hashing is not None:
                            hashing.update(data)
                finally:
                    writer.close()
            finally:
                if direct is not None:
                    os.close(direct)
            self.direct_bytes += writer.direct_bytes
            if writer.cached_bytes:
                self.unflushed[sha256] = self.unflushed.get(sha256, 0) + writer.cached_bytes
            return writer.offset
        finally:
            os.close(fd)

    def flush_partial(self, sha256: str) -> None:
        """Push what the partial holds to disk now (the receiver does every ``WRITE_BEHIND``
        bytes): a gigabyte left dirty in the page cache makes every other file's fsync on the
        disk -- a note saved meanwhile -- wait for it (ext4 commits them together). A partial
        already landed (or discarded) is nothing to do."""
        self.unflushed.pop(sha256, None)
        try:
            fd = os.open(self._partial_path(sha256), os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def discard(self, sha256: str) -> None:
        self.unflushed.pop(sha256, None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._partial_path(sha256))


class PartialHash:
    """The SHA-256 of a partial's bytes, kept as chunks are appended (``append_run``).

    It covers the first ``covered`` bytes. A receive that resumes a partial this object has
    not seen (written before a restart, or through another link) reads that prefix once
    (``catch_up``) and goes on from there."""

    def __init__(self, sha256: str) -> None:
        self.sha256 = check_sha(sha256)
        self.covered = 0
        self._h = hashlib.sha256()

    def catch_up(self, store: BlobStore, offset: int) -> None:
        """Make the hash cover exactly the partial's first ``offset`` bytes."""
        if offset == self.covered:
            return
        self._h, self.covered = hashlib.sha256(), 0
        if offset == 0:
            return
        with open(store._partial_path(self.sha256), "rb") as f:
            while self.covered < offset:
                data = f.read(min(CHUNK, offset - self.covered))
                if not data:
                    raise BlobError(f"the partial of {self.sha256} holds fewer than {offset} bytes")
                self._h.update(data)
                self.covered += len(data)

    def update(self, data: bytes | memoryview) -> None:
        self._h.update(data)
        self.covered += len(data)

    def forget(self) -> None:
        """Cover nothing: the next ``catch_up`` reads the partial's prefix from its file."""
        self._h, self.covered = hashlib.sha256(), 0

    def feed(self, store: BlobStore, offset: int, chunks: Sequence[bytes | memoryview]) -> None:
        """``catch_up`` to ``offset``, then ``update`` with each chunk (``append_run``'s
        hashing, run in a thread of its own beside the write)."""
        self.catch_up(store, offset)
        for data in chunks:
            self.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()
