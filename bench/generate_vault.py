#!/usr/bin/env python3
"""Seeded, deterministic generator of realistic markdown vaults for the benchmarks (SPEC §9).

Usage::

    python bench/generate_vault.py OUT_DIR --notes 10000 --seed 1 \
        [--min-kb 1 --max-kb 50 --target-mb 50]
    python bench/generate_vault.py --self-check      # determinism check, exit 0 = OK

or from Python::

    from generate_vault import generate_vault
    vault = generate_vault(Path("/tmp/v"), notes=10_000, seed=1)
    vault.paths, vault.total_bytes

Standard library only. The same ``(notes, seed, min_bytes, max_bytes, target_total_bytes)``
always produces a byte-identical tree (file names, contents and, unless disabled, mtimes),
whatever the platform or ``PYTHONHASHSEED``: every random choice comes from
``random.Random`` instances seeded with strings (SHA-512 seeding, not ``hash()``), nothing
iterates over a ``set`` of strings, and nothing depends on the clock or on the order the
filesystem lists directories in. Across Python versions Python only promises that
``random()`` is stable; the tree was checked identical on CPython 3.11.2, 3.11.7, 3.12.1 and
3.13.0 (compare :func:`tree_digest` after an upgrade).

What a vault looks like (a realistic Obsidian-style personal vault):

* layout: ``daily/YYYY-MM-DD.md`` (~25 %), ``projects/<name>/[<sub>/]*.md`` (~35 %),
  ``people/*.md``, ``inbox/*.md``, ``areas/<area>/[<topic>/]*.md``, ``archive/<year>/*.md``
  and a few root notes; at most three directory levels; names with spaces, a few non-ASCII
  (NFC) names; no two paths differ only by case; every path obeys SPEC §3.13. About 1 % of
  notes are ``.txt`` or ``.markdown``, the rest ``.md``.
* sizes: between ``min_bytes`` and ``max_bytes`` (exactly: every file's size, BOM and line
  endings included, is the planned size), skewed to small: ``min + lognormal`` whose mean is
  solved so the total hits ``target_total_bytes`` (default: mean 5 KiB for 1–50 KiB, i.e.
  10,000 notes ≈ 51 MB); median ≈ 3.5 KiB, p99 ≈ 27 KiB for the defaults.
* content: front matter on some notes, ``#``/``##``/``###`` headings, prose paragraphs built
  from the word lists below, bullet lists (some nested), numbered lists, task lists, fenced
  code blocks (python/js/bash, a few json/plain), block quotes and callouts, occasional
  tables, ``[[wiki links]]`` (with aliases and headings, a few unresolved) and
  ``[md](relative%20links.md)`` to other generated notes, inline code, bold and emphasis.
* unicode: emoji (incl. skin tones and ZWJ sequences), CJK, Korean, RTL scripts and
  combining marks (``e\\u0301``) in a share of the notes.
* bytes: a few notes with CRLF line endings, a few with mixed CRLF/LF, a few with no final
  newline, a few with a UTF-8 BOM.
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import hashlib
import itertools
import json
import math
import os
import posixpath
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

__all__ = ["GeneratedVault", "generate_vault", "tree_digest", "check_determinism"]

KIB = 1024
DEFAULT_MIN_BYTES = 1 * KIB
DEFAULT_MAX_BYTES = 50 * KIB
# Default mean note size sits at the same relative place in [min, max] as 5 KiB does in
# [1 KiB, 50 KiB], so the defaults give 10,000 notes ≈ 50 MB (SPEC §9, P3).
_DEFAULT_MEAN_FRACTION = (5 * KIB - DEFAULT_MIN_BYTES) / (DEFAULT_MAX_BYTES - DEFAULT_MIN_BYTES)
_SIZE_SIGMA = 1.0  # spread of the lognormal part of the size distribution
_SENTENCE_POOL = 24_000  # prose sentences drawn once per seed, reused by all notes
_EPOCH_START = dt.date(2017, 1, 1)  # vault history runs from here (plus a seeded offset)

BOM = b"\xef\xbb\xbf"

# ---------------------------------------------------------------------------------------
# Word lists (all ASCII, so prose byte lengths equal character lengths).
# ---------------------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return text.split()


NOUNS = _words("""
account action agenda agent algorithm analysis answer api approach archive argument
assumption attempt audience backlog backup balance baseline batch benchmark bill blocker
board book boundary branch bridge budget buffer bug build bundle cache calendar call
campaign candidate capacity card case change channel chapter checklist checkpoint choice
client cluster code comment commit community company component concept conference config
conflict connection constraint contract conversation copy cost coverage customer cycle
dashboard database deadline decision default delay delta demo dependency deploy design
detail device diagram diff document domain draft editor effort email endpoint engine
estimate event example experiment feature feedback field file filter fix flow folder
format framework friction function garden goal graph guide habit handler header history
hypothesis idea incident index insight interface interview issue item iteration journal
kernel key label launch layer lead lesson library limit link list log loop manager map
margin market meeting memory merge message method metric migration milestone model module
monitor network node note notebook object offer office option order outline owner package
page paper parser partner patch path pattern payload peer phase pipeline plan platform
plugin policy pool post priority problem process product profile program project prompt
proposal protocol prototype pull query question queue quote ranking reader recipe record
refactor release report request research resource result retro review risk roadmap role
rollout route rule runbook sample schedule schema scope script search section server
service session setting signal sketch snapshot socket solution source spec sprint stack
stage standup status step story strategy stream summary survey sync system table target
task team template test theme thread ticket timeline token tool topic trace tradeoff
transcript trial update upgrade user value vendor version video view vision vote window
workflow workshop worker write
""")

ADJECTIVES = _words("""
active actual annual automatic average basic better big brief broken busy careful central
cheap clean clear close common complete complex concrete current daily dark deep default
detailed different difficult direct early easy empty entire exact existing external fair
fast final fine first flexible focused formal fresh full future general global good great
hard heavy helpful hidden high huge important initial internal key large late lazy light
likely little live local long low main major manual messy minimal minor missing mobile
modern monthly narrow native neat new next nice normal obvious odd offline old online open
optional original other overall partial personal plain popular possible previous primary
private proper public quick quiet random rare raw ready real recent regular relevant remote
rough safe same scary secure separate serious shared short silent simple single slow small
smooth solid special specific stable stale steady strange strict strong subtle sudden
simple tiny tricky typical unclear unique unusual urgent useful usual valid vague visible
weekly whole wide wild wrong
""")

# (base, past) pairs.
VERBS = [
    ("accept", "accepted"),
    ("add", "added"),
    ("adjust", "adjusted"),
    ("agree", "agreed"),
    ("answer", "answered"),
    ("archive", "archived"),
    ("ask", "asked"),
    ("avoid", "avoided"),
    ("break", "broke"),
    ("build", "built"),
    ("cache", "cached"),
    ("change", "changed"),
    ("check", "checked"),
    ("clean", "cleaned"),
    ("close", "closed"),
    ("collect", "collected"),
    ("compare", "compared"),
    ("confirm", "confirmed"),
    ("copy", "copied"),
    ("create", "created"),
    ("debug", "debugged"),
    ("decide", "decided"),
    ("delete", "deleted"),
    ("deploy", "deployed"),
    ("describe", "described"),
    ("discuss", "discussed"),
    ("document", "documented"),
    ("draft", "drafted"),
    ("drop", "dropped"),
    ("estimate", "estimated"),
    ("explain", "explained"),
    ("explore", "explored"),
    ("export", "exported"),
    ("find", "found"),
    ("finish", "finished"),
    ("fix", "fixed"),
    ("follow", "followed"),
    ("improve", "improved"),
    ("include", "included"),
    ("keep", "kept"),
    ("launch", "launched"),
    ("learn", "learned"),
    ("measure", "measured"),
    ("merge", "merged"),
    ("migrate", "migrated"),
    ("move", "moved"),
    ("need", "needed"),
    ("notice", "noticed"),
    ("open", "opened"),
    ("outline", "outlined"),
    ("pair", "paired"),
    ("plan", "planned"),
    ("prepare", "prepared"),
    ("push", "pushed"),
    ("read", "read"),
    ("record", "recorded"),
    ("reduce", "reduced"),
    ("refactor", "refactored"),
    ("release", "released"),
    ("remove", "removed"),
    ("rename", "renamed"),
    ("replace", "replaced"),
    ("report", "reported"),
    ("request", "requested"),
    ("review", "reviewed"),
    ("rewrite", "rewrote"),
    ("schedule", "scheduled"),
    ("send", "sent"),
    ("ship", "shipped"),
    ("simplify", "simplified"),
    ("sketch", "sketched"),
    ("skip", "skipped"),
    ("split", "split"),
    ("start", "started"),
    ("suggest", "suggested"),
    ("summarize", "summarized"),
    ("support", "supported"),
    ("test", "tested"),
    ("track", "tracked"),
    ("try", "tried"),
    ("update", "updated"),
    ("upgrade", "upgraded"),
    ("validate", "validated"),
    ("verify", "verified"),
    ("watch", "watched"),
    ("write", "wrote"),
]

ADVERBS = _words("""
again already carefully clearly eventually finally quickly slowly probably definitely
honestly mostly nearly quietly really roughly simply soon still today tomorrow yesterday
together later early maybe barely exactly manually automatically
""")

PREPOSITIONS = _words("""
about after against around before behind between during for from inside into near of on
over through under until with without across beyond
""")

DETERMINERS = ["the", "the", "the", "a", "our", "this", "that", "every", "each", "my", "their"]
SUBJECTS = ["we", "I", "they", "the team", "everyone", "nobody", "someone", "she", "he"]
MODALS = ["should", "could", "will", "might", "must", "can", "would"]
INTROS = [
    "In practice",
    "Honestly",
    "For now",
    "Next week",
    "Last time",
    "As discussed",
    "In short",
    "On the other hand",
    "Surprisingly",
    "Before the release",
    "After lunch",
    "Long term",
    "To be fair",
    "Either way",
    "If possible",
    "Ideally",
]
CONJUNCTIONS = ["because", "while", "so", "although", "but", "and", "since", "unless", "until"]

# Long words so the exact-size filler finds a word of every length from 1 to 20.
LONG_WORDS = _words("""
a an it do be we the and for was with from this that have about review project
document question important discussion experiment performance architecture documentation
implementation synchronization straightforward responsibilities responsibility
internationalization characterization reconciliation acknowledgement
industrialization counterintuitively incomprehensibility uncharacteristically
""")

# A few NFC non-ASCII names (paths are NFC, SPEC §2): José, Zoë, Søren, Chloé, Björn, ...
FIRST_NAMES = _words(
    """
Ada Alan Amara Ana Ben Carlos Chen Dana Diego Elena Emma Farah Felix Grace Hana Ines
Ivan Jonas Kai Kenji Lars Leila Lina Luca Maya Mei Mira Nadia Noah Omar Priya Rafael
Ravi Rosa Sam Sara Tariq Theo Uma Vera Wei Yara Yusuf Zoe Jos\u00e9 Zo\u00eb
S\u00f8ren Chlo\u00e9 Bj\u00f6rn Ren\u00e9e
"""
)
LAST_NAMES = _words(
    """
Adeyemi Almeida Baker Becker Brown Costa Dubois Eriksen Fischer Garcia Haddad Ito
Jensen Kim Kowalski Lee Lindqvist Lopez Martin Meyer Morales Nakamura Novak Okafor
Olsen Park Patel Petrov Rossi Sato Schmidt Silva Singh Tanaka Walker Wang Weber
Yilmaz Zhang N\u00fa\u00f1ez M\u00fcller G\u00f6rg\u00fcn \u00c5berg
"""
)
NON_ASCII_NOTE_NAMES = [
    "\u4f1a\u8b70\u30e1\u30e2",  # 会議メモ
    "\uc544\uc774\ub514\uc5b4",  # 아이디어
    "\u8bfb\u4e66\u7b14\u8bb0",  # 读书笔记
    "Caf\u00e9 ideas",
    "R\u00e9sum\u00e9 draft",
    "Stra\u00dfe notes",
    "\u00dcberblick",
]

PROJECT_WORDS = _words("""
atlas aurora beacon borealis cascade cedar comet compass delta ember falcon fjord garnet
glacier harbor helix horizon indigo juniper kestrel lantern lumen maple meridian mosaic
nebula nimbus oasis onyx orbit osprey pebble phoenix prism quartz quill raven saffron
sequoia sierra solstice sparrow summit tandem tidal tundra vertex willow zephyr
""")
PROJECT_SUFFIXES = [
    "",
    "",
    "",
    " migration",
    " redesign",
    " launch",
    " api",
    " v2",
    " research",
    " rewrite",
    " sync",
    " mobile",
    " docs",
    " onboarding",
]
PROJECT_SUBDIRS = _words(
    """
meetings design research specs notes retros drafts decisions api planning
"""
)
AREAS = {
    "health": ["running", "sleep", "nutrition"],
    "finance": ["taxes", "budget", "investing"],
    "home": ["garden", "renovation", "recipes"],
    "learning": ["rust", "statistics", "japanese", "writing"],
    "work": ["hiring", "career", "management"],
    "reading": ["fiction", "papers", "essays"],
    "travel": ["lisbon", "kyoto", "iceland"],
}
ROOT_NOTES = ["Home", "Index", "Inbox zero", "Weekly review", "Reading list", "Ideas", "Todo"]
TAGS = _words(
    """
idea todo meeting project reference draft review research person journal howto
decision bug reading someday important work/planning work/oncall area/health
status/active status/done
"""
)
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = _words(
    """
January February March April May June July August September October November
December
"""
)

# Includes a skin-tone modifier, a ZWJ family, a flag and VS16 sequences.
EMOJI = _words(
    """
\U0001f600 \U0001f680 \u2705 \U0001f469\u200d\U0001f469\u200d\U0001f467 \U0001f389
\U0001f4cc \U0001f525 \U0001f44d\U0001f3fd \u26a0\ufe0f \U0001f9ea \U0001f4a1
\u2764\ufe0f \U0001f1ef\U0001f1f5 \U0001f914
"""
)
UNICODE_FRAGMENTS = [
    "\u4e16\u754c",  # 世界
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",  # 日本語のテキスト
    "\ud55c\uad6d\uc5b4",  # 한국어
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c",  # こんにちは世界
    "\u4e2d\u6587\u7b14\u8bb0\u548c\u5f85\u529e\u4e8b\u9879",  # 中文笔记和待办事项
    "\u4eca\u65e5\u306f\u3044\u3044\u5929\u6c17\u3067\u3059\u306d\u3002",  # 今日はいい天気ですね。
    "\ud68c\uc758 \ub0b4\uc6a9 \uc815\ub9ac",  # 회의 내용 정리
    "cafe\u0301",  # café with a combining acute accent (NFD)
    "nai\u0308ve re\u0301sume\u0301",  # naïve résumé, decomposed
    "A\u030angstro\u0308m",  # Ångström, decomposed
    "man\u0303ana",  # mañana, decomposed
    "Z\u0351\u0301a\u0308\u0324l\u0303g\u0300o\u0327",  # stacked combining marks
    "\u05e9\u05dc\u05d5\u05dd",  # שלום
    "\u0645\u0631\u062d\u0628\u0627",  # مرحبا
    "\u00fcber na\u00efve caf\u00e9",  # precomposed forms
    "\u2014 \u201cquoted\u201d \u2026",  # punctuation
]


def _build_filler_words() -> tuple[list[str], dict[int, list[str]]]:
    words: list[str] = []
    seen: dict[str, None] = {}
    for w in NOUNS + ADJECTIVES + [v for pair in VERBS for v in pair] + ADVERBS + PREPOSITIONS:
        if w not in seen:
            seen[w] = None
            words.append(w)
    for w in LONG_WORDS:
        if w not in seen:
            seen[w] = None
    by_len: dict[int, list[str]] = {}
    for w in seen:
        by_len.setdefault(len(w), []).append(w)
    missing = [n for n in range(1, 21) if n not in by_len]
    if missing:  # pragma: no cover - guarded by the word lists above
        raise AssertionError(f"filler word list lacks lengths {missing}")
    return words, by_len


FILLER_WORDS, FILLER_BY_LEN = _build_filler_words()
_MAX_FILLER_WORD = 20

_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL"} | {
    f"{p}{d}" for p in ("COM", "LPT") for d in "0123456789"
}


# ---------------------------------------------------------------------------------------
# Result type
# ---------------------------------------------------------------------------------------


@dataclass
class GeneratedVault:
    """What :func:`generate_vault` wrote."""

    root: Path
    seed: int
    paths: list[str]  # vault-relative POSIX paths, in generation order
    sizes: list[int]  # bytes of each file, same order as ``paths``
    total_bytes: int
    elapsed_s: float = 0.0
    features: dict[str, int] = field(default_factory=dict)  # counts of special notes

    @property
    def notes(self) -> int:
        return len(self.paths)

    def size_summary(self) -> dict[str, float]:
        s = sorted(self.sizes)
        if not s:
            return {}
        return {
            "min": s[0],
            "p10": s[len(s) // 10],
            "median": statistics.median(s),
            "mean": sum(s) / len(s),
            "p90": s[(len(s) * 9) // 10],
            "p99": s[min(len(s) - 1, (len(s) * 99) // 100)],
            "max": s[-1],
        }


# ---------------------------------------------------------------------------------------
# Planning: paths, dates, sizes, flags
# ---------------------------------------------------------------------------------------


@dataclass
class _Note:
    index: int
    path: str  # vault-relative POSIX path
    kind: str  # daily / project / person / inbox / area / archive / root
    title: str
    date: dt.date
    size: int = 0
    crlf: bool = False
    mixed_eol: int = 0  # > 0: this many lines end in CRLF, the rest in LF
    final_newline: bool = True
    bom: bool = False
    unicode_rich: bool = False
    emoji: bool = False
    front_matter: bool = False

    @property
    def stem(self) -> str:
        name = self.path.rsplit("/", 1)[-1]
        return name[:-3] if name.endswith(".md") else name

    @property
    def folder(self) -> str:
        return posixpath.dirname(self.path)


def _plan_sizes(rng: random.Random, n: int, lo: int, hi: int, mean: float) -> list[int]:
    """``n`` sizes in ``[lo, hi]``: ``lo + min(hi - lo, lognormal)`` with the given mean.

    The normal draws are fixed first; ``mu`` is then solved by bisection so the sample mean
    is exactly ``mean`` (before rounding), which is what makes ``target_total_bytes`` hit.
    """
    z = [rng.gauss(0.0, 1.0) for _ in range(n)]
    span = hi - lo
    want = mean - lo

    def sample_mean(mu: float) -> float:
        return sum(min(span, math.exp(mu + _SIZE_SIGMA * zi)) for zi in z) / n

    a, b = -20.0, math.log(span) + 10.0 * _SIZE_SIGMA + 10.0
    for _ in range(80):
        mid = (a + b) / 2
        if sample_mean(mid) < want:
            a = mid
        else:
            b = mid
    mu = (a + b) / 2
    return [lo + min(span, round(math.exp(mu + _SIZE_SIGMA * zi))) for zi in z]


def _title_words(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.30:
        words = [rng.choice(ADJECTIVES), rng.choice(NOUNS), rng.choice(NOUNS)]
    elif r < 0.50:
        words = [rng.choice(NOUNS), rng.choice(NOUNS), "notes"]
    elif r < 0.65:
        words = [rng.choice(VERBS)[0], "the", rng.choice(ADJECTIVES), rng.choice(NOUNS)]
    elif r < 0.80:
        words = [rng.choice(NOUNS), rng.choice(PREPOSITIONS), rng.choice(NOUNS)]
    elif r < 0.90:
        words = ["how", "to", rng.choice(VERBS)[0], rng.choice(NOUNS)]
    else:
        words = [rng.choice(ADJECTIVES), rng.choice(NOUNS)]
    title = " ".join(words)
    return title[0].upper() + title[1:]


def _safe_segment(seg: str) -> bool:
    stem = seg.split(".", 1)[0].rstrip(" ").upper()
    return stem not in _WINDOWS_RESERVED and not seg.endswith((".", " "))


def _plan_notes(rng: random.Random, n: int) -> list[_Note]:
    kinds = ["daily", "project", "person", "inbox", "area", "archive", "root"]
    weights = [25, 35, 7, 10, 12, 9, 2]
    cum = list(itertools.accumulate(weights))
    assigned = [kinds[bisect.bisect_right(cum, rng.random() * cum[-1])] for _ in range(n)]

    start = _EPOCH_START + dt.timedelta(days=rng.randrange(365))
    n_daily = assigned.count("daily")
    # Consecutive days with some skipped; history spread up to "today" of the vault.
    daily_dates: list[dt.date] = []
    day = start
    while len(daily_dates) < n_daily:
        if rng.random() > 0.18:
            daily_dates.append(day)
        day += dt.timedelta(days=1)
    history_days = max(30, (day - start).days)

    def random_date() -> dt.date:
        return start + dt.timedelta(days=rng.randrange(history_days))

    n_proj_notes = assigned.count("project")
    n_projects = max(1, min(len(PROJECT_WORDS) * 4, round(n_proj_notes / 90)))
    projects: list[str] = []
    taken: dict[str, None] = {}
    while len(projects) < n_projects:
        name = rng.choice(PROJECT_WORDS) + rng.choice(PROJECT_SUFFIXES)
        name = name.title() if rng.random() < 0.5 else name.replace(" ", "-")
        if name.lower() in taken:
            continue
        taken[name.lower()] = None
        projects.append(name)
    proj_subdirs = {p: rng.sample(PROJECT_SUBDIRS, rng.randint(0, 4)) for p in projects}
    area_names = list(AREAS)

    used_paths: dict[str, None] = {}  # casefolded full paths (SPEC §3.13: no case twins)
    used_stems: dict[str, None] = {}  # casefolded stems: wiki links stay unambiguous
    notes: list[_Note] = []
    daily_i = 0
    special_names = list(NON_ASCII_NOTE_NAMES)
    root_names = list(ROOT_NOTES)

    for i, kind in enumerate(assigned):
        date = random_date()
        ext = ".md"
        r = rng.random()
        if kind != "daily" and r < 0.005:
            ext = ".txt"
        elif kind != "daily" and r < 0.010:
            ext = ".markdown"
        if kind == "daily":
            date = daily_dates[daily_i]
            daily_i += 1
            folder, title = "daily", date.isoformat()
        elif kind == "project":
            proj = rng.choice(projects)
            subs = proj_subdirs[proj]
            folder = f"projects/{proj}"
            if subs and rng.random() < 0.6:
                folder += "/" + rng.choice(subs)
            title = _title_words(rng)
            if folder.endswith("/meetings") and rng.random() < 0.7:
                what = rng.choice(["sync", "planning", "standup", "review", "1-1"])
                title = f"{date.isoformat()} {what}"
        elif kind == "person":
            folder = "people"
            title = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        elif kind == "inbox":
            folder = "inbox"
            if special_names and rng.random() < 0.02:
                title = special_names.pop(0)
            elif rng.random() < 0.3:
                title = f"Untitled {rng.randint(1, 400)}"
            else:
                title = _title_words(rng)
        elif kind == "area":
            area = rng.choice(area_names)
            folder = f"areas/{area}"
            if rng.random() < 0.55:
                folder += "/" + rng.choice(AREAS[area])
            title = _title_words(rng)
        elif kind == "archive":
            folder = f"archive/{rng.randint(start.year, date.year)}"
            title = _title_words(rng)
        else:
            folder = ""
            title = root_names.pop(0) if root_names else _title_words(rng)

        stem, k = title, 1
        while True:
            path = f"{folder}/{stem}{ext}" if folder else f"{stem}{ext}"
            path = unicodedata.normalize("NFC", path)
            if (
                path.casefold() not in used_paths
                and stem.casefold() not in used_stems
                and all(_safe_segment(s) for s in path.split("/"))
            ):
                break
            k += 1
            stem = f"{title} {k}"
        used_paths[path.casefold()] = None
        used_stems[stem.casefold()] = None
        notes.append(_Note(index=i, path=path, kind=kind, title=stem, date=date))
    return notes


def _pick_special(rng: random.Random, n: int, fraction: float, minimum: int) -> list[int]:
    k = min(n, max(minimum if n >= 20 else 0, round(n * fraction)))
    return sorted(rng.sample(range(n), k))


# ---------------------------------------------------------------------------------------
# Prose
# ---------------------------------------------------------------------------------------


def _np(rng: random.Random) -> str:
    det = rng.choice(DETERMINERS)
    words = (
        [rng.choice(ADJECTIVES), rng.choice(NOUNS)] if rng.random() < 0.45 else [rng.choice(NOUNS)]
    )
    if det == "a" and words[0][0] in "aeio":
        det = "an"
    return f"{det} {' '.join(words)}"


def _clause(rng: random.Random) -> str:
    subj = rng.choice(SUBJECTS) if rng.random() < 0.4 else _np(rng)
    base, past = rng.choice(VERBS)
    r = rng.random()
    if r < 0.5:
        verb = past
    elif r < 0.8:
        verb = f"{rng.choice(MODALS)} {base}"
    else:
        verb = f"need to {base}" if subj in ("we", "I", "they") else f"has to {base}"
    out = f"{subj} {verb} {_np(rng)}"
    if rng.random() < 0.5:
        out += f" {rng.choice(PREPOSITIONS)} {_np(rng)}"
    if rng.random() < 0.2:
        out += f" {rng.choice(ADVERBS)}"
    return out


def _sentence(rng: random.Random) -> str:
    s = _clause(rng)
    if rng.random() < 0.35:
        s += f", {rng.choice(CONJUNCTIONS)} {_clause(rng)}"
    if rng.random() < 0.15:
        s = f"{rng.choice(INTROS)}, {s}"
    end = "." if rng.random() < 0.9 else rng.choice(["?", "!", "..."])
    return s[0].upper() + s[1:] + end


def _exact_filler(rng: random.Random, pool: list[str], n: int) -> str:
    """ASCII prose of exactly ``n`` bytes (``n >= 1``), no newlines."""
    if n <= _MAX_FILLER_WORD:
        return rng.choice(FILLER_BY_LEN[n])
    parts: list[str] = []
    r = n
    # Whole pool sentences while they fit (a few tries each), then words for the last bytes.
    while r > 60:
        for _ in range(6):
            s = rng.choice(pool)
            if len(s) + 1 <= r - 24:
                parts.append(s)
                r -= len(s) + 1  # the joining space
                break
        else:
            break
    # Then words, keeping enough room for a final word plus ".".
    words: list[str] = []
    while r > _MAX_FILLER_WORD + 1:
        w = rng.choice(FILLER_WORDS)
        if r - (len(w) + 1) < 3:
            continue
        words.append(w)
        r -= len(w) + 1
    # r is now in [3, 21]: a final word of r - 1 bytes, then ".".
    words.append(rng.choice(FILLER_BY_LEN[r - 1]))
    tail = " ".join(words) + "."
    tail = tail[0].upper() + tail[1:]
    return " ".join([*parts, tail])


# ---------------------------------------------------------------------------------------
# Note content
# ---------------------------------------------------------------------------------------

_PY_TEMPLATES = [
    """def {fn}({arg}, limit={num}):
    \"\"\"{doc}\"\"\"
    {var} = [x for x in {arg} if x]
    if len({var}) > limit:
        {var} = {var}[:limit]
    return {var}
""",
    """import json
from pathlib import Path

{var} = json.loads(Path("{key}.json").read_text())
for item in {var}.get("{key2}", []):
    print(f"{{item['id']}}: {{item}}")
""",
    """class {cls}:
    def __init__(self, {arg}):
        self.{arg} = {arg}
        self.count = {num}

    def {fn}(self):
        self.count += 1
        return self.{arg}
""",
    """async def {fn}(session, url):
    async with session.get(url) as resp:
        resp.raise_for_status()
        return await resp.json()
""",
]
_JS_TEMPLATES = [
    """const {var} = await fetch(`/api/{key}/${{id}}`).then((r) => r.json());
console.log({var}.{key2}?.length ?? 0);
""",
    """function {fn}({arg}) {{
  // {doc}
  return {arg}.filter(Boolean).map((x) => x * {num});
}}
""",
    """export const {var} = {{
  {key}: {num},
  {key2}: '{word}',
  enabled: true,
}};
""",
    """document.querySelectorAll('.{key}').forEach((el) => {{
  el.addEventListener('click', {fn});
}});
""",
]
_BASH_TEMPLATES = [
    """git checkout -b {key}-{key2}
git commit -am "{doc}"
git push -u origin HEAD
""",
    """for f in *.md; do
  wc -c "$f"
done | sort -n | tail -n {num}
""",
    """curl -s http://127.0.0.1:{port}/v1/{key} | jq '.{key2}'
""",
    """rsync -av --delete ./{key}/ backup:/srv/{key2}/
systemctl --user restart {key}.service
""",
    """python -m venv .venv && . .venv/bin/activate
pip install -e '.[test]'
pytest -q -k {key}
""",
]
_JSON_TEMPLATE = (
    '{{\n  "{key}": {num},\n  "{key2}": ["{word}", "{word2}"],\n  "enabled": false\n}}\n'
)
_TABLE_COLUMNS = ["Name", "Owner", "Status", "Due", "Estimate", "Priority", "Notes", "Link"]
_STATUSES = ["todo", "doing", "done", "blocked", "waiting", "n/a"]


class _NoteWriter:
    """Generates one note's text to an exact byte size. One per note, own seeded RNG."""

    def __init__(self, note: _Note, notes: list[_Note], pool: list[str], seed: int) -> None:
        self.note = note
        self.notes = notes
        self.pool = pool
        self.rng = random.Random(f"stet-bench-note:{seed}:{note.index}")
        self.eol_extra = 1 if note.crlf else 0
        self.since_heading = 0
        self.heading_level = 2

    # -- helpers ------------------------------------------------------------------------

    def blen(self, s: str) -> int:
        n = len(s) if s.isascii() else len(s.encode("utf-8"))
        return n + s.count("\n") * self.eol_extra if self.eol_extra else n

    def target(self) -> _Note:
        return self.notes[self.rng.randrange(len(self.notes))]

    def wiki_link(self) -> str:
        rng = self.rng
        if rng.random() < 0.04:
            return f"[[{_title_words(rng)}]]"  # unresolved: a note not written yet
        t = self.target()
        name = t.stem
        r = rng.random()
        if r < 0.15:
            return f"[[{name}|{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}]]"
        if r < 0.22:
            return f"[[{name}#{rng.choice(['Notes', 'Summary', 'Tasks', 'Log', 'Context'])}]]"
        return f"[[{name}]]"

    def md_link(self) -> str:
        t = self.target()
        rel = posixpath.relpath(t.path, self.note.folder or ".")
        return f"[{t.title}]({quote(rel, safe='/')})"

    def any_link(self) -> str:
        r = self.rng.random()
        if r < 0.6:
            return self.wiki_link()
        if r < 0.92:
            return self.md_link()
        return f"<https://example.com/{self.rng.choice(NOUNS)}/{self.rng.randint(1, 9999)}>"

    def sprinkle(self) -> str:
        """A short decorated fragment to put between sentences."""
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            return f"See {self.any_link()}."
        if r < 0.50:
            return f"Run `{rng.choice(NOUNS)}_{rng.choice(NOUNS)}()` first."
        if r < 0.62:
            return f"This is **{rng.choice(ADJECTIVES)}** and *{rng.choice(ADJECTIVES)}*."
        if r < 0.72:
            return f"#{rng.choice(TAGS)}"
        if r < 0.86 and self.note.emoji:
            return rng.choice(EMOJI)
        if self.note.unicode_rich:
            frag = rng.choice(UNICODE_FRAGMENTS)
            return f"{frag} {rng.choice(EMOJI)}" if self.note.emoji else frag
        return f"Ask {self.wiki_link()} about it."

    def prose(self, k: int) -> str:
        rng = self.rng
        parts = rng.choices(self.pool, k=k)
        extra = rng.random() < 0.5
        if extra:
            for _ in range(1 + (k > 4)):
                parts.insert(rng.randint(0, len(parts)), self.sprinkle())
        return " ".join(parts)

    def short_item(self) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            s = rng.choice(self.pool)
            if len(s) > 90:
                s = _clause(rng)
                s = s[0].upper() + s[1:]
            return s
        if r < 0.7:
            return f"{rng.choice(VERBS)[0].capitalize()} {_np(rng)} with {self.wiki_link()}"
        if r < 0.8:
            return f"{_np(rng).capitalize()}: {self.md_link()}"
        if r < 0.9 and (self.note.emoji or self.note.unicode_rich):
            frag = rng.choice(EMOJI) if self.note.emoji else rng.choice(UNICODE_FRAGMENTS)
            return f"{_np(rng).capitalize()} {frag}"
        return f"{_np(rng).capitalize()} {rng.choice(PREPOSITIONS)} {_np(rng)}"

    def idents(self) -> dict[str, object]:
        rng = self.rng
        a, b = rng.choice(NOUNS), rng.choice(NOUNS)
        return {
            "fn": f"{rng.choice(VERBS)[0]}_{a}",
            "arg": b,
            "var": f"{a}_{b}s",
            "cls": f"{a.capitalize()}{b.capitalize()}",
            "key": rng.choice(NOUNS),
            "key2": rng.choice(NOUNS),
            "num": rng.randint(2, 500),
            "port": rng.choice([8080, 8384, 22000, 4567, 3000]),
            "doc": rng.choice(self.pool)[:60].rstrip(" ,"),
            "word": rng.choice(ADJECTIVES),
            "word2": rng.choice(ADJECTIVES),
        }

    # -- blocks -------------------------------------------------------------------------

    def heading(self) -> str:
        rng = self.rng
        self.since_heading = 0
        if self.note.kind == "daily" and rng.random() < 0.5:
            return "## " + rng.choice(["Log", "Tasks", "Notes", "Meetings", "Ideas", "Reading"])
        level = 3 if (self.heading_level >= 2 and rng.random() < 0.35) else 2
        self.heading_level = level
        text = _title_words(rng)
        if self.note.emoji and rng.random() < 0.15:
            text += " " + rng.choice(EMOJI)
        return "#" * level + " " + text

    def paragraph(self) -> str:
        return self.prose(self.rng.randint(2, 7))

    def bullets(self) -> str:
        rng = self.rng
        lines = []
        for _ in range(rng.randint(2, 7)):
            lines.append(f"- {self.short_item()}")
            if rng.random() < 0.15:
                for _ in range(rng.randint(1, 3)):
                    lines.append(f"  - {self.short_item()}")
        return "\n".join(lines)

    def log(self) -> str:
        rng = self.rng
        h = rng.randint(7, 10)
        m = 0
        lines = []
        for _ in range(rng.randint(2, 6)):
            m += rng.randint(10, 120)
            lines.append(f"- {h + m // 60:02d}:{m % 60:02d} {self.short_item()}")
        return "\n".join(lines)

    def numbered(self) -> str:
        return "\n".join(f"{i}. {self.short_item()}" for i in range(1, self.rng.randint(2, 6) + 1))

    def tasks(self) -> str:
        rng = self.rng
        lines = []
        for _ in range(rng.randint(2, 8)):
            box = "x" if rng.random() < 0.4 else " "
            item = self.short_item()
            if rng.random() < 0.2:
                due = self.note.date + dt.timedelta(days=rng.randint(0, 30))
                item += f" \U0001f4c5 {due.isoformat()}"  # 📅, Obsidian Tasks style
            lines.append(f"- [{box}] {item}")
        return "\n".join(lines)

    def code(self) -> str:
        rng = self.rng
        r = rng.random()
        ids = self.idents()
        if r < 0.4:
            lang, body = "python", rng.choice(_PY_TEMPLATES).format(**ids)
        elif r < 0.7:
            lang, body = rng.choice(["js", "javascript"]), rng.choice(_JS_TEMPLATES).format(**ids)
        elif r < 0.92:
            lang, body = rng.choice(["bash", "sh"]), rng.choice(_BASH_TEMPLATES).format(**ids)
        elif r < 0.97:
            lang, body = "json", _JSON_TEMPLATE.format(**ids)
        else:
            lang, body = "", f"{rng.choice(self.pool)}\n{rng.choice(self.pool)}\n"
        return f"```{lang}\n{body}```"

    def quote(self) -> str:
        rng = self.rng
        if rng.random() < 0.3:
            kind = rng.choice(["note", "tip", "warning", "info", "question"])
            return f"> [!{kind}]\n> " + self.prose(rng.randint(1, 3))
        lines = [f"> {s}" for s in rng.choices(self.pool, k=rng.randint(1, 3))]
        if rng.random() < 0.3:
            lines.append(f"> \u2014 {self.wiki_link()}")
        return "\n".join(lines)

    def table(self) -> str:
        rng = self.rng
        cols = rng.sample(_TABLE_COLUMNS, rng.randint(2, 4))
        lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] * len(cols)) + "|"]
        for _ in range(rng.randint(2, 6)):
            cells = []
            for c in cols:
                if c == "Name":
                    cells.append(_title_words(rng))
                elif c == "Owner":
                    cells.append(self.wiki_link())
                elif c == "Status":
                    cells.append(rng.choice(_STATUSES))
                elif c == "Due":
                    cells.append(
                        (self.note.date + dt.timedelta(days=rng.randint(1, 60))).isoformat()
                    )
                elif c == "Estimate":
                    cells.append(f"{rng.randint(1, 13)}d")
                elif c == "Priority":
                    cells.append(rng.choice(["P0", "P1", "P2", "P3"]))
                elif c == "Link":
                    cells.append(self.md_link())
                else:
                    cells.append(_np(rng))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def unicode_paragraph(self) -> str:
        rng = self.rng
        frags = [rng.choice(UNICODE_FRAGMENTS) for _ in range(rng.randint(1, 4))]
        if self.note.emoji:
            frags.append(rng.choice(EMOJI))
        parts = [rng.choice(self.pool), " ".join(frags), rng.choice(self.pool)]
        return " ".join(parts)

    def next_block(self) -> str:
        rng = self.rng
        self.since_heading += 1
        if self.since_heading > rng.randint(2, 6):
            return self.heading()
        r = rng.random()
        if self.note.unicode_rich and r < 0.08:
            return self.unicode_paragraph()
        if r < 0.42:
            return self.paragraph()
        if r < 0.56:
            return self.log() if self.note.kind == "daily" else self.bullets()
        if r < 0.63:
            return self.numbered()
        if r < 0.75:
            return self.tasks()
        if r < 0.81:
            return self.code()
        if r < 0.91:
            return self.quote()
        if r < 0.925:
            return self.table()
        if r < 0.96:
            return f"Related: {', '.join(self.any_link() for _ in range(rng.randint(1, 4)))}"
        if r < 0.97:
            return "---"
        return self.bullets()

    def header_blocks(self) -> list[str]:
        rng, note = self.rng, self.note
        blocks: list[str] = []
        if note.front_matter:
            tags = rng.sample(TAGS, rng.randint(1, 3))
            if note.kind == "person":
                tags = ["person", *tags[:1]]
            fm = ["---", f'title: "{note.title}"']
            if rng.random() < 0.5:
                fm.append(f"tags: [{', '.join(tags)}]")
            else:
                fm.append("tags:")
                fm.extend(f"  - {t}" for t in tags)
            fm.append(f"date: {note.date.isoformat()}")
            if rng.random() < 0.2:
                fm.append(f"aliases: [{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}]")
            if rng.random() < 0.15:
                fm.append(f"status: {rng.choice(_STATUSES)}")
            fm.append("---")
            blocks.append("\n".join(fm))
        if note.kind == "daily":
            d = note.date
            if rng.random() < 0.5:
                blocks.append(f"# {d.isoformat()} ({WEEKDAYS[d.weekday()]})")
            else:
                blocks.append(f"# {WEEKDAYS[d.weekday()]}, {MONTHS[d.month - 1]} {d.day} {d.year}")
            prev = d - dt.timedelta(days=1)
            nxt = d + dt.timedelta(days=1)
            blocks.append(f"\u2190 [[{prev.isoformat()}]] | [[{nxt.isoformat()}]] \u2192")
        elif note.kind == "person":
            blocks.append(f"# {note.title}")
            blocks.append(
                f"Role: {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} lead at "
                f"{rng.choice(PROJECT_WORDS).title()}. Met at {self.wiki_link()}."
            )
        elif note.kind == "inbox" and rng.random() < 0.4:
            pass  # quick capture: no title
        else:
            blocks.append(f"# {note.title}")
        return blocks

    # -- assembly -----------------------------------------------------------------------

    def render(self) -> bytes:
        """The note's bytes, exactly ``note.size`` long (unless the header alone is longer)."""
        note, rng = self.note, self.rng
        sep = 2 + 2 * self.eol_extra  # the "\n\n" between blocks
        budget = note.size - (len(BOM) if note.bom else 0)
        budget -= (1 + self.eol_extra) * note.final_newline
        budget -= note.mixed_eol  # bytes of the "\r"s added after rendering
        blocks = self.header_blocks()
        used = sum(self.blen(b) for b in blocks) + sep * max(0, len(blocks) - 1)
        while used > budget and len(blocks) > 1:
            used -= sep + self.blen(blocks.pop())
        n_head = len(blocks)

        def cost(b: str) -> int:
            return self.blen(b) + (sep if blocks else 0)

        misses = 0
        while budget - used > 240 and misses < 4:
            b = self.next_block()
            if b == "---" and len(blocks) == n_head:
                continue  # never open the file (or the body) with a rule
            c = cost(b)
            if used + c <= budget:
                blocks.append(b)
                used += c
            else:
                misses += 1
        if len(blocks) > n_head and blocks[-1].startswith("#"):
            b = blocks.pop()  # no dangling heading at the end
            used -= self.blen(b) + (sep if blocks else 0)
        # Fill what is left with exact-size prose paragraphs at random places in the body.
        rem = budget - used
        while 0 < rem < (sep if blocks else 0) + 3 and len(blocks) > n_head:
            b = blocks.pop()
            rem += self.blen(b) + (sep if blocks else 0)
        while True:
            s = sep if blocks else 0
            if rem < s + 3:
                break
            chunk = rem - s if rem - s <= 1100 else rng.randint(300, 900)
            if 0 < rem - s - chunk < sep + 3:
                chunk = rem - s
            blocks.insert(rng.randint(n_head, len(blocks)), _exact_filler(rng, self.pool, chunk))
            rem -= s + chunk
        text = "\n\n".join(blocks)
        if note.final_newline:
            text += "\n"
        if note.crlf:
            text = text.replace("\n", "\r\n")
        elif note.mixed_eol:
            # Some lines CRLF (as if pasted from Windows), the rest LF; exactly
            # ``mixed_eol`` "\r"s are added, as budgeted above.
            lines = text.split("\n")
            k = note.mixed_eol
            idx = sorted(rng.sample(range(len(lines) - 1), min(k, len(lines) - 1)))
            for i in idx:
                lines[i] += "\r"
            if len(idx) < k:  # too few line breaks: pad the first line instead
                lines[0] += " " * (k - len(idx))
            text = "\n".join(lines)
        data = text.encode("utf-8")
        return BOM + data if note.bom else data


# ---------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------


def _mtime(note: _Note, seed: int) -> float:
    # Deterministic mtimes: the note's date, late afternoon, plus a per-note offset.
    h = hashlib.sha256(f"{seed}:{note.index}".encode()).digest()
    secs = 17 * 3600 + int.from_bytes(h[:4], "big") % (6 * 3600)
    day = dt.datetime(note.date.year, note.date.month, note.date.day, tzinfo=dt.UTC)
    return day.timestamp() + secs


def generate_vault(
    out: Path,
    notes: int,
    seed: int,
    min_bytes: int = DEFAULT_MIN_BYTES,
    max_bytes: int = DEFAULT_MAX_BYTES,
    target_total_bytes: int | None = None,
    *,
    set_mtimes: bool = True,
) -> GeneratedVault:
    """Write a vault of ``notes`` markdown notes under ``out`` (created; must be empty).

    Every file is between ``min_bytes`` and ``max_bytes`` bytes. The total is
    ``target_total_bytes`` (to within ``notes`` bytes of rounding) or, if None, ``notes``
    times the default mean (5 KiB for 1–50 KiB). ``set_mtimes`` gives every file a
    deterministic modification time on its note's date (byte content is the same either way).
    """
    t0 = time.perf_counter()
    out = Path(out)
    if notes < 1:
        raise ValueError("notes must be >= 1")
    if not 64 <= min_bytes < max_bytes:
        raise ValueError("need 64 <= min_bytes < max_bytes")
    if target_total_bytes is None:
        mean = min_bytes + (max_bytes - min_bytes) * _DEFAULT_MEAN_FRACTION
    else:
        mean = target_total_bytes / notes
        if not min_bytes < mean < max_bytes:
            raise ValueError(
                f"target {target_total_bytes} bytes means {mean:.0f} bytes/note, "
                f"outside ({min_bytes}, {max_bytes})"
            )
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")

    rng = random.Random(f"stet-bench-vault:{seed}")
    plan = _plan_notes(rng, notes)
    sizes = _plan_sizes(rng, notes, min_bytes, max_bytes, mean)
    for note, size in zip(plan, sizes, strict=True):
        note.size = size
    for i in _pick_special(rng, notes, 0.015, 3):
        plan[i].crlf = True
    for i in _pick_special(rng, notes, 0.003, 2):
        if not plan[i].crlf:
            plan[i].mixed_eol = rng.randint(2, 12)
    for i in _pick_special(rng, notes, 0.02, 3):
        plan[i].final_newline = False
    for i in _pick_special(rng, notes, 0.005, 2):
        plan[i].bom = True
    fm_prob = {
        "person": 0.9,
        "project": 0.4,
        "area": 0.4,
        "root": 0.5,
        "archive": 0.3,
        "daily": 0.15,
        "inbox": 0.1,
    }
    for note in plan:
        note.front_matter = rng.random() < fm_prob[note.kind]
        note.emoji = rng.random() < 0.15
        note.unicode_rich = rng.random() < 0.08

    pool_rng = random.Random(f"stet-bench-prose:{seed}")
    pool = [_sentence(pool_rng) for _ in range(_SENTENCE_POOL)]

    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, None] = {}
    for note in plan:
        d = note.folder
        if d and d not in made:
            (out / d).mkdir(parents=True, exist_ok=True)
            made[d] = None

    actual: list[int] = []
    for note in plan:
        data = _NoteWriter(note, plan, pool, seed).render()
        p = out / note.path
        with open(p, "wb") as f:
            f.write(data)
        if set_mtimes:
            m = _mtime(note, seed)
            os.utime(p, (m, m))
        actual.append(len(data))

    features = {
        "crlf": sum(n.crlf for n in plan),
        "mixed_eol": sum(n.mixed_eol > 0 for n in plan),
        "no_final_newline": sum(not n.final_newline for n in plan),
        "bom": sum(n.bom for n in plan),
        "front_matter": sum(n.front_matter for n in plan),
        "emoji": sum(n.emoji for n in plan),
        "unicode_rich": sum(n.unicode_rich for n in plan),
        "txt": sum(n.path.endswith(".txt") for n in plan),
        "markdown": sum(n.path.endswith(".markdown") for n in plan),
        "off_plan_size": sum(a != n.size for a, n in zip(actual, plan, strict=True)),
    }
    return GeneratedVault(
        root=out,
        seed=seed,
        paths=[n.path for n in plan],
        sizes=actual,
        total_bytes=sum(actual),
        elapsed_s=time.perf_counter() - t0,
        features=features,
    )


def tree_digest(root: Path, *, include_mtimes: bool = False) -> str:
    """SHA-256 over every file's relative path and bytes (and mtime if asked), sorted."""
    root = Path(root)
    h = hashlib.sha256()
    files = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file())
    for rel, p in files:
        h.update(rel.encode("utf-8") + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
        if include_mtimes:
            h.update(str(p.stat().st_mtime_ns).encode())
    return h.hexdigest()


def check_determinism(notes: int = 2000, seed: int = 7) -> bool:
    """Generate twice (separate processes, different PYTHONHASHSEED) and compare digests.

    Also checks that another seed gives a different tree. Prints what it finds.
    """
    script = str(Path(__file__).resolve())
    with tempfile.TemporaryDirectory(prefix="stet-vault-check-") as tmp:
        digests = []
        for run, (s, hashseed) in enumerate([(seed, "1"), (seed, "2"), (seed + 1, "3")]):
            out = Path(tmp) / f"run{run}"
            env = dict(os.environ, PYTHONHASHSEED=hashseed)
            subprocess.run(
                [
                    sys.executable,
                    script,
                    str(out),
                    "--notes",
                    str(notes),
                    "--seed",
                    str(s),
                    "--quiet",
                ],
                check=True,
                env=env,
            )
            digests.append(tree_digest(out, include_mtimes=True))
            shutil.rmtree(out)
    same = digests[0] == digests[1]
    differs = digests[0] != digests[2]
    print(f"seed {seed} twice:   {'identical' if same else 'DIFFERENT'} ({digests[0][:16]})")
    print(f"seed {seed} vs {seed + 1}: {'different' if differs else 'IDENTICAL (bad)'}")
    return same and differs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("out", nargs="?", type=Path, help="output directory (created; must be empty)")
    ap.add_argument("--notes", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-kb", type=float, default=DEFAULT_MIN_BYTES / KIB)
    ap.add_argument("--max-kb", type=float, default=DEFAULT_MAX_BYTES / KIB)
    ap.add_argument(
        "--target-mb",
        type=float,
        default=None,
        help="total size in MB (10^6 bytes); default: notes x 5 KiB mean",
    )
    ap.add_argument("--no-mtimes", action="store_true", help="leave mtimes at write time")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument(
        "--self-check",
        action="store_true",
        help="generate twice with one seed and compare (exit 1 if they differ)",
    )
    args = ap.parse_args(argv)

    if args.self_check:
        return 0 if check_determinism() else 1
    if args.out is None:
        ap.error("OUT_DIR is required (or use --self-check)")
    try:
        vault = generate_vault(
            args.out,
            notes=args.notes,
            seed=args.seed,
            min_bytes=round(args.min_kb * KIB),
            max_bytes=round(args.max_kb * KIB),
            target_total_bytes=None if args.target_mb is None else round(args.target_mb * 1e6),
            set_mtimes=not args.no_mtimes,
        )
    except (ValueError, FileExistsError) as e:
        ap.error(str(e))
    sizes = vault.size_summary()
    mib = round(vault.total_bytes / KIB / KIB, 2)
    summary = {
        "out": str(vault.root),
        "notes": vault.notes,
        "seed": vault.seed,
        "total_bytes": vault.total_bytes,
        "total_mib": mib,
        "sizes": sizes,
        "features": vault.features,
        "elapsed_s": round(vault.elapsed_s, 2),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    elif not args.quiet:
        s = sizes
        print(
            f"wrote {vault.notes} notes, {vault.total_bytes:,} bytes "
            f"({mib} MiB) to {vault.root} in {vault.elapsed_s:.1f} s\n"
            f"sizes: min {s['min']:.0f}  p10 {s['p10']:.0f}  median {s['median']:.0f}  "
            f"mean {s['mean']:.0f}  p90 {s['p90']:.0f}  p99 {s['p99']:.0f}  max {s['max']:.0f}\n"
            f"special: {vault.features}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
