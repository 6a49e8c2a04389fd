"""Kinds and sources as str-valued enums (issue 11): what they parse and how they compare."""

from __future__ import annotations

import json

import pytest

from stet.daemon.notes.changes import Change
from stet.daemon.safety.versions_keeper import origin
from stet.sync.change_kinds import (
    ChangeKind,
    Source,
    agent_source,
    is_git,
    is_local_agent,
    is_peer,
    on_device,
    peer_source,
    source_kind,
)
from stet.sync.versions import KINDS, VersionKind


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("disk", Source.DISK),
        ("git", Source.GIT),
        ("git on DEV", Source.GIT),
        ("agent:bot", Source.AGENT),
        ("agent:bot on DEV", Source.AGENT),
        ("peer:DEV", Source.PEER),
        ("restore", Source.RESTORE),
        ("cli", Source.CLI),
        ("ui", Source.UI),
        ("pairing", Source.PAIRING),
        ("import", Source.IMPORT),
        ("something else", Source.OTHER),
        ("", Source.OTHER),
    ],
)
def test_a_source_string_is_classified_by_its_first_word(source: str, kind: Source) -> None:
    assert source_kind(source) is kind


def test_made_sources_round_trip() -> None:
    assert agent_source("bot") == "agent:bot"
    assert source_kind(agent_source("bot")) is Source.AGENT
    assert peer_source("D1") == "peer:D1"
    assert is_peer(peer_source("D1"))
    assert on_device("git", "D1") == "git on D1"
    assert is_git(on_device(Source.GIT, "D1"))
    assert is_local_agent("agent:bot")
    assert not is_local_agent("agent:bot on D1")
    assert not is_git("gitter")
    assert not is_peer("peerless")


def test_enums_are_their_strings_in_json_and_comparisons() -> None:
    assert ChangeKind.CHANGED == "changed"
    assert ChangeKind.DELETED == "deleted"
    assert json.dumps({"k": ChangeKind.MOVED, "s": Source.DISK, "v": VersionKind.IDLE}) == (
        '{"k": "moved", "s": "disk", "v": "idle"}'
    )
    assert f"{Source.AGENT}:x" == "agent:x"  # format gives the value, not the member name
    assert set(KINDS) == set(VersionKind)


def test_a_change_names_who_made_it_and_origin_adds_the_device() -> None:
    c = Change(ChangeKind.CHANGED, "n", "a.md", agent_source("bot"), None, "r", device="D1")
    assert c.made_by is Source.AGENT
    assert origin(c) == "agent:bot on D1"
    peer = Change(ChangeKind.CHANGED, "n", "a.md", peer_source("D1"), None, "r", device="D1")
    assert origin(peer) == "peer:D1"
    assert peer.made_by is Source.PEER
