"""daemon/api/json_stream.py: a big string escaped slice by slice gives the bytes of json.dumps,
whatever sits at the slice edges; JsonOf is the JSON text of its value, streamed or not."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stet.daemon.api import json_stream
from stet.daemon.api.json_stream import JsonOf, dumps, has_big_string, iter_json

SPECIALS = ["\\", '"', "😀", "漢", "\n", "\t", "\x01", "é", "\u2028", "/"]


@pytest.fixture(autouse=True)
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_stream, "BIG_CHARS", 40)
    monkeypatch.setattr(json_stream, "SLICE_CHARS", 7)


def edgy(n: int) -> str:
    """Every special character at every offset of a 7-code-point slice."""
    return "".join(SPECIALS[i % len(SPECIALS)] if i % 3 else "a" for i in range(n))


@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("n", [39, 40, 41, 49, 70, 211])
def test_a_big_string_streams_to_the_same_bytes(ensure_ascii: bool, n: int) -> None:
    value: dict[str, Any] = {"path": "a/ü.md", "content": edgy(n), "revision": 3,
                             "list": [1, 2.5, None, True, edgy(n)[::-1]], "empty": {}, "none": []}
    expected = json.dumps(value, ensure_ascii=ensure_ascii)
    assert "".join(iter_json(value, ensure_ascii=ensure_ascii)) == expected


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_json_of_is_the_json_text_of_its_value(ensure_ascii: bool) -> None:
    result = {"path": "n.md", "content": edgy(300), "revision": 1}
    answer = {"jsonrpc": "2.0", "id": 1, "result": {
        "content": [{"type": "text", "text": JsonOf(result)}], "structuredContent": result, "isError": False}}
    expected = {"jsonrpc": "2.0", "id": 1, "result": {
        "content": [{"type": "text", "text": json.dumps(result, ensure_ascii=False)}],
        "structuredContent": result, "isError": False}}
    streamed = "".join(iter_json(answer, ensure_ascii=ensure_ascii))
    assert streamed == json.dumps(expected, ensure_ascii=ensure_ascii)
    assert dumps(answer, ensure_ascii=ensure_ascii) == streamed  # built in one go (a batch)
    assert json.loads(json.loads(streamed)["result"]["content"][0]["text"]) == result


def test_pieces_are_bounded_and_big_strings_are_found() -> None:
    value = {"content": edgy(1000)}
    assert has_big_string(value)
    assert has_big_string([JsonOf(value)])
    assert not has_big_string({"content": "x" * 39, "n": 1})
    # Each piece is at most one slice's escape (≤ 6 characters per code point), not the whole.
    assert max(len(p) for p in iter_json(value, ensure_ascii=True)) <= 12 * 7


def test_non_json_values_are_refused() -> None:
    with pytest.raises(TypeError):
        dumps({"x": object()})
    with pytest.raises(TypeError):
        "".join(iter_json({1: edgy(50)}, ensure_ascii=True))


async def test_encode_builds_the_same_bytes_in_slices() -> None:
    result = {"path": "n.md", "content": edgy(500), "revision": 2}
    answer = {"id": 1, "result": {"content": [{"type": "text", "text": JsonOf(result)}],
                                  "structuredContent": result}}
    for ensure_ascii in (True, False):
        assert await json_stream.encode(answer, ensure_ascii=ensure_ascii) == \
            dumps(answer, ensure_ascii=ensure_ascii).encode()
    assert await json_stream.encode({"small": "x"}) == b'{"small": "x"}'
