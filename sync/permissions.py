"""Agent token scopes (SPEC §6.2): which paths a token may read, append to, or write.

Globs: ``**`` matches across folders, ``*`` and ``?`` within one path segment.
``write`` implies ``append`` and ``read`` on the same paths; ``append`` implies nothing
else (an append-only log can be written to without being read). Enforced by the daemon,
never taken from a request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .errors import StetError

READ, APPEND, WRITE = "read", "append", "write"


@lru_cache(maxsize=1024)
def _glob_regex(glob: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def glob_matches(glob: str, path: str) -> bool:
    return _glob_regex(glob).match(path) is not None


_NOT_GLOB_SYNTAX = "[]{}\\"


def glob_problem(glob: str) -> str | None:
    """Why ``glob`` cannot be a new token's scope, in a person's words; None if it can.

    Stricter than ``validate_glob`` (which tokens already stored must keep passing): Stet
    globs know only ``*``, ``**`` and ``?``, so brackets, braces and backslashes, which in
    other glob dialects mean classes, alternatives or escapes, are refused rather than
    silently matched as plain characters."""
    if not glob:
        return "it is empty"
    if glob.startswith("/"):
        return "it starts with / (globs are relative to the vault folder)"
    if "\x00" in glob or any(ord(c) < 0x20 for c in glob):
        return "it holds control characters"
    if ".." in glob.split("/"):
        return "it holds a .. segment"
    bad = sorted({c for c in glob if c in _NOT_GLOB_SYNTAX})
    if bad:
        return f"{' '.join(bad)} is not glob syntax here (only *, ** and ? are)"
    if "***" in glob:
        return "*** is not a glob (** crosses folders)"
    return None


def validate_glob(glob: str) -> str:
    if not glob or glob.startswith("/") or "\x00" in glob or ".." in glob.split("/"):
        raise StetError(f"invalid scope glob {glob!r}", code="bad_request")
    return glob


@dataclass(frozen=True, slots=True)
class Scopes:
    read: tuple[str, ...] = ()
    append: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    owner: bool = field(default=False)

    @classmethod
    def everything(cls) -> Scopes:
        return cls(owner=True)

    def allows(self, action: str, path: str) -> bool:
        if self.owner:
            return True
        return _allowed(self, action, path)

    def check(self, action: str, path: str) -> None:
        if not self.allows(action, path):
            raise StetError(f"this token may not {action} {path}", code="forbidden", path=path, action=action)

    def to_json(self) -> dict[str, Any]:
        return {"read": list(self.read), "append": list(self.append), "write": list(self.write)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Scopes:
        return cls(
            read=tuple(validate_glob(g) for g in data.get("read", [])),
            append=tuple(validate_glob(g) for g in data.get("append", [])),
            write=tuple(validate_glob(g) for g in data.get("write", [])),
        )


@lru_cache(maxsize=4096)
def _allowed(scopes: Scopes, action: str, path: str) -> bool:
    """A scope decision, remembered: an agent asks about the same few paths again and again
    (an append per request). Keyed by the scopes' value, so a token whose scopes change
    (a new ``Principal`` after home.db changed) or that is revoked (refused before any
    scope is asked) is never answered from another's decision."""
    globs: tuple[str, ...] = scopes.write
    if action == READ:
        globs = scopes.read + scopes.write
    elif action == APPEND:
        globs = scopes.append + scopes.write
    return any(glob_matches(g, path) for g in globs)
