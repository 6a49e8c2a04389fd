"""This device's name, given at ``stet init`` / ``stet join`` (``--device-name``): what the
other members show for its changes (``disk on laptop``) and in ``stet devices``. Kept in
the home as one line (``<home>/device-name``); the host's name until one is given."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from .errors import StetError

MAX_CHARS = 40


def check_device_name(name: str) -> str:
    """The name, trimmed, or a clear error: one line of printable text, at most 40 characters."""
    name = name.strip()
    if not name:
        raise StetError("give the device a name, e.g. --device-name laptop")
    if len(name) > MAX_CHARS or not name.isprintable():
        raise StetError(f"a device name is one line of at most {MAX_CHARS} printable characters: {name!r}")
    return name


def host_name() -> str:
    """The first label of the host's name (``laptop`` of ``laptop.local``)."""
    label = socket.gethostname().split(".", 1)[0].strip()
    return label[:MAX_CHARS] if label and label.isprintable() else ""


def read_device_name(root: Path) -> str:
    try:
        text = (root / "device-name").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    return text or host_name()


def write_device_name(root: Path, name: str) -> str:
    name = check_device_name(name)
    path = root / "device-name"
    tmp = root / ".device-name.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(name + "\n")
    os.replace(tmp, path)
    return name
