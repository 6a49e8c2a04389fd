"""The files of a vault for agents (SPEC §6.12), shared by REST (``file_routes``) and MCP
(``file_tools``): listing with hashes, and contained opens, with scopes applied.

All disk work (listing, hashing, opening) runs in a worker thread; the hash cache is
per vault, kept on the aiohttp app (``api/file_routes.file_access``).
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stet.daemon.base.timestamps import iso
from stet.sync.errors import NotFound, StetError
from stet.sync.ignore_rules import IgnoreRules
from stet.sync.note_paths import InvalidPath
from stet.sync.permissions import READ
from stet.sync.vault_files import (
    FileChangedWhileRead,
    HashCache,
    VaultFile,
    list_files,
    open_file,
)

if TYPE_CHECKING:
    from stet.daemon.ops.notes import NoteOperations

_TEXT_TYPES = {".md": "text/markdown; charset=utf-8", ".markdown": "text/markdown; charset=utf-8",
               ".txt": "text/plain; charset=utf-8"}


def content_type(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext in _TEXT_TYPES:
        return _TEXT_TYPES[ext]
    guessed = mimetypes.guess_type(path, strict=False)[0]
    return guessed or "application/octet-stream"


@dataclass(slots=True)
class VaultFileAccess:
    root: Path
    extensions: tuple[str, ...]
    max_bytes: int  # [attachments] max_bytes: bigger files are listed, not hashed
    cache: HashCache = field(init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        self.cache = HashCache(self.root, IgnoreRules(), self.extensions)

    def _rules(self) -> IgnoreRules:
        rules = IgnoreRules.load(self.root)
        self.cache.rules = rules
        return rules

    def _page(self, prefix: str, cursor: str, limit: int, ops: NoteOperations) -> dict[str, Any]:
        rules = self._rules()
        visible = [f for f in list_files(self.root, rules, self.extensions, prefix)
                   if f.path > cursor and ops.principal.scopes.allows(READ, f.path)]
        page, more = visible[:limit], len(visible) > limit
        files = []
        for f in page:
            entry = describe(f)
            if f.size > self.max_bytes:
                entry["sha256"] = None
                entry["skipped"] = f"too large ({f.size} bytes; [attachments] max_bytes is {self.max_bytes})"
            else:
                try:
                    entry["sha256"] = self.cache.sha256(f)
                except (FileNotFoundError, InvalidPath):
                    continue  # gone (or replaced by a link) since the listing
                except FileChangedWhileRead:
                    entry["sha256"] = None
                    entry["changing"] = True
            files.append(entry)
        return {"files": files, "nextCursor": page[-1].path if more and page else None}

    async def page(self, ops: NoteOperations, *, prefix: str, cursor: str, limit: int) -> dict[str, Any]:
        # One hashing pass per vault at a time (the cache is not shared across threads).
        async with self._lock:
            return await asyncio.to_thread(self._page, prefix, cursor, limit, ops)

    async def attachments(self, ops: NoteOperations, *, cursor: str,
                          limit: int) -> tuple[list[tuple[str, int]], bool]:
        """(path, size) of the attachments the token may read after ``cursor`` in path order,
        and whether more follow: MCP's resources/list names them.

        From the store's ``attachment_files`` (the files the daemon has taken in, what peers
        get), not a walk of the folder: a walk of 10,000 files cost 96 ms under light load,
        on every attachments page, past the 50 ms a page asked (issue 34). A file over
        ``[attachments] max_bytes`` is not taken in, so not listed (resources/read would
        refuse its bytes anyway)."""
        return attachments_after(ops, cursor, limit)

    def _open(self, path: str) -> tuple[int, VaultFile]:
        try:
            return open_file(self.root, self._rules(), self.extensions, path)
        except InvalidPath as exc:
            raise StetError(f"invalid path {path!r}: {exc.reason}", code="invalid_path", path=path) from None
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"no file at {path}", path=path) from None
        except OSError as exc:
            raise StetError(f"{path} cannot be read: {exc.strerror}", code="invalid_path",
                            path=path) from None

    async def open(self, ops: NoteOperations, path: Any) -> tuple[int, VaultFile]:
        """Check the path and the read scope (before looking at the disk, so a refusal says
        nothing about whether the file exists), then open it contained."""
        from stet.daemon.ops.notes import check_path

        path = check_path(path)
        ops.principal.scopes.check(READ, path)
        return await asyncio.to_thread(self._open, path)


def describe(f: VaultFile) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": f.path, "kind": f.kind, "size": f.size, "sha256": None,
                             "updatedAt": iso(f.mtime_ns / 1e9), "contentType": content_type(f.path)}
    if f.executable:
        entry["executable"] = True
    return entry


def attachments_after(ops: NoteOperations, cursor: str, limit: int) -> tuple[list[tuple[str, int]], bool]:
    """The store's side of ``VaultFileAccess.attachments``: batches of the indexed table,
    filtered by the read scope, until one more than the page or the end."""
    from stet.sync.attachment_files import AttachmentFiles

    scopes = ops.principal.scopes
    files = AttachmentFiles(ops.store)
    found: list[tuple[str, int]] = []
    after = cursor
    for _ in range(10_000):  # bounded: 10,000 batches of 500 rows
        rows = files.page(after, 500)
        found += [(path, size) for path, size, _ in rows if scopes.allows(READ, path)]
        if len(found) > limit or len(rows) < 500:
            break
        after = rows[-1][0]
    return found[:limit], len(found) > limit
