"""What a live client's update would make of a note, and whether it carries only the note's
text (SPEC §6.13, issue 33 finding 3).

A note's document holds one ``Y.Text`` named ``content`` and nothing else. A Yjs update
may carry anything a ``Y.Doc`` can: other shared types, keys on the text type itself
(items with a ``parentSub``, invisible in the text), formatting attributes and embeds.
None of it shows in the note, all of it would be stored and sent to every new client
(an 8 MB ``Y.Map`` next to a 31-character note). ``preview`` applies the update to a copy
built untyped, so every view of the root can be looked at: the text, the same root read
as a map (its keys), the other roots, the text's chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pycrdt

from .errors import CrdtError
from .note_doc import TEXT_NAME, apply_checked
from .peer_merge import MARKS_NAME


@dataclass(frozen=True, slots=True)
class Preview:
    text: str  # the note's text after the update
    not_text: str | None  # what else the document would hold (None: only plain text)


def _not_text(doc: pycrdt.Doc[Any]) -> tuple[str | None, str]:
    """(a description of what ``doc`` holds besides the plain text of ``content``, the text).

    The root is read as a map before it is read as text (pycrdt types an untyped root on
    first access; both views of one branch are kept).
    """
    # (Stet's own merge marks, a root beside the text, are the daemon's: ``preview`` checks
    # a live update leaves them as they were.)
    others = sorted(k for k in doc.keys() if k not in (TEXT_NAME, MARKS_NAME))  # noqa: SIM118 - untyped
    keys = sorted(doc.get(TEXT_NAME, type=pycrdt.Map).keys())
    text_type = doc.get(TEXT_NAME, type=pycrdt.Text)
    text = str(text_type)
    if others:
        return f"shared types other than the text: {', '.join(repr(k) for k in others[:3])}", text
    if keys:
        return f"keys on the text type: {', '.join(repr(k) for k in keys[:3])}", text
    for chunk, attributes in text_type.diff():
        if not isinstance(chunk, str):
            return "an embed in the text", text
        if attributes:
            return "formatting in the text", text
    return None, text


def _untyped(updates: list[bytes], what: str) -> pycrdt.Doc[Any]:
    doc: pycrdt.Doc[Any] = pycrdt.Doc(skip_gc=True)
    for update in updates:
        apply_checked(doc, update, what)
    return doc


def preview(full_update: bytes, update: bytes) -> Preview:
    """The note (its whole state ``full_update``) after ``update``, without changing it.

    A document that already held something besides its text (stored before this check
    existed) is not held against a later update: only what the update adds counts.
    Raises ``CrdtError`` for an update that cannot be decoded.
    """
    doc = _untyped([full_update, update], "update")
    after, text = _not_text(doc)
    if after is not None:
        before, _ = _not_text(_untyped([full_update], "the note"))
        if before == after:
            after = None
    if after is None and MARKS_NAME in doc.keys():  # noqa: SIM118 - Doc.__iter__ is untyped
        now = _marks(doc)
        if now is None or now != _marks(_untyped([full_update], "the note")):
            after = "Stet's merge records"  # a live client writes text, never those
    return Preview(text, after)


def _marks(doc: pycrdt.Doc[Any]) -> dict[str, Any] | None:
    """The merge marks' map as plain data (None: that root is not a map -- not Stet's)."""
    if MARKS_NAME not in doc.keys():  # noqa: SIM118 - Doc.__iter__ is untyped
        return {}
    try:
        return dict(doc.get(MARKS_NAME, type=pycrdt.Map).to_py() or {})
    except Exception:  # noqa: BLE001 - (pycrdt: a root of another type) refused by the caller
        return None


__all__ = ["CrdtError", "Preview", "preview"]
