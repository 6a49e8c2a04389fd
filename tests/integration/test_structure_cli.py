"""The structure commands through the real CLI against a real daemon (issue 34 item 4):
`stet section`, `stet tick`, `stet frontmatter`, `stet links`, `stet context`; the note's
text checked whole after each edit."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import DaemonProcess, run_stet

NOTE = "---\ntags: [draft]\n---\n# Plan\n## Tasks\n- [ ] buy milk\n\n## Links\nSee [[other]].\n"


def test_structure_commands_edit_and_read_through_the_daemon(daemon: DaemonProcess, home: Path) -> None:
    run_stet(home, "write", "plan.md", input=NOTE.encode())
    run_stet(home, "write", "other.md", input=b"# Other\nBack to [[plan]].\n")
    run_stet(home, "section", "plan.md", "Tasks", "--", "- [ ] call Léa")  # text starting with -
    run_stet(home, "tick", "plan.md", "buy milk")
    run_stet(home, "frontmatter", "plan.md", "--set", "status=active", "--tag", "决策", "--untag", "draft")
    assert daemon.content("plan.md") == (
        "---\ntags: [决策]\nstatus: active\n---\n# Plan\n## Tasks\n- [x] buy milk\n- [ ] call Léa\n\n"
        "## Links\nSee [[other]].\n")
    shown = json.loads(run_stet(home, "frontmatter", "plan.md", "--json").stdout)
    assert shown == {"tags": ["决策"], "status": "active"}
    links = run_stet(home, "links", "plan.md").stdout.decode()
    assert links.splitlines() == ["-> other  (other.md)", "<- other.md"]
    context = json.loads(run_stet(home, "context", "plan.md", "--json").stdout)
    assert [n["path"] for n in context["notes"]] == ["plan.md", "other.md"]
    missing = run_stet(home, "section", "plan.md", "Nowhere", "x", check=False)
    assert missing.returncode == 1
    assert "Nowhere" in missing.stderr.decode()
