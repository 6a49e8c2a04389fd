"""Finding and talking to a home's daemon: ``daemon.json``, the owner token, HTTP.

The CLI and scripts use ``DaemonClient``; it speaks plain HTTP/JSON to the daemon's
loopback API (one request per socket, ``loopback_http``: no event loop and no ``http.client``
to import in a CLI).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stet.sync.errors import StetError
from stet.sync.home_layout import HomeLayout

from .loopback_http import exchange

try:
    import fcntl
except ImportError:  # Windows: no flock (the client still imports; the pid is trusted)
    fcntl = None  # type: ignore[assignment]

OWNER_TOKEN_USER = "owner-token"


class DaemonNotRunning(StetError):
    code = "unavailable"


class ApiError(StetError):
    """An error answer from the daemon, carrying its code, status and details."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any]) -> None:
        super().__init__(message, code=code, **details)
        self.http_status = status


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    pid: int
    api_url: str
    version: str
    raw: dict[str, Any]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """An exited process its parent has not reaped yet. A daemon from `stet start` is
    reparented to PID 1, which in a container may reap late or never: without this,
    `stet stop` would wait for a process that is already gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS) or gone meanwhile
        return False
    # "pid (comm) state ...": comm may itself contain ") ".
    fields = stat.rpartition(")")[2].split()
    return bool(fields) and fields[0] == "Z"


def daemon_lock_held(layout: HomeLayout) -> bool:
    """Whether a daemon holds the home's lock (it does for its whole life).

    A ``daemon.json`` left by a daemon that died (kill -9, power loss) may name a pid
    the system has since given to another process: the lock tells them apart.
    """
    if fcntl is None:
        return True
    try:
        fd = os.open(layout.lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the shared lock if we got it
    return False


def read_daemon_info(layout: HomeLayout) -> DaemonInfo | None:
    """The running daemon's ``daemon.json``, or None if there is none (or it is stale)."""
    try:
        raw = json.loads(layout.daemon_json.read_text())
        info = DaemonInfo(int(raw["pid"]), str(raw["api_url"]), str(raw.get("version", "")), raw)
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    if not pid_alive(info.pid) or not daemon_lock_held(layout):
        return None
    return info


def read_starting(layout: HomeLayout) -> list[dict[str, Any]]:
    """What a starting daemon says it is doing (a long rescan); empty if nothing is said,
    or no daemon holds the home's lock (a file left by a daemon that died)."""
    try:
        data = json.loads(layout.starting_json.read_text())
    except (OSError, ValueError):
        return []
    if not daemon_lock_held(layout):
        return []
    activity = data.get("activity") if isinstance(data, dict) else None
    return [a for a in activity if isinstance(a, dict)] if isinstance(activity, list) else []


def read_owner_token(layout: HomeLayout) -> str | None:
    """The home's owner token: the keyring's, else the 0600 file's (as the daemon decides)."""
    token = _keyring_owner_token(layout)
    return token if token else _file_owner_token(layout)


def _keyring_owner_token(layout: HomeLayout) -> str | None:
    import keyring  # imported here: it costs a CLI start ~30 ms (P10)
    import keyring.errors

    try:
        return keyring.get_password(layout.keyring_service, OWNER_TOKEN_USER) or None
    except keyring.errors.KeyringError:
        return None


def _file_owner_token(layout: HomeLayout) -> str | None:
    try:
        return layout.owner_token_file.read_text().strip() or None
    except FileNotFoundError:
        return None


def quick_owner_token(layout: HomeLayout) -> tuple[str | None, bool]:
    """The owner token for a CLI command, without importing keyring when the daemon keeps
    it in the file (headless Linux): (token, whether a 401 should retry with the keyring's).

    The daemon prefers the keyring and writes the file only when the keyring fails, so a
    file that exists is almost always the one; a stale file beside a keyring entry shows up
    as a 401, and the keyring is asked then."""
    token = _file_owner_token(layout)
    if token is not None:
        return token, True
    return _keyring_owner_token(layout), False


def quote_path(path: str) -> str:
    return urllib.parse.quote(path, safe="/")


class DaemonClient:
    """A small synchronous client of the daemon's HTTP API."""

    def __init__(self, api_url: str, token: str, *, timeout: float = 30.0) -> None:
        parsed = urllib.parse.urlsplit(api_url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 80
        self.token = token
        self.timeout = timeout
        self._fallback_token: Callable[[], str | None] | None = None

    @classmethod
    def for_home(cls, layout: HomeLayout) -> DaemonClient:
        info = read_daemon_info(layout)
        if info is None:
            raise DaemonNotRunning(f"the daemon is not running for {layout.root}: start it with `stet start`")
        token, keyring_may_differ = quick_owner_token(layout)
        if token is None:
            raise StetError(f"no owner token found for {layout.root} (keyring or {layout.owner_token_file})")
        client = cls(info.api_url, token)
        if keyring_may_differ:
            client._fallback_token = lambda: _keyring_owner_token(layout)
        return client

    def request(
        self, method: str, path: str, body: Any = None, *, query: dict[str, Any] | None = None
    ) -> Any:
        try:
            return self._request(method, path, body, query=query)
        except ApiError as exc:
            fallback, self._fallback_token = self._fallback_token, None
            other = fallback() if exc.http_status == 401 and fallback is not None else None
            if other is None or other == self.token:
                raise
            self.token = other
            return self._request(method, path, body, query=query)

    def _request(
        self, method: str, path: str, body: Any = None, *, query: dict[str, Any] | None = None
    ) -> Any:
        if query:
            clean = {k: v for k, v in query.items() if v is not None}
            if clean:
                path = f"{path}?{urllib.parse.urlencode(clean)}"
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            status, payload = exchange(self.host, self.port, method, path, headers, data,
                                       timeout=self.timeout)
        except ConnectionRefusedError:
            raise DaemonNotRunning("the daemon is not answering (connection refused)") from None
        except OSError as exc:
            raise DaemonNotRunning(f"cannot reach the daemon: {exc}") from None
        try:
            decoded = json.loads(payload) if payload else None
        except ValueError:
            raise StetError(f"the daemon sent a non-JSON answer (HTTP {status})") from None
        if status >= 400:
            err = (decoded or {}).get("error", {}) if isinstance(decoded, dict) else {}
            details = {k: v for k, v in err.items() if k not in ("code", "message")}
            raise ApiError(
                status,
                err.get("code", "bad_request"),
                err.get("message", f"HTTP {status}"),
                details,
            )
        return decoded

    # -- typed helpers ----------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/v1/status")
        return result

    def vault_names(self) -> list[str]:
        return [v["name"] for v in self.request("GET", "/v1/vaults")["vaults"]]

    def resolve_vault(self, vault: str | None) -> str:
        if vault is not None:
            return vault
        names = self.vault_names()
        if len(names) == 1:
            return names[0]
        if not names:
            raise StetError("the daemon serves no vault yet: run `stet init PATH`")
        raise StetError(f"there are several vaults ({', '.join(names)}): name one with --vault")

    def read_note(self, vault: str, path: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "GET", f"/v1/vaults/{quote_path(vault)}/notes/{quote_path(path)}"
        )
        return result

    def list_notes(
        self, vault: str, *, prefix: str = "", limit: int = 1000, cursor: str | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "GET",
            f"/v1/vaults/{quote_path(vault)}/notes",
            query={"prefix": prefix, "limit": limit, "cursor": cursor},
        )
        return result

    def reload(self) -> list[str]:
        return list(self.request("POST", "/v1/reload")["opened"])


def home_path_from(value: str | os.PathLike[str] | None) -> Path:
    if value:
        return Path(value).expanduser().resolve()
    env = os.environ.get("STET_HOME")
    if env:
        return Path(env).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("stet", appauthor=False))
