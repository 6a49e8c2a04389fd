"""Yjs state vectors as plain dicts: decode, compare, and a digest over many notes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from .errors import CrdtError


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise CrdtError("truncated or oversized varint in a state vector")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def decode_state_vector(sv: bytes) -> dict[int, int]:
    """``{client id: clock}`` of an encoded (v1) state vector."""
    count, pos = read_varint(sv, 0)
    if count > len(sv):
        raise CrdtError("state vector claims more entries than it has bytes")
    out: dict[int, int] = {}
    for _ in range(count):
        client, pos = read_varint(sv, pos)
        clock, pos = read_varint(sv, pos)
        out[client] = clock
    return out


def has_unseen(current: bytes, seen: bytes) -> bool:
    """Does ``current`` hold anything a replica at ``seen`` had not seen?"""
    cur, old = decode_state_vector(current), decode_state_vector(seen)
    return any(clock > old.get(client, 0) for client, clock in cur.items())


def vault_digest(entries: Iterable[tuple[str, bytes]]) -> str:
    """One hash over every (note id, state vector): equal digests = nothing to exchange."""
    h = hashlib.sha256()
    for note_id, sv in sorted(entries):
        canonical = sorted(decode_state_vector(sv).items())
        h.update(note_id.encode() + b"\0" + repr(canonical).encode() + b"\n")
    return h.hexdigest()
