"""Promotion of refused writes (SPEC §6.4): a refused write is kept, and a person can
apply it later (``stet conflicts show ID`` / ``stet conflicts apply ID``).

When a write is refused, its conflict record keeps what was attempted and the CRDT state
of the text it was made against: the revision the agent had read (``expectedRevision``
or ``baseRevision``), else the note as it stood at the refusal. Documents keep deleted
text (``skip_gc``), so that state can be rebuilt for as long as the record exists.

Applying it (owner only, attributed to ``cli``):
- a rewrite (``update_note``) is applied as a ``baseRevision`` rewrite made at that
  state: whatever anyone changed since survives beside it;
- an anchored edit (``edit_note``) is planned against the text it was made against and
  applied the same way;
- an append is appended to the note as it is now; a create creates; a delete deletes;
  a move moves.
The note's text before is kept as a ``before-promotion`` version; the conflict is marked
promoted (once: a second apply is refused); ``conflict.promoted`` is published.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stet.sync.attribution import attribution
from stet.sync.conflict_log import Conflict, ConflictLog
from stet.sync.errors import AlreadyExists, NotFound, StetError
from stet.sync.json_input import row_id
from stet.sync.note_doc import text_revision
from stet.sync.note_rows import NoteRow
from stet.sync.operations import append_splice, parse_edits, plan_edits
from stet.sync.text_diff import apply_splices
from stet.sync.versions import BEFORE_PROMOTION

if TYPE_CHECKING:
    from stet.daemon.notes.service import NotesService
    from stet.daemon.ops.notes import NoteOperations

PROMOTABLE = ("update_note", "edit_note", "append_note", "create_note", "delete_note", "move_note")


def refusal_base(service: NotesService, row: NoteRow | None, attempted: dict[str, Any],
                 now: float) -> tuple[str | None, bytes | None]:
    """(revision, CRDT state) of the text a refused write was made against, if known."""
    if row is None:
        return None, None
    said = attempted.get("expectedRevision") or attempted.get("baseRevision")
    if isinstance(said, str) and said != row.revision:
        state = service.revisions.lookup(row.id, said, now)
        return (said, state) if state is not None else (said, None)
    return row.revision, service.doc(row.id).snapshot()


def _owner(ops: NoteOperations) -> None:
    if not ops.principal.scopes.owner:
        raise StetError("only the owner token may see or promote conflicts", code="forbidden")


def _conflict(ops: NoteOperations, conflict_id: Any) -> Conflict:
    _owner(ops)
    conflict_id = row_id(conflict_id, "conflict id")  # 1 .. 2^63-1, else bad_request
    found = ConflictLog(ops.store).get(conflict_id)
    if found is None:
        raise NotFound(f"no conflict {conflict_id} (see stet conflicts)", id=conflict_id)
    return found


def _note(ops: NoteOperations, c: Conflict) -> NoteRow | None:
    """The note the write was aimed at, where it is now (it may have moved)."""
    if c.note_id is not None:
        row = ops.store.note(c.note_id)
        if row is not None and not row.deleted:
            return row
    return ops.store.note_at(c.path)


def _base_text(ops: NoteOperations, c: Conflict, row: NoteRow) -> str | None:
    if c.base_state is None or c.note_id != row.id:
        return None
    fork = ops.service.doc(row.id).fork_at(c.base_state)
    return fork.text if text_revision(fork.text) == c.base_revision else None


def _attempted_text(ops: NoteOperations, c: Conflict, row: NoteRow | None) -> str | None:
    """The text the attempt would have given the note, made against its base."""
    a = c.attempted
    if c.operation in ("update_note", "create_note"):
        content = a.get("content")
        return content if isinstance(content, str) else None
    if row is None:
        return a.get("text") if c.operation == "append_note" else None
    if c.operation == "append_note":
        text = ops.service.doc(row.id).text
        return text + append_splice(text, str(a.get("text", ""))).text
    if c.operation == "edit_note":
        base = _base_text(ops, c, row)
        if base is None:
            return None
        return apply_splices(base, plan_edits(base, parse_edits(a.get("edits"))))
    return None


def show(ops: NoteOperations, conflict_id: Any) -> dict[str, Any]:
    """The conflict, what it attempted, and the note as it is now."""
    c = _conflict(ops, conflict_id)
    row = _note(ops, c)
    out: dict[str, Any] = {**c.to_json(), "promotable": c.operation in PROMOTABLE, "note": None}
    if c.operation == "merge" and isinstance(c.attempted.get("sides"), list):
        # Who wrote each side, as a person reads it (``disk on laptop``: the device's name).
        names = {device: m.name for device, m in ops.service.index.members().items()}
        here = ops.service.device_id
        out["attempted"] = {**c.attempted, "sides": [
            {**side, "by": attribution(str(side.get("source", "")), None, here=here, names=names)}
            for side in c.attempted["sides"] if isinstance(side, dict)]}
    if row is not None:
        out["note"] = {"path": row.path, "revision": row.revision, "content": ops.service.doc(row.id).text}
        out["baseText"] = _base_text(ops, c, row)
    try:
        out["attemptedText"] = _attempted_text(ops, c, row)
    except StetError as exc:
        out["attemptedText"] = None
        out["attemptedError"] = exc.to_dict()
    out["resultText"], out["resultOverlaps"] = _preview(ops, c, row, out["attemptedText"])
    return out


def _preview(ops: NoteOperations, c: Conflict, row: NoteRow | None,
             attempted: str | None) -> tuple[str | None, int]:
    """The text ``apply`` would give the note now (and how many overlapping regions it
    would keep whole), by the same merge rule; None where apply would refuse."""
    if c.promoted_at is not None or c.operation not in PROMOTABLE or attempted is None:
        return None, 0
    if c.operation in ("update_note", "edit_note"):
        if row is None or c.base_state is None or c.base_revision is None or c.note_id != row.id:
            return None, 0
        try:
            merged = ops.service.preview_rewrite_at(row.path, c.base_state, c.base_revision, attempted)
        except StetError:
            return None, 0
        return merged.text, len(merged.overlaps)
    if c.operation in ("append_note", "create_note"):
        return attempted, 0
    return None, 0


def promote(ops: NoteOperations, conflict_id: Any) -> dict[str, Any]:
    c = _conflict(ops, conflict_id)
    if c.promoted_at is not None:
        raise AlreadyExists(f"conflict {c.id} was promoted already", id=c.id,
                            promoted=c.to_json()["promoted"])
    if c.operation not in PROMOTABLE:
        raise StetError(f"a refused {c.operation} cannot be promoted; do it yourself", code="bad_request")
    source = ops.principal.source
    row = _note(ops, c)
    # One unit of work: the version, the write and the conflict marked promoted commit
    # together; an error rolls all back and forgets the documents it touched.
    with ops.service.write(source):
        version_id = None
        if row is not None and ops.versions is not None and c.operation != "create_note":
            text = ops.service.doc(row.id).text
            version_id = ops.versions.save(row.id, row.path, BEFORE_PROMOTION, source, row.revision,
                                           text).id
        path, revision = _apply(ops, c, row, source)
        ConflictLog(ops.store).mark_promoted(c.id, at=ops.clock(), by=source, revision=revision)
    result = {"id": c.id, "operation": c.operation, "path": path, "revision": revision,
              "promoted": True, "beforeVersion": version_id}
    ops.events.publish(ops.service.vault_id, "conflict.promoted", {
        "id": c.id, "path": path, "operation": c.operation, "token": c.token, "revision": revision,
        "source": source, "beforeVersion": version_id,
    })
    return result


def _need(row: NoteRow | None, c: Conflict) -> NoteRow:
    if row is None:
        raise NotFound(f"the note of conflict {c.id} ({c.path}) is gone", path=c.path)
    return row


def _apply(ops: NoteOperations, c: Conflict, row: NoteRow | None, source: str) -> tuple[str, str | None]:
    a, svc = c.attempted, ops.service
    if c.operation in ("update_note", "edit_note"):
        note = _need(row, c)
        if c.base_state is None or c.base_revision is None or c.note_id != note.id:
            raise StetError("the text this write was made against is not known (its revision was "
                            "older than an hour when it was refused); see stet conflicts show and "
                            "write it yourself",
                            code="revision_unknown", baseRevision=c.base_revision)
        if c.operation == "update_note":
            new_text = a.get("content")
            if not isinstance(new_text, str):
                raise StetError("the conflict holds no content to apply", code="bad_request")
        else:
            base = _base_text(ops, c, note)
            if base is None:
                raise StetError("the text this edit was made against cannot be rebuilt",
                                code="revision_unknown", baseRevision=c.base_revision)
            new_text = apply_splices(base, plan_edits(base, parse_edits(a.get("edits"))))
        ops._check_size(new_text)
        result = svc.rewrite_at(note.path, c.base_state, c.base_revision, new_text, source)
        return note.path, result.note.revision
    if c.operation == "append_note":
        text = a.get("text")
        if not isinstance(text, str) or not text:
            raise StetError("the conflict holds no text to append", code="bad_request")
        if row is None:
            ops._check_note_name(c.path)
            created = svc.write_text(c.path, text, source)
            return c.path, created.note.revision
        current = svc.doc(row.id).text
        splice = append_splice(current, text)
        ops._check_size(current + splice.text)
        return row.path, svc.apply_splices(row.path, [splice], source).note.revision
    if c.operation == "create_note":
        content = a.get("content", "")
        if not isinstance(content, str):
            raise StetError("the conflict holds no content to create", code="bad_request")
        ops._check_note_name(c.path)
        ops._check_size(content)
        return c.path, svc.write_text(c.path, content, source, must_create=True).note.revision
    if c.operation == "delete_note":
        note = _need(row, c)
        svc.delete(note.path, source)
        return note.path, None
    note = _need(row, c)  # move_note
    new_path = a.get("newPath")
    if not isinstance(new_path, str):
        raise StetError("the conflict holds no newPath", code="bad_request")
    ops._check_note_name(new_path)
    return new_path, svc.move(note.path, new_path, source).revision
