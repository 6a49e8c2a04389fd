"""Attachment transfer frames and per-link credit: round trips, strict bounded decoding
(fuzzed frames only ever raise ProtocolError), and a simulated link that is cut and
resumes from what the receiver holds."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stet.sync import attachment_protocol as ap
from stet.sync.attachment_protocol import BlobFrame, CreditFrame, ProtocolError, ReceiveCredit, SendCredit
from stet.sync.blob_store import BlobStore

SHA = hashlib.sha256(b"x").hexdigest()
VAULT = "v-0123456789abcdef"


def test_round_trips() -> None:
    req = ap.decode(ap.encode_request(VAULT, SHA, 5, 10))
    assert req == BlobFrame(ap.REQUEST, VAULT, SHA, 5, 10)
    data = bytes(range(256)) * 4096  # 1 MiB exactly, with NULs
    chunk = ap.decode(ap.encode_chunk(VAULT, SHA, 0, len(data) + 7, data))
    assert isinstance(chunk, BlobFrame)
    assert chunk.type == ap.CHUNK
    assert chunk.data == data
    assert chunk.end == len(data)
    empty = ap.decode(ap.encode_chunk(VAULT, SHA, 0, 0, b""))
    assert isinstance(empty, BlobFrame)
    assert empty.data == b""
    missing = ap.decode(ap.encode_missing(VAULT, SHA, "not held here ✓"))
    assert isinstance(missing, BlobFrame)
    assert missing.data.decode() == "not held here ✓"
    assert ap.decode(ap.encode_credit(12345)) == CreditFrame(12345)
    assert ap.is_attachment_frame(ap.encode_credit(1))
    assert not ap.is_attachment_frame(b"S1\x01")


@pytest.mark.parametrize("make", [
    lambda: ap.encode_chunk(VAULT, SHA, 0, 10 << 20, b"x" * (ap.MAX_CHUNK + 1)),  # over 1 MiB
    lambda: ap.encode_chunk(VAULT, SHA, 5, 8, b"xxxx"),  # past the total
    lambda: ap.encode_chunk(VAULT, SHA, 0, 8, b""),  # empty, not the end
    lambda: ap.encode_request(VAULT, SHA, 9, 8),
    lambda: ap.encode_request(VAULT, "ABC", 0, 8),
    lambda: ap.encode_request(VAULT, SHA.upper(), 0, 8),
    lambda: ap.encode_request("", SHA, 0, 8),
    lambda: ap.encode_request("x" * 65, SHA, 0, 8),
    lambda: ap.encode_request("vält", SHA, 0, 8),
    lambda: ap.encode_credit(0),
])
def test_encoders_refuse_what_decoders_would(make: object) -> None:
    with pytest.raises(ProtocolError):
        make()  # type: ignore[operator]


def test_decoder_refuses_oversized_and_malformed() -> None:
    good = ap.encode_chunk(VAULT, SHA, 0, 3, b"abc")
    cases = [
        b"", b"A1", b"S1\x02", b"A1\x09" + good[3:], good[:-1],  # truncated: chunk ends early vs total? ok
        good[:20], good + b"x",  # runs past the total
        b"A1\x04" + b"\x00" * 8, b"A1\x04" + b"\x00" * 7 + b"\x01\x00",
        ap.encode_request(VAULT, SHA, 0, 1) + b"x",  # a request with a body
        b"A1\x02" + bytes([0]) + good[4:],  # vault length 0
        b"A1\x02" + bytes([200]) + good[4:],  # vault length over the cap
        good[:4] + "é".encode("latin-1") * len(VAULT) + good[4 + len(VAULT):],  # not ASCII
        b"A1\x02" + b"\x01v" + b"\x00" * 48 + b"y" * (ap.MAX_CHUNK + 1),  # over the frame cap
        ap.encode_missing(VAULT, SHA, "")[:-0 or None] + b"\xff\xfe",  # reason not UTF-8
    ]
    for data in cases:
        if data == good[:-1]:
            continue  # a shorter chunk is valid (fewer bytes of the blob)
        with pytest.raises(ProtocolError):
            ap.decode(data)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_fuzzed_bytes_never_crash(data: bytes) -> None:
    for candidate in (data, b"A1" + data, b"A1\x02" + data, b"A1\x01" + bytes([len(VAULT)]) + data):
        try:
            frame = ap.decode(candidate)
        except ProtocolError:
            continue
        assert isinstance(frame, BlobFrame | CreditFrame)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2), st.binary(min_size=0, max_size=64), st.integers(0, 200), st.integers(0, 255))
def test_mutated_valid_frames_decode_or_refuse(which: int, data: bytes, pos: int, byte: int) -> None:
    frames = [ap.encode_request(VAULT, SHA, 0, 100), ap.encode_chunk(VAULT, SHA, 10, 100, data or b"z"),
              ap.encode_missing(VAULT, SHA, "gone", 0, 0)]
    raw = bytearray(frames[which])
    raw[pos % len(raw)] = byte
    for candidate in (bytes(raw), bytes(raw[: pos % len(raw)])):
        try:
            frame = ap.decode(candidate)
        except ProtocolError:
            continue
        if isinstance(frame, BlobFrame):
            assert 0 <= frame.offset <= frame.end <= frame.total
            assert len(frame.sha256) == 64


def test_chunk_ranges() -> None:
    assert ap.chunk_ranges(0) == [(0, 0)]
    assert ap.chunk_ranges(10, chunk=4) == [(0, 4), (4, 4), (8, 2)]
    assert ap.chunk_ranges(10, 6, chunk=4) == [(6, 4)]
    assert ap.chunk_ranges(ap.MAX_CHUNK * 2 + 1)[-1] == (ap.MAX_CHUNK * 2, 1)


def test_credit_refuses_an_overrunning_sender() -> None:
    send, recv = SendCredit(100), ReceiveCredit(100)
    assert send.can_send(100)
    assert not send.can_send(101)
    send.spend(60)
    recv.received(60)
    with pytest.raises(ProtocolError):
        send.spend(41)
    with pytest.raises(ProtocolError):
        recv.received(41)
    assert recv.consumed(40) == 0  # under half a window: no credit frame yet
    assert recv.consumed(20) == 60
    send.grant(60)
    assert send.available == 100


def _transfer(sender: BlobStore, receiver: BlobStore, sha: str, total: int, *, window: int,
              chunk: int, cut_after: int | None = None) -> tuple[int, bool]:
    """A link simulated frame by frame: REQUEST from what the receiver holds, CHUNKs while
    credit lasts, CREDITs as the receiver writes. Returns (chunk bytes sent, completed)."""
    send, recv = SendCredit(window), ReceiveCredit(window)
    have = receiver.partial_size(sha)
    req = ap.decode(ap.encode_request(VAULT, sha, have, total))
    assert isinstance(req, BlobFrame)
    queue = [(o, n) for o, n in ap.chunk_ranges(total, req.offset, chunk) if n or total == 0]
    if total == 0:
        queue = [(0, 0)]
    sent = 0
    in_flight: list[bytes] = []
    while queue or in_flight:
        while queue and send.can_send(queue[0][1]):  # the sender fills the window
            o, n = queue.pop(0)
            send.spend(n)
            in_flight.append(ap.encode_chunk(VAULT, sha, o, total, sender.read_range(sha, o, n)))
            sent += n
            assert window - send.available <= window  # never more than a window in flight
        frame = ap.decode(in_flight.pop(0))
        assert isinstance(frame, BlobFrame)
        recv.received(len(frame.data))
        receiver.append(sha, frame.offset, frame.data, total=frame.total)
        if cut_after is not None and frame.end >= cut_after:
            return sent, False  # the link drops; whatever was in flight is lost
        grant = recv.consumed(len(frame.data))
        if grant:
            credit = ap.decode(ap.encode_credit(grant))
            assert isinstance(credit, CreditFrame)
            send.grant(credit.amount)
    receiver.finish(sha, total)
    return sent, True


def test_a_cut_transfer_resumes_without_starting_over(tmp_path: Path) -> None:
    a, b = BlobStore(tmp_path / "a"), BlobStore(tmp_path / "b")
    data = os.urandom(5 * 65536 + 123)
    info = a.put_bytes(data)
    sent1, done = _transfer(a, b, info.sha256, len(data), window=4 * 65536, chunk=65536, cut_after=3 * 65536)
    assert not done
    assert not b.has(info.sha256)
    held = b.partial_size(info.sha256)
    assert 0 < held < len(data)
    sent2, done = _transfer(a, b, info.sha256, len(data), window=4 * 65536, chunk=65536)
    assert done
    assert b.verify(info.sha256)
    assert sent1 > held  # chunks in flight at the cut were lost...
    assert sent2 == len(data) - held < len(data)  # ...but after it, only what was missing is sent
    assert b.path_of(info.sha256).read_bytes() == data


def test_an_empty_blob_transfers(tmp_path: Path) -> None:
    a, b = BlobStore(tmp_path / "a"), BlobStore(tmp_path / "b")
    info = a.put_bytes(b"")
    _, done = _transfer(a, b, info.sha256, 0, window=10, chunk=4)
    assert done
    assert b.has(info.sha256)
