"""The daemon's secrets, read at start in a short-lived child process (SPEC §9 P7).

The owner token and the device identity live in the keyring (or 0600 files where no
keyring backend works: ``secret_store``, ``device_identity``). Reading them needs
keyring (its backends, entry points and D-Bus clients) and ``cryptography``: ~11 MB
of resident memory the daemon would keep for its whole life to use them once. So the
daemon runs ``python -m stet.daemon.identity.startup_secrets HOME`` while it holds the home's
lock; the child loads or creates both, as before, and prints them as one JSON line on
stdout (a pipe: never on disk); its log lines go to stderr and are logged again here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import sys
from pathlib import Path

from stet.daemon.identity.device_cert import DeviceIdentity
from stet.sync.errors import StoreError
from stet.sync.home_layout import HomeLayout

logger = logging.getLogger(__name__)

CHILD_TIMEOUT_S = 120.0  # a keyring backend may ask the desktop to unlock it
_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING,
           "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}


async def load_startup_secrets(layout: HomeLayout) -> tuple[str, DeviceIdentity]:
    """The owner token and the device identity of ``layout``'s home, created on first use."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "stet.daemon.identity.startup_secrets", str(layout.root),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), CHILD_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise StoreError(f"reading this home's secrets took over {CHILD_TIMEOUT_S:.0f} s "
                         "(a keyring waiting to be unlocked?)") from None
    error = _relay_log(err.decode("utf-8", "replace"))
    if proc.returncode != 0:
        raise StoreError(error or f"reading this home's secrets failed (exit {proc.returncode})")
    got = json.loads(out)
    identity = DeviceIdentity(
        got["cert_pem"].encode("ascii"), got["key_pem"].encode("ascii"),
        base64.b64decode(got["cert_der"]), got["device_id"], scratch_dir=layout.root,
    )
    return got["owner_token"], identity


def _relay_log(stderr: str) -> str:
    """Log the child's lines here (``LEVEL name: message``); returns its last error's text."""
    error = ""
    for line in stderr.splitlines():
        level, _, rest = line.partition(" ")
        name, sep, message = rest.partition(": ")
        if level in _LEVELS and sep:
            logging.getLogger(name).log(_LEVELS[level], "%s", message)
        elif line.startswith("STORE-ERROR "):
            error = line.removeprefix("STORE-ERROR ")
        elif line.strip():
            logger.warning("secrets helper: %s", line)
    return error


def _child(home: Path) -> int:
    from stet.daemon.identity.device_identity import load_or_create_identity
    from stet.daemon.identity.secret_store import get_or_create_owner_token

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    layout = HomeLayout(home)
    try:
        token = get_or_create_owner_token(layout)
        identity = load_or_create_identity(layout)
    except StoreError as exc:
        print(f"STORE-ERROR {exc}", file=sys.stderr, flush=True)
        return 1
    sys.stdout.write(json.dumps({
        "owner_token": token,
        "cert_pem": identity.cert_pem.decode("ascii"), "key_pem": identity.key_pem.decode("ascii"),
        "cert_der": base64.b64encode(identity.cert_der).decode("ascii"), "device_id": identity.device_id,
    }) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child(Path(sys.argv[1])))
