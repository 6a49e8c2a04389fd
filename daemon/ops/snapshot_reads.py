"""Snapshot reads and reads at a revision (SPEC §6.4), for ``NoteOperations``.

``open_snapshot`` records a store position (``stet.sync.snapshots``); ``read_note``,
``list_notes`` and ``search_notes`` given that ``snapshot`` answer as the vault stood then:
notes created since are absent, deleted ones present, moved ones at their old path, texts
as they were. Scopes apply as usual, to the paths as they were then.

Search under a snapshot: notes unchanged since (content and place) are found through the
full-text index, which holds their current text, the same as then; notes changed since
are scanned, their text rebuilt as of the snapshot and matched by the same rule (every
word, the last as a prefix). The scan is bounded (``SCAN_LIMIT`` changed notes); a
snapshot older than that many changes is refused with ``too_large``: open a new one.
Scanned hits come after the index's ranked ones. A listing rebuilds at most
``REBUILD_PER_PAGE`` changed notes per page (the page ends early, with a cursor).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from stet.daemon.base.timestamps import iso
from stet.sync.errors import NotFound, StetError
from stet.sync.note_doc import text_revision
from stet.sync.permissions import READ
from stet.sync.search_query import best_line, parse_query, snippet
from stet.sync.snapshots import Snapshot, Snapshots

if TYPE_CHECKING:
    from stet.daemon.ops.notes import NoteOperations

SCAN_LIMIT = 500  # notes changed since a snapshot that a search under it may scan
REBUILD_PER_PAGE = 200  # changed notes rebuilt for one page of a listing (then it ends early)


# (vault, snapshot, note) -> (text, revision, size) as of the snapshot: immutable, so a
# task's repeated reads, pages and searches under one snapshot rebuild each note once.
_THEN: OrderedDict[tuple[str, str, str], tuple[str, str, int]] = OrderedDict()
THEN_CACHE_BYTES = 32 * 1024 * 1024  # at most this much text held (by UTF-8 size)
THEN_CACHE_ENTRY = 1024 * 1024  # a larger note is rebuilt each time, never held
_then_bytes = [0]


def _then(ops: NoteOperations, snaps: Snapshots, snap: Snapshot, note_id: str) -> tuple[str, str, int]:
    key = (ops.service.vault_id, snap.id, note_id)
    hit = _THEN.get(key)
    if hit is not None:
        _THEN.move_to_end(key)
        return hit
    doc = snaps.doc_then(snap, note_id)
    value = (doc.text, doc.revision, doc.byte_size)
    if doc.byte_size <= THEN_CACHE_ENTRY:
        _THEN[key] = value
        _then_bytes[0] += doc.byte_size
        while _then_bytes[0] > THEN_CACHE_BYTES:
            _, (_, _, size) = _THEN.popitem(last=False)
            _then_bytes[0] -= size
    return value


def _snapshots(ops: NoteOperations) -> Snapshots:
    return Snapshots(ops.store)


def _get(ops: NoteOperations, snapshot: Any) -> Snapshot:
    return _snapshots(ops).get(snapshot, ops.clock())


def open_snapshot(ops: NoteOperations) -> dict[str, Any]:
    snap = _snapshots(ops).open(ops.clock())
    return {"snapshot": snap.id, "at": iso(snap.created_at),
            "expiresAt": iso(snap.created_at + _snapshots(ops).ttl_s)}


def read_at_snapshot(ops: NoteOperations, path: str, snapshot: Any) -> dict[str, Any]:
    snap = _get(ops, snapshot)
    ops._allow(READ, path)
    then = _snapshots(ops).note_then(snap, path)
    if then is None:
        raise NotFound(f"no note at {path} in snapshot {snap.id}", path=path)
    if not then.changed:
        row, text = ops.service.read(path)
        return {"path": path, "content": text, "revision": row.revision, "snapshot": snap.id}
    snaps = _snapshots(ops)
    text, revision, _ = _then(ops, snaps, snap, then.note_id)
    # A revision handed out is remembered, so a later baseRevision rewrite made on what
    # the agent read here merges with everything since (SPEC §6.4).
    if ops.service.revisions.lookup(then.note_id, revision, ops.clock()) is None:
        doc = snaps.doc_then(snap, then.note_id)
        ops.service.revisions.remember(then.note_id, revision, doc.snapshot(), ops.clock())
    return {"path": path, "content": text, "revision": revision, "snapshot": snap.id}


def read_at_revision(ops: NoteOperations, path: str, revision: Any) -> dict[str, Any]:
    if not isinstance(revision, str) or not revision:
        raise StetError("atRevision must be a revision string", code="bad_request")
    ops._allow(READ, path)
    row, text = ops.service.read(path)
    if revision == row.revision:
        return {"path": path, "content": text, "revision": row.revision}
    state = ops.service.revisions.lookup(row.id, revision, ops.clock())
    if state is None:
        raise StetError("that revision of the note is unknown here or older than an hour",
                        code="revision_unknown", atRevision=revision)
    then = ops.service.doc(row.id).fork_at(state).text
    if text_revision(then) != revision:
        raise StetError("that revision cannot be rebuilt here", code="revision_unknown", atRevision=revision)
    return {"path": path, "content": then, "revision": revision}


def list_at_snapshot(ops: NoteOperations, prefix: str, limit: int, cursor: str,
                     snapshot: Any) -> dict[str, Any]:
    from stet.daemon.ops.notes import note_summary

    snaps = _snapshots(ops)
    snap = snaps.get(snapshot, ops.clock())
    scopes = ops.principal.scopes
    # Only readable notes are paged, so a cursor never names a note this token may not see.
    page, more = snaps.page_then(snap, prefix=prefix, after=cursor, limit=limit,
                                 allow=lambda p: scopes.allows(READ, p))
    out: list[dict[str, Any]] = []
    rebuilt = 0
    for i, n in enumerate(page):
        if n.row is not None:  # unchanged since: its row now is its row then
            out.append(note_summary(n.row))
            continue
        if rebuilt == REBUILD_PER_PAGE:  # bounded work per request: the page ends here
            page, more = page[:i], True
            break
        rebuilt += 1
        _, revision, size = _then(ops, snaps, snap, n.note_id)
        last = snaps.last_write_then(snap, n.note_id)
        out.append({"path": n.path, "revision": revision, "size": size,
                    "updatedAt": iso(last[0]) if last else None, "updatedBy": last[1] if last else None})
    return {"notes": out, "nextCursor": page[-1].path if more and page else None, "snapshot": snap.id}


def search_at_snapshot(ops: NoteOperations, q: Any, limit: int, snapshot: Any) -> dict[str, Any]:
    if not isinstance(q, str) or not q.strip():
        raise StetError("q must be a non-empty string", code="bad_request")
    snaps = _snapshots(ops)
    snap = snaps.get(snapshot, ops.clock())
    query = parse_query(q)
    scopes = ops.principal.scopes
    changed, touched = snaps.changed_then(snap)
    if len(changed) > SCAN_LIMIT:
        raise StetError(f"{len(changed)} notes changed since this snapshot; searching it would rebuild "
                        f"too many (limit {SCAN_LIMIT}): open a new snapshot", code="too_large",
                        limit=SCAN_LIMIT)
    results: list[dict[str, Any]] = []
    # Index hits: only notes unchanged since (their current text and path are the then ones).
    for hit in ops.searchable().search(q, limit=limit * 4 + len(touched)):
        row = ops.store.note_at(hit.path)
        if row is not None and row.id not in touched and scopes.allows(READ, hit.path):
            results.append(hit.to_json())
            if len(results) >= limit:
                break
    for n in changed:
        if len(results) >= limit:
            break
        if not scopes.allows(READ, n.path):
            continue
        text = _then(ops, snaps, snap, n.note_id)[0]
        if query.matches(text):
            line_no, line = best_line(text, query)
            results.append({"path": n.path, "line": line_no, "snippet": snippet(line, query)})
    return {"results": results, "snapshot": snap.id}
