"""MCP's resources/list names attachments from the store's ``attachment_files``, not a walk
of the folder (issue 34: ≤ 50 ms a page on 10,000 notes; a walk cost 96 ms on every
attachments page). In-process on a real store: the folder the access points at does not
even exist, so an answer can only come from the store; paging and the read scope as
``list_notes``."""

from __future__ import annotations

import asyncio
from pathlib import Path

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.files import VaultFileAccess
from stet.daemon.ops.notes import NoteOperations, Principal
from stet.sync.attachment_files import AttachmentFiles
from stet.sync.attachment_plan import SeenFile
from stet.sync.permissions import Scopes
from stet.sync.store import VaultStore

PATHS = ["a.png", "img/b.png", "img/c.pdf", "secret/d.png", "图片/e.png", "z.bin"]


def ops_for(tmp_path: Path, principal: Principal) -> NoteOperations:
    service = NotesService("v1", VaultStore(tmp_path / "v.db"))
    files = AttachmentFiles(service.store)
    for i, path in enumerate(PATHS):
        files.put(path, SeenFile(f"att{i}", "0" * 64, 100 + i, 1_700_000_000_000_000_000, i, False, ""))
    return NoteOperations(service, EventBus(), principal, extensions=(".md",), max_bytes=1_000_000)


def page_all(access: VaultFileAccess, ops: NoteOperations, limit: int) -> list[list[tuple[str, int]]]:
    pages, cursor = [], ""
    for _ in range(20):
        files, more = asyncio.run(access.attachments(ops, cursor=cursor, limit=limit))
        pages.append(files)
        if not more:
            return pages
        cursor = files[-1][0]
    raise AssertionError("never ended")


def test_attachments_are_listed_from_the_store_in_pages(tmp_path: Path) -> None:
    ops = ops_for(tmp_path, Principal("owner", "owner"))
    access = VaultFileAccess(tmp_path / "no-such-folder", (".md",), 1_000_000)
    pages = page_all(access, ops, 2)
    assert [len(p) for p in pages] == [2, 2, 2]
    assert [path for p in pages for path, _ in p] == sorted(PATHS)
    assert pages[0][0] == ("a.png", 100)


def test_a_scoped_token_sees_only_the_attachments_it_may_read(tmp_path: Path) -> None:
    scoped = Principal("agent", "scoped", vault_id="v1", scopes=Scopes(read=("img/**", "图片/**")))
    ops = ops_for(tmp_path, scoped)
    access = VaultFileAccess(tmp_path / "no-such-folder", (".md",), 1_000_000)
    pages = page_all(access, ops, 2)
    assert [path for p in pages for path, _ in p] == ["img/b.png", "img/c.pdf", "图片/e.png"]
    assert [len(p) for p in pages] == [2, 1]  # the cursor never names a hidden path
