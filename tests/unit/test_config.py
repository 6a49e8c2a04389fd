"""sync/config.py: the defaults of SPEC §8, and a config.toml that is wrong is refused
with a ConfigError naming the key (never silently ignored or half-applied)."""

from __future__ import annotations

import dataclasses
import tomllib
from typing import Any

import pytest

from stet.sync.config import (
    ApiConfig,
    BrakeConfig,
    Config,
    ConfigError,
    NotesConfig,
    PeerConfig,
    VersionsConfig,
    parse_config,
    replace_section,
)
from stet.sync.errors import StetError

# SPEC §8, verbatim: the defaults must be exactly these.
SPEC_TOML = """
[api]
host = "127.0.0.1"
port = 7420            # 0 = any free port (the chosen one goes to daemon.json)
[peer]
port = 7421            # 0 = any free port
mdns = true
addresses = []         # "host:port" of peers to dial (no mDNS needed)
[notes]
extensions = [".md", ".markdown", ".txt"]
max_bytes = 10485760
rescan_seconds = 3600
[versions]
idle_minutes = 10
keep = 50
shrink_ratio = 0.2
shrink_min_chars = 200
keep_shrink = 10
shrink_keep_days = 30
[brake]
notes = 10
window_seconds = 60
hold_minutes = 30
on_timeout = "release" # or "hold"
"""


def _spec() -> dict[str, Any]:
    return tomllib.loads(SPEC_TOML)


@pytest.mark.parametrize(("section", "key", "value"), [
    (section, key, value) for section, keys in tomllib.loads(SPEC_TOML).items()
    for key, value in keys.items()
])
def test_every_spec_default_holds_with_no_config_file(section: str, key: str, value: Any) -> None:
    actual = getattr(getattr(Config(), section), key)
    if isinstance(value, list):
        assert tuple(actual) == tuple(value)
    else:
        assert actual == value
        assert type(actual) is type(value) or (isinstance(value, int) and isinstance(actual, float))


def test_spec_sections_and_keys_are_all_known() -> None:
    """Every §8 key exists (a key missing from Config would make the spec file fail)."""
    for section, keys in _spec().items():
        fields = {f.name for f in dataclasses.fields(getattr(Config(), section))}
        assert set(keys) <= fields, (section, set(keys) - fields)


def test_the_spec_file_itself_parses_to_the_defaults() -> None:
    assert parse_config(_spec()) == Config()


def test_empty_config_is_the_defaults() -> None:
    assert parse_config({}) == Config()
    assert parse_config({"api": {}, "brake": {}}) == Config()


def test_a_section_keeps_defaults_for_keys_not_given() -> None:
    config = parse_config({"api": {"port": 0}, "brake": {"on_timeout": "hold"}})
    assert config.api == ApiConfig(host="127.0.0.1", port=0)
    assert config.brake == BrakeConfig(on_timeout="hold")
    assert config.peer == PeerConfig()


def test_values_are_taken_with_their_types() -> None:
    config = parse_config({
        "peer": {"addresses": ["10.0.0.2:7421", "host:1"], "mdns": False, "port": 0},
        "notes": {"extensions": [".md"], "max_bytes": 1024},
        "versions": {"idle_minutes": 2.5, "shrink_ratio": 1, "keep": 3},
        "brake": {"window_seconds": 0.5, "hold_minutes": 0},
    })
    assert config.peer.addresses == ("10.0.0.2:7421", "host:1")
    assert isinstance(config.peer.addresses, tuple)
    assert config.peer.mdns is False
    assert config.notes.extensions == (".md",)
    assert config.notes.max_bytes == 1024
    # Float keys take fractions even where the default is written as a whole number.
    assert config.versions.idle_minutes == 2.5
    assert config.brake.window_seconds == 0.5
    assert config.versions.shrink_ratio == 1.0
    assert isinstance(config.versions.shrink_ratio, float)
    assert config.versions.keep == 3


def _refused(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert isinstance(info.value, StetError)
    message = info.value.message
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("data", "must_name"), [
    ({"nope": {"x": 1}}, "[nope]"),
    ({"api": {"bogus": 1}}, "'bogus'"),
    ({"brake": {"note": 3}}, "'note'"),           # a typo of "notes"
    ({"api": 3}, "[api]"),                        # a key where a table belongs
    ({"peer": ["a"]}, "[peer]"),
])
def test_unknown_sections_and_keys_are_refused_by_name(data: dict[str, Any], must_name: str) -> None:
    message = _refused(data)
    assert must_name in message


@pytest.mark.parametrize(("section", "key", "value"), [
    ("api", "port", "7420"),
    ("api", "port", 7420.0),
    ("api", "port", True),
    ("api", "host", 127),
    ("peer", "mdns", "yes"),
    ("peer", "mdns", 1),
    ("peer", "addresses", "10.0.0.2:7421"),
    ("peer", "addresses", [7421]),
    ("notes", "extensions", ".md"),
    ("notes", "max_bytes", "10MiB"),
    ("notes", "max_bytes", 1.5),
    ("notes", "rescan_seconds", False),
    ("versions", "keep", 2.5),
    ("versions", "idle_minutes", "10"),
    ("versions", "shrink_ratio", True),
    ("brake", "notes", [10]),
    ("brake", "window_seconds", {"s": 1}),
    ("brake", "on_timeout", 1),
])
def test_wrong_types_are_refused_naming_the_key(section: str, key: str, value: Any) -> None:
    message = _refused({section: {key: value}})
    assert f"[{section}] {key}" in message


@pytest.mark.parametrize(("section", "key", "value"), [
    ("api", "port", -1),
    ("peer", "port", -7421),
    ("notes", "max_bytes", -1),
    ("notes", "rescan_seconds", -3600),
    ("versions", "keep", -50),
    ("versions", "idle_minutes", -0.5),
    ("versions", "shrink_ratio", -0.2),
    ("brake", "notes", -10),
    ("brake", "window_seconds", -60),
    ("brake", "hold_minutes", -1),
])
def test_negative_numbers_are_refused_naming_the_key(section: str, key: str, value: Any) -> None:
    message = _refused({section: {key: value}})
    assert f"[{section}] {key}" in message
    assert "negative" in message


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_numbers_are_refused(value: float) -> None:
    """TOML has nan and inf; a brake window of nan seconds is no window."""
    message = _refused({"brake": {"window_seconds": value}})
    assert "[brake] window_seconds" in message


@pytest.mark.parametrize("section", ["api", "peer"])
def test_ports_above_65535_are_refused_naming_the_key(section: str) -> None:
    message = _refused({section: {"port": 65536}})
    assert f"[{section}] port" in message
    assert parse_config({section: {"port": 65535}})


@pytest.mark.parametrize("value", ["explode", "Release", "", "hold "])
def test_bad_on_timeout_is_refused(value: str) -> None:
    message = _refused({"brake": {"on_timeout": value}})
    assert "[brake] on_timeout" in message
    assert '"release"' in message
    assert '"hold"' in message


@pytest.mark.parametrize("value", ["release", "hold"])
def test_on_timeout_takes_both_documented_values(value: str) -> None:
    assert parse_config({"brake": {"on_timeout": value}}).brake.on_timeout == value


def test_config_error_is_a_bad_request() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"api": {"bogus": 1}})
    assert info.value.code == "bad_request"
    assert info.value.status == 400


def test_replace_section_changes_only_the_named_keys() -> None:
    base = parse_config({"peer": {"addresses": ["a:1"]}, "notes": {"max_bytes": 99}})
    changed = replace_section(base, "peer", port=0, mdns=False)
    assert changed.peer == PeerConfig(port=0, mdns=False, addresses=("a:1",))
    assert changed.notes == NotesConfig(max_bytes=99)
    assert changed.api == base.api
    assert changed.versions == base.versions
    # The original is untouched (configs are frozen values).
    assert base.peer == PeerConfig(addresses=("a:1",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.peer.port = 1  # type: ignore[misc]


def test_replace_section_chains_like_the_daemon_flags() -> None:
    config = replace_section(Config(), "api", port=0)
    config = replace_section(config, "peer", addresses=(*config.peer.addresses, "h:2"))
    config = replace_section(config, "peer", mdns=False)
    assert config.api.port == 0
    assert config.peer == PeerConfig(port=7421, mdns=False, addresses=("h:2",))
    assert config.versions == VersionsConfig()


def test_replace_section_refuses_unknown_keys() -> None:
    with pytest.raises(TypeError):
        replace_section(Config(), "api", bogus=1)


@pytest.mark.parametrize(("section", "key", "value"), [
    ("live", "max_sockets", 0), ("live", "max_sockets_per_token", 0), ("live", "max_sockets_per_note", 0),
    ("live", "max_update_bytes", 0), ("live", "max_awareness_state_bytes", 0),
    ("live", "max_awareness_state_bytes", 65537), ("live", "awareness_per_second", 0),
    ("peer", "max_concurrent_joins", 0), ("peer", "join_attempts_per_minute", 0),
])
def test_issue_33_bounds_refuse_values_that_would_disable_or_break_them(section: str, key: str,
                                                                         value: Any) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config({section: {key: value}})


def test_issue_33_bounds_take_their_values() -> None:
    config = parse_config({"live": {"max_sockets": 10, "max_update_bytes": 4096, "awareness_per_second": 2.5},
                           "peer": {"max_concurrent_joins": 1, "join_attempts_per_minute": 3}})
    live = config.live
    assert (live.max_sockets, live.max_update_bytes, live.awareness_per_second) == (10, 4096, 2.5)
    assert (config.peer.max_concurrent_joins, config.peer.join_attempts_per_minute) == (1, 3)
