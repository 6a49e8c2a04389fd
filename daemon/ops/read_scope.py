"""What a token may see of a payload (SPEC §6.3): every path it names, not just ``path``.

Events, change-log entries and conflict records name paths under several keys (``path``,
``oldPath``, ``newPath``, an attempted write's fields, a brake's list of ``paths``). A
payload whose main ``path`` the token may not read is not shown at all; any other path it
may not read is blanked (``None``), so a note moved out of hiding is seen arriving, never
where it came from. Peer events (``peer.*``) go to the owner only.
"""

from __future__ import annotations

from typing import Any

from stet.sync.permissions import READ, Scopes

PATH_KEYS = frozenset({"path", "oldPath", "newPath", "existing", "paths", "old_path", "new_path",
                       "savedAtPath"})
OWNER_ONLY_PREFIXES = ("peer.",)


def _redact(value: Any, scopes: Scopes, under_path_key: bool) -> tuple[Any, bool]:
    """(the value with unreadable paths blanked, whether anything was blanked)."""
    if isinstance(value, str):
        if under_path_key and not scopes.allows(READ, value):
            return None, True
        return value, False
    if isinstance(value, list):
        out, hidden = [], False
        for item in value:
            new, h = _redact(item, scopes, under_path_key)
            hidden |= h
            if not (h and under_path_key and isinstance(item, str)):
                out.append(new)  # a hidden path in a list of paths is left out
        return out, hidden
    if isinstance(value, dict):
        result, hidden = {}, False
        for key, item in value.items():
            new, h = _redact(item, scopes, under_path_key or key in PATH_KEYS)
            result[key] = new
            hidden |= h
        return result, hidden
    return value, False


def visible_payload(scopes: Scopes, data: dict[str, Any]) -> dict[str, Any] | None:
    """``data`` as this token may see it, or None if it may not see it at all."""
    if scopes.owner:
        return data
    main = data.get("path")
    if isinstance(main, str) and not scopes.allows(READ, main):
        return None
    redacted, _ = _redact(data, scopes, False)
    result: dict[str, Any] = redacted
    return result


def visible_event(scopes: Scopes, type_: str, data: dict[str, Any]) -> dict[str, Any] | None:
    if not scopes.owner and type_.startswith(OWNER_ONLY_PREFIXES):
        return None
    if type_ == "conflict.refused" and not scopes.owner:
        # A refused write names what was attempted: shown whole or not at all.
        _, hidden = _redact(data, scopes, False)
        main = data.get("path")
        if hidden or (isinstance(main, str) and not scopes.allows(READ, main)):
            return None
        return data
    return visible_payload(scopes, data)
