"""Issue 34 item 5, through a real daemon: the change log counts what an edit inserted and
deleted (not the span between its first and last change); an event stream opened without
``Last-Event-ID`` starts now (``Last-Event-ID: 0`` still replays what is buffered); a note
made by ``append_note`` ends with a newline."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.harness import DaemonProcess, wait_until
from tests.integration.agent_support import event_stream, owner_agent
from tests.integration.test_mcp import call, mcp_url, session
from tests.integration.test_mcp import make_token as make_mcp_token

MIDDLE = "".join(f"line {i} of the text between the two edits\n" for i in range(4))  # ~170 chars
TEXT = "# alpha\n" + MIDDLE + "0123456789ABCDEFGHIJ tail\n"
EDITED = "# alpha12345678\n" + MIDDLE + " tail\n"  # 8 characters in, 20 out


def _last_change(daemon: DaemonProcess, path: str) -> dict[str, int]:
    agent = owner_agent(daemon)
    try:
        [latest, *_] = agent.ok(agent.log(path))["changes"]
    finally:
        agent.close()
    return {"inserted": latest["inserted"], "deleted": latest["deleted"]}


def test_the_change_log_counts_what_an_edit_inserted_and_deleted(daemon: DaemonProcess,
                                                                 vault_dir: Path) -> None:
    agent = owner_agent(daemon)
    try:
        agent.ok(agent.create("edited.md", TEXT))
        agent.ok(agent.edit("edited.md", [("# alpha\n", "# alpha12345678\n"),
                                          ("0123456789ABCDEFGHIJ tail", " tail")]))
        assert agent.ok(agent.read("edited.md"))["content"] == EDITED
        assert _last_change(daemon, "edited.md") == {"inserted": 8, "deleted": 20}
        # the same change as a whole new text (update_note), and as a file edited on disk
        agent.ok(agent.create("updated.md", TEXT))
        agent.ok(agent.update("updated.md", EDITED))
        assert _last_change(daemon, "updated.md") == {"inserted": 8, "deleted": 20}
        agent.ok(agent.create("on-disk.md", TEXT))
        on_disk = vault_dir / "on-disk.md"
        wait_until(lambda: on_disk.exists() and on_disk.read_text() == TEXT, what="the note's file")
        on_disk.write_text(EDITED)
        daemon.wait_content("on-disk.md", EDITED)
        assert _last_change(daemon, "on-disk.md") == {"inserted": 8, "deleted": 20}
    finally:
        agent.close()


def test_an_event_stream_without_last_event_id_starts_now(daemon: DaemonProcess) -> None:
    agent = owner_agent(daemon)
    try:
        agent.ok(agent.create("before.md", "made before the stream opened\n"))
        with event_stream(daemon, daemon.client.token) as stream:
            agent.ok(agent.create("after.md", "made after\n"))
            stream.wait_for("note.changed", path="after.md")
            assert [e.data.get("path") for e in stream.seen] == ["after.md"], stream.seen
        with event_stream(daemon, daemon.client.token, last_event_id=0) as replayed:  # asked for: the buffer
            replayed.wait_for("note.changed", path="before.md")
            replayed.wait_for("note.changed", path="after.md")
    finally:
        agent.close()


def test_a_note_made_by_append_note_ends_with_a_newline(daemon: DaemonProcess, vault_dir: Path) -> None:
    agent = owner_agent(daemon)
    try:
        assert agent.ok(agent.append("made/by-append.md", "first line"))["created"] is True
        assert agent.ok(agent.read("made/by-append.md"))["content"] == "first line\n"
        daemon.wait_content("made/by-append.md", "first line\n")
        agent.ok(agent.append("made/by-append.md", "second"))  # an append to it: as before
        assert agent.ok(agent.read("made/by-append.md"))["content"] == "first line\nsecond"
        assert agent.ok(agent.append("made/crlf.md", "a\r\nb"))["created"] is True
        assert agent.ok(agent.read("made/crlf.md"))["content"] == "a\r\nb\r\n"
    finally:
        agent.close()
    token = make_mcp_token(daemon, "appender")

    async def run() -> None:
        async with session(mcp_url(daemon), token) as client:
            made = await call(client, "append_note", path="made/by-mcp.md", text="from mcp")
            assert made["created"] is True
            assert (await call(client, "read_note", path="made/by-mcp.md"))["content"] == "from mcp\n"

    asyncio.run(run())
    wait_until(lambda: (vault_dir / "made/by-mcp.md").exists(), what="the file of the note")
    assert (vault_dir / "made/by-mcp.md").read_text() == "from mcp\n"
