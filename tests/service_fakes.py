"""Stand-ins for ``systemctl``, ``loginctl`` and ``launchctl``, put first on ``PATH``.

Tests of ``stet service`` must never enable a real service on the machine running them,
so every such test runs with these fakes. They log each call (one JSON array per line)
and keep a small state (enabled / active / loaded) in a JSON file:

- ``FAKE_SERVICE_MODE=nobus``: every ``systemctl --user`` call fails as in a container
  ("Failed to connect to bus: No medium found"); ``launchctl`` fails as over ssh.
- ``FAKE_SERVICE_MODE=ok``: a working user manager.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

_COMMON = r'''
import json, os, sys
from pathlib import Path
here = Path(__file__).resolve().parent
mode = os.environ.get("FAKE_SERVICE_MODE", "nobus")
state_file = here / "state.json"
state = json.loads(state_file.read_text()) if state_file.exists() else {}
args = sys.argv[1:]
with open(here / "calls.log", "a") as log:
    log.write(json.dumps([Path(sys.argv[0]).name, *args]) + "\n")
def done(code=0, out="", err=""):
    state_file.write_text(json.dumps(state))
    if out:
        print(out)
    if err:
        print(err, file=sys.stderr)
    sys.exit(code)
'''

SYSTEMCTL = _COMMON + r'''
if mode == "nobus" and "--user" in args:
    done(1, err="Failed to connect to bus: No medium found")
rest = [a for a in args if a != "--user"]
verb = rest[0] if rest else ""
now = "--now" in rest
if verb in ("daemon-reload", "reset-failed"):
    done()
if verb == "enable":
    state["enabled"] = True
    state["active"] = state.get("active", False) or now
    done()
if verb == "disable":
    state["enabled"] = False
    if now:
        state["active"] = False
    done()
if verb in ("start", "restart"):
    state["active"] = True
    state["starts"] = state.get("starts", 0) + 1
    done()
if verb == "stop":
    state["active"] = False
    done()
if verb == "is-enabled":
    on = state.get("enabled", False)
    done(0 if on else 1, out="enabled" if on else "disabled")
if verb == "is-active":
    on = state.get("active", False)
    done(0 if on else 3, out="active" if on else "inactive")
if verb == "show":
    done(out="4242" if state.get("active") else "0")
done(1, err=f"fake systemctl: unknown verb {verb!r}")
'''

LOGINCTL = _COMMON + r'''
if mode == "nobus":
    done(1, err="Failed to connect to bus: No medium found")
done(out="no")
'''

LAUNCHCTL = _COMMON + r'''
verb = args[0] if args else ""
loaded = state.get("loaded", False)
if mode == "nobus" and verb in ("bootstrap", "kickstart"):
    done(125, err="Bootstrap failed: 125: Domain does not support specified action")
if verb == "print":
    done(0 if loaded else 113, out="\tpid = 4242\n\tstate = running" if loaded else "",
         err="" if loaded else "Could not find service")
if verb == "enable":
    done()
if verb == "bootstrap":
    if loaded:
        done(5, err="Bootstrap failed: 5: Input/output error")
    state["loaded"] = True
    state["bootstraps"] = state.get("bootstraps", 0) + 1
    done()
if verb == "bootout":
    if not loaded:
        done(3, err="Boot-out failed: 3: No such process")
    state["loaded"] = False
    done()
if verb == "kickstart":
    done(0 if loaded else 113, err="" if loaded else "Could not find service")
done(1, err=f"fake launchctl: unknown verb {verb!r}")
'''


def install_fakes(bin_dir: Path) -> Path:
    """Write the fake tools into ``bin_dir``; returns it (put it first on PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in (("systemctl", SYSTEMCTL), ("loginctl", LOGINCTL), ("launchctl", LAUNCHCTL)):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(0o755)
    return bin_dir


def calls(bin_dir: Path) -> list[list[str]]:
    log = bin_dir / "calls.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def state(bin_dir: Path) -> dict[str, object]:
    f = bin_dir / "state.json"
    return json.loads(f.read_text()) if f.exists() else {}


def service_env(bin_dir: Path, service_dir: Path, mode: str, *, keep_path: bool = True) -> dict[str, str]:
    """Environment entries for a ``stet service`` run against the fakes."""
    path = str(bin_dir) + (os.pathsep + os.environ.get("PATH", "") if keep_path else "")
    return {"PATH": path, "STET_SERVICE_DIR": str(service_dir), "FAKE_SERVICE_MODE": mode}
