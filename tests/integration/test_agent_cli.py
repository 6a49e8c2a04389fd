"""The agent-facing CLI (SPEC §6.2, §7): ``stet token create|list|revoke`` with or
without a daemon (hash-only storage, a running daemon takes tokens up at once), and
``stet append|write|edit|log|conflicts|search`` through the HTTP API as an agent would,
with errors that are one sentence and exit 1.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.agent_support import agent_for
from tests.integration.test_cli import one_sentence


def test_tokens_work_without_a_daemon_and_a_daemon_takes_them_up(
        home: Path, vault_dir: Path, daemon_factory: list[DaemonProcess]) -> None:
    run_stet(home, "init", str(vault_dir), "--name", "notes", "--json")
    created = json.loads(run_stet(home, "token", "create", "researcher", "--write", "agents/researcher/**",
                                  "--append", "shared/findings.md", "--read", "**", "--json").stdout)
    token = created["token"]
    assert token.startswith("stet_")
    assert created["vault"] == "notes"
    plain = run_stet(home, "token", "create", "second", "--vault", "notes", "--read", "docs/*.md")
    secret = plain.stdout.decode()
    assert secret.strip().startswith("stet_")
    assert secret.count("\n") == 1  # the token alone on stdout, for $(stet token create ...)
    assert "only this once" in plain.stderr.decode()
    home_db = b"".join(p.read_bytes() for p in home.glob("home.db*"))
    assert token.encode() not in home_db  # only its hash is stored
    assert secret.strip().encode() not in home_db

    listed = json.loads(run_stet(home, "token", "list", "--json").stdout)
    assert [t["name"] for t in listed] == ["researcher", "second"]
    researcher = listed[0]
    assert researcher["vault"] == "notes"
    assert researcher["scopes"] == {"read": ["**"], "append": ["shared/findings.md"],
                                    "write": ["agents/researcher/**"]}
    assert abs(researcher["createdAt"] - time.time()) < 120
    assert researcher["lastUsedAt"] is None
    assert token not in json.dumps(listed)
    table = run_stet(home, "token", "list").stdout.decode()
    assert "researcher" in table
    assert "never" in table
    assert "write agents/researcher/**" in table

    for args, word in [
        (("token", "create", "researcher", "--read", "**"), "exists"),
        (("token", "create", "noscope"), "scope"),
        (("token", "create", "escape", "--write", "../x/**"), "glob"),
        (("token", "create", "absolute", "--write", "/etc/**"), "glob"),
        (("token", "create", "elsewhere", "--vault", "nope", "--read", "**"), "nope"),
        (("token", "create", "bad name!", "--read", "**"), "name"),
        (("token", "revoke", "nobody"), "nobody"),
    ]:
        line = one_sentence(run_stet(home, *args, check=False))
        assert word in line, (args, line)
    assert "revoked" in run_stet(home, "token", "revoke", "second").stdout.decode().lower()
    assert [t["name"] for t in json.loads(run_stet(home, "token", "list", "--json").stdout)] == ["researcher"]

    daemon = DaemonProcess(home)
    daemon_factory.append(daemon)
    daemon.start()
    agent = agent_for(daemon, token)
    agent.ok(agent.append("shared/findings.md", "- found\n"))
    assert agent.create("agents/researcher/n.md", "mine\n").status == 201
    assert agent.create("agents/other/n.md", "not mine\n").status == 403
    assert agent.request("GET", agent.url("conflicts")).status == 403  # conflicts are the owner's
    late = json.loads(run_stet(home, "token", "create", "late", "--append", "late.md", "--json").stdout)
    late_agent = agent_for(daemon, late["token"])
    late_agent.ok(late_agent.append("late.md", "taken up at once\n"))
    used = {t["name"]: t["lastUsedAt"] for t in json.loads(run_stet(home, "token", "list", "--json").stdout)}
    assert used["researcher"] is not None
    assert used["late"] is not None
    for a in (agent, late_agent):
        a.close()


def test_append_write_edit_log_conflicts_search_through_the_api(home: Path, vault_dir: Path,
                                                                daemon: DaemonProcess) -> None:
    def stet(*args: str, input: bytes | None = None) -> str:
        return run_stet(home, *args, input=input).stdout.decode()

    def content(path: str) -> str:
        return str(daemon.read(path)["content"])

    assert stet("append", "notes/today.md", "first line\n").startswith("Created notes/today.md (revision ")
    appended = stet("append", "notes/today.md", "-", input=b"from stdin\n")
    assert appended.startswith("Appended to notes/today.md")
    stet("append", "notes/today.md", "keyed\n", "--idempotency-key", "k1")
    assert "a retry" in stet("append", "notes/today.md", "keyed\n", "--idempotency-key", "k1")
    assert content("notes/today.md") == "first line\nfrom stdin\nkeyed\n"

    assert stet("write", "notes/summary.md", input=b"Summary v1\n").startswith("Created notes/summary.md")
    first = json.loads(stet("write", "notes/summary.md", "--json", input=b"Summary v2\n"))
    assert first["changed"] is True
    assert content("notes/summary.md") == "Summary v2\n"
    stale = run_stet(home, "write", "notes/summary.md", "--expected-revision", "0" * 64,
                     input=b"lost\n", check=False)
    assert "changed since that revision" in one_sentence(stale)
    assert first["revision"][:12] in one_sentence(stale)
    stet("append", "notes/summary.md", "tail added meanwhile\n")
    based = json.loads(stet("write", "notes/summary.md", "--base-revision", first["revision"], "--json",
                            input=b"Summary v3\n"))
    assert based["changed"] is True
    assert content("notes/summary.md") == "Summary v3\ntail added meanwhile\n"
    assert "already holds that text" in stet("write", "notes/summary.md",
                                             input=b"Summary v3\ntail added meanwhile\n")
    unknown = run_stet(home, "write", "notes/summary.md", "--base-revision", "f" * 64, input=b"x\n",
                       check=False)
    assert "unknown" in one_sentence(unknown)
    both = run_stet(home, "write", "notes/summary.md", "--expected-revision", "a", "--base-revision", "b",
                    input=b"x\n", check=False)
    assert "not both" in one_sentence(both)
    not_text = run_stet(home, "write", "notes/summary.md", input=b"\xff\xfe", check=False)
    assert "UTF-8" in one_sentence(not_text)
    absent = run_stet(home, "write", "notes/missing.md", "--expected-revision", "a", input=b"x\n",
                      check=False)
    assert "no note" in one_sentence(absent)

    edited = stet("edit", "notes/summary.md", "--old", "v3", "--new", "v4")
    assert edited.startswith("Edited notes/summary.md")
    missing = one_sentence(run_stet(home, "edit", "notes/summary.md", "--old", "no such text", "--new", "x",
                                    check=False))
    assert "not found" in missing
    unpaired = run_stet(home, "edit", "notes/summary.md", "--old", "a", "--old", "b", "--new", "c",
                        check=False)
    assert "as many --new" in one_sentence(unpaired)
    assert content("notes/summary.md") == "Summary v4\ntail added meanwhile\n"

    log = json.loads(stet("log", "notes/summary.md", "--json"))
    assert [c["kind"] for c in log] == ["changed", "changed", "changed", "changed", "created"]
    assert {c["source"] for c in log} == {"cli"}
    assert all(c["path"] == "notes/summary.md" for c in log)
    assert len(json.loads(stet("log", "--since", "1h", "--json"))) == 8
    assert json.loads(stet("log", "--since", "2000-01-01T00:00:00Z", "--json", "--limit", "2"))[0] == log[0]
    assert "cli" in stet("log", "notes/today.md")
    assert "since" in one_sentence(run_stet(home, "log", "--since", "last tuesday", check=False))

    refused = json.loads(stet("conflicts", "--json"))
    assert [c["code"] for c in refused] == ["anchor_not_found", "revision_mismatch"]
    assert {c["token"] for c in refused} == {"owner"}
    assert refused[1]["attempted"]["content"] == "lost\n"
    text = stet("conflicts")
    assert "revision_mismatch" in text
    assert "notes/summary.md" in text

    assert stet("search", "summary v4") == "notes/summary.md:1: Summary v4\n"
    assert json.loads(stet("search", "stdin", "--json")) == [
        {"path": "notes/today.md", "line": 2, "snippet": "from stdin"}]
    assert stet("search", "nothingmatchesthis") == "No matches.\n"
    wait_until(lambda: (vault_dir / "notes/summary.md").read_text() == "Summary v4\ntail added meanwhile\n",
               what="the file to follow the API writes")


def test_api_commands_without_a_daemon_are_one_sentence_errors(home: Path, vault_dir: Path) -> None:
    run_stet(home, "init", str(vault_dir), "--name", "notes", "--json")
    for args in (("append", "a.md", "x"), ("write", "a.md"), ("edit", "a.md", "--old", "a", "--new", "b"),
                 ("log",), ("conflicts",), ("search", "x")):
        line = one_sentence(run_stet(home, *args, check=False, input=b"text\n"))
        assert "stet start" in line, (args, line)
