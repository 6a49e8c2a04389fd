"""``attachment_protocol.read_chunk_into``: a CHUNK frame whose bytes are read straight
behind its header is the very frame ``encode_chunk`` makes (and decodes to the same chunk);
a file that ends early and a chunk over the caps are refused."""

from __future__ import annotations

import io
import os

import pytest

from stet.sync import attachment_protocol as ap

VAULT = "notes"
SHA = "ab" * 32


@pytest.mark.parametrize(("offset", "length", "total"), [(0, ap.MAX_CHUNK, 3 * ap.MAX_CHUNK + 7),
                                                          (3 * ap.MAX_CHUNK, 7, 3 * ap.MAX_CHUNK + 7),
                                                          (0, 0, 0)])
def test_a_frame_read_in_place_is_the_encoded_frame(offset: int, length: int, total: int) -> None:
    data = os.urandom(total)
    f = io.BufferedReader(io.BytesIO(data), buffer_size=4096)  # short reads: filled in steps
    f.seek(offset)
    frame = ap.read_chunk_into(VAULT, SHA, offset, total, length, f.readinto)
    expected = ap.encode_chunk(VAULT, SHA, offset, total, data[offset:offset + length])
    assert bytes(frame) == expected
    decoded = ap.decode(bytes(frame))
    assert isinstance(decoded, ap.BlobFrame)
    assert bytes(decoded.data) == data[offset:offset + length]


def test_a_file_that_ends_early_is_an_os_error() -> None:
    f = io.BytesIO(b"x" * 100)
    with pytest.raises(OSError, match="ended early at 100"):
        ap.read_chunk_into(VAULT, SHA, 0, 200, 150, f.readinto)


@pytest.mark.parametrize(("offset", "length", "total"),
                         [(0, ap.MAX_CHUNK + 1, 10 << 20), (5, 4, 8), (0, 0, 8)])
def test_chunks_over_the_caps_are_refused(offset: int, length: int, total: int) -> None:
    with pytest.raises(ap.ProtocolError):
        ap.read_chunk_into(VAULT, SHA, offset, total, length, io.BytesIO(b"y" * length).readinto)
