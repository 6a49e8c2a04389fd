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
        globs: tuple[str, ...] = self.write
        if action == READ:
            globs = self.read + self.write
        elif action == APPEND:
            globs = self.append + self.write
        return any(glob_matches(g, path) for g in globs)

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
