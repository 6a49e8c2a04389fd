"""P10 (CLI start <= 150 ms) kept structurally: what `stet read`, `stet status`, `stet --help`
and `stet mcp --stdio` import. Timing is measured in bench/p10_cli.py (never asserted in a
test); here a heavy import creeping back into a command's path fails, naming the module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stet.client import cli as cli_module
from stet.client.loopback_http import BadAnswer, parse_answer
from tests.harness import DaemonProcess, env_for

# Never on a daemon-backed command's path: the daemon's own stack, the CRDT, TLS, the keyring
# (headless: the token is in the home's file), the progress bars, http.client's email/ssl.
HEAVY = ("aiohttp", "pycrdt", "cryptography", "rich", "keyring", "zeroconf", "watchdog", "http.client",
         "ssl", "email", "sqlite3", "asyncio")


def modules_after(home: Path, *args: str, stdin: bytes = b"") -> set[str]:
    code = ("import atexit, json, sys\n"
            "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
            "from stet.client.cli import main\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code, "--home", str(home), *args], env=env_for(home),
                          input=stdin, capture_output=True, timeout=60)
    last = proc.stderr.decode().strip().splitlines()[-1]
    return set(json.loads(last))


@pytest.mark.parametrize("args", [("read", "a.md"), ("status",), ("--help",), ("log",), ("ls",)])
def test_a_command_imports_nothing_heavy(daemon: DaemonProcess, args: tuple[str, ...]) -> None:
    (daemon.home.parent / "vault" / "a.md").write_text("a\n")
    daemon.wait_content("a.md", "a\n")
    loaded = modules_after(daemon.home, *args)
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY)
    if args in (("status",), ("--help",)):  # the token table reads home.db; help loads every command
        heavy = [m for m in heavy if not m.startswith("sqlite3")]
    assert heavy == [], f"stet {' '.join(args)} imports {heavy}"


def test_the_stdio_bridge_imports_nothing_heavy(daemon: DaemonProcess, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("stet_whatever\n")
    loaded = modules_after(daemon.home, "mcp", "--stdio", "--token-file", str(token))
    assert sorted(m for m in loaded if m.split(".")[0] in HEAVY) == []


def test_the_lazy_table_names_every_command() -> None:
    cli_module._register_command_modules()
    for name, cmd in cli_module.cli.commands.items():
        module = cmd.callback.__module__ if cmd.callback is not None else ""
        if module == "stet.client.cli":
            continue
        assert cli_module.COMMAND_MODULES.get(name) == module.rsplit(".", 1)[-1], (
            f"add {name!r} to COMMAND_MODULES in client/cli.py")


def test_answers_with_a_length_chunks_or_cut_short() -> None:
    assert parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}") == (200, b"{}")
    assert parse_answer(b"HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\nabcdef") == (404, b"abc")
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"
    assert parse_answer(chunked) == (200, b"abcde")
    assert parse_answer(b"HTTP/1.1 202 Accepted\r\n\r\n") == (202, b"")
    for bad in (b"", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", b"garbage\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"):
        with pytest.raises(BadAnswer):
            parse_answer(bad)
