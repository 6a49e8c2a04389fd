"""MCP prompts: a few templates that lead an agent through the recommended ways to write.

Each prompt is text only: fetching one reads nothing from the vault (it repeats only what
the client passed), so it needs no scope; the tools it names check the token's scope when
the agent calls them. The messages name the tools to use (append_note with an
idempotencyKey for findings, recent_changes for what changed, edit_note anchors for a
proposed edit), which is what an agent gets wrong when left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PromptArg:
    name: str
    description: str
    required: bool = False
    is_path: bool = False  # completed with note paths (completion/complete)


@dataclass(frozen=True, slots=True)
class Prompt:
    name: str
    title: str
    description: str
    arguments: tuple[PromptArg, ...]
    template: str

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "description": self.description,
                "arguments": [{"name": a.name, "description": a.description, "required": a.required}
                              for a in self.arguments]}


PROMPTS: tuple[Prompt, ...] = (
    Prompt(
        "record_finding", "Record a finding",
        "Add a finding (a result, an observation, a decision taken) to a shared findings note "
        "without disturbing what others write there.",
        (PromptArg("finding", "What you found, in a sentence or a short paragraph.", required=True),
         PromptArg("path", "The findings note (default: findings.md).", is_path=True)),
        "Record this finding in the Stet note `{path}`:\n\n{finding}\n\n"
        "Use the append_note tool with path `{path}` and text starting with a heading line "
        "`## <today's date, YYYY-MM-DD> <a few words naming the finding>`, then the finding, then a "
        "`Source:` line saying where it comes from. Pass a fresh idempotencyKey (a UUID) so a "
        "retry never adds it twice. Do not rewrite the note: appends never conflict with others.",
    ),
    Prompt(
        "summarise_changes", "Summarise what changed",
        "Summarise what changed in the vault (or one note) since a time, and who changed it.",
        (PromptArg("since", "A time: ISO 8601 (2026-07-28T09:00:00Z) or Unix seconds.", required=True),
         PromptArg("path", "Only this note (optional).", is_path=True)),
        "Summarise what changed {scope} since {since}.\n\n"
        "1. Call recent_changes with since `{since}`{path_arg} (page with a smaller `since` if you "
        "need more).\n2. Call open_snapshot, then read_note each changed note with that snapshot so "
        "every note is read as of one moment.\n3. For each note, say in one or two lines what changed "
        "and which agent or device changed it (the `source` of each entry). Group related notes. "
        "Say plainly if nothing changed.",
    ),
    Prompt(
        "propose_decision_edit", "Propose an edit to a decisions note",
        "Propose a change to a decisions note (context, decision, consequences) as exact edits a "
        "person can review, without applying it.",
        (PromptArg("path", "The decisions note, e.g. decisions/0007-storage.md.", required=True,
                   is_path=True),
         PromptArg("change", "What should change and why.", required=True)),
        "Propose an edit to the decisions note `{path}`: {change}\n\n"
        "1. read_note `{path}` and keep its `revision`.\n2. Keep its layout: Context, Decision, "
        "Numbers, Consequences. Change only what the proposal needs; add a line under Consequences "
        "saying what the change supersedes.\n3. Show the proposal as a list of edit_note edits "
        "(each `oldText` copied exactly from the note and unique in it, with its `newText`) and a "
        "one-paragraph rationale. Do not call edit_note until a person approves; then call it with "
        "`expectedRevision` set to the revision you read.",
    ),
)

PROMPTS_BY_NAME = {p.name: p for p in PROMPTS}
# prompt name -> its arguments that completion/complete answers with note paths
PATH_ARGUMENTS = {p.name: {a.name for a in p.arguments if a.is_path} for p in PROMPTS}


class PromptError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def get_prompt(params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    prompt = PROMPTS_BY_NAME.get(name) if isinstance(name, str) else None
    if prompt is None:
        raise PromptError(f"unknown prompt: {name!r} (prompts: {', '.join(PROMPTS_BY_NAME)})")
    raw = params.get("arguments") or {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise PromptError("arguments must be an object of strings")
    known = {a.name for a in prompt.arguments}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise PromptError(f"unknown argument(s) for {prompt.name}: {', '.join(unknown)}; "
                          f"it takes: {', '.join(sorted(known))}")
    args = {k: v.strip() for k, v in raw.items() if v.strip()}
    for a in prompt.arguments:
        if a.required and a.name not in args:
            raise PromptError(f"{a.name} is required: {a.description}")
    if prompt.name == "record_finding":
        args.setdefault("path", "findings.md")
    path = args.get("path")
    fields = {"scope": f"in the note `{path}`" if path else "in the vault",
              "path_arg": f" and path `{path}`" if path else "", "path": path or "", **args}
    text = prompt.template.format(**fields)
    return {"description": prompt.description,
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}]}
