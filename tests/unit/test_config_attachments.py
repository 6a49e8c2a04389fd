"""The ``[attachments]`` keys of SPEC §8: defaults, types, refusals naming the key."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from stet.sync.config import AttachmentsConfig, Config, ConfigError, parse_config

SPEC_TOML = """
[attachments]
max_bytes = 2147483648
keep_bytes = 1073741824  # per vault, for replaced/deleted attachments' old bytes
"""


def test_defaults_are_the_spec_values() -> None:
    assert Config().attachments == AttachmentsConfig(max_bytes=2 * 1024**3, keep_bytes=1024**3)
    assert parse_config(tomllib.loads(SPEC_TOML)) == Config()
    assert parse_config({}).attachments.max_bytes == 2147483648


def test_values_are_taken() -> None:
    cfg = parse_config({"attachments": {"max_bytes": 5_000_000}})
    assert cfg.attachments.max_bytes == 5_000_000
    assert cfg.attachments.keep_bytes == 1024**3  # the other key keeps its default
    assert parse_config({"attachments": {"keep_bytes": 0}}).attachments.keep_bytes == 0


@pytest.mark.parametrize(("data", "words"), [
    ({"attachments": {"max_bytes": "2 GB"}}, "[attachments] max_bytes"),
    ({"attachments": {"keep_bytes": 1.5}}, "[attachments] keep_bytes"),
    ({"attachments": {"keep_bytes": True}}, "[attachments] keep_bytes"),
    ({"attachments": {"max_bytes": -1}}, "[attachments] max_bytes"),
    ({"attachments": {"max_files": 3}}, "max_files"),
    ({"attachments": 5}, "[attachments]"),
])
def test_wrong_values_are_refused_naming_the_key(data: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    assert words in exc.value.message
