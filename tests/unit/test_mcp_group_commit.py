"""MCP's append_note shares the loop turn's commit with the other appends, as REST appends
do (daemon/notes/group_commit.py; issue 18, P2): the real tool dispatch (``McpRequest.call_tool``)
on a real store and write path, in-process; the commits are counted by the store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from stet.daemon.api.mcp_server import McpRequest
from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.group_commit import group_for
from stet.daemon.notes.records import RecordsKeeper
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.notes import OWNER, NoteOperations
from stet.sync.store import VaultStore


class DirectMcp(McpRequest):
    """``McpRequest`` with its vault's operations given (no aiohttp request to find them in)."""

    def __init__(self, ops: NoteOperations) -> None:
        self._ops = ops

    def operations(self) -> NoteOperations:
        return self._ops


def make_ops(tmp_path: Path) -> NoteOperations:
    service = NotesService("v1", VaultStore(tmp_path / "v.db"))
    events = EventBus()
    records = RecordsKeeper(service, events)
    ops = NoteOperations(service, events, OWNER, extensions=(".md",), max_bytes=1_000_000,
                         flush_index=records.flush_index)
    ops.create_note("log.md", "# log\n")
    return ops


def call(mcp: McpRequest, text: str, key: str, path: str = "log.md") -> Any:
    arguments = {"path": path, "text": text, "idempotencyKey": key}
    return mcp.call_tool({"name": "append_note", "arguments": arguments})


def test_mcp_appends_of_one_turn_share_one_commit_and_each_is_answered(tmp_path: Path) -> None:
    ops = make_ops(tmp_path)
    mcp = DirectMcp(ops)
    before = ops.store.commits

    async def main() -> list[Any]:
        return await asyncio.gather(*(call(mcp, f"line {i}\n", f"k{i}") for i in range(8)))

    answers = asyncio.run(main())
    assert ops.store.commits - before == 1
    assert group_for(ops.service).groups == 1
    assert [a["isError"] for a in answers] == [False] * 8
    revisions = {a["structuredContent"]["revision"] for a in answers}
    assert len(revisions) == 8
    text = ops.read_note("log.md")["content"]
    assert all(text.count(f"line {i}\n") == 1 for i in range(8))


def test_a_refused_mcp_append_in_a_group_is_its_own_tool_error(tmp_path: Path) -> None:
    ops = make_ops(tmp_path)
    mcp = DirectMcp(ops)

    async def main() -> list[Any]:
        return await asyncio.gather(call(mcp, "a\n", "ka"), call(mcp, "b\n", "kb", path="../out.md"),
                                    call(mcp, "c\n", "kc"), call(mcp, "a again\n", "ka"))

    good, bad, also_good, reused = asyncio.run(main())
    assert not good["isError"]
    assert not also_good["isError"]
    assert bad["isError"]
    assert bad["structuredContent"]["error"]["code"] == "invalid_path"
    assert reused["isError"]  # the same key with another text: refused, nothing applied
    assert reused["structuredContent"]["error"]["code"] == "idempotency_key_reused"
    assert ops.read_note("log.md")["content"] == "# log\na\nc\n"

    async def retry() -> Any:
        return await call(mcp, "a\n", "ka")

    again = asyncio.run(retry())  # a retried key: its first answer, applied once
    assert again["structuredContent"]["replayed"] is True
    assert ops.read_note("log.md")["content"] == "# log\na\nc\n"
