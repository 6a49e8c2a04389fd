"""Which member's file system cannot hold a name (SPEC §3.13; issue 37 item 6).

Every name the members' file systems can hold syncs; a name is refused only on a member
whose file system cannot hold it, and the others say which member and why. A member
declares its platform in the vault index (``sys.platform`` at its start); the rule for a
platform is a pure function of the (valid, normalised) path:

- ``win32`` (and ``cygwin``/``msys``, which write through Windows' file system): what
  :func:`stet.sync.note_paths.windows_refusal` refuses (``"<>:|?*``, a drive letter,
  ``CON``/``NUL``/``COM1``..., a segment ending in a dot or a space);
- every other platform (Linux, macOS, the BSDs) holds every valid path;
- a member that has not declared one yet (an older Stet, a device invited but never
  started) is not assumed to refuse anything.

Pure: no I/O. Untested on a real Windows machine (no Windows runner): the rule is
checked by unit tests only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .note_paths import windows_refusal

_WINDOWS_PLATFORMS = ("win32", "cygwin", "msys")
_SHOWN = {"win32": "Windows", "cygwin": "Windows (Cygwin)", "msys": "Windows (MSYS)",
          "linux": "Linux", "darwin": "macOS"}


def platform_label(platform: str) -> str:
    """A platform as a person reads it: ``Windows``, ``macOS``, ``Linux`` (else as given)."""
    return _SHOWN.get(platform, platform or "unknown")


def holds_every_name(platform: str) -> bool:
    """Whether a member on ``platform`` holds every valid path (no need to look at any)."""
    return platform not in _WINDOWS_PLATFORMS


def refusal_on(path: str, platform: str) -> str | None:
    """Why a member on ``platform`` cannot hold ``path`` in its folder, or None."""
    if platform in _WINDOWS_PLATFORMS:
        return windows_refusal(path)
    return None


@dataclass(frozen=True, slots=True)
class MemberRefusal:
    path: str
    device: str
    member: str  # the member as a person reads it (its name, else its short ID)
    platform: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "device": self.device, "member": self.member,
                "platform": platform_label(self.platform), "reason": self.reason}

    def line(self) -> str:
        return f"{self.member} ({platform_label(self.platform)}) cannot hold {self.path}: {self.reason}"


@dataclass(frozen=True, slots=True)
class DeclaredMember:
    device: str
    label: str
    platform: str


def names_members_cannot_hold(paths: Iterable[str], members: Iterable[DeclaredMember], *,
                              limit: int = 100) -> list[MemberRefusal]:
    """Each (path, member) where the member's declared platform cannot hold the path,
    sorted by path then member; at most ``limit`` of them (a status stays short). Members
    whose platform holds every name cost nothing: the paths are not looked at for them."""
    refusing = [m for m in members if not holds_every_name(m.platform)]
    if not refusing:
        return []
    out: list[MemberRefusal] = []
    for path in sorted(paths):
        for m in sorted(refusing, key=lambda m: m.label):
            reason = refusal_on(path, m.platform)
            if reason is not None:
                out.append(MemberRefusal(path, m.device, m.label, m.platform, reason))
                if len(out) >= limit:
                    return out
    return out


def declared_members(members: Mapping[str, tuple[str, str]]) -> list[DeclaredMember]:
    """``{device: (label, platform)}`` as ``DeclaredMember``s."""
    return [DeclaredMember(d, label, platform) for d, (label, platform) in members.items()]
