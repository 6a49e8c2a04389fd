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
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass

import pycrdt

from .errors import CrdtError
from .note_doc import TEXT_NAME, NoteDoc
from .state_vectors import read_varint as _varint
from .text_diff import diff_splices, to_byte_splices
from .text_merge import MergeResult, Side, merge_texts

DeleteSet = dict[int, list[tuple[int, int]]]  # client -> sorted, merged (clock, length)
StateVector = dict[int, int]


@dataclass(frozen=True, slots=True)
class PeerMerge:
    """What the merge rule made of a peer's catch-up: the repair (None: the CRDT's text was
    already the merge) and the sides' texts, for the records."""

    repair: bytes | None
    result: MergeResult
    own_text: str
    peer_text: str


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


def includes(big: tuple[DeleteSet, StateVector], small: tuple[DeleteSet, StateVector]) -> bool:
    """Whether a replica at ``big`` has seen everything a replica at ``small`` had."""
    (ds_big, sv_big), (ds_small, sv_small) = big, small
    if any(clock > sv_big.get(client, 0) for client, clock in sv_small.items()):
        return False
    return all(_contains(ds_big.get(client, []), ranges) for client, ranges in ds_small.items())


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


def repair_client_id(merged_snapshot: bytes) -> int:
    digest = hashlib.sha256(b"stet-peer-merge\0" + merged_snapshot).digest()
    return int.from_bytes(digest[:4], "big") | 1


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
    if result.text == current or same_lines(current, result.text):
        # The CRDT's merge holds the very lines (inserts at one point, in its own order,
        # the same on every device): no repair, which would rewrite characters that others
        # may be editing beside.
        return PeerMerge(None, result, own_text, peer_text)
    merged = decode_snapshot(doc.snapshot())
    fork: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(client_id=repair_client_id(encode_snapshot(*merged)),
                                              skip_gc=True)
    fork.apply_update(doc.full_update())
    text = fork.get(TEXT_NAME, type=pycrdt.Text)
    before = fork.get_state()
    with fork.transaction():
        for s in to_byte_splices(current, diff_splices(current, result.text)):
            if s.length:
                del text[s.start : s.start + s.length]
            if s.text:
                text.insert(s.start, s.text)
    return PeerMerge(fork.get_update(before), result, own_text, peer_text)
