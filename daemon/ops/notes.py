"""The agent operations of SPEC §6.4 -- one implementation behind REST, MCP and the CLI.

Every call names its caller (a ``Principal``: the owner, or an agent token with scopes)
and goes: path check → scope check → idempotency lookup → preconditions
(``expectedRevision``, anchors, the brake) → one write through ``NotesService`` → the
idempotency record, all in one store transaction, so an acknowledged write is durable and
a retried one applies nothing. Refusals that a person should see are recorded in the
conflict log and published as ``conflict.refused``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from stet.daemon.notes.event_bus import EventBus
from stet.daemon.notes.service import NotesService
from stet.daemon.ops.read_scope import visible_payload
from stet.daemon.ops.structure import StructureOperations
from stet.daemon.ops.versions import VersionOperations, attribution_of
from stet.sync.change_kinds import Source, agent_source
from stet.sync.conflict_log import ConflictLog
from stet.sync.errors import BaseNotRebuilt, NotFound, StetError
from stet.sync.idempotency import IdempotencyKeys, payload_hash
from stet.sync.note_paths import InvalidPath, casefold_key, normalize_note_path
from stet.sync.note_rows import NoteRow
from stet.sync.operations import append_splice, parse_edits, plan_edits
from stet.sync.permissions import APPEND, READ, WRITE, Scopes
from stet.sync.text_diff import Splice, apply_splices

if TYPE_CHECKING:
    from stet.daemon.notes.search_indexer import SearchIndexer
    from stet.daemon.safety.brake import Brake
    from stet.daemon.safety.versions_keeper import VersionsKeeper

RECORDED_CODES = {"revision_mismatch", "anchor_not_found", "anchor_ambiguous", "anchors_overlap",
                  "forbidden", "brake_engaged"}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the owner (CLI, UI) or a named agent token."""

    kind: str  # "owner" | "agent"
    name: str
    vault_id: str | None = None  # an agent token belongs to one vault
    scopes: Scopes = Scopes.everything()
    # The credential it came with, which its open streams are closed with (ops/open_streams.py):
    # "owner", "token:<sha256 of the secret>" or "ui:<sha256 of the session id>".
    holder: str = "owner"

    @property
    def source(self) -> str:
        if self.kind == "owner":
            return Source.UI if self.name == "ui" else Source.CLI  # the web page writes as "ui"
        return agent_source(self.name)

    @property
    def token_key(self) -> str:
        """What idempotency keys and conflicts are scoped/attributed to."""
        return "owner" if self.kind == "owner" else agent_source(self.name)


OWNER = Principal("owner", "owner")


@lru_cache(maxsize=1024)
def _normalized(raw: str) -> str:
    """An agent names the same few paths request after request (its log): checked once
    each (a refused path raises and is not remembered)."""
    return normalize_note_path(raw)


def check_path(raw: Any, field: str = "path") -> str:
    if not isinstance(raw, str):
        raise StetError(f"{field} must be a string", code="bad_request")
    try:
        return _normalized(raw)
    except InvalidPath as exc:
        raise StetError(f"invalid {field} {raw!r}: {exc.reason}", code="invalid_path", path=raw) from None


def _opt_str(args: dict[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is not None and not isinstance(value, str):
        raise StetError(f"{name} must be a string", code="bad_request")
    return value


def _req_str(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise StetError(f"{name} is required and must be a string", code="bad_request")
    return value


def note_summary(row: NoteRow) -> dict[str, Any]:
    from stet.daemon.base.timestamps import iso

    return {"path": row.path, "revision": row.revision, "size": row.size,
            "updatedAt": iso(row.updated_at), "updatedBy": row.updated_by}


class NoteOperations:
    """The operations of one vault, for one caller (its versions: ``history``)."""

    def __init__(self, service: NotesService, events: EventBus, principal: Principal, *,
                 extensions: tuple[str, ...], max_bytes: int,
                 clock: Callable[[], float] = time.time,
                 flush_index: Callable[[], None] | None = None,
                 search: SearchIndexer | None = None,
                 versions: VersionsKeeper | None = None, brake: Brake | None = None,
                 write_guard: Callable[[str], None] | None = None) -> None:
        self.service = service
        self.write_guard = write_guard  # ignored paths, symlinked folders (write_guard.py)
        self.versions = versions
        self.brake = brake
        self.store = service.store
        self.events = events
        self.principal = principal
        self.extensions = extensions
        self.max_bytes = max_bytes
        self.clock = clock
        self.flush_index = flush_index
        self.search = search  # the vault's search index (its worker: search_indexer.py)
        self._index_waited = False
        self._index_behind = False  # still behind after waiting (``index_caught_up``)
        # The attachment rows of the conflicts list (daemon/ops/attachment_versions.py).
        self.attachment_conflicts: Callable[[float | None, int], list[dict[str, Any]]] | None = None
        if principal.vault_id is not None and principal.vault_id != service.vault_id:
            # A token of another vault learns nothing about this one, not even that it exists.
            raise NotFound("no such vault")
        self.history = VersionOperations(service, principal, versions=versions, brake=brake,
                                         allow=self._allow, write=self._write)
        self.structure = StructureOperations(self)

    # -- helpers ----------------------------------------------------------------------

    def _refuse(self, exc: StetError, operation: str, path: str, attempted: dict[str, Any]) -> StetError:
        if exc.code in RECORDED_CODES or isinstance(exc, BaseNotRebuilt):
            self.service.flush_appends()  # in a group: the rows as its answers named them
            from stet.daemon.ops.promotion import refusal_base

            row = self.store.note_at(path)
            base_revision, base_state = refusal_base(self.service, row, attempted, self.clock())
            conflict = ConflictLog(self.store).record(
                at=self.clock(), token=self.principal.token_key, path=path, operation=operation,
                code=exc.code, attempted=attempted, current_revision=row.revision if row else None,
                note_id=row.id if row else None, base_revision=base_revision, base_state=base_state,
            )
            self.events.publish(self.service.vault_id, "conflict.refused", conflict.to_json())
        return exc

    def _allow(self, action: str, path: str) -> None:
        self.principal.scopes.check(action, path)

    def _check_writable(self, path: str) -> None:
        if self.write_guard is not None:
            self.write_guard(path)

    def _check_note_name(self, path: str) -> None:
        from stet.sync.note_paths import is_note_name

        if not is_note_name(path, self.extensions):
            raise StetError(f"{path} is not a note name (extensions: {', '.join(self.extensions)})",
                            code="invalid_path", path=path)

    def _check_size(self, text: str) -> None:
        self._check_bytes(len(text.encode("utf-8")))

    def _check_bytes(self, size: int) -> None:
        if size > self.max_bytes:
            raise StetError(f"the note would be {size} bytes; the limit is {self.max_bytes}",
                            code="too_large", size=size, limit=self.max_bytes)

    def _current(self, path: str) -> tuple[NoteRow, str]:
        return self.service.read(path)

    def _expect(self, row: NoteRow, text: str, expected: str | None) -> None:
        if expected is not None and expected != row.revision:
            # The current text only for a token that may read it (a write-only scope sees none).
            shown = {"currentContent": text} if self.principal.scopes.allows(READ, row.path) else {}
            raise StetError("the note changed since that revision", code="revision_mismatch",
                            currentRevision=row.revision, **shown)

    @contextmanager
    def _write(self, operation: str, path: str, args: dict[str, Any], key: str | None,
               *, implicit_key: bool = False) -> Iterator[dict[str, Any]]:
        """One durable write: refusal recording, idempotency, one transaction.

        ``implicit_key``: without an ``idempotencyKey`` the payload itself is the key (in a
        namespace of its own), for writes that must never apply twice (a stale rewrite).
        """
        digest = ""
        if key is not None or implicit_key:  # only keyed writes need the payload's hash
            digest = payload_hash(operation, path, {k: v for k, v in args.items() if k != "idempotencyKey"})
        keys = IdempotencyKeys(self.store)
        scope = self.principal.token_key
        if key is None and implicit_key:
            scope, key = f"{scope} (payload)", digest
        holder: dict[str, Any] = {}
        try:
            if key is not None:
                if not isinstance(key, str) or not key or len(key) > 200:
                    raise StetError("idempotencyKey must be a non-empty string of at most 200 characters")
                first = keys.lookup(scope, key, digest)
                if first is not None:
                    holder["result"] = dict(first, replayed=True)
                    holder["replayed"] = True
                    yield holder
                    return
            touched: list[str] = []
            holder["touched"] = touched
            # One unit of work: the write and its idempotency record commit together;
            # a rollback forgets what it touched and announces nothing.
            with self.service.write():
                yield holder
                if key is not None:
                    keys.save(scope, key, digest, holder["result"], self.clock())
        except StetError as exc:
            raise self._refuse(exc, operation, path, args) from None

    # -- reads -----------------------------------------------------------------------

    def list_notes(self, prefix: str = "", limit: int = 1000, cursor: str = "",
                   snapshot: Any = None) -> dict[str, Any]:
        if snapshot is not None:
            from stet.daemon.ops.snapshot_reads import list_at_snapshot

            return list_at_snapshot(self, prefix, limit, cursor or "", snapshot)
        # The cursor is the last note *shown*: read past hidden rows until one more visible
        # note than the page holds is found (or the end), so it never names a hidden path.
        scopes = self.principal.scopes
        visible: list[NoteRow] = []
        after = cursor or ""
        batch = limit + 1 if scopes.owner else max(limit + 1, 500)
        while len(visible) <= limit:
            rows = self.store.live_notes(prefix=prefix, after=after, limit=batch)
            visible += [r for r in rows if scopes.allows(READ, r.path)]
            if len(rows) < batch:
                break
            after = rows[-1].path
        more = len(visible) > limit
        visible = visible[:limit]
        return {"notes": [note_summary(r) for r in visible],
                "nextCursor": visible[-1].path if more else None}

    def read_note(self, path: Any, version: Any = None, snapshot: Any = None,
                  atRevision: Any = None, include: Any = None) -> dict[str, Any]:
        """The note as stored; ``include`` (headings, frontmatter, tasks, links) adds its
        structure (``ops/structure.py``), of the current text only."""
        path = check_path(path)
        self._allow(READ, path)
        if include is not None:
            if version is not None or snapshot is not None or atRevision is not None:
                raise StetError("include reads the current text: give it without version, snapshot "
                                "or atRevision", code="bad_request")
            read = self.read_note(path)
            return {**read, **self.structure.describe(read["path"], read["content"], include)}
        if sum(x is not None for x in (version, snapshot, atRevision)) > 1:
            raise StetError("give at most one of version, snapshot and atRevision", code="bad_request")
        if snapshot is not None or atRevision is not None:
            from stet.daemon.ops import snapshot_reads

            if snapshot is not None:
                return snapshot_reads.read_at_snapshot(self, path, snapshot)
            return snapshot_reads.read_at_revision(self, path, atRevision)
        if version is not None:
            return self.history.read_version(path, version)
        row, text = self._current(path)
        self.service.reads.handed(self.principal.source, row.id, row.revision, self.clock())
        return {"path": row.path, "content": text, "revision": row.revision}

    async def index_caught_up(self) -> None:
        """Wait, with the loop running, until every change made so far is searchable
        (bounded: then the search answers from what is indexed); the search that follows
        in this request needs no blocking ``flush_index`` then."""
        if self.search is not None:
            # Waited either way: an index still behind after that (being rebuilt: a new
            # schema, a lost file) answers from what it holds, saying so, rather than
            # blocking the loop in ``flush`` for as long again.
            self._index_behind = not await self.search.wait_indexed()
            self._index_waited = True

    def searchable(self) -> SearchIndexer:
        """The search index, holding every change made before this request."""
        if self.search is None:
            raise StetError("search is not available here", code="internal")
        if not self._index_waited:
            (self.flush_index or self.search.flush)()
        return self.search

    def search_notes(self, q: Any, limit: int = 20, snapshot: Any = None) -> dict[str, Any]:
        if snapshot is not None:
            from stet.daemon.ops.snapshot_reads import search_at_snapshot

            return search_at_snapshot(self, q, limit, snapshot)
        if not isinstance(q, str) or not q.strip():
            raise StetError("q must be a non-empty string", code="bad_request")
        wanted = limit if self.principal.scopes.owner else limit * 4
        hits = self.searchable().search(q, limit=wanted)
        visible = [h for h in hits if self.principal.scopes.allows(READ, h.path)][:limit]
        answer: dict[str, Any] = {"results": [h.to_json() for h in visible]}
        if self._index_behind and self.search is not None and self.search.behind:
            answer["indexing"] = ("the search index is still being built: these results may miss notes; "
                                  "search again in a moment")
        return answer

    def open_snapshot(self) -> dict[str, Any]:
        """SPEC §6.4 snapshot reads: ``{snapshot, at}``; see ``snapshot_reads``."""
        from stet.daemon.ops.snapshot_reads import open_snapshot

        return open_snapshot(self)

    def recent_changes(self, path: Any = None, since: Any = None, limit: int = 100) -> dict[str, Any]:
        from stet.sync.change_log import ChangeLog

        if path is not None:
            path = check_path(path)
            self._allow(READ, path)
        since_ts = _parse_since(since)
        entries = ChangeLog(self.store).query(path=path, since=since_ts, limit=limit)
        by = attribution_of(self.service)
        shown = (visible_payload(self.principal.scopes, {**e.to_json(), "by": by(e.source, e.device)})
                 for e in entries)
        return {"changes": [e for e in shown if e is not None]}  # every path checked (oldPath too)

    def list_conflicts(self, since: Any = None, limit: int = 100) -> dict[str, Any]:
        """Refused writes, newest first (SPEC §6.8): for a person, so the owner only."""
        if not self.principal.scopes.owner:
            raise StetError("only the owner token may list conflicts", code="forbidden")
        after = _parse_since(since)
        listed = [c.to_json() for c in ConflictLog(self.store).list(limit=limit, since=after)]
        if self.attachment_conflicts is not None:  # concurrent attachment changes (SPEC §3.14)
            listed = sorted(listed + self.attachment_conflicts(after, limit), key=lambda c: c["at"],
                            reverse=True)[:limit]
        return {"conflicts": listed}

    # -- writes ----------------------------------------------------------------------

    def create_note(self, path: Any, content: Any = "", idempotencyKey: Any = None) -> dict[str, Any]:
        path = check_path(path)
        if not isinstance(content, str):
            raise StetError("content must be a string", code="bad_request")
        args = {"content": content}
        with self._write("create_note", path, args, idempotencyKey) as w:
            if "result" in w:
                return dict(w["result"])
            self._allow(WRITE, path)
            self._check_note_name(path)
            self._check_writable(path)
            self._check_size(content)
            self._check_case(path)
            result = self.service.write_text(path, content, self.principal.source, must_create=True)
            w["touched"].append(result.note.id)
            w["result"] = {"path": path, "revision": result.note.revision, "created": True}
        return dict(w["result"])

    def append_note(self, path: Any, text: Any = None, idempotencyKey: Any = None) -> dict[str, Any]:
        path = check_path(path)
        if not isinstance(text, str) or text == "":
            raise StetError("text must be a non-empty string", code="bad_request")
        args = {"text": text}
        with self._write("append_note", path, args, idempotencyKey) as w:
            if "result" in w:
                return dict(w["result"])
            self._allow(APPEND, path)
            found = self.service.appendable(path)  # a group's queued appends included
            if found is None:
                self._check_note_name(path)
                self._check_writable(path)
                self._check_case(path)
                # A note it makes ends its last line (issue 34): the next append, or an
                # editor, starts on a line of its own.
                if not text.endswith("\n"):
                    text += "\r\n" if "\r\n" in text else "\n"
                self._check_size(text)
                result = self.service.write_text(path, text, self.principal.source)
                created = True
            else:
                row, current, size = found
                splice = append_splice(current, text)
                # The note's size is known (kept with its revision): adding the splice's
                # bytes spares joining and encoding the whole note on every append.
                self._check_bytes(size + len(splice.text.encode("utf-8")))
                result = self.service.append_at_end(row, splice.text, self.principal.source)
                created = False
            w["touched"].append(result.note.id)
            w["result"] = {"path": path, "revision": result.note.revision, "created": created}
        return dict(w["result"])

    def edit_note(self, path: Any, edits: Any = None, expectedRevision: Any = None,
                  idempotencyKey: Any = None) -> dict[str, Any]:
        path = check_path(path)
        expected = _opt_str({"expectedRevision": expectedRevision}, "expectedRevision")
        args = {"edits": edits, "expectedRevision": expected}
        with self._write("edit_note", path, args, idempotencyKey) as w:
            if "result" in w:
                return dict(w["result"])
            self._allow(WRITE, path)
            parsed = parse_edits(edits)
            row, text = self._current(path)
            if expected is not None and expected != row.revision and self._edit_already_there(
                    row, text, expected, parsed):
                # The same conclusion reached twice: its result is the text as it is now.
                w["result"] = {"path": path, "revision": row.revision, "changed": False, "unchanged": True}
                return dict(w["result"])
            self._expect(row, text, expected)
            splices = plan_edits(text, parsed)
            self._check_size(apply_splices(text, splices))
            result = self.service.apply_splices(path, splices, self.principal.source)
            w["touched"].append(row.id)
            w["result"] = {"path": path, "revision": result.note.revision, "changed": result.changed}
        return dict(w["result"])

    def apply_plan(self, operation: str, path: Any, args: dict[str, Any], plan: Callable[[str], list[Splice]],
                   *, expectedRevision: Any = None, idempotencyKey: Any = None) -> dict[str, Any]:
        """One edit planned on the note's current text (``plan`` -> splices; an empty plan
        changes nothing), applied as ``edit_note`` applies its edits: a structure edit of
        ``ops/structure.py``. Its refusals are the plan's (``anchor_not_found``, ...)."""
        path = check_path(path)
        expected = _opt_str({"expectedRevision": expectedRevision}, "expectedRevision")
        args = {**args, "expectedRevision": expected}
        with self._write(operation, path, args, idempotencyKey) as w:
            if "result" in w:
                return dict(w["result"])
            self._allow(WRITE, path)
            row, text = self._current(path)
            self._expect(row, text, expected)
            splices = plan(text)
            if not splices:
                w["result"] = {"path": path, "revision": row.revision, "changed": False}
                return dict(w["result"])
            self._check_size(apply_splices(text, splices))
            result = self.service.apply_splices(path, splices, self.principal.source)
            w["touched"].append(row.id)
            w["result"] = {"path": path, "revision": result.note.revision, "changed": result.changed}
        return dict(w["result"])

    def update_note(self, path: Any, content: Any = None, expectedRevision: Any = None,
                    baseRevision: Any = None, idempotencyKey: Any = None,
                    force: Any = None) -> dict[str, Any]:
        path = check_path(path)
        if not isinstance(content, str):
            raise StetError("content is required and must be a string", code="bad_request")
        expected = _opt_str({"expectedRevision": expectedRevision}, "expectedRevision")
        base = _opt_str({"baseRevision": baseRevision}, "baseRevision")
        if expected is not None and base is not None:
            raise StetError("give expectedRevision or baseRevision, not both", code="bad_request")
        if force is not None and not isinstance(force, bool):
            raise StetError("force must be true or false", code="bad_request")
        if force and (expected is not None or base is not None):
            raise StetError("force replaces the note whatever it holds: give no revision with it",
                            code="bad_request")
        read_base = None
        if expected is None and base is None and not force and self.principal.kind == "agent":
            # A rewrite without a revision from an agent's token that read the note moments
            # ago was made on what it read: merged with what others wrote since, not over it.
            # (The owner -- the CLI, the web page -- sets the text it says.)
            row_now = self.store.note_at(path)
            if row_now is not None and not row_now.deleted:
                read_base = self.service.reads.last_read(self.principal.source, row_now.id, self.clock())
                if read_base == row_now.revision:
                    read_base = None
        base = base or read_base
        args = {"content": content, "expectedRevision": expected, "baseRevision": base}
        # A rewrite made at baseRevision is a CRDT edit concurrent with everything since:
        # applied a second time (a retry after a lost answer) it would insert its new text
        # again. So the same rewrite from the same base applies once, key or no key.
        with self._write("update_note", path, args, idempotencyKey, implicit_key=base is not None) as w:
            if "result" in w:
                return dict(w["result"])
            self._allow(WRITE, path)
            self._check_size(content)
            row, text = self._current(path)
            if expected is not None and expected != row.revision and content == text:
                # The same conclusion reached twice (the winner wrote this very text): a
                # success that changes nothing, not a conflict.
                w["result"] = {"path": path, "revision": row.revision, "changed": False, "unchanged": True}
                return dict(w["result"])
            self._expect(row, text, expected)
            snapshot = None
            if base is not None and base != row.revision:
                snapshot = self.service.revisions.lookup(row.id, base, self.clock())
                if snapshot is None and read_base is None:
                    raise StetError("that baseRevision is unknown here or older than an hour; "
                                    "read the note again", code="revision_unknown", baseRevision=base)
            if snapshot is not None and base is not None:
                result = self.service.rewrite_at(path, snapshot, base, content, self.principal.source)
            else:
                result = self.service.write_text(path, content, self.principal.source, create=False)
            w["touched"].append(row.id)
            w["result"] = {"path": path, "revision": result.note.revision, "changed": result.changed}
            if self.service.doc(row.id).text == content:
                # The token knows this text whole (it wrote it): its next rewrite without a
                # revision is made on it. Not so after a merge: that text holds others' too.
                self.service.reads.handed(self.principal.source, row.id, result.note.revision, self.clock())
            if snapshot is not None and read_base is not None:
                # Said so the agent knows: its rewrite kept what others wrote since it read.
                w["result"]["mergedFrom"] = read_base
        return dict(w["result"])

    def _edit_already_there(self, row: NoteRow, text: str, expected: str, parsed: list[Any]) -> bool:
        """Whether anchored edits made on the text at ``expected`` give the text as it is now."""
        snapshot = self.service.revisions.lookup(row.id, expected, self.clock())
        if snapshot is None:
            return False
        try:
            then = self.service.doc(row.id).fork_at(snapshot, expected)
            if then.revision != expected:
                return False
            return apply_splices(then.text, plan_edits(then.text, parsed)) == text
        except StetError:
            return False

    def delete_note(self, path: Any, expectedRevision: Any = None,
                    idempotencyKey: Any = None) -> dict[str, Any]:
        path = check_path(path)
        expected = _opt_str({"expectedRevision": expectedRevision}, "expectedRevision")
        with self._write("delete_note", path, {"expectedRevision": expected}, idempotencyKey) as w:
            if "result" in w:
                return dict(w["result"])
            self._allow(WRITE, path)
            row, text = self._current(path)
            self._expect(row, text, expected)
            self.service.delete(path, self.principal.source)
            w["result"] = {"path": path, "deleted": True, "revision": None}
        return dict(w["result"])

    def move_note(self, path: Any, newPath: Any = None, expectedRevision: Any = None,
                  idempotencyKey: Any = None) -> dict[str, Any]:
        path = check_path(path)
        new_path = check_path(newPath, "newPath")
        expected = _opt_str({"expectedRevision": expectedRevision}, "expectedRevision")
        args = {"newPath": new_path, "expectedRevision": expected}
        with self._write("move_note", path, args, idempotencyKey) as w:
            if "result" in w:
                return dict(w["result"])
            self._allow(WRITE, path)
            self._allow(WRITE, new_path)
            self._check_note_name(new_path)
            self._check_writable(new_path)
            row, text = self._current(path)
            self._expect(row, text, expected)
            if casefold_key(new_path) != casefold_key(path):
                self._check_case(new_path)
            moved = self.service.move(path, new_path, self.principal.source)
            w["result"] = {"path": new_path, "oldPath": path, "revision": moved.revision}
        return dict(w["result"])

    def _check_case(self, path: str) -> None:
        key = casefold_key(path)
        parent = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
        for row in self.store.live_notes(prefix=parent):
            if row.path != path and casefold_key(row.path) == key:
                if not self.principal.scopes.allows(READ, row.path):  # never name a hidden note
                    raise StetError(f"{path} differs only by case from an existing note",
                                    code="invalid_path", path=path)
                raise StetError(f"{path} differs only by case from the existing note {row.path}",
                                code="invalid_path", path=path, existing=row.path)


def _parse_since(since: Any) -> float | None:
    if since is None or since == "":
        return None
    if isinstance(since, int | float) and not isinstance(since, bool):
        return float(since)
    if isinstance(since, str):
        from datetime import datetime

        try:
            return float(since)
        except ValueError:
            pass
        try:
            return datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    raise StetError("since must be a timestamp (seconds) or an ISO 8601 time", code="bad_request")
