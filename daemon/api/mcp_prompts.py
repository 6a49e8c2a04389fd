"""MCP prompts that walk an agent through the recommended layout (docs/agents.md):
record a finding in the append-only log, summarise what changed since a time, propose an
edit to a person's decisions note (agents never write it). Each is built from what the
token may read: ``summarise_changes`` embeds the scoped change log, ``propose_decision_edit``
the decisions note as an embedded resource.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stet.daemon.api.mcp_resources import uri_of
from stet.daemon.api.mcp_versions import INVALID_PARAMS, RpcError
from stet.daemon.ops.files import content_type
from stet.daemon.ops.notes import NoteOperations
from stet.sync.errors import StetError

LOG = "shared/log.md"
DECISIONS = "decisions.md"
CHANGES_SHOWN = 200  # change-log entries put into summarise_changes


@dataclass(frozen=True, slots=True)
class Prompt:
    name: str
    title: str
    description: str
    arguments: tuple[tuple[str, str, bool], ...]  # (name, description, required)
    build: Callable[[NoteOperations, str, dict[str, str]], list[dict[str, Any]]]
    path_arguments: frozenset[str] = frozenset()  # completed with note paths

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "description": self.description,
                "arguments": [{"name": n, "description": d, "required": r} for n, d, r in self.arguments]}


def _text(text: str) -> dict[str, Any]:
    return {"role": "user", "content": {"type": "text", "text": text}}


def _record_finding(ops: NoteOperations, vault: str, args: dict[str, str]) -> list[dict[str, Any]]:
    log = args.get("log") or LOG
    return [_text(
        f"Record this finding in the shared log {log} of the Stet vault {vault!r}.\n\n"
        f"Topic: {args['topic']}\nFinding: {args['finding']}\n\n"
        f"Call append_note with path {log!r} and text of one list item, e.g. "
        f"'- <UTC date> {args['topic']}: <the finding, one or two sentences, with where it came from>'. "
        "Pass an idempotencyKey made of your name, the task and the step (e.g. researcher-42-3), so a "
        "retry never adds it twice. Do not rewrite the log (no update_note, no edit_note): others append "
        "to it at the same time. If the append is refused as forbidden, your token has no append scope "
        "on it: say so instead of writing elsewhere.")]


def _summarise_changes(ops: NoteOperations, vault: str, args: dict[str, str]) -> list[dict[str, Any]]:
    prefix = args.get("prefix") or ""
    try:
        log = ops.recent_changes(since=args["since"], limit=CHANGES_SHOWN)["changes"]
    except StetError as exc:
        raise RpcError(INVALID_PARAMS, exc.message, data={"error": exc.to_dict()}) from None
    entries = [e for e in log if isinstance(e.get("path"), str) and e["path"].startswith(prefix)]
    lines = "\n".join(json.dumps(e, ensure_ascii=False) for e in entries) or "(no changes)"
    where = f" under {prefix!r}" if prefix else ""
    return [_text(
        f"Summarise what changed in the Stet vault {vault!r}{where} since {args['since']}.\n\n"
        f"The change log, newest first ({len(entries)} entries; path, time, who, characters inserted and "
        f"deleted):\n{lines}\n\n"
        "Group the changes by note and by who made them; say what each change was about, reading a note "
        "with read_note (or an older text with list_versions/read_version) where the log is not enough. "
        "Keep to what the log and the notes show.")]


def _propose_decision_edit(ops: NoteOperations, vault: str, args: dict[str, str]) -> list[dict[str, Any]]:
    path = args.get("path") or DECISIONS
    try:
        note = ops.read_note(path)
    except StetError as exc:
        raise RpcError(INVALID_PARAMS, exc.message, data={"error": exc.to_dict()}) from None
    log = args.get("log") or LOG
    resource = {"uri": uri_of(vault, path), "mimeType": content_type(path), "text": note["content"],
                "_meta": {"revision": note["revision"]}}
    return [
        {"role": "user", "content": {"type": "resource", "resource": resource}},
        _text(
            f"Above is {path}, the decisions note of the Stet vault {vault!r}, at revision "
            f"{note['revision']}. A person owns it: do not change it yourself.\n\n"
            f"Proposed change: {args['change']}\n\n"
            f"Propose the edit for that person: append to {log} (append_note, with an idempotencyKey) one "
            f"entry that names {path} and revision {note['revision']}, why the change is needed, and the "
            "exact edit as oldText (quoted from the note, unique in it) and newText, so it can be applied "
            "with edit_note as written. If the note does not need the change, say so instead."),
    ]


PROMPTS: tuple[Prompt, ...] = (
    Prompt("record_finding", "Record a finding",
           "Append a finding (a result, an observation) to the shared append-only log, once, with an "
           "idempotency key.",
           (("topic", "What the finding is about, a few words.", True),
            ("finding", "The finding itself.", True),
            ("log", f"The log note (default {LOG}).", False)),
           _record_finding, frozenset({"log"})),
    Prompt("summarise_changes", "Summarise changes since a time",
           "Summarise what changed in the vault since a time, from the change log the token may read.",
           (("since", "ISO 8601 time (e.g. 2026-12-01T09:00:00Z) or Unix seconds.", True),
            ("prefix", "Only notes whose path starts with this, e.g. projects/.", False)),
           _summarise_changes, frozenset({"prefix"})),
    Prompt("propose_decision_edit", "Propose an edit to a decisions note",
           "Propose a change to a person's decisions note as an exact edit in the log, without writing "
           "the note.",
           (("change", "The change to propose, in words.", True),
            ("path", f"The decisions note (default {DECISIONS}).", False),
            ("log", f"Where the proposal goes (default {LOG}).", False)),
           _propose_decision_edit, frozenset({"path", "log"})),
)
PROMPTS_BY_NAME = {p.name: p for p in PROMPTS}


def find_prompt(name: Any) -> Prompt:
    prompt = PROMPTS_BY_NAME.get(name) if isinstance(name, str) else None
    if prompt is None:
        raise RpcError(INVALID_PARAMS, f"unknown prompt: {name!r} (prompts: {', '.join(PROMPTS_BY_NAME)})")
    return prompt


def get_prompt(ops: NoteOperations, vault: str, params: dict[str, Any]) -> dict[str, Any]:
    prompt = find_prompt(params.get("name"))
    raw = params.get("arguments") or {}
    if not isinstance(raw, dict):
        raise RpcError(INVALID_PARAMS, "arguments must be an object of strings")
    known = {n for n, _, _ in prompt.arguments}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise RpcError(INVALID_PARAMS, f"unknown argument(s) for {prompt.name}: "
                       f"{', '.join(unknown)}; it takes: {', '.join(sorted(known))}")
    args: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(value, str):
            raise RpcError(INVALID_PARAMS, f"{name} must be a string")
        args[name] = value
    for name, _, required in prompt.arguments:
        if required and not args.get(name):
            raise RpcError(INVALID_PARAMS, f"{prompt.name} needs the argument {name}")
    return {"description": prompt.description, "messages": prompt.build(ops, vault, args)}
