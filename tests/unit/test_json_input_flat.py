"""sync/json_input.py: a flat body (an append's text and key) is checked without the walk,
and still refused, naming the field, when a key or value holds a lone surrogate."""

from __future__ import annotations

import pytest

from stet.sync.errors import StetError
from stet.sync.json_input import parse_json


def test_a_flat_body_passes_and_a_lone_surrogate_in_it_is_refused_by_name() -> None:
    assert parse_json(b'{"text": "line \\u00e9", "idempotencyKey": "k1", "n": 3, "x": null}') == {
        "text": "line \u00e9", "idempotencyKey": "k1", "n": 3, "x": None}
    with pytest.raises(StetError) as bad_value:
        parse_json(b'{"text": "ok \\udfff ok", "idempotencyKey": "k1"}')
    assert bad_value.value.code == "bad_request"
    assert bad_value.value.details["field"] == "text"
    with pytest.raises(StetError) as bad_key:
        parse_json(b'{"\\ud800": "x"}')
    assert bad_key.value.code == "bad_request"


def test_a_nested_body_is_still_walked_for_depth_and_surrogates() -> None:
    with pytest.raises(StetError) as bad:
        parse_json(b'{"edits": [{"oldText": "a", "newText": "\\ud800"}]}')
    assert bad.value.details["field"] == "edits[0].newText"
    deep = b'{"a": ' + b"[" * 70 + b"]" * 70 + b"}"
    with pytest.raises(StetError, match="nests deeper"):
        parse_json(deep)
