"""The agent operations (SPEC §6.4) as MCP tools: names, JSON Schemas, descriptions, calls.

Each tool is a thin call into ``NoteOperations`` with the SPEC's argument names. Arguments
are checked against the tool's input schema here (unknown names, types, ranges) so a
model that sends a wrong argument gets a ``bad_request`` it can correct, never a crash.
No ``outputSchema`` is declared: some clients (TypeScript SDK before the fix for
typescript-sdk#1943) validate even an error result's ``structuredContent`` against it,
and our errors carry ``{"error": {...}}`` there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from stet.daemon.api import file_tools
from stet.daemon.ops.notes import NoteOperations
from stet.sync.errors import StetError

Call = Callable[[NoteOperations, dict[str, Any]], dict[str, Any]]
# A tool that does its own I/O off the loop and shapes its own MCP result (content blocks).
Run = Callable[[web.Request, NoteOperations, dict[str, Any]], Awaitable[dict[str, Any]]]

PATH_DOC = ("Note path inside the vault, relative, with '/' between folders and a note extension, "
            "e.g. 'projects/plan.md'.")
KEY_DOC = ("Any unique string you choose (e.g. a UUID) for this one change. Retrying with the same key "
           "returns the first result and applies nothing, so a retry after a timeout never duplicates. "
           "Never reuse a key for a different change.")
EXPECTED_DOC = ("Refuse (revision_mismatch, with currentRevision and currentContent) unless the note is "
                "still at this revision, i.e. nobody changed it since you read it. On revision_mismatch: "
                "re-read the note and redo your change on its current text, or rewrite with update_note "
                "and `baseRevision` set to the revision you had read (your rewrite is then merged with "
                "what changed since).")
SNAPSHOT_DOC = ("A snapshot id from open_snapshot: answer as the vault stood when it was opened, whatever "
                "others have written since (expired_snapshot after an hour: open a new one).")


def _str(doc: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": doc, **extra}


def _int(doc: str, lo: int, hi: int, default: int) -> dict[str, Any]:
    return {"type": "integer", "description": doc, "minimum": lo, "maximum": hi, "default": default}


def _id(doc: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "description": doc}


def _schema(required: list[str], **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    call: Call
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    run: Run | None = None  # set: used instead of ``call``
    grouped: bool = False  # run in the loop turn's group commit (daemon/notes/group_commit.py), as over REST
    searches: bool = False  # waits (the loop running) until the search index has caught up

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
                "openWorldHint": False,
            },
        }


def _kwargs(method: str) -> Call:
    """Call the operation of the same name with the arguments as keywords (same names)."""

    def call(ops: NoteOperations, args: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = getattr(ops, method)(**args)
        return result

    return call


def _list_versions(ops: NoteOperations, args: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = ops.history.list_versions(args["path"])
    return result


def _read_version(ops: NoteOperations, args: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = ops.history.read_version(args["path"], args["id"])
    return result


def _structure(method: str) -> Call:
    """A structure operation (``ops/structure.py``) with the arguments as keywords."""

    def call(ops: NoteOperations, args: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = getattr(ops.structure, method)(**args)
        return result

    return call


INCLUDE_SCHEMA = {"type": "array", "items": {"type": "string",
                                             "enum": ["headings", "frontmatter", "tasks", "links"]},
                  "description": "Also return these of the current text: headings, frontmatter, tasks, "
                                 "links."}
HEADING_DOC = ("The heading's text without the #s, e.g. 'Decisions'; where several headings have that "
               "text, the path through the headings above it: 'Project A > Decisions'.")


def _async_only(ops: NoteOperations, args: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError("this tool runs through Tool.run")


def _restore_version(ops: NoteOperations, args: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = ops.history.restore_version(
        args["path"], args["id"], idempotencyKey=args.get("idempotencyKey"))
    return result


TOOLS: tuple[Tool, ...] = (
    Tool(
        "list_notes", "List notes",
        "List the notes of this vault in path order, each with path, revision, size (bytes), updatedAt "
        "and updatedBy. Use `prefix` to list one folder (e.g. 'projects/'). Results come in pages: while "
        "`nextCursor` is not null, pass it as `cursor` to get the next page. With `snapshot`, lists "
        "the notes as they were when the snapshot was opened.",
        _schema([],
                prefix=_str("Only notes whose path starts with this, e.g. 'projects/'.", default=""),
                limit=_int("Notes per page.", 1, 10000, 100),
                cursor=_str("The `nextCursor` of the previous page."),
                snapshot=_str(SNAPSHOT_DOC)),
        _kwargs("list_notes"), read_only=True, idempotent=True,
    ),
    Tool(
        "read_note", "Read a note",
        "Read a note: {path, content, revision}. Keep the `revision` for your next write: pass it as "
        "`baseRevision` to update_note (your rewrite is merged with whatever others changed since you "
        "read), or as `expectedRevision` to edit_note/update_note/delete_note/move_note (refused if "
        "anyone changed the note since). With `version` (an id from list_versions), reads that old "
        "version instead. With `snapshot` (from open_snapshot), reads the note as it was when the "
        "snapshot was opened: use one snapshot for every read of a task that reads several notes. "
        "With `atRevision`, reads the note at a revision you were given earlier (within an hour). "
        "With `include`, also returns the current text's headings (level, text, line), frontmatter "
        "(parsed), tasks (text, done, line) and links (with the note each resolves to).",
        _schema(["path"], path=_str(PATH_DOC),
                version=_id("A version id from list_versions: read that version, not the current text."),
                snapshot=_str(SNAPSHOT_DOC),
                atRevision=_str("A revision of this note that the daemon handed out (a read or a write) "
                                "in the last hour: read the note's text at that revision."),
                include=INCLUDE_SCHEMA),
        _kwargs("read_note"), read_only=True, idempotent=True,
    ),
    Tool(
        "search_notes", "Search notes",
        "Full-text search of note contents, in any language (words inside Chinese, Japanese, Korean, "
        "Thai runs too; accents ignored): every word of `q` must occur, each as the start of a word; "
        '`"a phrase"` in that order; `a OR b`; `-word` excludes. '
        "Returns path, line number and a snippet per hit, best first. Read a note before changing it. "
        "With `snapshot`, searches the texts as they were when the snapshot was opened.",
        _schema(["q"], q=_str('Words to search for: kube autosc, "exact phrase", fox OR bear, -excluded.',
                              minLength=1),
                limit=_int("Maximum number of hits.", 1, 200, 20),
                snapshot=_str(SNAPSHOT_DOC)),
        _kwargs("search_notes"), read_only=True, idempotent=True, searches=True,
    ),
    Tool(
        "open_snapshot", "Open a snapshot",
        "Start a consistent view of the vault for a task that reads several notes (research, a summary, "
        "a plan across files): returns {snapshot, at}. Pass `snapshot` to every read_note, list_notes and "
        "search_notes of the task: they all answer as the vault stood at `at`, so a note another agent "
        "rewrites or deletes mid-task does not change what you already reasoned about (no note seen "
        "before a change and another after it). A snapshot lasts an hour. Reads without it show the "
        "newest text. When you then write, pass each note's snapshot `revision` as `baseRevision` to "
        "update_note (merged with what changed since) or as `expectedRevision` (refused if it changed).",
        _schema([]),
        _kwargs("open_snapshot"), read_only=True,
    ),
    Tool(
        "create_note", "Create a note",
        "Create a new note with `content`. Refused with `already_exists` if a note is at that path: then "
        "read it and use append_note, edit_note or update_note. Answers with the new `revision`.",
        _schema(["path"], path=_str(PATH_DOC), content=_str("The text of the new note.", default=""),
                idempotencyKey=_str(KEY_DOC)),
        _kwargs("create_note"),
    ),
    Tool(
        "append_note", "Append to a note",
        "Add `text` at the end of a note, creating the note if it does not exist (a newline is put "
        "first if the note does not end with one). The right tool for logs, findings, journal entries "
        "and anything several agents add to: appends never conflict and need no revision. Always pass "
        "an `idempotencyKey` so that a retried call never adds the entry twice.",
        _schema(["path", "text"], path=_str(PATH_DOC), text=_str("The text to add.", minLength=1),
                idempotencyKey=_str(KEY_DOC)),
        _kwargs("append_note"), grouped=True,
    ),
    Tool(
        "edit_note", "Edit a note by anchors",
        "Replace exact pieces of a note: each edit's `oldText` must occur exactly once in the current "
        "text (include a few surrounding words to make it unique) and is replaced by `newText`. The "
        "right tool for small changes to shared notes: only the replaced text is touched, so concurrent "
        "changes elsewhere in the note survive. Edits must not overlap. If any anchor is missing "
        "(anchor_not_found), ambiguous (anchor_ambiguous, with the match count) or overlapping "
        "(anchors_overlap), nothing is written: read the note again and retry.",
        _schema(["path", "edits"], path=_str(PATH_DOC),
                edits={"type": "array", "minItems": 1,
                       "description": "The replacements, applied together or not at all.",
                       "items": _schema(["oldText", "newText"],
                                        oldText=_str("Exact text to find; must match exactly once.",
                                                     minLength=1),
                                        newText=_str("Replacement text ('' deletes oldText)."))},
                expectedRevision=_str(EXPECTED_DOC), idempotencyKey=_str(KEY_DOC)),
        _kwargs("edit_note"), destructive=True,
    ),
    Tool(
        "update_note", "Rewrite a note",
        "Replace a note's whole text with `content` (applied as a minimal diff; identical content is a "
        "no-op). Say what you based it on. `baseRevision` (the revision you read): your rewrite is "
        "merged with whatever anyone changed since, line by line; where you and another writer changed "
        "the same words, both lines are kept whole, one after the other, and the overlap is listed "
        "for a person (stet conflicts). Use it for most rewrites. Without any revision, a rewrite "
        "from a token that read the note in the last hour is merged the same way from the revision it "
        "was last given (the answer says `mergedFrom`); `force: true` replaces the text whatever it "
        "holds. `expectedRevision`: first committer wins; refused with revision_mismatch "
        "(carrying currentRevision and currentContent) if the note changed since, unless the note "
        "already holds exactly your `content` (then it succeeds, `unchanged`). Give at most one of the "
        "two. On revision_mismatch: re-read and redo your change, or send the same rewrite with "
        "`baseRevision` instead (the revision you had read); a change already made by the winner "
        "lands once. A refused write is also kept for a person to promote (stet conflicts apply). "
        "For small changes prefer edit_note; for adding entries, append_note.",
        _schema(["path", "content"], path=_str(PATH_DOC), content=_str("The complete new text."),
                expectedRevision=_str(EXPECTED_DOC),
                baseRevision=_str("The revision you read; changes made since by others are kept "
                                  "(revision_unknown if it is older than an hour: read again)."),
                idempotencyKey=_str(KEY_DOC),
                force={"type": "boolean", "description": "Replace the text whatever it holds now (no "
                       "merge with what others wrote since you read it)."}),
        _kwargs("update_note"), destructive=True,
    ),
    Tool(
        "delete_note", "Delete a note",
        "Delete a note (its text stays recoverable as a version). Pass `expectedRevision` to refuse if "
        "the note changed since you read it.",
        _schema(["path"], path=_str(PATH_DOC), expectedRevision=_str(EXPECTED_DOC),
                idempotencyKey=_str(KEY_DOC)),
        _kwargs("delete_note"), destructive=True,
    ),
    Tool(
        "move_note", "Move or rename a note",
        "Move or rename a note to `newPath`, keeping its identity and history. Refused with "
        "already_exists if a note is at `newPath`.",
        _schema(["path", "newPath"], path=_str(PATH_DOC), newPath=_str("The new path. " + PATH_DOC),
                expectedRevision=_str(EXPECTED_DOC), idempotencyKey=_str(KEY_DOC)),
        _kwargs("move_note"), destructive=True,
    ),
    Tool(
        "list_versions", "List a note's versions",
        "The kept versions of a note (also of a deleted one), newest first: id, kind, createdAt, "
        "source, size and a preview. Text that a write cut or deleted is kept here; read one with "
        "read_version and bring it back with restore_version.",
        _schema(["path"], path=_str(PATH_DOC)),
        _list_versions, read_only=True, idempotent=True,
    ),
    Tool(
        "read_version", "Read an old version",
        "The text of one version of a note (an `id` from list_versions).",
        _schema(["path", "id"], path=_str(PATH_DOC), id=_id("A version id from list_versions.")),
        _read_version, read_only=True, idempotent=True,
    ),
    Tool(
        "restore_version", "Restore an old version",
        "Make a kept version the note's current text again, applied as an edit (the text it replaces "
        "is kept as a version too, so a restore can be undone). Brings a deleted note back. Answers "
        "with the new `revision`.",
        _schema(["path", "id"], path=_str(PATH_DOC), id=_id("A version id from list_versions."),
                idempotencyKey=_str(KEY_DOC)),
        _restore_version, destructive=True,
    ),
    Tool(
        "recent_changes", "Recent changes",
        "The attributed change log, newest first: path, time, source (which agent or device), revision "
        "before and after, characters inserted and deleted. Optionally for one `path` and/or `since` a "
        "time. Use it to see what others changed before you write.",
        _schema([], path=_str("Only changes of this note. " + PATH_DOC),
                since=_str("Only changes after this time: ISO 8601 (e.g. '2025-01-31T12:00:00Z') or "
                           "Unix seconds."),
                limit=_int("Maximum number of entries.", 1, 10000, 100)),
        _kwargs("recent_changes"), read_only=True, idempotent=True,
    ),
    Tool(
        "edit_section", "Edit a section by its heading",
        "Change one section of a note, found by its heading (no need to anchor on the next heading): "
        "`mode` append (at the end of the section, sub-sections included), prepend / insert_after (just "
        "below the heading), replace (the section's body, the heading kept). Applied as a minimal change, "
        "beside whatever others write. Refused with anchor_not_found (no such heading) or "
        "anchor_ambiguous (with `count`: give 'Parent > Heading').",
        _schema(["path", "heading", "text"], path=_str(PATH_DOC), heading=_str(HEADING_DOC),
                mode=_str("append | prepend | insert_after | replace", default="append",
                          enum=["append", "prepend", "insert_after", "replace"]),
                text=_str("The text to put there (a final line break is added where needed)."),
                expectedRevision=_str(EXPECTED_DOC), idempotencyKey=_str(KEY_DOC)),
        _structure("edit_section"),
    ),
    Tool(
        "edit_frontmatter", "Set frontmatter fields and tags",
        "Set fields of a note's YAML frontmatter (`set`: {field: value}), delete fields (`delete`), add "
        "or remove tags (`addTags`, `removeTags`). Every other line of the block stays as written; a note "
        "without frontmatter gets a block. Read them with read_note and include ['frontmatter'].",
        _schema(["path"], path=_str(PATH_DOC),
                set={"type": "object", "description": "Fields to set: string, number, true/false, null or "
                     "a list of them."},
                delete={"type": "array", "items": {"type": "string"}, "description": "Fields to remove."},
                addTags={"type": "array", "items": {"type": "string"}, "description": "Tags to add."},
                removeTags={"type": "array", "items": {"type": "string"}, "description": "Tags to remove."},
                expectedRevision=_str(EXPECTED_DOC), idempotencyKey=_str(KEY_DOC)),
        _structure("edit_frontmatter"),
    ),
    Tool(
        "tick_task", "Tick a task item",
        "Tick (`done`: true, the default) or untick a markdown task item (`- [ ] buy milk`) found by its "
        "text. Refused with anchor_not_found, or anchor_ambiguous when several items match (give more of "
        "the text). Ticking a ticked item changes nothing.",
        _schema(["path", "task"], path=_str(PATH_DOC),
                task=_str("The item's text after the box, e.g. 'buy milk'."),
                done={"type": "boolean", "description": "true: tick it; false: untick it.", "default": True},
                expectedRevision=_str(EXPECTED_DOC), idempotencyKey=_str(KEY_DOC)),
        _structure("tick_task"),
    ),
    Tool(
        "note_links", "Links and backlinks of a note",
        "A note's outgoing links ([[wikilinks]] and markdown links to notes, each with the note it "
        "resolves to, or null) and its backlinks (the notes linking to it, also by a path it had before "
        "it was moved: `viaOldPath`). Only notes your token may read are shown.",
        _schema(["path"], path=_str(PATH_DOC)),
        _structure("note_links"), read_only=True, idempotent=True, searches=True,
    ),
    Tool(
        "build_context", "A note with its linked notes",
        "Read a note together with the notes it links to and the notes linking to it, breadth first up "
        "to `depth` (0-3) and `limit` notes (1-50, and 4 MB of text): each with path, revision, content, "
        "depth, reachedBy (link / backlink) and from. `truncated` says the limits cut it.",
        _schema(["path"], path=_str(PATH_DOC), depth=_int("How many links away.", 0, 3, 1),
                limit=_int("At most this many notes.", 1, 50, 20)),
        _structure("build_context"), read_only=True, idempotent=True, searches=True,
    ),
    Tool(
        "list_files", "List files (notes and attachments)",
        "List every file of this vault in path order -- notes and attachments (images, PDFs, any "
        "other file) -- each with path, kind ('note' or 'attachment'), size (bytes), sha256, updatedAt "
        "and contentType. Use `prefix` to list one folder (e.g. 'img/'). Results come in pages: while "
        "`nextCursor` is not null, pass it as `cursor` to get the next page. Read a file with "
        "read_file; notes are better read with read_note.",
        _schema([],
                prefix=_str("Only files whose path starts with this, e.g. 'img/'.", default=""),
                limit=_int("Files per page.", 1, 1000, 100),
                cursor=_str("The `nextCursor` of the previous page.")),
        _async_only, read_only=True, idempotent=True, run=file_tools.list_files,
    ),
    Tool(
        "read_file", "Read a file (an image, a PDF, any attachment)",
        "Read one file of the vault by path. An image (PNG, JPEG, GIF, WebP) of at most 5 MB comes back "
        "as image content you can look at, with its metadata. Any other file comes back as metadata "
        "(path, kind, size, sha256, updatedAt, contentType) plus a link to its bytes (an HTTP URL on "
        "this daemon that your token may GET). For the text of a note use read_note.",
        _schema(["path"], path=_str("File path inside the vault, relative, with '/' between folders, "
                                    "e.g. 'img/diagram.png'.")),
        _async_only, read_only=True, idempotent=True, run=file_tools.read_file,
    ),
)

TOOLS_BY_NAME = {t.name: t for t in TOOLS}
_ID_LIKE = {"id", "version"}  # tolerate "3" for the version id 3


def check_arguments(tool: Tool, raw: dict[str, Any]) -> dict[str, Any]:
    """The arguments, checked against the tool's input schema (null counts as absent)."""
    props: dict[str, Any] = tool.input_schema["properties"]
    unknown = sorted(set(raw) - set(props))
    if unknown:
        raise StetError(f"unknown argument(s) for {tool.name}: {', '.join(unknown)}; "
                        f"it takes: {', '.join(props)}", code="bad_request")
    args: dict[str, Any] = {}
    for name, value in raw.items():
        if value is None:
            continue
        spec = props[name]
        kind = spec.get("type")
        if name == "since" and isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)  # Unix seconds given as a number
        if name in _ID_LIKE and isinstance(value, str) and value.isascii() and value.isdigit():
            value = int(value)
        if kind == "string" and not isinstance(value, str):
            raise StetError(f"{name} must be a string", code="bad_request")
        if kind == "integer":
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool):
                raise StetError(f"{name} must be a whole number", code="bad_request")
            lo, hi = spec.get("minimum"), spec.get("maximum")
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                bounds = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
                raise StetError(f"{name} must be {bounds}", code="bad_request")
        if kind == "array" and not isinstance(value, list):
            raise StetError(f"{name} must be a list", code="bad_request")
        args[name] = value
    for name in tool.input_schema["required"]:
        if name not in args:
            raise StetError(f"{name} is required", code="bad_request")
    if tool.name in ("list_notes", "list_files"):
        args.setdefault("limit", props["limit"]["default"])
    return args
