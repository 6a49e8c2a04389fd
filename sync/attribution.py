"""Who made a change, and on which device, as a person reads it (SPEC §4.6; issue 37 item 7):
``disk on laptop``, ``git on desk``, ``agent:researcher on laptop``.

Pure: the stored ``source`` string (``disk``, ``git``, ``agent:NAME``, ``X on DEVICE_ID``,
``peer:DEVICE_ID``), the device a change came from (None: this one), and the members' names
give the words. A device is shown by the name it was given at ``stet init`` / ``stet join``
(``--device-name``; the host's name by default), else by the 7 characters of its ID that
``stet devices`` shows first.
"""

from __future__ import annotations

from collections.abc import Mapping

from .change_kinds import Source

SHORT_ID = 7  # as `stet status` and `stet devices` show a device
_ON = " on "


def device_label(device_id: str, names: Mapping[str, str]) -> str:
    """A device's short name: its given name, else its short ID."""
    name = names.get(device_id, "").strip()
    return name or device_id[:SHORT_ID]


def attribution(source: str, device: str | None, *, here: str, names: Mapping[str, str]) -> str:
    """``HOW on DEVICE`` for a change of ``source`` that came from ``device`` (None: made
    on ``here``). A first sync's catch-up (``peer:D``) names the device it came from, as the
    change's own device is not known then: ``sync from D``."""
    how, _, on = source.partition(_ON)
    if not on and how.startswith(Source.PEER + ":"):
        return f"sync from {device_label(how.split(':', 1)[1], names)}"
    origin = on or device or here
    if not origin:
        return how
    return f"{how}{_ON}{device_label(origin, names)}"
