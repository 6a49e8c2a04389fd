"""Two devices that changed the same words while apart (issue 32, the peer case).

When a peer's catch-up arrives, the CRDT merges it character by character: two values
written over one word come out mixed (``1060`` from ``100`` and ``60``). Each daemon can do
better, because it can see all three texts in the merged document:

- its own text, as it was just before the peer's update;
- the peer's text, at the snapshot the peer sent with its update (its state vector and
  delete set when it built the update);
- the state both had in common: the items both had (the smaller clock of each client) with
  the deletions both had made.

The one merge rule (``text_merge.merge_texts``) over those three gives the readable text,
and the *repair* turns the merged document's text into it. The repair is made by a client
id derived from the merged state alone, on a copy of that state, so the two devices --
each repairing as it takes in the other's catch-up, from the same merged state -- make the
very same CRDT items, and receiving the other's repair changes nothing (the idea of the
deterministic first import, SPEC §3.7). The sides are keyed by device id, so both order
overlapping lines alike.

Where the sides overlapped, the repair also writes a *merge mark* into the document (a
root map next to the text, ``MARKS_NAME``): the devices and the snapshot each side's text
stood at. It travels with the repair to every peer, in catch-ups and live updates alike,
so a device that did not compute the merge itself (its peer had, and sent the result)
rebuilds the very same sides from the mark and records the overlap too; a device that
already holds a mark has recorded it, so neither a second sync nor a restart records it
again (docs/decisions/0002-peer-merge.md, "The overlap on every machine"). Who wrote each
side is kept beside the mark, under its own key, by the device that computed it with its
own client id: two devices computing it at once then write two values of one key (the map
keeps one), never two different items of one id.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pycrdt

from .errors import CrdtError
from .note_doc import TEXT_NAME, NoteDoc
from .state_vectors import read_varint as _varint
from .text_diff import diff_splices, to_byte_splices
from .text_merge import MergeResult, Side, merge_texts

DeleteSet = dict[int, list[tuple[int, int]]]  # client -> sorted, merged (clock, length)
StateVector = dict[int, int]


MARKS_NAME = "stet-merges"  # the root map of merge marks, beside the text
_MARK = "m/"  # + mark id: the mark (``MergeMark.encode``), written by the deterministic repair
_SOURCES = "s/"  # + mark id: who wrote each side, ``{device: source}`` as JSON
MAX_MARK_CHARS = 4 * 1024 * 1024  # a mark's snapshots: far below it


@dataclass(frozen=True, slots=True)
class MergeMark:
    """A merge of overlapping sides, as every device can rebuild it from the document: each
    side's device and the snapshot its text stood at, ordered by device."""

    sides: tuple[tuple[str, bytes], ...]

    def encode(self) -> str:
        return json.dumps([[key, base64.b64encode(snap).decode()] for key, snap in self.sides],
                          separators=(",", ":"))

    @property
    def id(self) -> str:
        return hashlib.sha256(self.encode().encode()).hexdigest()[:32]

    @staticmethod
    def decode(value: object) -> MergeMark:
        """A mark as stored; ``CrdtError`` for anything else (a peer's damaged document)."""
        if not isinstance(value, str) or len(value) > MAX_MARK_CHARS:
            raise CrdtError("a merge mark is a JSON string")
        try:
            raw = json.loads(value)
            sides = tuple((str(key), base64.b64decode(snap, validate=True)) for key, snap in raw)
        except (ValueError, TypeError, binascii.Error) as exc:
            raise CrdtError(f"bad merge mark: {exc}") from None
        if len(sides) < 2 or [k for k, _ in sides] != sorted({k for k, _ in sides}):
            raise CrdtError("a merge mark names two or more devices, in order, once each")
        return MergeMark(sides)


def mark_of(sides: Mapping[str, bytes]) -> MergeMark:
    return MergeMark(tuple(sorted(sides.items())))


@dataclass(frozen=True, slots=True)
class PeerMerge:
    """What the merge rule made of a peer's catch-up: the repair (None: the CRDT's text was
    already the merge) and the sides' texts, for the records; ``mark`` where they overlapped
    (the repair then writes it into the document)."""

    repair: bytes | None
    result: MergeResult
    own_text: str
    peer_text: str
    mark: MergeMark | None = None


@dataclass(frozen=True, slots=True)
class ReplayedMerge:
    """A merge mark's merge rebuilt from the document: each side's (device, text) in the
    mark's order, the rule's result over them, and who wrote each side where recorded."""

    mark: MergeMark
    sides: tuple[tuple[str, str], ...]
    result: MergeResult
    sources: dict[str, str]


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_snapshot(data: bytes) -> tuple[DeleteSet, StateVector]:
    """A v1 snapshot (``Snapshot.encode``): its delete set, then its state vector."""
    pos = 0
    ds: DeleteSet = {}
    clients, pos = _varint(data, pos)
    if clients > len(data):
        raise CrdtError("snapshot claims more clients than it has bytes")
    for _ in range(clients):
        client, pos = _varint(data, pos)
        ranges, pos = _varint(data, pos)
        if ranges > len(data):
            raise CrdtError("snapshot claims more ranges than it has bytes")
        got = ds.setdefault(client, [])
        for _ in range(ranges):
            clock, pos = _varint(data, pos)
            length, pos = _varint(data, pos)
            got.append((clock, length))
    sv: StateVector = {}
    count, pos = _varint(data, pos)
    if count > len(data):
        raise CrdtError("snapshot claims more entries than it has bytes")
    for _ in range(count):
        client, pos = _varint(data, pos)
        clock, pos = _varint(data, pos)
        sv[client] = clock
    return {c: _normal(r) for c, r in ds.items() if r}, sv


def encode_snapshot(ds: DeleteSet, sv: StateVector) -> bytes:
    """The canonical encoding (clients in order): equal states encode alike everywhere."""
    out = bytearray(_uvarint(len(ds)))
    for client in sorted(ds):
        out += _uvarint(client) + _uvarint(len(ds[client]))
        for clock, length in ds[client]:
            out += _uvarint(clock) + _uvarint(length)
    out += _uvarint(len(sv))
    for client in sorted(sv):
        out += _uvarint(client) + _uvarint(sv[client])
    return bytes(out)


def _normal(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for clock, length in sorted(ranges):
        if length <= 0:
            continue
        if out and clock <= out[-1][0] + out[-1][1]:
            start, size = out[-1]
            out[-1] = (start, max(size, clock + length - start))
        else:
            out.append((clock, length))
    return out


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][0] + a[i][1], b[j][0] + b[j][1])
        if lo < hi:
            out.append((lo, hi - lo))
        if a[i][0] + a[i][1] < b[j][0] + b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _contains(big: list[tuple[int, int]], small: list[tuple[int, int]]) -> bool:
    return _intersect(big, small) == small


def common_state(a: tuple[DeleteSet, StateVector], b: tuple[DeleteSet, StateVector]) -> bytes:
    """The snapshot of what both had: each client's smaller clock, the deletions both made."""
    (ds_a, sv_a), (ds_b, sv_b) = a, b
    sv = {c: min(sv_a[c], sv_b[c]) for c in sv_a.keys() & sv_b.keys() if min(sv_a[c], sv_b[c]) > 0}
    ds: DeleteSet = {}
    for client in ds_a.keys() & ds_b.keys():
        both = [(clock, min(length, sv.get(client, 0) - clock))
                for clock, length in _intersect(ds_a[client], ds_b[client]) if clock < sv.get(client, 0)]
        if both:
            ds[client] = both
    return encode_snapshot(ds, sv)


def common_of(snapshots: list[bytes]) -> bytes:
    """The snapshot of what all of ``snapshots`` had."""
    states = [decode_snapshot(s) for s in snapshots]
    common = encode_snapshot(*states[0])
    for state in states[1:]:
        common = common_state(decode_snapshot(common), state)
    return common


def includes(big: tuple[DeleteSet, StateVector], small: tuple[DeleteSet, StateVector]) -> bool:
    """Whether a replica at ``big`` has seen everything a replica at ``small`` had."""
    (ds_big, sv_big), (ds_small, sv_small) = big, small
    if any(clock > sv_big.get(client, 0) for client, clock in sv_small.items()):
        return False
    return all(_contains(ds_big.get(client, []), ranges) for client, ranges in ds_small.items())


def includes_snapshot(big: bytes, small: bytes) -> bool:
    """``includes`` of two encoded snapshots."""
    return includes(decode_snapshot(big), decode_snapshot(small))


def same_lines(a: str, b: str) -> bool:
    """Whether two texts hold the same lines, each as often, in any order: a CRDT's merge of
    inserts at one point and the merge rule's differ only in their order, both readable."""
    if a == b:
        return True
    if len(a) != len(b):
        return False
    return Counter(_lines(a)) == Counter(_lines(b))


def _lines(text: str) -> list[str]:
    return (text if text.endswith("\n") else text + "\n").splitlines(keepends=True)


def repair_client_id(merged_snapshot: bytes, mark: MergeMark | None = None) -> int:
    """The repair's client id: of the merged state and the mark it writes, so two devices
    make the same items only where they write the same content."""
    digest = hashlib.sha256(b"stet-peer-merge\0" + merged_snapshot
                            + (b"\0" + mark.encode().encode() if mark is not None else b"")).digest()
    return int.from_bytes(digest[:4], "big") | 1


def _marks_map(doc: pycrdt.Doc[Any]) -> pycrdt.Map[Any]:
    marks: pycrdt.Map[Any] = doc.get(MARKS_NAME, type=pycrdt.Map)
    return marks


def mark_ids(doc: NoteDoc) -> frozenset[str]:
    """The ids of the merge marks the document holds (cheap: no mark decoded)."""
    if MARKS_NAME not in doc.doc.keys():  # noqa: SIM118 - Doc.__iter__ is untyped
        return frozenset()
    return frozenset(k[len(_MARK):] for k in _marks_map(doc.doc).keys()  # noqa: SIM118 - untyped
                     if k.startswith(_MARK))


def replay_mark(doc: NoteDoc, mark_id: str) -> ReplayedMerge:
    """Mark ``mark_id``'s merge, rebuilt: each side's text at its snapshot, the rule over
    them from what they all had (the same texts and result the computing device had)."""
    marks = _marks_map(doc.doc)
    mark = MergeMark.decode(marks.get(_MARK + mark_id))
    sides = tuple((key, doc.fork_at(snap).text) for key, snap in mark.sides)
    base = doc.fork_at(common_of([snap for _, snap in mark.sides])).text
    result = merge_texts(base, [Side(text, key) for key, text in sides])
    sources: dict[str, str] = {}
    raw = marks.get(_SOURCES + mark_id)
    if isinstance(raw, str) and len(raw) <= MAX_MARK_CHARS:
        try:
            named = json.loads(raw)
        except ValueError:
            named = None
        if isinstance(named, dict):
            # (a source string is at most 256 characters on the wire: so here too)
            sources = {k: v[:256] for k, v in named.items() if isinstance(k, str) and isinstance(v, str)}
    return ReplayedMerge(mark, sides, result, sources)


def mark_here(doc: NoteDoc, mark: MergeMark, sources: Mapping[str, str]) -> bytes | None:
    """Write ``mark`` and who wrote its sides by this device's own client id: a merge only
    this device makes (a file or a ``baseRevision`` rewrite merged against a peer's change),
    so its peers learn of the overlap too. Returns the update."""
    marks = _marks_map(doc.doc)
    if marks.get(_MARK + mark.id) is not None:
        return None
    before = doc.state_vector()
    with doc.doc.transaction():
        marks[_MARK + mark.id] = mark.encode()
        marks[_SOURCES + mark.id] = json.dumps(dict(sorted(sources.items())), separators=(",", ":"),
                                               ensure_ascii=False)
    return doc.update_since(before)


def name_sides(doc: NoteDoc, mark_id: str, sources: Mapping[str, str]) -> bytes | None:
    """Write who wrote each side of mark ``mark_id`` (by this device's own client id: two
    devices naming them at once write two values of one key, the map keeps one). Returns
    the update, or None when the document already says so."""
    marks = _marks_map(doc.doc)
    value = json.dumps(dict(sorted(sources.items())), separators=(",", ":"), ensure_ascii=False)
    if marks.get(_SOURCES + mark_id) == value:
        return None
    before = doc.state_vector()
    with doc.doc.transaction():
        marks[_SOURCES + mark_id] = value
    return doc.update_since(before)


def merge_catch_up(doc: NoteDoc, own_snapshot: bytes, own_text: str, peer_snapshot: bytes,
                   own_key: str, peer_key: str) -> PeerMerge | None:
    """After a peer's catch-up was applied to ``doc``: the repair that makes its text the
    readable merge of this device's text (``own_text`` at ``own_snapshot``, just before) and
    the peer's (at ``peer_snapshot``). None when there was nothing concurrent (the peer had
    seen all of ours, or we all of theirs): the CRDT's result is then the peer's or ours."""
    own = decode_snapshot(own_snapshot)
    peer = decode_snapshot(peer_snapshot)
    if includes(peer, own) or includes(own, peer):
        return None
    peer_text = doc.fork_at(peer_snapshot).text
    base_text = doc.fork_at(common_state(own, peer)).text
    result = merge_texts(base_text, [Side(own_text, own_key), Side(peer_text, peer_key)])
    current = doc.text
    mark = None if result.clean else mark_of({own_key: own_snapshot, peer_key: peer_snapshot})
    keep_text = result.text == current or same_lines(current, result.text)
    if keep_text and mark is None:
        # The CRDT's merge holds the very lines (inserts at one point, in its own order,
        # the same on every device): no repair, which would rewrite characters that others
        # may be editing beside.
        return PeerMerge(None, result, own_text, peer_text)
    merged = decode_snapshot(doc.snapshot())
    fork: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(
        client_id=repair_client_id(encode_snapshot(*merged), mark), skip_gc=True)
    fork.apply_update(doc.full_update())
    text = fork.get(TEXT_NAME, type=pycrdt.Text)
    before = fork.get_state()
    with fork.transaction():
        # (the text left as the CRDT merged it where that holds the same lines, as above)
        for s in [] if keep_text else to_byte_splices(current, diff_splices(current, result.text)):
            if s.length:
                del text[s.start : s.start + s.length]
            if s.text:
                text.insert(s.start, s.text)
        if mark is not None:
            _marks_map(fork)[_MARK + mark.id] = mark.encode()
    return PeerMerge(fork.get_update(before), result, own_text, peer_text, mark)
