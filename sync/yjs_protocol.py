"""The y-websocket wire format (y-protocols): plain functions, bytes in and bytes out.

A message is ``varUint type`` then its body: ``0`` sync (``varUint subtype`` -- 0 step 1
with a state vector, 1 step 2 with an update, 2 an update -- then ``varUint8Array``),
``1`` awareness (``varUint8Array`` of an awareness update), ``2`` auth, ``3`` a query for
the awareness states. An awareness update is ``varUint count`` then, for each client,
``varUint clientID``, ``varUint clock`` and ``varString`` JSON state (``null``: gone).

pycrdt's ``write_message`` / ``create_update_message`` / ``create_awareness_message``
encode; decoding is done here because pycrdt's ``Decoder`` reads past the end of a
truncated message (an IndexError) and counts string lengths in characters, not UTF-8
bytes. Every decoder here is strict: anything malformed is a ``ProtocolError``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pycrdt

from .errors import CrdtError, StetError
from .state_vectors import decode_state_vector

MSG_SYNC = 0
MSG_AWARENESS = 1
MSG_AUTH = 2
MSG_QUERY_AWARENESS = 3

SYNC_STEP1 = 0
SYNC_STEP2 = 1
SYNC_UPDATE = 2

# An awareness state is a cursor and a user name; a client is one Yjs doc.
MAX_AWARENESS_STATE_BYTES = 64 * 1024
MAX_AWARENESS_ENTRIES = 64  # entries in one awareness message


class ProtocolError(StetError):
    code = "bad_request"


@dataclass(frozen=True, slots=True)
class Message:
    kind: int  # MSG_*
    sync_type: int | None  # SYNC_* for MSG_SYNC
    payload: bytes  # the state vector, update or awareness update ("" for a query)


@dataclass(frozen=True, slots=True)
class AwarenessEntry:
    client_id: int
    clock: int
    state: str  # the state as JSON text; "null" when the client is gone

    @property
    def is_null(self) -> bool:
        return self.state == "null"


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def var_uint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise ProtocolError("truncated message (a number runs past the end)")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ProtocolError("a number in the message is too long")

    def var_bytes(self) -> bytes:
        length = self.var_uint()
        end = self.pos + length
        if end > len(self.data):
            left = len(self.data) - self.pos
            raise ProtocolError(f"truncated message ({length} bytes announced, {left} left)")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def var_string(self) -> str:
        try:
            return self.var_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("a string in the message is not UTF-8") from None


def parse(data: bytes) -> Message:
    """One websocket message from a client."""
    r = _Reader(data)
    kind = r.var_uint()
    if kind == MSG_SYNC:
        sync_type = r.var_uint()
        if sync_type not in (SYNC_STEP1, SYNC_STEP2, SYNC_UPDATE):
            raise ProtocolError(f"unknown sync message type {sync_type}")
        return Message(kind, sync_type, r.var_bytes())
    if kind == MSG_AWARENESS:
        return Message(kind, None, r.var_bytes())
    if kind in (MSG_AUTH, MSG_QUERY_AWARENESS):
        return Message(kind, None, b"")
    raise ProtocolError(f"unknown message type {kind}")


def sync_step1(state_vector: bytes) -> bytes:
    return bytes([MSG_SYNC, SYNC_STEP1]) + pycrdt.write_message(state_vector)


def sync_step2(update: bytes) -> bytes:
    return bytes([MSG_SYNC, SYNC_STEP2]) + pycrdt.write_message(update)


def sync_update(update: bytes) -> bytes:
    return pycrdt.create_update_message(update)


def awareness_message(update: bytes) -> bytes:
    return pycrdt.create_awareness_message(update)


# An awareness message with no entries: changes nothing on a client, but is a message
# (the JS client drops a socket that received none for 30 s; protocol pings do not count).
KEEPALIVE = awareness_message(b"\x00")


def foreign_history(client_state_vector: bytes, note_state_vector: bytes) -> bool:
    """Does a client's document hold text with no history in common with the note's?

    A client that ever synced with the note knows some of the note's writers; one that
    knows none while both hold something either typed before its first sync (the Yjs
    "initial offline value") or kept a document of a note since deleted and made again
    at the same path. Merging it would insert its whole text a second time (doubled text:
    jupyter-collaboration #594, hocuspocus #344), so it is refused instead.
    """
    try:
        client = decode_state_vector(client_state_vector)
        note = decode_state_vector(note_state_vector)
    except CrdtError as exc:
        raise ProtocolError(exc.message) from None
    return bool(client) and bool(note) and not (client.keys() & note.keys())


def decode_awareness(update: bytes) -> list[AwarenessEntry]:
    r = _Reader(update)
    count = r.var_uint()
    if count > MAX_AWARENESS_ENTRIES:
        raise ProtocolError(f"an awareness update of {count} clients (at most {MAX_AWARENESS_ENTRIES})")
    entries = []
    for _ in range(count):
        client_id = r.var_uint()
        clock = r.var_uint()
        state = r.var_string()
        if len(state) > MAX_AWARENESS_STATE_BYTES:
            raise ProtocolError("an awareness state is too large")
        try:
            json.loads(state)
        except ValueError:
            raise ProtocolError("an awareness state is not JSON") from None
        entries.append(AwarenessEntry(client_id, clock, state))
    return entries


def encode_awareness(entries: list[AwarenessEntry]) -> bytes:
    out = [pycrdt.write_var_uint(len(entries))]
    for e in entries:
        data = e.state.encode("utf-8")
        out += [pycrdt.write_var_uint(e.client_id), pycrdt.write_var_uint(e.clock),
                pycrdt.write_var_uint(len(data)), data]
    return b"".join(out)


class AwarenessStates:
    """The latest awareness state of each client of one note, for clients that join later.

    The rules of y-protocols' ``applyAwarenessUpdate``: a state replaces the one held when
    its clock is newer, or equal and it says the client is gone.
    """

    def __init__(self) -> None:
        self._states: dict[int, AwarenessEntry] = {}

    def apply(self, entries: list[AwarenessEntry]) -> list[AwarenessEntry]:
        """Take in a client's entries; returns those that changed something."""
        taken = []
        for e in entries:
            held = self._states.get(e.client_id)
            if held is not None and not (e.clock > held.clock or (e.clock == held.clock and e.is_null
                                                                     and not held.is_null)):
                continue
            if e.is_null:
                self._states.pop(e.client_id, None)
            else:
                self._states[e.client_id] = e
            taken.append(e)
        return taken

    def remove(self, client_ids: set[int]) -> bytes | None:
        """Forget clients whose connection closed: the update telling the others (or None)."""
        gone = [AwarenessEntry(c, self._states.pop(c).clock + 1, "null") for c in sorted(client_ids)
                if c in self._states]
        return encode_awareness(gone) if gone else None

    def full(self) -> bytes | None:
        """Every known state as one update (None if there is none)."""
        if not self._states:
            return None
        return encode_awareness(list(self._states.values()))

    def __len__(self) -> int:
        return len(self._states)
