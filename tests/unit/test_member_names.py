"""Which member's file system cannot hold a name (issue 37 item 6): a pure rule given the
member's declared platform, and `stet status` naming the member and why. The Windows side
is checked here only (no Windows runner): untested on a real Windows machine."""

from __future__ import annotations

from typing import Any

import pytest

from stet.client.status_view import Extras, render
from stet.sync.member_names import (
    DeclaredMember,
    holds_every_name,
    names_members_cannot_hold,
    platform_label,
    refusal_on,
)

WINDOWS_REFUSED = {
    "CON": "CON.md",
    "con, any case and extension": "notes/con.tar.md",
    "NUL in a folder": "NUL/x.md",
    "COM1 with a space before the dot": "COM1 .md",
    "LPT9": "lpt9.md",
    "a quote": 'he/הנחות לחינוך ולמלכ"רים.md',
    "a colon": "meetings/10:30 standup.md",
    "a trailing dot": "folder./n.md",
    "a trailing space": "folder /n.md",
    "a question mark": "why?.md",
    "a pipe": "a|b.md",
    "angle brackets": "<draft>.md",
    "an asterisk": "todo*.md",
    "a drive letter": "c:/x.md",
}
HELD_EVERYWHERE = ["plain.md", "ru/заметка.md", "ja/ノート.md", "ar/ملاحظة.md", "emoji 🎉.md",
                   "CONSOLE.md", "icon.md", "com10.md", "a.b.c.md", "nul-ish/x.md"]


@pytest.mark.parametrize("path", list(WINDOWS_REFUSED.values()), ids=list(WINDOWS_REFUSED))
def test_windows_refuses_what_its_file_system_cannot_hold(path: str) -> None:
    reason = refusal_on(path, "win32")
    assert reason is not None, path
    assert reason.strip(), path
    assert refusal_on(path, "cygwin") == reason  # writes through Windows' file system
    for posix in ("linux", "darwin", "freebsd14", ""):  # "": not declared yet: refuses nothing
        assert refusal_on(path, posix) is None, (path, posix)


def test_the_reason_says_what_is_wrong() -> None:
    assert "'\"'" in (refusal_on(WINDOWS_REFUSED["a quote"], "win32") or "")
    assert "':'" in (refusal_on(WINDOWS_REFUSED["a colon"], "win32") or "")
    assert "CON" in (refusal_on("CON.md", "win32") or "")
    assert "ends with '.' or a space" in (refusal_on("folder./n.md", "win32") or "")
    assert "ends with '.' or a space" in (refusal_on("folder /n.md", "win32") or "")


@pytest.mark.parametrize("path", HELD_EVERYWHERE)
def test_names_windows_holds(path: str) -> None:
    assert refusal_on(path, "win32") is None


def test_only_the_members_that_cannot_hold_a_name_are_named() -> None:
    members = [DeclaredMember("W" * 52, "office-pc", "win32"), DeclaredMember("L" * 52, "laptop", "linux"),
               DeclaredMember("M" * 52, "mac", "darwin"), DeclaredMember("O" * 52, "OLDSTET", "")]
    paths = ["ok.md", "CON.md", 'he/ולמלכ"רים.md', "10:30.md"]
    found = names_members_cannot_hold(paths, members)
    assert [(r.path, r.member) for r in found] == [("10:30.md", "office-pc"), ("CON.md", "office-pc"),
                                                     ('he/ולמלכ"רים.md', "office-pc")]
    assert found[0].to_json() == {"path": "10:30.md", "device": "W" * 52, "member": "office-pc",
                                  "platform": "Windows", "reason": "path contains a forbidden character ':'"}
    assert found[0].line() == ("office-pc (Windows) cannot hold 10:30.md: "
                               "path contains a forbidden character ':'")
    assert names_members_cannot_hold(paths, members[1:]) == []  # every member POSIX: none
    assert len(names_members_cannot_hold([f"{i}:x.md" for i in range(500)], members, limit=7)) == 7


def test_only_windows_platforms_refuse_names() -> None:
    assert not holds_every_name("win32")
    assert not holds_every_name("msys")
    assert all(holds_every_name(p) for p in ("linux", "darwin", "freebsd14", ""))
    assert platform_label("win32") == "Windows"
    assert platform_label("darwin") == "macOS"


def _status(refusals: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "running": True, "pid": 1, "apiUrl": "http://127.0.0.1:1", "home": "/h", "version": "x",
        "startedAt": 0, "deviceId": "D" * 52, "transfers": {"files": 0, "bytes": 0, "done": 0},
        "vaults": [{"id": "v1", "name": "notes", "path": "/vault", "notes": 3, "pendingWrites": 0,
                    "skipped": [], "membersCannotHold": refusals, "otherFiles": 0, "indexedNotes": 3}],
    }


def test_status_says_which_member_cannot_hold_a_name_and_why() -> None:
    office = DeclaredMember("W" * 52, "office-pc", "win32")
    refusal = names_members_cannot_hold(["meetings/10:30.md"], [office])
    text = "\n".join(render(_status([r.to_json() for r in refusal]), Extras(held={"notes": 0})))
    assert ("  not on office-pc (Windows) notes/meetings/10:30.md: path contains a forbidden character ':'"
            in text), text
    quiet = "\n".join(render(_status([]), Extras(held={"notes": 0})))
    assert "not on " not in quiet
