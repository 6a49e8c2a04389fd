"""The structure of a markdown note, read the way Obsidian and CommonMark read it: headings
and their sections, the frontmatter block, task items and links. Pure functions over the
text; every edit is planned as splices (``text_diff.Splice``) so the write path applies it
as the minimal change it is, beside whatever else is being written to the note.

A ``#`` inside a fenced code block is not a heading and a ``[[x]]`` there (or in inline
code) is not a link. Errors are ``StetError`` with the codes agents already know from
``edit_note``: ``anchor_not_found``, ``anchor_ambiguous`` (with the count), ``bad_request``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from stet.sync.errors import StetError
from stet.sync.text_diff import Splice

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_TASK = re.compile(r"^(\s*(?:[-*+]|\d+[.)])\s+\[)([ xX])(\]\s+)(.*?)\s*$")
_WIKILINK = re.compile(r"(!?)\[\[([^\[\]\n|#]*)(?:#([^\[\]\n|]*))?(?:\|([^\[\]\n]*))?\]\]")
_MDLINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)(?:\s+\"[^\"\n]*\")?\)")
_INLINE_CODE = re.compile(r"`+[^`\n]*`+")


@dataclass(frozen=True, slots=True)
class Line:
    number: int  # 1-based
    start: int  # offset of its first character
    end: int  # offset just past its last character, before the line break
    text: str
    in_code: bool  # inside a fenced code block (or its fence)


def lines_of(text: str) -> list[Line]:
    out: list[Line] = []
    fence: str | None = None
    pos = 0
    for number, raw in enumerate(text.splitlines(keepends=True), start=1):
        body = raw.rstrip("\r\n")
        match = _FENCE.match(body)
        in_code = fence is not None
        if match is not None:
            marker = match.group(1)
            if fence is None:
                fence, in_code = marker[0] * len(marker), True
            elif marker[0] == fence[0] and len(marker) >= len(fence) and not body.strip()[len(marker):]:
                fence, in_code = None, True
        out.append(Line(number, pos, pos + len(body), body, in_code))
        pos += len(raw)
    return out


# -- headings and sections ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    text: str
    line: int
    start: int  # offset of the heading line
    body_start: int  # offset just past the heading line (its line break included)
    end: int  # offset where its section ends (the next heading of its level or higher, or the end)

    def to_json(self) -> dict[str, Any]:
        return {"level": self.level, "text": self.text, "line": self.line}


def headings(text: str) -> list[Heading]:
    """The ATX headings (``#`` .. ``######``) outside code, each with its section's span.
    The frontmatter block is not searched."""
    lines = lines_of(text)
    skip = frontmatter_span(text)
    found: list[tuple[int, str, Line]] = []
    for ln in lines:
        if ln.in_code or (skip is not None and ln.start < skip[1]):
            continue
        m = _HEADING.match(ln.text)
        if m is not None:
            found.append((len(m.group(1)), (m.group(2) or "").strip(), ln))
    out: list[Heading] = []
    for i, (level, title, ln) in enumerate(found):
        end = len(text)
        for later_level, _t, later in found[i + 1:]:
            if later_level <= level:
                end = later.start
                break
        body_start = ln.end + _break_length(text, ln.end)
        out.append(Heading(level, title, ln.number, ln.start, body_start, end))
    return out


def _break_length(text: str, at: int) -> int:
    if text.startswith("\r\n", at):
        return 2
    return 1 if text.startswith(("\n", "\r"), at) else 0


def find_section(text: str, heading: str) -> Heading:
    """The heading named ``heading``: its text (``## `` marks optional, case kept), or a
    path ``Parent > Child`` through the headings above it where one name is not enough."""
    if not isinstance(heading, str) or not heading.strip():
        raise StetError("heading must be a non-empty string", code="bad_request")
    wanted = [part.strip().lstrip("#").strip() for part in heading.split(">")]
    all_headings = headings(text)
    matches = [h for h in all_headings if _matches_path(h, all_headings, wanted)]
    if not matches:
        raise StetError(f"no heading {heading!r} in the note", code="anchor_not_found", heading=heading)
    if len(matches) > 1:
        raise StetError(f"{len(matches)} headings match {heading!r}: name the one above it too "
                        f"(\"Parent > {wanted[-1]}\")", code="anchor_ambiguous", heading=heading,
                        count=len(matches), lines=[h.line for h in matches])
    return matches[0]


def _matches_path(h: Heading, all_headings: list[Heading], wanted: list[str]) -> bool:
    if h.text != wanted[-1]:
        return False
    # each earlier name: an enclosing heading (higher level, before it, its section covering it)
    chain = [a for a in all_headings if a.start < h.start and a.end >= h.end and a.level < h.level]
    names = [a.text for a in chain]
    pos = 0
    for name in wanted[:-1]:
        try:
            pos = names.index(name, pos) + 1
        except ValueError:
            return False
    return True


SECTION_MODES = ("append", "prepend", "replace", "insert_after")


def plan_section_edit(text: str, heading: str, mode: str, new_text: str) -> list[Splice]:
    """``append``: at the end of the section (before its sub-sections' end: the whole
    section, sub-headings included, as a person reads it); ``prepend`` / ``insert_after``:
    just below the heading line; ``replace``: the section's body (sub-sections included),
    the heading kept. A line break is added where the new text would run into the next line."""
    if mode not in SECTION_MODES:
        raise StetError(f"mode must be one of {', '.join(SECTION_MODES)}", code="bad_request")
    if not isinstance(new_text, str):
        raise StetError("text must be a string", code="bad_request")
    h = find_section(text, heading)
    newline = "\r\n" if "\r\n" in text else "\n"
    if mode in ("prepend", "insert_after"):
        at = h.body_start
        lead = newline if at == len(text) and not text[h.start:at].endswith(("\n", "\r")) else ""
        return [Splice(at, at, lead + _ended(new_text, newline))] if new_text else []
    if mode == "replace":
        body = _ended(new_text, newline) if new_text else ""
        # a heading on the note's last line, without a line break: the body starts on a new line
        lead = newline if body and not text[h.start:h.body_start].endswith(("\n", "\r")) else ""
        # keep the blank line before the next heading where the old body had one
        old = text[h.body_start:h.end]
        tail = newline if (h.end < len(text) and old.endswith(newline * 2) and body
                           and not body.endswith(newline * 2)) else ""
        return [Splice(h.body_start, h.end, lead + body + tail)]
    # append: after the section's last non-blank line
    section = text[h.body_start:h.end]
    stripped = section.rstrip("\r\n \t")
    at = h.body_start + len(stripped)
    if not stripped:  # an empty section: right below the heading
        at = h.body_start
        lead = newline if not text[h.start:at].endswith(("\n", "\r")) else ""
        return [Splice(at, at, lead + _ended(new_text, newline))] if new_text else []
    if not new_text:
        return []
    # the text goes on a line of its own after the last line of the section
    return [Splice(at, at, newline + new_text.rstrip("\r\n"))]


def _ended(s: str, newline: str) -> str:
    return s if s.endswith(("\n", "\r")) else s + newline


# -- tasks -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Task:
    line: int
    text: str
    done: bool
    mark_at: int  # offset of the character between the brackets

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "text": self.text, "done": self.done}


def tasks(text: str) -> list[Task]:
    out = []
    for ln in lines_of(text):
        if ln.in_code:
            continue
        m = _TASK.match(ln.text)
        if m is not None:
            out.append(Task(ln.number, m.group(4), m.group(2) != " ", ln.start + len(m.group(1))))
    return out


def plan_task_tick(text: str, task: str, done: bool) -> list[Splice]:
    """Tick (``done``) or untick the task item whose text is ``task`` (the words after the
    box, exactly; or, when no item has exactly them, the one item that contains them)."""
    if not isinstance(task, str) or not task.strip():
        raise StetError("task must be a non-empty string", code="bad_request")
    wanted = task.strip()
    wanted = re.sub(r"^(?:[-*+]|\d+[.)])\s+\[[ xX]\]\s+", "", wanted)  # the whole line given
    items = tasks(text)
    exact = [t for t in items if t.text == wanted]
    found = exact or [t for t in items if wanted in t.text]
    if not found:
        raise StetError(f"no task item {wanted!r} in the note", code="anchor_not_found", task=wanted)
    if len(found) > 1:
        raise StetError(f"{len(found)} task items match {wanted!r}: give more of its text",
                        code="anchor_ambiguous", task=wanted, count=len(found), lines=[t.line for t in found])
    t = found[0]
    if t.done == done:
        return []
    return [Splice(t.mark_at, t.mark_at + 1, "x" if done else " ")]


# -- frontmatter -------------------------------------------------------------------------


def frontmatter_span(text: str) -> tuple[int, int, int] | None:
    """(start of its body, end of its body, end of the closing ``---`` line) of a
    frontmatter block opening the note, or None."""
    m = re.match(r"(?:\ufeff)?---[ \t]*\r?\n", text)
    if m is None:
        return None
    body_start = m.end()
    close = re.compile(r"^(?:---|\.\.\.)[ \t]*(?:\r?\n|$)", re.MULTILINE)
    c = close.search(text, body_start)
    if c is None:
        return None
    return body_start, c.start(), c.end()


def frontmatter(text: str) -> dict[str, Any] | None:
    """The frontmatter as data (YAML, safe loader; dates as ISO text), or None. A block that
    is not a YAML mapping is a ``bad_request`` naming why."""
    span = frontmatter_span(text)
    if span is None:
        return None
    try:
        data = yaml.safe_load(text[span[0]:span[1]])
    except yaml.YAMLError as exc:
        raise StetError(f"the frontmatter is not valid YAML: {str(exc).splitlines()[0]}",
                        code="bad_request") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise StetError("the frontmatter is not a mapping of fields", code="bad_request")
    return {str(k): _plain(v) for k, v in data.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)  # dates, timestamps


_FIELD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_ .-]*$")


def _scalar(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, bool) or value is None or isinstance(value, int | float):
        return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    if not isinstance(value, str):
        raise StetError("a frontmatter value is a string, number, true/false, null or a list of them",
                        code="bad_request")
    dumped: str = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**9)
    return dumped.strip().removesuffix("...").strip()


def _field_lines(text: str, span: tuple[int, int, int]) -> dict[str, tuple[int, int]]:
    """field -> (start, end) of its lines in the block (a block value's indented lines too)."""
    out: dict[str, tuple[int, int]] = {}
    body = text[span[0]:span[1]]
    current: str | None = None
    pos = span[0]
    for raw in body.splitlines(keepends=True):
        m = re.match(r"^([^\s#:][^:]*?):(?:\s|$)", raw)
        if m is not None and not raw[0].isspace():
            current = m.group(1).strip().strip("'\"")
            out[current] = (pos, pos + len(raw))
        elif current is not None and (raw[:1].isspace() or raw.lstrip().startswith("- ")) and raw.strip():
            out[current] = (out[current][0], pos + len(raw))
        pos += len(raw)
    return out


def plan_frontmatter_edit(text: str, set_fields: dict[str, Any] | None = None,
                          delete: Sequence[str] = (), add_tags: Sequence[str] = (),
                          remove_tags: Sequence[str] = ()) -> list[Splice]:
    """Set fields (a line ``name: value`` each, in place where the field was), delete
    fields, add or remove tags (the ``tags`` field as a list): every other line of the
    block stays as the person wrote it. A note without frontmatter gets a block."""
    set_fields = dict(set_fields or {})
    for name in [*set_fields, *delete]:
        if not isinstance(name, str) or not _FIELD_NAME.match(name):
            raise StetError(f"{name!r} is not a frontmatter field name", code="bad_request")
    for tag in [*add_tags, *remove_tags]:
        if not isinstance(tag, str) or not tag.strip() or any(c in tag for c in ",[]\n#"):
            raise StetError(f"{tag!r} is not a tag", code="bad_request")
    current = frontmatter(text) or {}
    if add_tags or remove_tags:
        tags = current.get("tags")
        listed = [str(t) for t in tags] if isinstance(tags, list) else (
            [t for t in re.split(r"[,\s]+", tags) if t] if isinstance(tags, str) else [])
        for tag in add_tags:
            if tag.strip() not in listed:
                listed.append(tag.strip())
        listed = [t for t in listed if t not in {r.strip() for r in remove_tags}]
        if listed != (tags if isinstance(tags, list) else None):
            set_fields["tags"] = listed
    newline = "\r\n" if "\r\n" in text else "\n"
    span = frontmatter_span(text)
    new_lines = {name: f"{name}: {_scalar(value)}{newline}" for name, value in set_fields.items()}
    if span is None:
        if not new_lines:
            return []
        return [Splice(0, 0, "---" + newline + "".join(new_lines.values()) + "---" + newline)]
    fields = _field_lines(text, span)
    splices: list[Splice] = []
    appended = ""
    for name, line in new_lines.items():
        if name in fields:
            start, end = fields[name]
            if text[start:end].rstrip("\r\n") != line.rstrip("\r\n"):
                splices.append(Splice(start, end, line))
        else:
            appended += line
    for name in delete:
        if name in fields and name not in new_lines:
            start, end = fields[name]
            splices.append(Splice(start, end, ""))
    if appended:
        at = span[1]
        lead = "" if at == span[0] or text[at - 1:at] in ("\n", "\r") else newline
        splices.append(Splice(at, at, lead + appended))
    return sorted(splices, key=lambda s: s.start)


# -- links -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Link:
    target: str  # as written: "b", "folder/b", "b.md", "../x/b.md"
    kind: str  # "wikilink" or "markdown"
    line: int
    heading: str | None = None
    alias: str | None = None
    embed: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"target": self.target, "kind": self.kind, "line": self.line}
        if self.heading:
            out["heading"] = self.heading
        if self.alias:
            out["alias"] = self.alias
        if self.embed:
            out["embed"] = True
        return out


def links(text: str) -> list[Link]:
    """Outgoing ``[[wikilinks]]`` (with ``#heading`` and ``|alias``) and markdown links to
    notes (relative targets ending in ``.md``, percent-decoded), outside code."""
    out: list[Link] = []
    for ln in lines_of(text):
        if ln.in_code:
            continue
        body = _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), ln.text)
        for m in _WIKILINK.finditer(body):
            target = m.group(2).strip()
            if target:
                out.append(Link(target, "wikilink", ln.number, (m.group(3) or "").strip() or None,
                                (m.group(4) or "").strip() or None, m.group(1) == "!"))
        for m in _MDLINK.finditer(body):
            raw = m.group(3)
            if "://" in raw or raw.startswith(("mailto:", "#", "/")):
                continue
            path, _, anchor = raw.partition("#")
            path = _unquote(path)
            if path.lower().endswith(".md"):
                out.append(Link(path, "markdown", ln.number, _unquote(anchor) or None,
                                m.group(2) or None, m.group(1) == "!"))
    return out


def _unquote(s: str) -> str:
    """Percent-decoding of a link target (``%20`` -> space; UTF-8 sequences decoded)."""
    if "%" not in s:
        return s
    raw = re.sub(rb"%([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), s.encode("utf-8"))
    return raw.decode("utf-8", "replace")


def link_keys(source_path: str, link: Link) -> list[str]:
    """The keys a link may resolve by, most specific first: the path relative to the
    vault (for a markdown link, relative to the source note's folder), lower-cased,
    without ``.md``; and for a bare name its basename."""
    target = link.target.replace("\\", "/")
    if link.kind == "markdown":
        folder = source_path.rsplit("/", 1)[0] if "/" in source_path else ""
        parts: list[str] = [p for p in folder.split("/") if p] if not target.startswith("/") else []
        for part in target.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if parts:
                    parts.pop()
                continue
            parts.append(part)
        target = "/".join(parts)
    key = _strip_md(target).lower()
    return [key]


def _strip_md(path: str) -> str:
    return path[:-3] if path.lower().endswith(".md") else path


def note_keys(path: str) -> tuple[str, str]:
    """(the note's path key, its basename key): what links to it may say."""
    key = _strip_md(path).lower()
    return key, key.rsplit("/", 1)[-1]


def resolve(key: str, paths_by_key: dict[str, list[str]], basenames: dict[str, list[str]]) -> str | None:
    """The note a link key names, Obsidian's way: the note at that path, else the note of
    that name anywhere (the shortest path, then the first in order, when several are)."""
    exact = paths_by_key.get(key)
    if exact:
        return exact[0]
    if "/" in key:
        name = key.rsplit("/", 1)[-1]
        tail = [p for p in basenames.get(name, []) if _strip_md(p).lower().endswith("/" + key)]
        return min(tail, key=lambda p: (len(p), p)) if tail else None
    named = basenames.get(key)
    return min(named, key=lambda p: (len(p), p)) if named else None


def key_maps(paths: Iterator[str] | Sequence[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    by_key: dict[str, list[str]] = {}
    by_name: dict[str, list[str]] = {}
    for p in paths:
        key, name = note_keys(p)
        by_key.setdefault(key, []).append(p)
        by_name.setdefault(name, []).append(p)
    return by_key, by_name
