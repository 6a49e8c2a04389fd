"""Peer protocol messages: bytes in, bytes out (no sockets here).

One websocket binary message = one frame::

    b"S1" | type (1 byte) | header length (4 bytes, big endian) | header (UTF-8 JSON object) | payload

The payload carries CRDT updates back to back; the header says where each one is.
Every decode is strict and bounded: a frame over ``MAX_FRAME`` bytes, a header that is
not a JSON object, offsets outside the payload, or an unknown type raise
``ProtocolError`` and the caller closes that link.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from .errors import StetError
from .json_input import check_json_value

MAGIC = b"S1"
MAX_FRAME = 48 * 1024 * 1024
MAX_HEADER = 8 * 1024 * 1024

# Message types.
HELLO = 1  # {device, vaults: [ids]} -- the vaults each side wants to sync
INDEX_SYNC = 2  # {vault, sv (b64), digest} -- my index state + my notes digest
INDEX_UPDATE = 3  # {vault} + payload: an index update
NOTE_SVS = 4  # {vault, notes: [[id, sv b64], ...]} -- sent when digests differ
NOTE_UPDATES = 5  # {vault, items: [[id, len, source, device], ...]} + payload
JOIN = 6  # {vault, device, cert_pem, proof}
JOIN_OK = 7  # {vault, name} + payload: the full index
ERROR = 8  # {code, message}
SYNCED = 9  # {vault} -- the sender has sent everything it had for this round

TYPES = {HELLO, INDEX_SYNC, INDEX_UPDATE, NOTE_SVS, NOTE_UPDATES, JOIN, JOIN_OK, ERROR, SYNCED}


class ProtocolError(StetError):
    code = "bad_request"


@dataclass(frozen=True, slots=True)
class Frame:
    type: int
    header: dict[str, Any]
    payload: bytes = b""


@dataclass(slots=True)
class UpdateItem:
    note_id: str
    update: bytes
    source: str
    device: str
    # A catch-up's: the sender's snapshot of the note when it built ``update`` (its state
    # vector and delete set), so the receiver can tell what both had and merge by lines
    # where both changed the same words (``peer_merge``). None on live updates.
    snapshot: bytes | None = None
    # With a snapshot: who last wrote the sender's text then, as the sender names it
    # (``disk on D``), so an overlap merged from it names each side's writer. None: unsaid.
    writer: str | None = None


MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024  # a note's delete set and state vector: far below it


@dataclass(slots=True)
class UpdateBatch:
    vault: str
    items: list[UpdateItem] = field(default_factory=list)


def encode(type_: int, header: dict[str, Any], payload: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    return MAGIC + bytes([type_]) + struct.pack(">I", len(head)) + head + payload


def decode(data: bytes) -> Frame:
    if len(data) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(data)} bytes is over the cap")
    if len(data) < 7 or data[:2] != MAGIC:
        raise ProtocolError("not a Stet frame")
    type_ = data[2]
    if type_ not in TYPES:
        raise ProtocolError(f"unknown frame type {type_}")
    (hlen,) = struct.unpack(">I", data[3:7])
    if hlen > MAX_HEADER or 7 + hlen > len(data):
        raise ProtocolError("bad header length")
    try:
        header = json.loads(data[7 : 7 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ProtocolError("header is not JSON (or nests too deep)") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    try:  # bounded depth, valid Unicode only: nothing later may fail on it
        check_json_value(header)
    except StetError as exc:
        raise ProtocolError(f"bad header: {exc.message}") from None
    return Frame(type_, header, bytes(data[7 + hlen :]))


def field_str(header: dict[str, Any], name: str, *, max_len: int = 1024) -> str:
    value = header.get(name)
    if not isinstance(value, str) or len(value) > max_len:
        raise ProtocolError(f"field {name!r} must be a string")
    return value


def encode_updates(batch: UpdateBatch) -> bytes:
    items: list[list[str | int]] = []
    payload: list[bytes] = []
    for i in batch.items:
        if i.snapshot is None:
            items.append([i.note_id, len(i.update), i.source, i.device])
            payload.append(i.update)
        else:  # the snapshot's bytes follow the update's
            item: list[str | int] = [i.note_id, len(i.update), i.source, i.device, len(i.snapshot)]
            if i.writer is not None:
                item.append(i.writer)
            items.append(item)
            payload += (i.update, i.snapshot)
    return encode(NOTE_UPDATES, {"vault": batch.vault, "items": items}, b"".join(payload))


def decode_updates(frame: Frame) -> UpdateBatch:
    vault = field_str(frame.header, "vault")
    raw = frame.header.get("items")
    if not isinstance(raw, list):
        raise ProtocolError("items must be a list")
    batch = UpdateBatch(vault)
    pos = 0
    for item in raw:
        if (
            not isinstance(item, list)
            or len(item) not in (4, 5, 6)
            or not isinstance(item[0], str)
            or not isinstance(item[1], int)
            or isinstance(item[1], bool)
            or item[1] < 0
            or not isinstance(item[2], str)
            or not isinstance(item[3], str)
            or len(item[0]) > 64
            or len(item[2]) > 256
            or len(item[3]) > 128
        ):
            raise ProtocolError("bad update item")
        snapshot_len = item[4] if len(item) >= 5 else None
        writer = item[5] if len(item) == 6 else None
        if writer is not None and (not isinstance(writer, str) or len(writer) > 256):
            raise ProtocolError("bad update item writer")
        if snapshot_len is not None and (not isinstance(snapshot_len, int) or isinstance(snapshot_len, bool)
                                         or not 0 <= snapshot_len <= MAX_SNAPSHOT_BYTES):
            raise ProtocolError("bad update item snapshot")
        end = pos + item[1]
        snap_end = end + (snapshot_len or 0)
        if snap_end > len(frame.payload):
            raise ProtocolError("update item runs past the payload")
        snapshot = frame.payload[end:snap_end] if snapshot_len is not None else None
        batch.items.append(UpdateItem(item[0], frame.payload[pos:end], item[2], item[3], snapshot, writer))
        pos = snap_end
    if pos != len(frame.payload):
        raise ProtocolError("payload has bytes no item accounts for")
    return batch
