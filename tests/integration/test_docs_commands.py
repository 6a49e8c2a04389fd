"""docs/agents.md shows commands that work (issue 13: its `stet append shared/log.md "- found X"
--idempotency-key K` failed with "no such option"). Every `stet ...` command in it, inline or
in a shell block, runs against a real daemon: none may be a usage error (exit 2) or an
unexpected one. Placeholders (PATH, REV, [...]) and shell redirections are left out.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.harness import DaemonProcess, run_stet

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
BARE = re.compile(r"stet( [a-z][a-z-]*){1,2}")
PLACEHOLDER = re.compile(r"\b(PATH|REV|NAME|GLOB|ID|QUERY)\b|\[|\.\.\.|\|")


def documented_commands() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    found = re.findall(r"`(stet [^`]+)`", text)
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        joined = block.replace("\\\n", " ")
        found += [line.split("#")[0].strip() for line in joined.splitlines()
                  if line.strip().startswith("stet ")]
    # A bare command name in prose (`stet mcp-config`, `stet token revoke`) names it, not runs it.
    return [c for c in dict.fromkeys(found) if not PLACEHOLDER.search(c) and not BARE.fullmatch(c)]


def test_the_documented_commands_run(daemon: DaemonProcess) -> None:
    vault = daemon.home.parent / "vault"
    (vault / "shared").mkdir()
    (vault / "shared" / "summary.md").write_text("# Summary\n\nStatus: draft\n")
    daemon.wait_content("shared/summary.md", "# Summary\n\nStatus: draft\n", timeout=30)
    commands = documented_commands()
    assert any("- found X" in c for c in commands)
    assert any("--client" in c for c in commands)
    ran = []
    for command in commands:
        argv = shlex.split(command)[1:]
        if ">" in argv:
            argv = argv[:argv.index(">")]
        proc = run_stet(daemon.home, *argv, check=False, input=b"")
        err = proc.stderr.decode(errors="replace")
        assert proc.returncode != 2, f"{command}: {err}"
        assert "unexpected error" not in err, f"{command}: {err}"
        assert "Traceback" not in err, f"{command}: {err}"
        ran.append((command, proc.returncode))
    assert len(ran) >= 12, ran
    # the note the documented append made ends with a newline (issue 34)
    assert run_stet(daemon.home, "read", "shared/log.md").stdout == b"- found X\n"
    assert b"Status: reviewed" in run_stet(daemon.home, "read", "shared/summary.md").stdout
