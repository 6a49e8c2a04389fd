"""Snapshot reads and promotion of refused writes (SPEC §6.4; issue 17) against real
daemons: agents through the official MCP SDK client, the owner through REST and the real
CLI, events on the real SSE stream, restarts by kill -9.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

from tests.harness import DaemonProcess, run_stet
from tests.integration.agent_support import event_stream, make_token, owner_agent
from tests.integration.bridge_support import live_id, open_store, restart, start_daemon
from tests.integration.test_mcp import call, mcp_url, refused, session

FULL = {"read": ("**",), "write": ("**",), "append": ("**",)}


def _token(daemon: DaemonProcess, name: str, **scopes: tuple[str, ...]) -> str:
    return make_token(daemon.home, name, **(scopes or FULL))


def _texts(n: int, version: str) -> dict[str, str]:
    return {f"task/n{i}.md": f"# Note {i}\n\nfact {i}: {version} value {i}\nword{version}{i}\n"
            for i in range(1, n + 1)}


async def test_an_agent_reading_under_a_snapshot_sees_one_moment_while_another_writes(
        daemon: DaemonProcess) -> None:
    owner = owner_agent(daemon)
    before = _texts(5, "old")
    for path, text in before.items():
        owner.ok(owner.create(path, text))
    owner.ok(owner.create("private/secret.md", "secret old\n"))
    a_token, b_token = _token(daemon, "agent-a"), _token(daemon, "agent-b")
    after = _texts(5, "new")
    async with session(mcp_url(daemon), a_token) as a, session(mcp_url(daemon), b_token) as b:
        snap = await call(a, "open_snapshot")
        assert snap["snapshot"].startswith("snap_")
        assert snap["at"].endswith("Z")
        seen: dict[str, dict[str, Any]] = {}
        # A reads two notes; B then rewrites three, deletes one, moves one, creates one
        # and changes a note A reads later; A goes on reading under its snapshot.
        for path in ("task/n1.md", "task/n2.md"):
            seen[path] = await call(a, "read_note", path=path, snapshot=snap["snapshot"])
        for path in ("task/n1.md", "task/n3.md", "task/n4.md"):
            await call(b, "update_note", path=path, content=after[path])
        await call(b, "delete_note", path="task/n5.md")
        await call(b, "move_note", path="task/n2.md", newPath="task/renamed.md")
        await call(b, "create_note", path="task/n6.md", content="created later wordold6\n")
        await call(b, "update_note", path="private/secret.md", content="secret new\n")
        for path in ("task/n1.md", "task/n3.md", "task/n4.md", "task/n5.md"):
            seen[path] = await call(a, "read_note", path=path, snapshot=snap["snapshot"])
        seen["task/n2.md (again)"] = await call(a, "read_note", path="task/n2.md", snapshot=snap["snapshot"])

        for path, text in before.items():
            assert seen[path]["content"] == text, path
        assert seen["task/n2.md (again)"]["content"] == before["task/n2.md"]
        assert seen["task/n1.md"]["revision"] != (await call(a, "read_note", path="task/n1.md"))["revision"]

        listed = await call(a, "list_notes", prefix="task/", snapshot=snap["snapshot"])
        # n5 there, n6 absent, n2 at its old path
        assert [n["path"] for n in listed["notes"]] == sorted(before)
        by_path = {n["path"]: n for n in listed["notes"]}
        assert by_path["task/n3.md"]["revision"] == seen["task/n3.md"]["revision"]
        assert by_path["task/n3.md"]["size"] == len(before["task/n3.md"].encode())

        hits = await call(a, "search_notes", q="wordold3", snapshot=snap["snapshot"])
        assert [h["path"] for h in hits["results"]] == ["task/n3.md"]
        assert (await call(a, "search_notes", q="wordnew3", snapshot=snap["snapshot"]))["results"] == []
        assert (await call(a, "search_notes", q="wordold6", snapshot=snap["snapshot"]))["results"] == []
        unchanged = await call(a, "search_notes", q="wordold2", snapshot=snap["snapshot"])
        assert [h["path"] for h in unchanged["results"]] == ["task/n2.md"]

        # A new read without the snapshot shows B's work.
        for path in ("task/n1.md", "task/n3.md", "task/n4.md"):
            assert (await call(a, "read_note", path=path))["content"] == after[path]
        await refused(a, "read_note", {"path": "task/n5.md"}, "not_found")
        assert (await call(a, "read_note", path="task/renamed.md"))["content"] == before["task/n2.md"]
        now_listed = await call(a, "list_notes", prefix="task/")
        assert "task/n5.md" not in [n["path"] for n in now_listed["notes"]]
        assert [h["path"] for h in (await call(a, "search_notes", q="wordnew3"))["results"]] == ["task/n3.md"]

        # atRevision: the revision A was handed out, after the note moved on.
        at = await call(a, "read_note", path="task/n3.md", atRevision=seen["task/n3.md"]["revision"])
        assert at["content"] == before["task/n3.md"]
        await refused(a, "read_note", {"path": "task/n3.md", "atRevision": "0" * 64}, "revision_unknown")

        # What A read under the snapshot is a base it can write on: B's change survives.
        merged_text = before["task/n1.md"] + "A's conclusion\n"
        await call(a, "update_note", path="task/n1.md", content=merged_text,
                   baseRevision=seen["task/n1.md"]["revision"])
        final = (await call(a, "read_note", path="task/n1.md"))["content"]
        assert "new value 1" in final
        assert "A's conclusion" in final
        assert "old value 1" not in final

        # Scopes apply as usual under a snapshot, to the paths as they were.
        c_token = _token(daemon, "agent-c", read=("task/**",))
        async with session(mcp_url(daemon), c_token) as c:
            await refused(c, "read_note", {"path": "private/secret.md", "snapshot": snap["snapshot"]},
                          "forbidden")
            paths = [n["path"] for n in (await call(c, "list_notes", snapshot=snap["snapshot"]))["notes"]]
            assert paths == sorted(before)
            assert (await call(c, "search_notes", q="secret", snapshot=snap["snapshot"]))["results"] == []
        secret = await call(a, "search_notes", q="secret old", snapshot=snap["snapshot"])
        assert [h["path"] for h in secret["results"]] == ["private/secret.md"]

        await refused(a, "read_note", {"path": "task/n1.md", "snapshot": "snap_" + "0" * 32},
                      "expired_snapshot")
        await refused(a, "read_note", {"path": "task/n1.md", "snapshot": "nonsense"}, "bad_request")
    owner.close()


def _rest_snapshot(daemon: DaemonProcess) -> str:
    owner = owner_agent(daemon)
    try:
        answer = owner.request("POST", owner.url("snapshots"), {})
        assert answer.status == 201, answer.body
        return str(answer.body["snapshot"])
    finally:
        owner.close()


def _read_at(daemon: DaemonProcess, path: str, snapshot: str) -> dict[str, Any]:
    owner = owner_agent(daemon)
    try:
        q = urllib.parse.urlencode({"snapshot": snapshot})
        return owner.ok(owner.request("GET", owner.note(path) + f"?{q}"))
    finally:
        owner.close()


def test_a_snapshot_survives_compaction_and_a_kill_9(tmp_path: Path,
                                                     daemon_factory: list[DaemonProcess]) -> None:
    home, vault = tmp_path / "home", tmp_path / "vault"
    vault.mkdir()
    daemon = start_daemon(home, vault, daemon_factory, config="[store]\ncompact_after_updates = 5\n")
    owner = owner_agent(daemon)
    owner.ok(owner.create("log.md", "start\n"))
    owner.ok(owner.create("doomed.md", "kept by the snapshot\n"))
    for i in range(3):
        owner.ok(owner.append("log.md", f"- before {i}\n"))
    then = daemon.client.read_note("notes", "log.md")
    snapshot = _rest_snapshot(daemon)
    for i in range(20):  # several compactions of log.md after the snapshot
        owner.ok(owner.append("log.md", f"- after {i}\n"))
    owner.ok(owner.delete("doomed.md"))
    owner.close()
    note_id = live_id(home, "log.md")
    with open_store(home) as db:
        rows = db.execute("SELECT count(*) FROM updates WHERE note_id = ?", (note_id,)).fetchone()[0]
    assert rows < 10, "compaction should have merged the appends"

    daemon.kill9()
    daemon = restart(home, daemon_factory)
    at = _read_at(daemon, "log.md", snapshot)
    assert at["content"] == then["content"]
    assert at["revision"] == then["revision"]
    assert _read_at(daemon, "doomed.md", snapshot)["content"] == "kept by the snapshot\n"
    assert "- after 19" in daemon.client.read_note("notes", "log.md")["content"]
    owner = owner_agent(daemon)
    listed = owner.ok(owner.request("GET", owner.url(f"notes?snapshot={snapshot}")))
    assert [n["path"] for n in listed["notes"]] == ["doomed.md", "log.md"]
    owner.close()


def _conflict_id(home: Path, token: str, path: str) -> int:
    rows = json.loads(run_stet(home, "conflicts", "--vault", "notes", "--json").stdout)
    ids = [c["id"] for c in rows if c["token"] == token and c["path"] == path]
    assert ids, rows
    return int(ids[0])


async def test_a_refused_rewrite_promoted_after_an_append_keeps_everything(daemon: DaemonProcess) -> None:
    path = "shared/plan.md"
    original = "# Plan\n\nstep one: draft\nstep two: review\n"
    owner = owner_agent(daemon)
    owner.ok(owner.create(path, original))
    owner.close()
    tokens = {n: _token(daemon, n) for n in ("loser", "winner", "appender")}
    async with (session(mcp_url(daemon), tokens["loser"]) as loser,
                session(mcp_url(daemon), tokens["winner"]) as winner,
                session(mcp_url(daemon), tokens["appender"]) as appender):
        read = await call(loser, "read_note", path=path)
        await call(winner, "update_note", path=path, content=original.replace("# Plan", "# Plan (v2)"),
                   expectedRevision=read["revision"])
        attempt = original.replace("step two: review", "step two: review by two people")
        error = await refused(loser, "update_note", {"path": path, "content": attempt,
                                                     "expectedRevision": read["revision"]},
                              "revision_mismatch")
        assert "# Plan (v2)" in error["currentContent"]
        await call(appender, "append_note", path=path, text="- note from the appender\n")
    before_apply = daemon.client.read_note("notes", path)
    conflict = _conflict_id(daemon.home, "agent:loser", path)

    shown = run_stet(daemon.home, "conflicts", "show", str(conflict), "--vault", "notes").stdout.decode()
    assert "step two: review by two people" in shown  # what was attempted
    assert "- note from the appender" in shown  # beside the note now
    with event_stream(daemon, daemon.client.token) as events:
        applied = run_stet(daemon.home, "conflicts", "apply", str(conflict), "--vault", "notes",
                           "--json").stdout
        result = json.loads(applied)
        event = events.wait_for("conflict.promoted", id=conflict, timeout=20)
    assert event.data["path"] == path
    assert event.data["revision"] == result["revision"]

    text = daemon.client.read_note("notes", path)["content"]
    assert "step two: review by two people" in text  # the promoted text is in place
    assert "- note from the appender" in text  # the append survives
    assert "# Plan (v2)" in text  # and so does the winner's change
    assert text.count("step one: draft") == 1
    assert "step two: review\n" not in text

    owner = owner_agent(daemon)
    versions = owner.ok(owner.request("GET", owner.note(path, "/versions")))["versions"]
    kept = [v for v in versions if v["kind"] == "before-promotion"]
    assert len(kept) == 1
    assert kept[0]["id"] == result["beforeVersion"]
    old = owner.ok(owner.request("GET", owner.note(path, f"/versions/{kept[0]['id']}")))
    assert old["content"] == before_apply["content"]
    log = owner.ok(owner.request("GET", owner.url(f"log?path={urllib.parse.quote(path)}")))["changes"]
    assert log[0]["source"] == "cli"

    listed = json.loads(run_stet(daemon.home, "conflicts", "--vault", "notes", "--json").stdout)
    assert next(c for c in listed if c["id"] == conflict)["promoted"]["revision"] == result["revision"]
    again = owner.request("POST", owner.url(f"conflicts/{conflict}/apply"), {})
    assert again.status == 409
    assert again.code == "already_exists"
    agent = owner_agent(daemon)
    agent.token = tokens["appender"]
    assert agent.request("POST", agent.url(f"conflicts/{conflict}/apply"), {}).status == 403
    assert agent.request("GET", agent.url(f"conflicts/{conflict}")).status == 403
    agent.close()
    owner.close()


def test_refused_edits_and_appends_are_promoted_as_what_they_attempted(daemon: DaemonProcess) -> None:
    owner = owner_agent(daemon)
    path = "shared/summary.md"
    owner.ok(owner.create(path, "Status: draft\nOwner: nobody\n"))
    editor = owner_agent(daemon)
    editor.token = _token(daemon, "editor")
    outsider = owner_agent(daemon)
    outsider.token = _token(daemon, "outsider", read=("**",))
    read = editor.ok(editor.read(path))
    owner.ok(owner.edit(path, [("Owner: nobody", "Owner: Ann")]))
    stale = editor.edit(path, [("Status: draft", "Status: reviewed")], expectedRevision=read["revision"])
    assert stale.code == "revision_mismatch"
    assert outsider.append(path, "- outsider's finding\n").code == "forbidden"
    owner.ok(owner.append(path, "- owner's line\n"))

    edit_id = _conflict_id(daemon.home, "agent:editor", path)
    append_id = _conflict_id(daemon.home, "agent:outsider", path)
    for cid in (edit_id, append_id):
        answer = owner.request("POST", owner.url(f"conflicts/{cid}/apply"), {})
        assert answer.status == 200, answer.body
    text = owner.ok(owner.read(path))["content"]
    assert text == "Status: reviewed\nOwner: Ann\n- owner's line\n- outsider's finding\n"
    assert owner.request("GET", owner.url("conflicts/abc")).code == "bad_request"
    assert owner.request("GET", owner.url("conflicts/99999999999999999999")).code == "bad_request"
    assert owner.request("POST", owner.url("conflicts/424242/apply"), {}).code == "not_found"
    for a in (owner, editor, outsider):
        a.close()
