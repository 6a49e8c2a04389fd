"""Configuration values and their defaults (SPEC §8), parsed from a plain dict.

Only ``stet.daemon.app.main`` and the CLI entry read the file and the environment; they
hand the parsed ``Config`` to everything else.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from .errors import StetError


class ConfigError(StetError):
    code = "bad_request"


@dataclass(frozen=True, slots=True)
class ApiConfig:
    host: str = "127.0.0.1"
    port: int = 7420


@dataclass(frozen=True, slots=True)
class PeerConfig:
    port: int = 7421
    mdns: bool = True
    addresses: tuple[str, ...] = ()
    # Where the peer port listens (all interfaces: peers are on other machines) and
    # which interfaces mDNS uses (empty: zeroconf's default, all of them).
    host: str = "0.0.0.0"
    mdns_interfaces: tuple[str, ...] = ()
    # Addresses written into invites (empty: this machine's addresses, loopback last).
    advertise: tuple[str, ...] = ()
    # A local delete reaches peers after this many seconds, so the burst brake can hold
    # a mass deletion before anyone hears of it. -1: the brake's window_seconds.
    delete_delay_seconds: float = -1.0
    # Joins on the peer port (issue 33): pairing checks at once (each runs a ~0.1 s child
    # process; a request over it is told "busy"), and join sockets per address a minute
    # (past it: HTTP 429 before any upgrade).
    max_concurrent_joins: int = 2
    join_attempts_per_minute: int = 10


@dataclass(frozen=True, slots=True)
class NotesConfig:
    extensions: tuple[str, ...] = (".md", ".markdown", ".txt")
    max_bytes: int = 10 * 1024 * 1024
    rescan_seconds: int = 3600
    settle_ms: int = 10
    unclosed_write_ms: int = 2000


@dataclass(frozen=True, slots=True)
class VersionsConfig:
    idle_minutes: float = 10
    keep: int = 50
    shrink_ratio: float = 0.2
    shrink_min_chars: int = 200
    keep_shrink: int = 10
    shrink_keep_days: float = 30


@dataclass(frozen=True, slots=True)
class BrakeConfig:
    notes: int = 10
    window_seconds: float = 60
    hold_minutes: float = 30
    on_timeout: str = "release"
    trust_git: bool = True  # a burst made by git is not held (SPEC §3.16)


@dataclass(frozen=True, slots=True)
class StoreConfig:
    # NORMAL survives a process crash (kill -9); FULL also survives power loss.
    synchronous: str = "NORMAL"
    compact_after_updates: int = 200


@dataclass(frozen=True, slots=True)
class AttachmentsConfig:
    # A file over this is skipped and reported, never synced (SPEC §2 attachment).
    max_bytes: int = 2 * 1024 * 1024 * 1024
    # Per vault: the old bytes of replaced/deleted attachments kept as versions, oldest
    # dropped first (SPEC §3.14).
    keep_bytes: int = 1024 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LiveConfig:
    """Live editing over y-websocket (SPEC §6.13)."""

    keepalive_seconds: float = 10  # a message after this much silence (JS clients drop at 30 s)
    max_queued_bytes: int = 8 * 1024 * 1024  # a client further behind than this is dropped
    max_queued_messages: int = 2048
    # Sockets open at once (issue 33): in all, of one token (the web page's tabs count as
    # the owner's), on one note. The next is closed 4429.
    max_sockets: int = 256
    max_sockets_per_token: int = 64
    max_sockets_per_note: int = 64
    # One update message; a bigger one is refused (4413) before it is decoded: decoding
    # costs up to ~130 ns a byte (an update of many one-character items), on the loop.
    max_update_bytes: int = 2 * 1024 * 1024
    # Awareness (cursors, names): one client's state, and the updates a socket may send
    # (a burst of twice the rate, then this many a second); over either: 4429 / 4413.
    max_awareness_state_bytes: int = 8 * 1024
    awareness_per_second: float = 30.0


@dataclass(frozen=True, slots=True)
class Config:
    api: ApiConfig = field(default_factory=ApiConfig)
    peer: PeerConfig = field(default_factory=PeerConfig)
    notes: NotesConfig = field(default_factory=NotesConfig)
    versions: VersionsConfig = field(default_factory=VersionsConfig)
    brake: BrakeConfig = field(default_factory=BrakeConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    attachments: AttachmentsConfig = field(default_factory=AttachmentsConfig)
    live: LiveConfig = field(default_factory=LiveConfig)


_SECTIONS: dict[str, type[Any]] = {
    "api": ApiConfig,
    "peer": PeerConfig,
    "notes": NotesConfig,
    "versions": VersionsConfig,
    "brake": BrakeConfig,
    "store": StoreConfig,
    "attachments": AttachmentsConfig,
    "live": LiveConfig,
}


def _coerce(section: str, key: str, kind: Any, value: Any) -> Any:
    """Check ``value`` against the key's declared type ``kind`` (not its default's
    type: ``idle_minutes: float = 10`` takes ``2.5``)."""
    where = f"[{section}] {key}"
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be a whole number, not {value!r}")
        if value < 0:
            raise ConfigError(f"{where} must not be negative")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, not {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be a finite number, not {value!r}")
        if value < 0:
            raise ConfigError(f"{where} must not be negative")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, not {value!r}")
        return value
    if typing.get_origin(kind) is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings")
        return tuple(value)
    raise ConfigError(f"{where}: unsupported value {value!r}")  # pragma: no cover


def parse_config(data: dict[str, Any]) -> Config:
    """Build a Config from parsed TOML, refusing unknown keys and wrong types."""
    sections: dict[str, Any] = {}
    for name, value in data.items():
        cls = _SECTIONS.get(name)
        if cls is None:
            raise ConfigError(f"unknown section [{name}] in config.toml")
        if not isinstance(value, dict):
            raise ConfigError(f"[{name}] must be a table")
        kinds = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in value.items():
            if key not in known:
                raise ConfigError(f"unknown key {key!r} in [{name}]")
            kwargs[key] = _coerce(name, key, kinds[key], raw)
        sections[name] = cls(**kwargs)
    config = Config(**sections)
    if config.brake.on_timeout not in ("release", "hold"):
        raise ConfigError('[brake] on_timeout must be "release" or "hold"')
    if config.store.synchronous.upper() not in ("NORMAL", "FULL", "EXTRA"):
        raise ConfigError('[store] synchronous must be "NORMAL", "FULL" or "EXTRA"')
    if not 0 < config.live.keepalive_seconds < 30:
        raise ConfigError("[live] keepalive_seconds must be above 0 and below 30 "
                          "(a client drops a socket that was quiet for 30 s)")
    if config.live.max_queued_messages < 1 or config.live.max_queued_bytes < 1:
        raise ConfigError("[live] max_queued_messages and max_queued_bytes must be at least 1")
    for key in ("max_sockets", "max_sockets_per_token", "max_sockets_per_note", "max_update_bytes",
                "max_awareness_state_bytes"):
        if getattr(config.live, key) < 1:
            raise ConfigError(f"[live] {key} must be at least 1")
    if config.live.max_awareness_state_bytes > 64 * 1024:
        raise ConfigError("[live] max_awareness_state_bytes must be at most 65536 "
                          "(the protocol decoder's own limit)")
    if config.live.awareness_per_second <= 0:
        raise ConfigError("[live] awareness_per_second must be above 0")
    if config.peer.max_concurrent_joins < 1 or config.peer.join_attempts_per_minute < 1:
        raise ConfigError("[peer] max_concurrent_joins and join_attempts_per_minute must be at least 1")
    for section in ("api", "peer"):
        if getattr(config, section).port > 65535:
            raise ConfigError(f"[{section}] port must be between 0 and 65535")
    return config


def replace_section(config: Config, section: str, **changes: Any) -> Config:
    """A copy of ``config`` with some keys of one section replaced (CLI flags)."""
    current = getattr(config, section)
    return dataclasses.replace(config, **{section: dataclasses.replace(current, **changes)})
