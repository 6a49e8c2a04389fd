"""Snapshots of the states inside one local insertion (a group of appends, P2).

A group of appends to one note is inserted in one CRDT transaction, yet each append is
answered with its own revision, and every revision handed out must be rebuildable for an
hour (``baseRevision``, ``sync/revision_memory.py``). The state after the k-th append of
the group is the state before the group with this client's clock advanced by the UTF-16
length of the first k appends (yrs counts a string's clock in UTF-16 code units): the
delete set is unchanged by insertions. So its snapshot is the snapshot before the group
with one state-vector entry changed -- no document to build.

The encoding (yrs ``Snapshot::encode_v1``): the delete set (varuint count; per client:
varuint client, varuint count of ranges, each varuint clock and varuint length), then the
state vector (varuint count; per client: varuint client, varuint clock).
"""

from __future__ import annotations


def utf16_length(text: str) -> int:
    """The clock units a string insertion takes (characters outside the BMP count twice)."""
    n = len(text)
    if text.isascii():
        return n
    return n + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _read(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated snapshot")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _write(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _split(snapshot: bytes) -> tuple[bytes, dict[int, int]]:
    """(the encoded delete set as it is, the state vector)."""
    pos = 0
    clients, pos = _read(snapshot, pos)
    for _ in range(clients):
        _client, pos = _read(snapshot, pos)
        ranges, pos = _read(snapshot, pos)
        for _ in range(2 * ranges):
            _value, pos = _read(snapshot, pos)
    delete_set = snapshot[:pos]
    count, pos = _read(snapshot, pos)
    vector: dict[int, int] = {}
    for _ in range(count):
        client, pos = _read(snapshot, pos)
        vector[client], pos = _read(snapshot, pos)
    if pos != len(snapshot):
        raise ValueError("trailing bytes after the snapshot's state vector")
    return delete_set, vector


def client_clock(snapshot: bytes, client: int) -> int:
    """The clock ``client`` has reached in ``snapshot`` (0: none of its items)."""
    return _split(snapshot)[1].get(client, 0)


def advanced(snapshot: bytes, client: int, clock: int) -> bytes:
    """``snapshot`` with ``client``'s clock set to ``clock`` (its items up to there seen)."""
    delete_set, vector = _split(snapshot)
    return _series(delete_set, vector, client, [clock])[0]


def after_insertions(snapshot: bytes, client: int, lengths: list[int]) -> list[bytes]:
    """The snapshots after each of ``client``'s next insertions of ``lengths`` (clock
    units) made at ``snapshot``, which is read once (a group's appends)."""
    delete_set, vector = _split(snapshot)
    clock = vector.get(client, 0)
    clocks = []
    for length in lengths:
        clock += length
        clocks.append(clock)
    return _series(delete_set, vector, client, clocks)


def _series(delete_set: bytes, vector: dict[int, int], client: int, clocks: list[int]) -> list[bytes]:
    """The snapshot of ``delete_set`` and ``vector`` with ``client`` at each of ``clocks``:
    the entries keep their order (only ``client``'s clock differs), encoded once."""
    vector.setdefault(client, 0)
    head = bytearray(delete_set)
    _write(len(vector), head)
    tail = bytearray()
    part = head
    for c, k in vector.items():
        if c == client:
            _write(c, head)
            part = tail
            continue
        _write(c, part)
        _write(k, part)
    out = []
    for clock in clocks:
        entry = bytearray()
        _write(clock, entry)
        out.append(bytes(head + entry + tail))
    return out


def cut_at(client: int, clock: int) -> bytes:
    """A snapshot naming only ``client`` up to ``clock`` and no deletions: what
    ``snapshot_state.state_at`` cuts an update of that client's insertion to."""
    out = bytearray([0, 1])  # no deletions; one client in the state vector
    _write(client, out)
    _write(clock, out)
    return bytes(out)
