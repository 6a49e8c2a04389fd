"""sync/vault_files.py: what the files API lists and opens -- regular files only, no
symlinks, ignore rules applied, names that round-trip -- and hashes cached by stat."""

from __future__ import annotations

import hashlib
import os
import unicodedata
from pathlib import Path

import pytest

from stet.sync.ignore_rules import IgnoreRules
from stet.sync.note_paths import InvalidPath
from stet.sync.vault_files import HashCache, list_files, open_file

EXT = (".md", ".markdown", ".txt")


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    (root / "img").mkdir(parents=True)
    (root / "img" / "cat.png").write_bytes(b"\x89PNG\x00\x01")
    (root / "notes").mkdir()
    (root / "notes" / "a.md").write_text("# a\n")
    (root / "run.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o755)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    (root / "x.swp").write_bytes(b"swap")
    (root / ".stetignore").write_text("private/\n")
    (root / "private").mkdir()
    (root / "private" / "p.pdf").write_bytes(b"%PDF")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (root / "img" / "link.png").symlink_to(outside / "secret.txt")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    nfd = unicodedata.normalize("NFD", "café.png")
    (root / nfd).write_bytes(b"nfd")
    return root


def test_lists_regular_files_with_kinds_and_nothing_else(vault: Path) -> None:
    files = list_files(vault, IgnoreRules.load(vault), EXT)
    # .stetignore itself is covered by the default ".stet*" rule
    assert [f.path for f in files] == ["img/cat.png", "notes/a.md", "run.sh"]
    kinds = {f.path: f.kind for f in files}
    assert kinds["notes/a.md"] == "note"
    assert kinds["img/cat.png"] == "attachment"
    assert [f.path for f in files if f.executable] == ["run.sh"]
    assert [f.path for f in list_files(vault, IgnoreRules.load(vault), EXT, "img/")] == ["img/cat.png"]
    assert [f.path for f in list_files(vault, IgnoreRules.load(vault), EXT, "no")] == ["notes/a.md"]


def test_open_refuses_links_ignored_and_bad_paths(vault: Path) -> None:
    rules = IgnoreRules.load(vault)
    fd, f = open_file(vault, rules, EXT, "img/cat.png")
    os.close(fd)
    assert f.size == 6
    for bad in ("img/link.png", "linked/secret.txt", "private/p.pdf", ".git/HEAD", "../outside/secret.txt",
                "/etc/passwd", "img", "img/../run.sh"):
        with pytest.raises(InvalidPath):
            open_file(vault, rules, EXT, bad)
    with pytest.raises(FileNotFoundError):
        open_file(vault, rules, EXT, "img/none.png")


def test_hashes_are_cached_by_stat(vault: Path) -> None:
    rules = IgnoreRules.load(vault)
    cache = HashCache(vault, rules, EXT)
    (f,) = [x for x in list_files(vault, rules, EXT) if x.path == "img/cat.png"]
    assert cache.sha256(f) == hashlib.sha256(b"\x89PNG\x00\x01").hexdigest()
    assert cache.sha256(f) == cache.sha256(f)
    assert cache.hashed == 1  # read once
    (vault / "img" / "cat.png").write_bytes(b"changed")
    (f,) = [x for x in list_files(vault, rules, EXT) if x.path == "img/cat.png"]
    assert cache.sha256(f) == hashlib.sha256(b"changed").hexdigest()
    assert cache.hashed == 2
