"""The version operations of SPEC §6.4 (``list_versions``, ``read_version``,
``restore_version``), ``NoteOperations.history`` -- one implementation behind REST, MCP
and the CLI, with the same path, scope, idempotency and refusal handling as the rest.

A path names the live note there and any deleted notes whose last path it was, so
``stet versions PATH`` still finds a note after ``rm PATH``, and after something else
took its place.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from stet.daemon.safety.versions_keeper import version_json
from stet.sync.attribution import attribution
from stet.sync.errors import NotFound, StetError
from stet.sync.json_input import row_id
from stet.sync.note_rows import NoteRow
from stet.sync.permissions import READ, WRITE
from stet.sync.version_store import Version

if TYPE_CHECKING:
    from stet.daemon.notes.service import NotesService
    from stet.daemon.ops.notes import Principal
    from stet.daemon.safety.brake import Brake
    from stet.daemon.safety.versions_keeper import VersionsKeeper


def parse_version_id(raw: Any) -> int:
    return row_id(raw, "version id")  # 1 .. 2^63-1, else bad_request (never an OverflowError)


DurableWrite = Callable[[str, str, dict[str, Any], "str | None"], AbstractContextManager[dict[str, Any]]]
"""``NoteOperations._write``: one durable write (refusal recording, idempotency, one transaction)."""


def attribution_of(service: NotesService) -> Callable[[str, str | None], str]:
    """``by`` of a log line or a version: ``disk on laptop`` (how, and on which device,
    by the names the vault's members gave: ``stet.sync.attribution``)."""
    names = {device: m.name for device, m in service.index.members().items()}
    here = service.device_id
    return lambda source, device: attribution(source, device, here=here, names=names)


class VersionOperations:
    """A caller's version operations on one vault: ``NoteOperations.history``. It shares
    the caller's scope check and durable write (``allow``, ``write``) rather than
    inheriting them."""

    def __init__(self, service: NotesService, principal: Principal, *, versions: VersionsKeeper | None,
                 brake: Brake | None, allow: Callable[[str, str], None], write: DurableWrite) -> None:
        self.service = service
        self.store = service.store
        self.principal = principal
        self.versions = versions
        self.brake = brake
        self._allow = allow
        self._write = write

    def _attribute(self) -> Callable[[str, str | None], str]:
        return attribution_of(self.service)

    def _readable(self, saved_at: str) -> bool:
        return self.principal.scopes.allows(READ, saved_at)

    def _keeper(self) -> VersionsKeeper:
        if self.versions is None:
            raise StetError("versions are not kept for this vault", code="not_found")
        return self.versions

    def _notes_named(self, path: str) -> list[NoteRow]:
        """The live note at ``path`` first, then deleted notes last seen there (newest first)."""
        rows: list[NoteRow] = []
        live = self.store.note_at(path)
        if live is not None:
            rows.append(live)
        deleted = self.store.db.execute(
            "SELECT id FROM notes WHERE path = ? AND deleted = 1 ORDER BY updated_at DESC", (path,)
        ).fetchall()
        for (note_id,) in deleted:
            row = self.store.note(note_id)
            if row is not None:
                rows.append(row)
        return rows

    def _version_at(self, path: str, version: Any) -> tuple[Version, NoteRow]:
        vid = parse_version_id(version)
        found = self._keeper().versions.get(vid)
        row = self.store.note(found.note_id) if found is not None else None
        # A version saved while the note was where this token may not read is not its to
        # see (issue 33, finding 8): the same answer as for no version at all.
        if found is None or row is None or row.path != path or not self._readable(found.path):
            raise NotFound(f"{path} has no version {vid} (see stet versions {path})", path=path, version=vid)
        return found, row

    def list_versions(self, path: Any) -> dict[str, Any]:
        from stet.daemon.ops.notes import check_path

        path = check_path(path)
        self._allow(READ, path)
        keeper = self._keeper()
        rows = self._notes_named(path)
        listed: list[tuple[float, int, dict[str, Any]]] = []
        by = self._attribute()
        for row in rows:
            for info in keeper.versions.for_note(row.id):
                if self._readable(info.path):  # saved where this token may read (finding 8)
                    shown = version_json(info, note_deleted=row.deleted)
                    listed.append((info.created_at, info.id, {**shown, "by": by(info.source, None)}))
        if not rows:
            raise NotFound(f"no note at {path}, now or deleted", path=path)
        listed.sort(key=lambda t: (t[0], t[1]), reverse=True)
        live = rows[0] if rows and not rows[0].deleted else None
        return {"path": path, "deleted": live is None, "versions": [item for _, _, item in listed]}

    def read_version(self, path: Any, version: Any) -> dict[str, Any]:
        from stet.daemon.ops.notes import check_path

        path = check_path(path)
        self._allow(READ, path)
        found, row = self._version_at(path, version)
        return {**version_json(found, note_deleted=row.deleted), "by": self._attribute()(found.source, None),
                "path": path, "content": found.text}

    def restore_version(self, path: Any, version: Any, idempotencyKey: Any = None) -> dict[str, Any]:
        """SPEC §5.4: save the current text as ``before-restore``, apply the old text as a
        minimal diff (source ``restore``); a deleted note comes back at its path, or at
        ``NAME (restored).md`` beside it if that is taken (``pathWasTaken``)."""
        from stet.daemon.ops.notes import check_path

        path = check_path(path)
        vid = parse_version_id(version)
        with self._write("restore_version", path, {"version": vid}, idempotencyKey) as w:
            if "result" in w:
                return dict(w["result"])
            self._allow(WRITE, path)
            found, row = self._version_at(path, vid)
            if not row.deleted and self.brake is not None:
                self.brake.check(self.principal.source, self.service.doc(row.id).text, found.text)
            allow: Callable[[str], None] = lambda p: self._allow(WRITE, p)  # noqa: E731
            restored = self._keeper().restore(found, allow_path=allow)
            w["touched"].append(row.id)
            w["result"] = restored.to_json()
        return dict(w["result"])
