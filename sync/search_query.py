"""The search query language, and the forms of a text the search index holds (issue 34).

Two columns of one FTS5 table (``sync/search_index.py``), both tokenised by ``unicode61``
with every Unicode mark a token character (``categories 'L* N* Co M*'``: by default a
Thai vowel, a Devanagari matra or an Arabic vowel mark splits the word it is in):

- ``words``: the text folded here (lower case, NFKD, accents and Arabic/Hebrew vowel
  points removed -- ``fold``), with the runs of scripts written without spaces blanked
  out. A query word is a prefix of an indexed word.
- ``grams``: those runs (Chinese, Japanese, Korean, Thai, Lao, Khmer, Myanmar, and Arabic
  and Hebrew, whose words carry attached particles: ``اجتماع`` inside ``الاجتماع``) as
  overlapping two-character tokens, each run ending with its last character alone and
  runs separated by a filler token. A query run is the phrase of its bigrams: found
  anywhere inside a run, two-character words included (trigrams would miss ``会议``).

Query syntax: words (each a prefix: ``kube autosc``), all required, in any order;
``"a quoted phrase"`` (its words in that order); ``a OR b``; ``-word`` / ``-"a phrase"``
excludes. Anything else is an error a person can read (``StetError`` bad_request).
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field

from .errors import StetError

FILLER = "x"  # between two runs in ``grams``: a phrase never spans two runs


def _letters(first: int, last: int) -> str:
    """The letters, marks and digits of a small block, as regex class ranges (its
    punctuation stays a separator)."""
    chars = [chr(c) for c in range(first, last + 1) if unicodedata.category(chr(c))[0] in "LMN"]
    return "".join(re.escape(ch) for ch in chars)


_GRAM_CLASS = (
    "["
    + _letters(0x0590, 0x05FF) + _letters(0x0600, 0x06FF) + _letters(0x0750, 0x077F)  # Hebrew, Arabic
    + _letters(0x08A0, 0x08FF)
    # Thai, Lao, Myanmar, Khmer
    + _letters(0x0E00, 0x0EFF) + _letters(0x1000, 0x109F) + _letters(0x1780, 0x17FF)
    + "\u1100-\u11ff\u3005-\u3007\u3041-\u3096\u3099-\u309f\u30a1-\u30fa\u30fc-\u30ff\u3131-\u318e"
    + "\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff\uf900-\ufaff"
    + "\U00020000-\U0003134f"
    + "]"
)
_GRAM_RUN = re.compile(_GRAM_CLASS + "+")
_GRAM_SPLIT = re.compile("(" + _GRAM_CLASS + "+)")
# Folded away: combining accents (Latin, Greek, Cyrillic: é -> e, ё -> е), Hebrew points,
# Arabic vowel marks and the tatweel (كَتَبَ -> كتب).
_FOLDED_MARKS = re.compile("[\u0300-\u036f\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0640]")
_NOT_TOKEN = r"[\W_]"  # Python's idea of a separator (close to unicode61's)


def fold(text: str) -> str:
    """Lower case, compatibility forms unfolded (ｶﾀｶﾅ, ﬁ), accents and vowel points removed."""
    low = text.lower()
    if low.isascii():
        return low
    return unicodedata.normalize("NFC", _FOLDED_MARKS.sub("", unicodedata.normalize("NFKD", low)))


def words_form(text: str) -> str:
    """What the ``words`` column indexes of a text: ``fold`` but for the case (the
    tokenizer lowers it), so that a text with no accents and no runs (ASCII, emoji) is held
    as it is, once (``docs.text`` holds the others for their snippets)."""
    if text.isascii():
        return text
    unfolded = unicodedata.normalize("NFC", _FOLDED_MARKS.sub("", unicodedata.normalize("NFKD", text)))
    return _GRAM_RUN.sub(" ", unfolded)


def _run_grams(run: str, *, whole: bool) -> list[str]:
    """A run's tokens: its bigrams, and (``whole``) its last character alone."""
    if len(run) == 1:
        return [run]
    grams = [run[i : i + 2] for i in range(len(run) - 1)]
    return [*grams, run[-1]] if whole else grams


def grams_form(*texts: str) -> str:
    """What the ``grams`` column indexes of texts (the path and the text of a note)."""
    out: list[str] = []
    for text in texts:
        if text.isascii():
            continue
        for run in _GRAM_RUN.findall(fold(text)):
            if out:
                out.append(FILLER)
            out += _run_grams(run, whole=True)
    return " ".join(out)


def _has_token(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


@dataclass(frozen=True, slots=True)
class Term:
    """One thing to find: a word (a prefix) or a phrase, folded."""

    text: str
    phrase: bool
    fts: str = field(compare=False)
    pieces: tuple[Piece, ...] = field(compare=False)  # all must be found (in any order)

    def found_in(self, folded: str) -> re.Match[str] | None:
        """Where the term is in a folded text (its first piece), None if it is not all there."""
        found = [p.search(folded) for p in self.pieces]
        return found[0] if all(found) else None


@dataclass(frozen=True, slots=True)
class Piece:
    """A regex over folded text; ``word_start``: only where a word starts (checked after
    the match: a pattern that opens with a look-behind is ~30x slower in ``re``)."""

    pattern: re.Pattern[str]
    word_start: bool = False

    def finditer(self, folded: str) -> Iterator[re.Match[str]]:
        for m in self.pattern.finditer(folded):
            at = m.start()
            if not self.word_start or at == 0 or not folded[at - 1].isalnum():
                yield m

    def search(self, folded: str) -> re.Match[str] | None:
        return next(self.finditer(folded), None)


def _words_piece(tokens: list[str], *, exact_end: bool) -> Piece:
    body = (_NOT_TOKEN + "+").join(re.escape(t) for t in tokens)
    return Piece(re.compile(body + (r"(?![^\W_])" if exact_end else "")), word_start=True)


def _term(raw: str, *, phrase: bool) -> Term | None:
    text = fold(raw).strip()
    if not _has_token(text):
        return None
    words = text.split()
    if phrase and not _GRAM_RUN.search(text):
        tokens = re.findall(r"[^\W_]+", text)
        return Term(text, True, f'{{path words}} : "{text}"', (_words_piece(tokens, exact_end=True),))
    if phrase and all(_GRAM_RUN.fullmatch(w) for w in words) and len(words) > 1:
        grams: list[str] = []
        for i, w in enumerate(words):
            if grams:
                grams.append(FILLER)
            grams += _run_grams(w, whole=i < len(words) - 1)
        between = "[^" + _GRAM_CLASS[1:] + "+"
        pattern = between.join(re.escape(w) for w in words)
        return Term(text, True, f'grams : "{" ".join(grams)}"', (Piece(re.compile(pattern)),))
    # A word (or a phrase mixing scripts: its words, each anywhere): every piece required.
    parts: list[str] = []
    pieces: list[Piece] = []
    for word in words:
        for piece in _GRAM_SPLIT.split(word):
            if _GRAM_RUN.fullmatch(piece):
                grams = _run_grams(piece, whole=False)
                parts.append(f'grams : "{grams[0]}"*' if len(piece) == 1 else f'grams : "{" ".join(grams)}"')
                pieces.append(Piece(re.compile(re.escape(piece))))
            elif _has_token(piece):
                # the word itself too: a note holding it ranks above one holding longer words
                parts.append(f'{{path words}} : ("{piece}" OR "{piece}"*)')
                pieces.append(_words_piece(re.findall(r"[^\W_]+", piece), exact_end=False))
    fts = parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"
    return Term(text, phrase, fts, tuple(pieces))


@dataclass(frozen=True, slots=True)
class Query:
    groups: list[list[Term]]  # every group must match; a group is its terms joined by OR
    excluded: list[Term]

    @property
    def wanted(self) -> list[Term]:
        return [t for group in self.groups for t in group]

    def to_fts(self) -> str:
        found = " AND ".join("(" + " OR ".join(t.fts for t in group) + ")" for group in self.groups)
        return "".join([f"({found})", *(f" NOT ({t.fts})" for t in self.excluded)])

    def matches(self, text: str) -> bool:
        """Python's reading of the same query over a text (snapshot scans)."""
        folded = fold(text)
        return (all(any(t.found_in(folded) for t in group) for group in self.groups)
                and not any(t.found_in(folded) for t in self.excluded))


def parse_query(q: str) -> Query:
    """A query as typed (see the module's docstring) -> what to find and what to exclude."""
    items: list[tuple[str, Term | None, bool]] = []  # ("or", None, _) | ("term", term, negated)
    i, n = 0, len(q)
    while i < n:
        if q[i].isspace():
            i += 1
            continue
        negated = q[i] == "-" and i + 1 < n and not q[i + 1].isspace()
        if negated:
            i += 1
        if q[i] == '"':
            end = q.find('"', i + 1)
            if end < 0:
                raise StetError('the search query has an unclosed quote ("): close the phrase, '
                                'e.g. "quick brown"', code="bad_request")
            items.append(("term", _term(q[i + 1 : end], phrase=True), negated))
            i = end + 1
            continue
        j = i
        while j < n and not q[j].isspace() and q[j] != '"':
            j += 1
        raw, i = q[i:j], j
        if raw == "OR" and not negated:
            items.append(("or", None, False))
        else:
            items.append(("term", _term(raw, phrase=False), negated))
    kept = [it for it in items if it[0] == "or" or it[1] is not None]  # punctuation alone: nothing to find
    groups: list[list[Term]] = []
    excluded: list[Term] = []
    join_next = False
    for k, (kind, term, negated) in enumerate(kept):
        if kind == "or":
            before = kept[k - 1] if k else None
            after = kept[k + 1] if k + 1 < len(kept) else None
            if before is None or after is None or before[0] == "or" or after[0] == "or":
                raise StetError("OR needs a word to find on each side (a OR b)", code="bad_request")
            if before[2] or after[2]:
                raise StetError("OR joins words to find, not excluded ones (-word)", code="bad_request")
            join_next = True
            continue
        assert term is not None
        if negated:
            excluded.append(term)
        elif join_next:
            groups[-1].append(term)
        else:
            groups.append([term])
        join_next = False
    if not groups:
        if excluded:
            raise StetError("the search query only excludes words (-word): give a word to find too",
                            code="bad_request")
        raise StetError("the search query has no words", code="bad_request")
    return Query(groups, excluded)


def best_line(text: str, query: Query) -> tuple[int, str]:
    """The (1-based) line where most of the query's terms are, and that line; a hit on
    the path alone shows the first line with words. Each term is looked for once in the
    whole folded text (not line by line: a long note has thousands of lines)."""
    lines = text.split("\n")
    folded = fold(text)
    if folded.count("\n") != len(lines) - 1:  # folding changed the lines (it should not): one by one
        folded_lines = [fold(line) for line in lines]
        on_lines = [{i for i, fl in enumerate(folded_lines) if t.found_in(fl)} for t in query.wanted]
    else:
        on_lines = [_lines_of(t, folded) for t in query.wanted]
    score: dict[int, int] = {}
    for found in on_lines:
        for i in found:
            score[i] = score.get(i, 0) + 1
    if score:
        best = max(score.values())
        i = min(k for k, v in score.items() if v == best)
        return i + 1, lines[i].rstrip("\r")
    for i, line in enumerate(lines):
        if _has_token(line):
            return i + 1, line.rstrip("\r")
    return 1, ""


_MAX_MATCHES = 200  # per piece of a term: enough to find a line holding them all


def _lines_of(term: Term, folded: str) -> set[int]:
    """The lines (0-based) where every piece of the term is."""
    found: set[int] | None = None
    for piece in term.pieces:
        lines: set[int] = set()
        line = at = 0
        for m in itertools.islice(piece.finditer(folded), _MAX_MATCHES):  # in order: count on
            line += folded.count("\n", at, m.start())
            at = m.start()
            lines.add(line)
        found = lines if found is None else found & lines
    return found or set()


def snippet(line: str, query: Query, width: int = 160) -> str:
    """The line, or ``width`` characters of it around the first term found there (found
    in its folded form, shown as written: ``cafe`` shows ``café``)."""
    if len(line) <= width:
        return line.strip()
    if line.isascii():
        folded, origin = line.lower(), None
    else:
        folded_chars: list[str] = []
        origin = []  # folded character -> its index in ``line``
        for at, ch in enumerate(line):
            for folded_ch in fold(ch):
                folded_chars.append(folded_ch)
                origin.append(at)
        folded = "".join(folded_chars)
    found = [m.start() for t in query.wanted if (m := t.found_in(folded)) is not None]
    pos = min(found, default=0)
    if origin is not None:
        pos = origin[pos] if pos < len(origin) else 0
    start = max(0, pos - width // 3)
    more = "…" if start + width < len(line) else ""
    return ("…" if start else "") + line[start : start + width].strip() + more
