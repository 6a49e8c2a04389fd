"""Attachment transfer frames and per-link credit (SPEC §3.14): bytes in, bytes out.

One websocket binary message = one frame. Every frame starts ``b"A1"`` (the note
protocol's start ``b"S1"``, so one link carries both) and a type byte::

    REQUEST  A1 | 1 | vault | sha256 (32) | offset u64 | total u64
             "send me this blob from ``offset``" (0: from the start; a resume after a
             cut asks from what it already holds). ``total``: the size the index says.
    CHUNK    A1 | 2 | vault | sha256 (32) | offset u64 | total u64 | bytes (≤ 1 MiB)
    MISSING  A1 | 3 | vault | sha256 (32) | offset u64 | total u64 | reason (UTF-8, ≤ 256)
             the sender does not hold it (or will not send it): ask someone else later.
    CREDIT   A1 | 4 | amount u64
             the receiver may take ``amount`` more chunk bytes on this link.

``vault`` is one length byte and 1..64 characters of ``A-Z a-z 0-9 _ -``. Integers are big endian.
Decoding is strict and bounded: anything malformed or over the caps raises
``ProtocolError`` (the caller closes the link), never another exception.

Credit: a sender sends chunk bytes only while it holds credit (``SendCredit``); the
receiver grants more as it writes what it got (``ReceiveCredit``), so at most one
window of attachment bytes is in flight or buffered per link, and frames of notes
(which need no credit) are never stuck behind a gigabyte of attachment.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

from .errors import StetError

MAGIC = b"A1"
REQUEST, CHUNK, MISSING, CREDIT = 1, 2, 3, 4
MAX_CHUNK = 1 << 20  # 1 MiB
MAX_VAULT = 64
MAX_REASON = 256
MAX_TOTAL = 1 << 62
_VAULT_RE = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_VAULT_BYTES_RE = re.compile(rb"[A-Za-z0-9_-]{1,64}\Z")
_HEAD = struct.Struct(">32sQQ")  # sha256, offset, total
MAX_FRAME = 3 + 1 + MAX_VAULT + _HEAD.size + MAX_CHUNK
DEFAULT_WINDOW = 16 * MAX_CHUNK


class ProtocolError(StetError):
    code = "bad_request"


@dataclass(frozen=True, slots=True)
class BlobFrame:
    """REQUEST, CHUNK or MISSING."""

    type: int
    vault: str
    sha256: str  # lowercase hex
    offset: int
    total: int
    # CHUNK: the bytes (a view into the received frame: a megabyte is not copied to be
    # written); MISSING: the reason (UTF-8)
    data: bytes | memoryview = b""

    @property
    def end(self) -> int:
        """Where a CHUNK's bytes end in the blob."""
        return self.offset + len(self.data) if self.type == CHUNK else self.offset


@dataclass(frozen=True, slots=True)
class CreditFrame:
    amount: int


def _vault_bytes(vault: str) -> bytes:
    raw = vault.encode("ascii") if _VAULT_RE.match(vault) else b""
    if not raw:
        raise ProtocolError(f"vault id must be 1..{MAX_VAULT} of A-Z a-z 0-9 _ -")
    return raw


def _sha_bytes(sha256: str) -> bytes:
    try:
        raw = bytes.fromhex(sha256)
    except ValueError:
        raw = b""
    if len(raw) != 32 or raw.hex() != sha256:
        raise ProtocolError("sha256 must be 64 lowercase hex digits")
    return raw


def _check_range(offset: int, total: int, length: int) -> None:
    if not (0 <= offset <= total <= MAX_TOTAL) or offset + length > total:
        raise ProtocolError(f"bytes {offset}..{offset + length} do not fit a blob of {total}")


def _encode(type_: int, vault: str, sha256: str, offset: int, total: int, data: bytes) -> bytes:
    v = _vault_bytes(vault)
    return MAGIC + bytes([type_, len(v)]) + v + _HEAD.pack(_sha_bytes(sha256), offset, total) + data


def encode_request(vault: str, sha256: str, offset: int, total: int) -> bytes:
    _check_range(offset, total, 0)
    return _encode(REQUEST, vault, sha256, offset, total, b"")


def encode_chunk(vault: str, sha256: str, offset: int, total: int, data: bytes) -> bytes:
    if len(data) > MAX_CHUNK:
        raise ProtocolError(f"a chunk holds at most {MAX_CHUNK} bytes")
    if not data and offset != total:
        raise ProtocolError("an empty chunk is only the end of an empty blob")
    _check_range(offset, total, len(data))
    return _encode(CHUNK, vault, sha256, offset, total, data)


def read_chunk_into(vault: str, sha256: str, offset: int, total: int, length: int,
                    readinto: Callable[[memoryview], int],
                    buffer: Callable[[int], memoryview] | None = None) -> bytearray | memoryview:
    """A CHUNK frame of ``length`` bytes whose bytes ``readinto`` puts straight behind the
    header (a file's ``readinto``): the megabyte is not copied again to frame it. Raises
    ``OSError`` if fewer bytes came. ``buffer(n)``: where the frame's ``n`` bytes go (a
    reused buffer's view, filled entirely here); by default a new ``bytearray``."""
    if length > MAX_CHUNK:
        raise ProtocolError(f"a chunk holds at most {MAX_CHUNK} bytes")
    if not length and offset != total:
        raise ProtocolError("an empty chunk is only the end of an empty blob")
    _check_range(offset, total, length)
    v = _vault_bytes(vault)
    head = MAGIC + bytes([CHUNK, len(v)]) + v + _HEAD.pack(_sha_bytes(sha256), offset, total)
    frame: bytearray | memoryview = (bytearray(len(head) + length) if buffer is None
                                     else buffer(len(head) + length))
    frame[:len(head)] = head
    view = memoryview(frame)
    try:
        got = 0
        while got < length:
            n = readinto(view[len(head) + got:])
            if not n:
                raise OSError(f"blob {sha256[:12]} ended early at {offset + got}")
            got += n
    finally:
        view.release()
    return frame


def encode_missing(vault: str, sha256: str, reason: str, offset: int = 0, total: int = 0) -> bytes:
    raw = reason.encode("utf-8")[:MAX_REASON]
    _check_range(offset, total, 0)
    return _encode(MISSING, vault, sha256, offset, total, raw)


def encode_credit(amount: int) -> bytes:
    if not 0 < amount <= MAX_TOTAL:
        raise ProtocolError("credit must be positive")
    return MAGIC + bytes([CREDIT]) + struct.pack(">Q", amount)


def is_attachment_frame(data: bytes) -> bool:
    return data[:2] == MAGIC


def decode(data: bytes | bytearray | memoryview) -> BlobFrame | CreditFrame:
    if len(data) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(data)} bytes is over the cap")
    if len(data) < 3 or data[:2] != MAGIC:
        raise ProtocolError("not an attachment frame")
    type_ = data[2]
    if type_ == CREDIT:
        if len(data) != 11:
            raise ProtocolError("bad credit frame")
        (amount,) = struct.unpack(">Q", data[3:11])
        if not 0 < amount <= MAX_TOTAL:
            raise ProtocolError("credit must be positive")
        return CreditFrame(amount)
    if type_ not in (REQUEST, CHUNK, MISSING):
        raise ProtocolError(f"unknown attachment frame type {type_}")
    if len(data) < 4:
        raise ProtocolError("truncated frame")
    vlen = data[3]
    start = 4 + vlen
    if not 0 < vlen <= MAX_VAULT or len(data) < start + _HEAD.size:
        raise ProtocolError("truncated frame")
    vault_raw = bytes(data[4:start])
    if _VAULT_BYTES_RE.match(vault_raw) is None:
        raise ProtocolError("vault id has characters outside A-Z a-z 0-9 _ -")
    raw_sha, offset, total = _HEAD.unpack_from(data, start)
    body: bytes | memoryview = (memoryview(data)[start + _HEAD.size:] if type_ == CHUNK
                                else bytes(data[start + _HEAD.size:]))
    if type_ == REQUEST:
        if body:
            raise ProtocolError("a request carries no bytes")
        _check_range(offset, total, 0)
    elif type_ == CHUNK:
        if len(body) > MAX_CHUNK:
            raise ProtocolError("chunk over 1 MiB")
        if not body and offset != total:
            raise ProtocolError("an empty chunk is only the end of an empty blob")
        _check_range(offset, total, len(body))
    else:
        if len(body) > MAX_REASON:
            raise ProtocolError("reason too long")
        _check_range(offset, total, 0)
        try:
            bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("reason is not UTF-8") from None
    return BlobFrame(type_, vault_raw.decode("ascii"), raw_sha.hex(), offset, total, body)


def chunk_ranges(total: int, offset: int = 0, chunk: int = MAX_CHUNK) -> list[tuple[int, int]]:
    """``(offset, length)`` of the chunks that send bytes ``offset..total`` (an empty blob
    is one empty chunk)."""
    if total == 0:
        return [(0, 0)]
    return [(o, min(chunk, total - o)) for o in range(offset, total, chunk)]


class SendCredit:
    """The sending side of one link: chunk bytes may go only while credit lasts."""

    def __init__(self, initial: int = DEFAULT_WINDOW) -> None:
        self.available = initial

    def can_send(self, length: int) -> bool:
        # An empty chunk (the end of an empty blob) costs nothing.
        return length <= self.available

    def spend(self, length: int) -> None:
        if length > self.available:
            raise ProtocolError(f"sending {length} bytes with {self.available} of credit")
        self.available -= length

    def grant(self, amount: int) -> None:
        if amount <= 0:
            raise ProtocolError("credit must be positive")
        self.available = min(self.available + amount, MAX_TOTAL)


class ReceiveCredit:
    """The receiving side: what the peer may still send, and when to grant it more.

    The window starts as the sender's initial credit (both sides use the same default).
    ``received`` refuses a sender that overruns its credit (a protocol violation: close the
    link). ``consumed`` (the bytes were written to disk) returns credit to grant once at
    least half a window has been freed, so credit frames stay rare.
    """

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self.window = window
        self.outstanding = window  # what the sender may send without hearing from us
        self.unacked = 0  # consumed, not yet granted back

    def received(self, length: int) -> None:
        if length > self.outstanding:
            raise ProtocolError(f"the peer sent {length} bytes with {self.outstanding} of credit left")
        self.outstanding -= length

    def consumed(self, length: int) -> int:
        """Returns an amount to send as a CREDIT frame now (0: not yet)."""
        self.unacked += length
        if self.unacked < max(1, self.window // 2):
            return 0
        grant, self.unacked = self.unacked, 0
        self.outstanding += grant
        return grant
