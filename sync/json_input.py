"""Untrusted JSON, parsed safely (SPEC §6.7, R3): bounded depth, valid Unicode only.

``json.loads`` recurses once per nesting level, so ``[[[[...]]]]`` 100 000 deep raises a
``RecursionError`` (a 500 where it was not caught), and a value a few hundred levels deep
that does parse can still blow the stack later (hashing, schema checks, answering).
JSON may also carry lone surrogates (``"\\ud800"``): a Python ``str`` that cannot be
encoded as UTF-8, so every later ``.encode()`` (size checks, idempotency hashes, the
answer that echoes it) raises. Both are refused here, where input arrives, with one
clear ``bad_request`` naming the field, never the value.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import StetError

MAX_DEPTH = 64  # no request or frame of ours nests deeper than ~6


def _valid_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _where(parts: tuple[str | int, ...]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "the top level"


def _flat_and_valid(data: dict[str, Any]) -> bool:
    """Whether every key and value of ``data`` is valid text or a scalar (False: walk it)."""
    for key, value in data.items():
        if not _valid_text(key):
            return False
        if isinstance(value, str):
            if not _valid_text(value):
                return False
        elif isinstance(value, dict | list):
            return False
    return True


def check_json_value(data: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """Raise ``bad_request`` if ``data`` nests deeper than ``max_depth`` or holds a string
    (a key or a value) that is not valid Unicode. Iterative: any depth is safe to check."""
    if isinstance(data, dict) and max_depth > 0 and _flat_and_valid(data):
        return  # most bodies (an append: text and key): checked without the walk
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(data, 0, ())]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, str):
            if not _valid_text(value):
                raise StetError(f"{_where(where)} is not valid Unicode text (it holds a lone surrogate "
                                "such as \\ud800)", code="bad_request", field=_where(where))
            continue
        if not isinstance(value, dict | list):
            continue
        if depth >= max_depth:
            raise StetError(f"the JSON nests deeper than {max_depth} levels (at {_where(where)})",
                            code="bad_request")
        if isinstance(value, dict):
            for key, item in value.items():
                if not _valid_text(key):
                    raise StetError(f"a field name under {_where(where)} is not valid Unicode text "
                                    "(it holds a lone surrogate such as \\ud800)", code="bad_request")
                stack.append((item, depth + 1, (*where, key)))
        else:
            for i, item in enumerate(value):
                stack.append((item, depth + 1, (*where, i)))


def parse_json(raw: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` for untrusted input: ``bad_request`` on invalid JSON, too deep a
    nesting or invalid Unicode, never a ``RecursionError``."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise StetError(f"the JSON nests deeper than {max_depth} levels", code="bad_request") from None
    except (ValueError, UnicodeDecodeError):
        raise StetError("the body is not valid JSON", code="bad_request") from None
    check_json_value(data, max_depth=max_depth)
    return data


MAX_ROW_ID = 2**63 - 1  # SQLite's INTEGER: a bigger Python int is an OverflowError at the query


def row_id(raw: Any, what: str) -> int:
    """A row id from outside (JSON, a URL, a form): an integer or a string of ASCII digits,
    1 to 2^63-1. Anything else is a ``bad_request`` here, never an ``OverflowError`` (a 500)
    where SQLite is asked (issue 33, finding 11)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 19:
        value = int(raw)
    else:
        shown = raw if isinstance(raw, int | float) else repr(raw)[:40]
        raise StetError(f"a {what} is a whole number from 1 to 2^63-1, not {shown}", code="bad_request")
    if not 1 <= value <= MAX_ROW_ID:
        shown_value = value if value.bit_length() <= 256 else f"a {value.bit_length()}-bit number"
        raise StetError(f"a {what} is a whole number from 1 to 2^63-1, not {shown_value}", code="bad_request")
    return value
