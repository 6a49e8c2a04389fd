"""A note's CRDT state as it stood at a snapshot, rebuilt from its full update.

pycrdt 0.14's ``Doc.from_snapshot`` (yrs ``encode_state_from_snapshot``) panics
(``src/doc.rs``, ``UnexpectedValue``) on some documents that hold merged concurrent
rewrites: found by R5 (docs/reliability.md), reproduced by
tests/unit/test_fork_at_snapshot.py. This module does the same thing in Python on the
Yjs v1 update format: every client's structs are cut at the snapshot's state vector (an
item the cut falls inside is split, a string at its UTF-16 offset as Yjs counts clocks),
and the delete set is the snapshot's. Applied to a fresh document, the result holds the
note exactly as it stood, with the same item ids: edits made on it merge back as
concurrent with everything written since.

Only what a note's text can hold is split (strings, deleted runs, GC and skip ranges,
JSON and Any lists); any other struct that the cut falls inside raises ``CrdtError``.
"""

from __future__ import annotations

from .errors import CrdtError

# The low five bits of an item's info byte: its content's kind (Yjs ``contentRefs``).
GC, DELETED, JSON, BINARY, STRING, EMBED, FORMAT, TYPE, ANY, DOC, SKIP = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
_HAS_ORIGIN, _HAS_RIGHT_ORIGIN, _HAS_PARENT_SUB = 0x80, 0x40, 0x20
_XML_ELEMENT, _XML_HOOK = 3, 5  # type refs followed by a name


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise CrdtError("truncated update")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def uint(self) -> int:
        value, shift = 0, 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
            if shift > 70:
                raise CrdtError("oversized varint in an update")

    def int_(self) -> None:  # a signed lib0 varint: skipped
        b = self.byte()
        while b & 0x80:
            b = self.byte()

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise CrdtError("truncated update")
        self.pos += n

    def buf(self) -> bytes:
        n = self.uint()
        start = self.pos
        self.skip(n)
        return self.data[start:self.pos]

    def any_(self) -> None:  # a lib0 ``Any`` value: skipped
        kind = self.byte()
        if kind in (127, 126, 121, 120):  # undefined, null, false, true
            return
        if kind == 125:
            self.int_()
        elif kind == 124:
            self.skip(4)
        elif kind in (123, 122):
            self.skip(8)
        elif kind in (119, 116):  # string, bytes
            self.buf()
        elif kind == 118:  # object
            for _ in range(self.uint()):
                self.buf()
                self.any_()
        elif kind == 117:  # array
            for _ in range(self.uint()):
                self.any_()
        else:
            raise CrdtError(f"unknown value type {kind} in an update")


def _uint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def _buf(data: bytes) -> bytes:
    return _uint(len(data)) + data


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _utf16_prefix(text: str, units: int) -> str:
    """The first ``units`` UTF-16 code units of ``text`` (half a pair becomes U+FFFD, as in Yjs)."""
    return text.encode("utf-16-le")[: 2 * units].decode("utf-16-le", errors="replace")


def decode_snapshot(snapshot: bytes) -> tuple[bytes, dict[int, int]]:
    """(the encoded delete set, the state vector) of an encoded (v1) snapshot."""
    r = _Reader(snapshot)
    for _ in range(r.uint()):
        r.uint()
        for _ in range(r.uint()):
            r.uint()
            r.uint()
    delete_set = snapshot[: r.pos]
    sv: dict[int, int] = {}
    for _ in range(r.uint()):
        client = r.uint()
        sv[client] = r.uint()
    return delete_set, sv


def _content_end(r: _Reader, kind: int) -> tuple[int, list[int]]:
    """Skip an item's content; returns its length in clocks and the offsets its elements end at
    (for lists that can be cut, relative to the content's start)."""
    start = r.pos
    if kind == DELETED:
        return r.uint(), []
    if kind == STRING:
        data = r.buf()
        try:
            return _utf16_len(data.decode("utf-8")), []
        except UnicodeDecodeError:
            raise CrdtError("string content that is not UTF-8") from None
    if kind in (JSON, ANY):
        count = r.uint()
        ends = []
        for _ in range(count):
            r.buf() if kind == JSON else r.any_()
            ends.append(r.pos - start)
        return count, ends
    if kind in (BINARY, EMBED):
        r.buf()
    elif kind == FORMAT:
        r.buf()
        r.buf()
    elif kind == TYPE:
        if r.uint() in (_XML_ELEMENT, _XML_HOOK):
            r.buf()
    elif kind == DOC:
        r.buf()
        r.any_()
    else:
        raise CrdtError(f"unknown content kind {kind} in an update")
    return 1, []


def _read_item(r: _Reader) -> tuple[int, int, int, int, list[int]]:
    """One struct of an update, read past: (info byte, kind, where its content starts,
    its length in clock units, the content's element ends -- empty for GC/skip)."""
    info = r.byte()
    kind = info & 0x1F
    if kind in (GC, SKIP):
        length = r.uint()
        return info, kind, r.pos, length, []
    if info & _HAS_ORIGIN:
        r.uint()
        r.uint()
    if info & _HAS_RIGHT_ORIGIN:
        r.uint()
        r.uint()
    if not info & (_HAS_ORIGIN | _HAS_RIGHT_ORIGIN):
        if r.uint() == 1:
            r.buf()
        else:
            r.uint()
            r.uint()
        if info & _HAS_PARENT_SUB:
            r.buf()
    head_end = r.pos
    length, ends = _content_end(r, kind)
    return info, kind, head_end, length, ends


def _cut_content(data: bytes, kind: int, keep: int, ends: list[int]) -> bytes:
    """The encoded content of an item's first ``keep`` clocks."""
    if kind == DELETED:
        return _uint(keep)
    if kind == STRING:
        r = _Reader(data)
        text = r.buf().decode("utf-8")
        return _buf(_utf16_prefix(text, keep).encode("utf-8"))
    if kind in (JSON, ANY):
        head = _Reader(data)
        head.uint()
        return _uint(keep) + data[head.pos : ends[keep - 1]]
    raise CrdtError(f"cannot cut content of kind {kind}")


def state_at(full_update: bytes, snapshot: bytes) -> bytes:
    """The part of ``full_update`` (a whole document, v1) that existed at ``snapshot``, with
    the snapshot's deletions: an update that makes a fresh document the note as it stood."""
    delete_set, sv = decode_snapshot(snapshot)
    r = _Reader(full_update)
    out_clients: list[bytes] = []
    for _ in range(r.uint()):
        count = r.uint()
        client = r.uint()
        clock = r.uint()
        limit = sv.get(client, 0)
        start_clock = clock
        kept: list[bytes] = []
        for _ in range(count):
            begin = r.pos
            info, kind, head_end, length, ends = _read_item(r)
            content_start = head_end
            if clock >= limit:
                clock += length
                continue
            if clock + length <= limit:
                kept.append(full_update[begin : r.pos])
            elif kind in (GC, SKIP):
                kept.append(bytes([info]) + _uint(limit - clock))
            else:
                content = full_update[content_start : r.pos]
                kept.append(full_update[begin:head_end] + _cut_content(content, kind, limit - clock, ends))
            clock += length
        if kept:
            out_clients.append(_uint(len(kept)) + _uint(client) + _uint(start_clock) + b"".join(kept))
    if r.pos > len(full_update):
        raise CrdtError("truncated update")
    return _uint(len(out_clients)) + b"".join(out_clients) + delete_set


def insertion_prefixes(update: bytes, client: int, clocks: list[int]) -> list[bytes]:
    """``state_at(update, cut)`` for a cut of ``client`` at each of ``clocks`` with no
    deletions, ``update`` read once: the parts of one local insertion (a group of appends,
    daemon/notes/append_batch.py) up to each clock. Any other shape of update is cut one
    ``state_at`` at a time."""
    from .snapshot_clock import cut_at

    r = _Reader(update)
    if r.uint() != 1:
        return [state_at(update, cut_at(client, c)) for c in clocks]
    count = r.uint()
    if r.uint() != client:
        return [state_at(update, cut_at(client, c)) for c in clocks]
    start_clock = clock = r.uint()
    items: list[tuple[int, int, int, int, int, int, int, list[int]]] = []
    for _ in range(count):
        begin = r.pos
        info, kind, head_end, length, ends = _read_item(r)
        items.append((clock, length, begin, head_end, r.pos, info, kind, ends))
        clock += length
    out = []
    for limit in clocks:
        kept: list[bytes] = []
        for at, length, begin, head_end, end, info, kind, ends in items:
            if at >= limit:
                break
            if at + length <= limit:
                kept.append(update[begin:end])
            elif kind in (GC, SKIP):
                kept.append(bytes([info]) + _uint(limit - at))
            else:
                content = _cut_content(update[head_end:end], kind, limit - at, ends)
                kept.append(update[begin:head_end] + content)
        clients = _uint(len(kept)) + _uint(client) + _uint(start_clock) + b"".join(kept) if kept else b""
        out.append(_uint(1 if kept else 0) + clients + b"\x00")
    return out
