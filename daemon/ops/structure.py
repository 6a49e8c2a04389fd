"""Structure-aware edits and reads (issue 34 item 4): a section by its heading, a
frontmatter field, a task item by its text; a note's headings, frontmatter, tasks and
links; its backlinks; a note with the notes linked to it, to a depth. One implementation
behind REST, MCP and the CLI: ``NoteOperations.structure``.

Every edit is planned on the note's current text by ``sync/markdown_structure.py`` and
applied through the caller's write path as splices (``NoteOperations.apply_plan``): the
same scope, brake, versions, idempotency and ``expectedRevision`` checks as ``edit_note``.

Links are read from the search index's ``links`` table, which the indexer keeps with each
note's terms on every write (agent, disk, peer), off the loop. A link is resolved when it
is asked for, Obsidian's way (the path, else the name anywhere); a note that was moved is
still found by the links that name one of its earlier paths (its identity, from the change
log), shown with ``viaOldPath`` -- Stet does not rewrite other notes' text for a rename.
Nothing is shown of a note the caller may not read: not its links, not its path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stet.sync import markdown_structure as md
from stet.sync.errors import StetError
from stet.sync.permissions import READ

if TYPE_CHECKING:
    from stet.daemon.ops.notes import NoteOperations

INCLUDE = ("headings", "frontmatter", "tasks", "links")
MAX_DEPTH = 3
MAX_CONTEXT_NOTES = 50
MAX_CONTEXT_BYTES = 4 * 1024 * 1024


def _str_list(raw: Any, what: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise StetError(f"{what} must be a list of strings", code="bad_request")
    return list(raw)


class StructureOperations:
    def __init__(self, ops: NoteOperations) -> None:
        self.ops = ops

    # -- edits -----------------------------------------------------------------------

    def edit_section(self, path: Any, heading: Any = None, mode: Any = "append", text: Any = None,
                     expectedRevision: Any = None, idempotencyKey: Any = None) -> dict[str, Any]:
        """Append to, prepend to, replace the body of, or insert below the heading of the
        section ``heading`` (``Parent > Child`` where one name is not enough)."""
        if not isinstance(text, str):
            raise StetError("text must be a string", code="bad_request")
        if not isinstance(mode, str) or mode not in md.SECTION_MODES:
            raise StetError(f"mode must be one of {', '.join(md.SECTION_MODES)}", code="bad_request")
        if not isinstance(heading, str):
            raise StetError("heading must be a string", code="bad_request")
        return self.ops.apply_plan(
            "edit_section", path, {"heading": heading, "mode": mode, "text": text},
            lambda current: md.plan_section_edit(current, heading, mode, text),
            expectedRevision=expectedRevision, idempotencyKey=idempotencyKey)

    def edit_frontmatter(self, path: Any, set: Any = None, delete: Any = None, addTags: Any = None,  # noqa: A002
                         removeTags: Any = None, expectedRevision: Any = None,
                         idempotencyKey: Any = None) -> dict[str, Any]:
        """Set or delete frontmatter fields, add or remove tags; the block's other lines
        stay as written (a note without one gets a block)."""
        if set is not None and not isinstance(set, dict):
            raise StetError("set must be an object of field: value", code="bad_request")
        fields = dict(set or {})
        gone, add, remove = (_str_list(delete, "delete"), _str_list(addTags, "addTags"),
                             _str_list(removeTags, "removeTags"))
        if not (fields or gone or add or remove):
            raise StetError("give set, delete, addTags or removeTags", code="bad_request")
        return self.ops.apply_plan(
            "edit_frontmatter", path, {"set": fields, "delete": gone, "addTags": add, "removeTags": remove},
            lambda current: md.plan_frontmatter_edit(current, fields, gone, add, remove),
            expectedRevision=expectedRevision, idempotencyKey=idempotencyKey)

    def tick_task(self, path: Any, task: Any = None, done: Any = True, expectedRevision: Any = None,
                  idempotencyKey: Any = None) -> dict[str, Any]:
        """Tick (``done: true``) or untick the task item with this text."""
        if not isinstance(done, bool):
            raise StetError("done must be true or false", code="bad_request")
        if not isinstance(task, str):
            raise StetError("task must be a string", code="bad_request")
        return self.ops.apply_plan(
            "tick_task", path, {"task": task, "done": done},
            lambda current: md.plan_task_tick(current, task, done),
            expectedRevision=expectedRevision, idempotencyKey=idempotencyKey)

    # -- reads -----------------------------------------------------------------------

    def describe(self, path: str, text: str, include: Any) -> dict[str, Any]:
        """What ``read_note``'s ``include`` asks for, of a note the caller may read."""
        wanted = _str_list(include, "include")
        unknown = [w for w in wanted if w not in INCLUDE]
        if unknown:
            raise StetError(f"include takes {', '.join(INCLUDE)}, not {', '.join(unknown)}",
                            code="bad_request")
        out: dict[str, Any] = {}
        if "headings" in wanted:
            out["headings"] = [h.to_json() for h in md.headings(text)]
        if "frontmatter" in wanted:
            out["frontmatter"] = md.frontmatter(text)
        if "tasks" in wanted:
            out["tasks"] = [t.to_json() for t in md.tasks(text)]
        if "links" in wanted:
            out["links"] = self._outgoing(path, text)
        return out

    def note_links(self, path: Any) -> dict[str, Any]:
        """A note's outgoing links (each with the note it resolves to, or null) and its
        backlinks, both within the caller's read scope."""
        content = self.ops.read_note(path)
        at = content["path"]
        return {"path": at, "revision": content["revision"],
                "links": self._outgoing(at, content["content"]), "backlinks": self._backlinks(at)}

    def build_context(self, path: Any, depth: Any = 1, limit: Any = 20) -> dict[str, Any]:
        """The note and the notes linked from it or to it, breadth first up to ``depth``
        (at most 3) and ``limit`` notes (at most 50, and 4 MiB of text), each with its
        text, how it was reached and from which note."""
        if not isinstance(depth, int) or isinstance(depth, bool) or not 0 <= depth <= MAX_DEPTH:
            raise StetError(f"depth must be a whole number from 0 to {MAX_DEPTH}", code="bad_request")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_CONTEXT_NOTES:
            raise StetError(f"limit must be a whole number from 1 to {MAX_CONTEXT_NOTES}", code="bad_request")
        first = self.ops.read_note(path)
        notes: list[dict[str, Any]] = [{"path": first["path"], "revision": first["revision"],
                                         "content": first["content"], "depth": 0}]
        seen = {first["path"]}
        size = len(first["content"].encode("utf-8"))
        frontier = [(first["path"], first["content"])]
        truncated = False
        for level in range(1, depth + 1):
            nxt: list[tuple[str, str]] = []
            for at, text in frontier:
                near = [(o["resolved"], "link") for o in self._outgoing(at, text) if o.get("resolved")]
                near += [(b["path"], "backlink") for b in self._backlinks(at)]
                for other, how in near:
                    if other in seen:
                        continue
                    if len(notes) >= limit:
                        truncated = True
                        break
                    row, other_text = self.ops.service.read(other)
                    other_size = len(other_text.encode("utf-8"))
                    if size + other_size > MAX_CONTEXT_BYTES:
                        truncated = True
                        continue
                    seen.add(other)
                    size += other_size
                    notes.append({"path": other, "revision": row.revision, "content": other_text,
                                  "depth": level, "reachedBy": how, "from": at})
                    nxt.append((other, other_text))
            frontier = nxt
        return {"notes": notes, "truncated": truncated}

    # -- links -----------------------------------------------------------------------

    def _readable(self, path: str) -> bool:
        return self.ops.principal.scopes.allows(READ, path)

    def _maps(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        return md.key_maps([row.path for row in self.ops.store.live_notes()])

    def _outgoing(self, path: str, text: str) -> list[dict[str, Any]]:
        by_key, by_name = self._maps()
        out = []
        for link in md.links(text):
            shown = link.to_json()
            (key,) = md.link_keys(path, link)
            target = md.resolve(key, by_key, by_name)
            # a note the caller may not read is not named, not even as where the link goes
            shown["resolved"] = target if target is not None and self._readable(target) else None
            out.append(shown)
        return out

    def _backlinks(self, path: str) -> list[dict[str, Any]]:
        """The readable notes whose links resolve to ``path`` now, or name one of the
        paths this note had before a move (and no note has now)."""
        row = self.ops.store.note_at(path)
        if row is None:
            return []
        key, name = md.note_keys(path)
        wanted: dict[str, str | None] = {key: None, name: None}
        parts = key.split("/")
        for i in range(1, len(parts)):
            wanted.setdefault("/".join(parts[i:]), None)  # [[folder/b]] for notes/folder/b.md
        for old in self._earlier_paths(row.id):
            if self.ops.store.note_at(old) is None:
                old_key, old_name = md.note_keys(old)
                wanted.setdefault(old_key, old)
                wanted.setdefault(old_name, old)
        by_key, by_name = self._maps()
        found: dict[str, dict[str, Any]] = {}
        for _note_id, source, link_key in self.ops.searchable().linking_to(list(wanted)):
            if source == path or source in found or not self._readable(source):
                continue
            was = wanted.get(link_key)
            if was is None and md.resolve(link_key, by_key, by_name) != path:
                continue  # the name is another note's (a namesake nearer the link)
            if was is not None and md.resolve(link_key, by_key, by_name) is not None:
                continue  # the old name is someone else's now
            entry: dict[str, Any] = {"path": source}
            if was is not None:
                entry["viaOldPath"] = was
            found[source] = entry
        return sorted(found.values(), key=lambda e: str(e["path"]))

    def _earlier_paths(self, note_id: str) -> list[str]:
        rows = self.ops.store.db.execute(
            "SELECT DISTINCT old_path FROM change_log WHERE note_id = ? AND old_path IS NOT NULL",
            (note_id,)).fetchall()
        return [str(r[0]) for r in rows]
