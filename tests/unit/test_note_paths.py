"""Unit tests for stet.sync.note_paths (SPEC §2 "path", §3.13 containment)."""

from __future__ import annotations

import os
import sys
import unicodedata
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stet.sync.note_paths import (
    MAX_PATH_BYTES,
    MAX_SEGMENT_BYTES,
    InvalidPath,
    casefold_key,
    is_note_name,
    normalize_note_path,
    resolve_inside,
    resolve_inside_str,
    windows_refusal,
)

# --------------------------------------------------------------------------- normalize

ACCEPTED = [
    ("a.md", "a.md"),
    ("notes/daily/2024-01-01.md", "notes/daily/2024-01-01.md"),
    (".hidden.md", ".hidden.md"),
    ("a..b.md", "a..b.md"),
    ("...md", "...md"),
    (" leading space.md", " leading space.md"),
    ("Notes/Ünïcødé 日本語 🙂.md", "Notes/Ünïcødé 日本語 🙂.md"),
    ("e\u0301.md", "\u00e9.md"),  # NFD -> NFC
    ("dir/e\u0301/x.md", "dir/\u00e9/x.md"),
    ("console.md", "console.md"),  # starts with CON but is not CON
    ("com10.md", "com10.md"),
    ("lpt.md", "lpt.md"),
    ("nul-ish.md", "nul-ish.md"),
    ("~/a.md", "~/a.md"),
    ("a" * MAX_SEGMENT_BYTES, "a" * MAX_SEGMENT_BYTES),
    ("/".join(["a" * 200] * 5) + "/" + "b" * 19, "/".join(["a" * 200] * 5) + "/" + "b" * 19),
]


@pytest.mark.parametrize(("raw", "expected"), ACCEPTED)
def test_accepted_paths(raw: str, expected: str) -> None:
    assert normalize_note_path(raw) == expected
    assert normalize_note_path(expected) == expected


# (raw, a word the reason must contain)
REFUSED = [
    # empty / absolute
    ("", "empty"),
    ("/x", "absolute"),
    ("/", "absolute"),
    ("//", "absolute"),
    ("//server/share/a.md", "absolute"),
    ("C:x", "drive"),
    ("C:/x.md", "drive"),
    ("c:", "drive"),
    # backslash
    ("a\\b.md", "backslash"),
    ("\\x.md", "backslash"),
    ("\\\\server\\share", "backslash"),
    ("..\\x.md", "backslash"),
    # dot segments
    ("..", "'..'"),
    ("../a.md", "'..'"),
    ("a/../b.md", "'..'"),
    ("a/..", "'..'"),
    (".", "'.'"),
    ("./a.md", "'.'"),
    ("a/./b.md", "'.'"),
    # empty segments, trailing slash
    ("a//b.md", "empty segment"),
    ("a/", "ends with '/'"),
    ("a/b/", "ends with '/'"),
    # control characters: NUL, other C0, DEL, C1
    ("a\x00.md", "control"),
    ("a\x01.md", "control"),
    ("a\n.md", "control"),
    ("a\r.md", "control"),
    ("a\t.md", "control"),
    ("a\x1f.md", "control"),
    ("a\x7f.md", "control"),
    ("a\x80.md", "control"),
    ("a\x85.md", "control"),
    ("a\x9f.md", "control"),
    ("dir\x00/a.md", "control"),
    # Windows-reserved names, any case, with or without extension, in any segment
    ("CON", "reserved"),
    ("con", "reserved"),
    ("Con.md", "reserved"),
    ("PRN.txt", "reserved"),
    ("aux.md", "reserved"),
    ("NUL", "reserved"),
    ("nul.tar.gz", "reserved"),
    ("COM1.md", "reserved"),
    ("com9", "reserved"),
    ("LPT1.md", "reserved"),
    ("lpt9.txt", "reserved"),
    ("COM\u00b9.md", "reserved"),
    ("con .md", "reserved"),
    ("notes/CON/a.md", "reserved"),
    ("notes/aux", "reserved"),
    # trailing dot or space in a segment
    ("a.", "ends with '.' or a space"),
    ("a.md.", "ends with '.' or a space"),
    ("a.md ", "ends with '.' or a space"),
    ("dir./a.md", "ends with '.' or a space"),
    ("dir /a.md", "ends with '.' or a space"),
    ("...", "ends with '.' or a space"),
    (" ", "ends with '.' or a space"),
    # forbidden characters
    ("a<b.md", "forbidden character '<'"),
    ("a>b.md", "forbidden character '>'"),
    ("ab:c.md", "forbidden character ':'"),
    ('a"b.md', "forbidden character '\"'"),
    ("a|b.md", "forbidden character '|'"),
    ("a?b.md", "forbidden character '?'"),
    ("a*b.md", "forbidden character '*'"),
    ("dir/x:y/a.md", "forbidden character ':'"),
    # lengths (UTF-8 bytes, not characters)
    ("a" * (MAX_SEGMENT_BYTES + 1), "255"),
    ("é" * 128, "255"),  # 128 characters, 256 bytes
    ("dir/" + "b" * (MAX_SEGMENT_BYTES + 1) + ".md", "255"),
    ("/".join(["a" * 200] * 5) + "/" + "b" * 20, "1024"),  # 1025 bytes
    ("/".join(["é" * 100] * 6), "1024"),
    # not encodable (lone surrogate, as os.fsdecode gives for undecodable names)
    ("a\udcff.md", "UTF-8"),
]


_WINDOWS_WORDS = ("drive", "reserved", "ends with '.' or a space", "forbidden character")
# What only Windows cannot hold (issue 37 item 6): held on POSIX, refused where a Windows
# file system would have to hold it (``windows_refusal``).
WINDOWS_ONLY = [(raw, why) for raw, why in REFUSED if any(w in why for w in _WINDOWS_WORDS)]
REFUSED = [(raw, why) for raw, why in REFUSED if (raw, why) not in WINDOWS_ONLY]


@pytest.mark.parametrize(("raw", "reason_part"), WINDOWS_ONLY)
def test_names_only_windows_refuses(raw: str, reason_part: str) -> None:
    reason = windows_refusal(unicodedata.normalize("NFC", raw))
    assert reason is not None
    assert reason_part in reason
    if sys.platform != "win32":
        assert normalize_note_path(raw) == unicodedata.normalize("NFC", raw)  # a POSIX file system holds it


def test_a_quote_in_a_hebrew_name_is_a_name_posix_holds() -> None:
    path = 'he/רישיונות ותשלום/הנחות לחינוך ולמלכ"רים.md'
    assert windows_refusal(path) == "path contains a forbidden character '\"'"
    if sys.platform != "win32":
        assert normalize_note_path(path) == path
    assert windows_refusal("he/plain name.md") is None


@pytest.mark.parametrize(("raw", "reason_part"), REFUSED)
def test_refused_paths(raw: str, reason_part: str) -> None:
    with pytest.raises(InvalidPath) as info:
        normalize_note_path(raw)
    assert reason_part in info.value.reason
    assert info.value.path == raw
    assert isinstance(info.value, ValueError)


def test_length_limits_are_exact() -> None:
    assert normalize_note_path("a" * MAX_SEGMENT_BYTES) == "a" * MAX_SEGMENT_BYTES
    total = "/".join(["a" * 200] * 5) + "/" + "b" * 19
    assert len(total.encode()) == MAX_PATH_BYTES
    assert normalize_note_path(total) == total


def test_length_is_measured_after_nfc() -> None:
    # 85 x (e + combining acute) = 255 bytes NFC (2 bytes each = 170) but 255 NFD bytes.
    nfd = "e\u0301" * 85
    assert len(nfd.encode()) == 255
    assert normalize_note_path(nfd) == "\u00e9" * 85


def test_invalid_path_message_and_reason() -> None:
    err = InvalidPath("path is empty", "")
    assert err.reason == "path is empty"
    assert "path is empty" in str(err)
    assert InvalidPath("x").path is None


def test_non_string_refused() -> None:
    with pytest.raises(InvalidPath):
        normalize_note_path(cast(Any, b"a.md"))


def test_non_string_refused_even_unhashable() -> None:
    # (the answers are kept per string: a list must still be refused as a path, not fail
    # as a dict key)
    with pytest.raises(InvalidPath):
        normalize_note_path(cast(Any, ["a.md"]))


def test_a_path_asked_again_is_answered_from_what_was_kept() -> None:
    from stet.sync import note_paths

    raw = "kept/Cafe\u0301 note.md"
    first = normalize_note_path(raw)
    before = note_paths._normalized.cache_info().hits
    assert normalize_note_path(raw) == first == unicodedata.normalize("NFC", raw)
    assert note_paths._normalized.cache_info().hits == before + 1
    # a refusal is never kept: refused each time, with its reason
    for _ in range(2):
        with pytest.raises(InvalidPath, match="control character"):
            normalize_note_path("bad\x00name.md")


_path_chars = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(list('/.\\:*?<>|" \x00\x7f\x85e\u0301\u00e9Aa')),
)
_path_text = st.text(_path_chars, max_size=40)
_segments = st.lists(
    st.one_of(
        st.sampled_from(["..", ".", "", "CON", "nul.md", "a.", "a ", "x", "e\u0301"]),
        st.text(_path_chars, min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=6,
).map("/".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_path_text, _segments))
def test_normalize_is_safe_and_idempotent(raw: str) -> None:
    try:
        out = normalize_note_path(raw)
    except InvalidPath as exc:
        reason = exc.reason
        assert reason, "every refusal carries a reason"
        return
    segs = out.split("/")
    assert ".." not in segs
    assert "." not in segs
    assert "" not in segs
    assert not out.startswith("/")
    assert "\\" not in out
    assert not any(unicodedata.category(ch) == "Cc" for ch in out)
    assert unicodedata.is_normalized("NFC", out)
    assert len(out.encode("utf-8")) <= MAX_PATH_BYTES
    assert normalize_note_path(out) == out
    assert casefold_key(out) == casefold_key(raw)


# --------------------------------------------------------------------------- is_note_name

EXTS = (".md", ".markdown", ".txt")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a.md", True),
        ("A.MD", True),
        ("dir/b.Markdown", True),
        ("x.txt", True),
        ("x.tar.md", True),
        ("a.md.bak", False),
        ("a.mdx", False),
        ("amd", False),
        ("image.png", False),
        (".md", False),  # a dotfile, not a note
        ("dir/.md", False),
        ("md/readme", False),
        (".stetignore", False),
    ],
)
def test_is_note_name(path: str, expected: bool) -> None:
    assert is_note_name(path, EXTS) is expected


def test_is_note_name_extension_forms() -> None:
    assert is_note_name("a.org", ["org"])
    assert is_note_name("a.ORG", [".Org"])
    assert not is_note_name("a.md", [])


# --------------------------------------------------------------------------- casefold_key


def test_casefold_key_collisions() -> None:
    assert casefold_key("Notes/A.md") == casefold_key("notes/a.md")
    assert casefold_key("NOTES/README.MD") == casefold_key("notes/readme.md")
    assert casefold_key("É.md") == casefold_key("é.md")
    assert casefold_key("E\u0301.md") == casefold_key("\u00e9.md")  # across normal forms
    assert casefold_key("Straße.md") == casefold_key("STRASSE.md")  # full folding: strict
    assert casefold_key("Notes/A.md") != casefold_key("Notes/B.md")
    assert casefold_key("a/b.md") != casefold_key("a-b.md")


def test_casefold_key_is_nfc() -> None:
    key = casefold_key("E\u0301COLE.md")
    assert unicodedata.is_normalized("NFC", key)
    assert key == "\u00e9cole.md"


# --------------------------------------------------------------------------- resolve_inside


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    (root / "dir" / "sub").mkdir(parents=True)
    (root / "dir" / "sub" / "note.md").write_text("hi", encoding="utf-8")
    (root / "top.md").write_text("top", encoding="utf-8")
    return root.resolve()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.md").write_text("secret", encoding="utf-8")
    return out.resolve()


needs_symlinks = pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")


def test_resolve_regular_nested_file(vault: Path) -> None:
    assert resolve_inside(vault, "dir/sub/note.md") == vault / "dir" / "sub" / "note.md"
    assert resolve_inside(vault, "top.md") == vault / "top.md"


def test_resolve_inside_str_is_the_same_check_on_strings(vault: Path) -> None:
    # resolve_inside is built on it, so every resolve test here checks it too.
    for rel in ("dir/sub/note.md", "top.md", "dir/new/deeper/x.md"):
        got = resolve_inside_str(str(vault), rel)
        assert isinstance(got, str)
        assert got == str(resolve_inside(vault, rel))
        assert resolve_inside_str(str(vault) + os.sep, rel) == got
    with pytest.raises(ValueError, match="absolute"):
        resolve_inside_str("vault", "top.md")
    with pytest.raises(InvalidPath, match="not a directory"):
        resolve_inside_str(str(vault), "top.md/x.md")


def test_resolve_missing_file_in_existing_dir(vault: Path) -> None:
    assert resolve_inside(vault, "dir/new.md") == vault / "dir" / "new.md"


def test_resolve_missing_dirs_accepted(vault: Path) -> None:
    assert resolve_inside(vault, "dir/new/deeper/x.md") == vault / "dir" / "new" / "deeper" / "x.md"


@needs_symlinks
def test_resolve_refuses_symlinked_dir_outside(vault: Path, outside: Path) -> None:
    os.symlink(outside, vault / "link")
    with pytest.raises(InvalidPath, match="symlink"):
        resolve_inside(vault, "link/secret.md")
    with pytest.raises(InvalidPath, match="symlink"):
        resolve_inside(vault, "link/not-yet.md")


@needs_symlinks
def test_resolve_refuses_symlinked_file_outside(vault: Path, outside: Path) -> None:
    os.symlink(outside / "secret.md", vault / "dir" / "leak.md")
    with pytest.raises(InvalidPath, match="symlink"):
        resolve_inside(vault, "dir/leak.md")


@needs_symlinks
def test_resolve_refuses_symlink_pointing_inside(vault: Path) -> None:
    os.symlink(vault / "top.md", vault / "alias.md")
    os.symlink(vault / "dir", vault / "dirlink")
    with pytest.raises(InvalidPath, match="symlink"):
        resolve_inside(vault, "alias.md")
    with pytest.raises(InvalidPath, match="symlink"):
        resolve_inside(vault, "dirlink/sub/note.md")


@needs_symlinks
def test_resolve_refuses_dangling_symlink(vault: Path, outside: Path) -> None:
    os.symlink(outside / "does-not-exist.md", vault / "dangling.md")
    with pytest.raises(InvalidPath, match="symlink"):
        resolve_inside(vault, "dangling.md")


@needs_symlinks
def test_resolve_refuses_relative_symlink_escape(vault: Path, outside: Path) -> None:
    os.symlink(os.path.join("..", "..", "outside"), vault / "dir" / "up")
    with pytest.raises(InvalidPath, match="symlink"):
        resolve_inside(vault, "dir/up/secret.md")


@pytest.mark.parametrize(
    "rel",
    [
        "../outside/secret.md",
        "dir/../../outside/secret.md",
        "dir/sub/../../../outside/secret.md",
        "..",
        "/etc/passwd",
        "dir/./sub/note.md",
        "..\\outside\\secret.md",
        "",
    ],
)
def test_resolve_refuses_dot_dot_tricks(vault: Path, outside: Path, rel: str) -> None:
    with pytest.raises(InvalidPath):
        resolve_inside(vault, rel)


def test_resolve_refuses_file_used_as_dir(vault: Path) -> None:
    with pytest.raises(InvalidPath, match="not a directory"):
        resolve_inside(vault, "top.md/x.md")


def test_resolve_refuses_directory_as_final(vault: Path) -> None:
    with pytest.raises(InvalidPath, match="not a regular file"):
        resolve_inside(vault, "dir/sub")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_resolve_refuses_fifo(vault: Path) -> None:
    os.mkfifo(vault / "pipe.md")
    with pytest.raises(InvalidPath, match="not a regular file"):
        resolve_inside(vault, "pipe.md")


def test_resolve_refuses_unnormalized(vault: Path) -> None:
    with pytest.raises(InvalidPath, match="normalised"):
        resolve_inside(vault, "e\u0301.md")


def test_resolve_missing_root(tmp_path: Path) -> None:
    with pytest.raises(InvalidPath, match="root"):
        resolve_inside(tmp_path / "nope", "a.md")


def test_resolve_root_is_a_file(vault: Path) -> None:
    with pytest.raises(InvalidPath, match="root"):
        resolve_inside(vault / "top.md", "a.md")


def test_resolve_relative_root_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="absolute"):
        resolve_inside(Path("relative"), "a.md")


def test_characters_beside_the_control_ranges_pass_and_the_first_control_is_named() -> None:
    # U+0020 and U+007E border C0 and DEL, U+00A0 borders C1: all allowed.
    assert normalize_note_path("a b~\u00a0c.md") == "a b~\u00a0c.md"
    with pytest.raises(InvalidPath, match=r"U\+0085"):
        normalize_note_path("x/a\u0085b\u0001.md")
