"""Versions follow the read scope like the change log does (issue 33, finding 8).

A note or attachment moved out of hiding (``secret/…`` → ``public/…``) is seen arriving
by a token that reads ``public/**``; what it was while hidden is not shown: no version
saved at the hidden path is listed, shown or restored, and no ``path`` / ``savedAtPath``
names it. The owner still sees every version.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from stet.client.daemon_link import ApiError, quote_path
from tests.harness import DaemonProcess, wait_until
from tests.integration.agent_support import owner_agent
from tests.integration.attachment_support import wait_recorded
from tests.integration.bridge_support import start_daemon
from tests.integration.versions_support import agent_client, note_url, versions_of, wait_versions

LONG = "".join(f"line {i:02d} of what was written while the note was hidden\n" for i in range(10))
A = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3 + b"hidden-era bytes"
B = b"\x89PNG\r\n\x1a\n" + bytes(range(255, -1, -1)) * 2 + b"second"


def test_note_versions_saved_at_a_hidden_path_are_not_shown(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    (vault_dir / "secret").mkdir()
    (vault_dir / "secret" / "mv2.md").write_text(LONG, encoding="utf-8")
    d = start_daemon(home, vault_dir, daemon_factory)
    d.wait_content("secret/mv2.md", LONG)
    owner = owner_agent(d)
    try:
        owner.ok(owner.update("secret/mv2.md", "cut short\n"))  # a large deletion: a version
        wait_versions(d, "secret/mv2.md", 1)
        owner.ok(owner.move("secret/mv2.md", "public/mv2.md"))
        owner.ok(owner.update("public/mv2.md", LONG.replace("hidden", "public")))
        owner.ok(owner.update("public/mv2.md", "cut again\n"))  # a version saved at public/
    finally:
        owner.close()
    everything = wait_versions(d, "public/mv2.md", 2)
    assert {v["savedAtPath"] for v in everything} == {"secret/mv2.md", "public/mv2.md"}
    hidden = next(v for v in everything if v["savedAtPath"] == "secret/mv2.md")

    reader = agent_client(d, "reader", {"read": ["public/**"], "append": [], "write": ["public/**"]})
    shown = versions_of(reader, "public/mv2.md")
    assert [v["savedAtPath"] for v in shown] == ["public/mv2.md"], shown
    assert "secret" not in str(shown)
    for request in (("GET", f"{note_url('public/mv2.md')}/versions/{hidden['id']}", None),
                    ("POST", f"{note_url('public/mv2.md')}/versions/{hidden['id']}/restore", {})):
        with pytest.raises(ApiError) as refused:
            reader.request(*request)
        assert refused.value.code == "not_found", request
        assert "secret" not in str(refused.value)
    assert d.content("public/mv2.md") == "cut again\n"  # nothing restored
    visible = reader.request("GET", f"{note_url('public/mv2.md')}/versions/{shown[0]['id']}")
    assert visible["content"] == LONG.replace("hidden", "public")


def test_attachment_versions_kept_at_a_hidden_path_are_not_shown(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    (vault_dir / "secret").mkdir()
    (vault_dir / "public").mkdir()
    (vault_dir / "secret" / "blob.bin").write_bytes(A)
    d = start_daemon(home, vault_dir, daemon_factory)
    wait_recorded(home, "secret/blob.bin", hashlib.sha256(A).hexdigest())
    (vault_dir / "secret" / "blob.bin").write_bytes(B)  # overwritten: A is kept at secret/
    wait_recorded(home, "secret/blob.bin", hashlib.sha256(B).hexdigest())
    (vault_dir / "secret" / "blob.bin").rename(vault_dir / "public" / "blob.bin")
    wait_recorded(home, "public/blob.bin", hashlib.sha256(B).hexdigest())
    url = f"/v1/vaults/notes/attachments/{quote_path('public/blob.bin')}/versions"

    def owner_sees_it() -> list[dict[str, object]] | None:
        versions: list[dict[str, object]] = d.client.request("GET", url)["versions"]
        return versions or None

    (kept,) = wait_until(owner_sees_it, timeout=30, what="the version under the new path")
    assert kept["path"] == "secret/blob.bin"  # the owner sees where it was kept
    reader = agent_client(d, "reader", {"read": ["public/**"], "append": [], "write": ["public/**"]})
    listed = reader.request("GET", url)
    assert listed["versions"] == [], listed
    for method, tail in (("GET", f"/{kept['id']}"), ("POST", f"/{kept['id']}/restore")):
        with pytest.raises(ApiError) as refused:
            reader.request(method, url + tail, {} if method == "POST" else None)
        assert refused.value.code == "not_found", (method, tail)
        assert "secret" not in str(refused.value)
    assert (vault_dir / "public" / "blob.bin").read_bytes() == B
