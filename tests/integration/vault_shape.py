"""A generated vault with the shape of a real one (issue 37: Obsidian's help vault), as a git
history: notes in five scripts (Latin, CJK, Arabic, Cyrillic, and emoji) under non-ASCII
folder and file names, png/svg attachments kept as identical twins in several folders with
different modes (one twin executable, its siblings not), and commits that add, edit, shrink,
delete and move notes, add and drop twins, flip a twin's exec bit and rename a folder.

Deterministic: the same seed gives the same history (byte for byte), so a failing step can
be replayed. Pure data until ``commit_history`` writes it into a repository.
"""

from __future__ import annotations

import hashlib
import os
import random
import stat
from dataclasses import dataclass
from pathlib import Path

from tests.integration.git_support import git

SCRIPTS = {
    "en": ("Notes", "note", "The quick brown fox jumps over the lazy dog. "),
    "ja": ("ノート", "メモ", "いろはにほへと ちりぬるを わかよたれそ つねならむ。"),
    "ar": ("ملاحظات", "ملاحظة", "نص عربي للتجربة في الملاحظات والمرفقات. "),
    "ru": ("Заметки", "заметка", "Съешь же ещё этих мягких французских булок. "),
    "emoji": ("🎉 Party", "idée 🎈", "🎉🎈✨ party notes with emoji 🥳 and accents: café, naïve. "),
}
EXEC, PLAIN = 0o755, 0o644


def png(n: int) -> bytes:
    """A small png-like file (a real header, then bytes of its own)."""
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + hashlib.sha256(b"png%d" % n).digest() * 40 + b"IEND"


def svg(n: int, tone: int = 0) -> bytes:
    colour = (n * 2654435761 + tone) & 0xFFFFFF
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{16 + n}" height="16">'
            f'<rect width="16" height="16" fill="#{colour:06x}"/></svg>\n').encode()


@dataclass(frozen=True)
class File:
    data: bytes
    mode: int  # EXEC or PLAIN

    @property
    def executable(self) -> bool:
        return self.mode == EXEC


Tree = dict[str, File]


class History:
    """Commits as full trees, made one from the other by a seeded random walk."""

    def __init__(self, seed: int = 37) -> None:
        self.rnd = random.Random(seed)
        self.trees: list[Tree] = []
        self.messages: list[str] = []
        self._notes = 0
        self._images = 0
        self.folders = {lang: folder for lang, (folder, _, _) in SCRIPTS.items()}

    def _note_text(self, lang: str, lines: int) -> bytes:
        sentence = SCRIPTS[lang][2]
        return "".join(f"{sentence} {self.rnd.randrange(10_000)}\n" for _ in range(lines)).encode()

    def _new_note(self, tree: Tree) -> None:
        lang = self.rnd.choice(list(SCRIPTS))
        self._notes += 1
        path = f"{lang}/{self.folders[lang]}/{SCRIPTS[lang][1]} {self._notes}.md"
        tree[path] = File(self._note_text(lang, self.rnd.randrange(3, 12)), PLAIN)

    def _new_twins(self, tree: Tree) -> None:
        """One image at 2-4 language folders, of one mode each (at least one of each kind)."""
        self._images += 1
        kind = self.rnd.choice(("png", "svg"))
        data = png(self._images) if kind == "png" else svg(self._images)
        langs = self.rnd.sample(list(SCRIPTS), self.rnd.randrange(2, 5))
        name = self.rnd.choice(("icon", "Снимок", "図", "صورة", "🖼 pic"))
        for i, lang in enumerate(langs):
            tree[f"{lang}/attachments/{name} {self._images}.{kind}"] = File(data, EXEC if i == 0 else PLAIN)

    def first(self, notes: int = 25, twins: int = 6) -> Tree:
        tree: Tree = {"README.md": File(b"# A vault of many scripts\n", PLAIN)}
        for _ in range(notes):
            self._new_note(tree)
        for _ in range(twins):
            self._new_twins(tree)
        self.trees.append(tree)
        self.messages.append("first")
        return tree

    def step(self) -> Tree:
        """The next commit: a few of each kind of change; every fourth a bulk deletion, every
        fifth a folder renamed."""
        n = len(self.trees)
        tree = dict(self.trees[-1])
        notes = sorted(p for p in tree if p.endswith(".md") and p != "README.md")
        images = sorted(p for p in tree if not p.endswith(".md"))
        did: list[str] = []
        for _ in range(self.rnd.randrange(1, 4)):
            self._new_note(tree)
        for p in self.rnd.sample(notes, min(2, len(notes))):  # an edit: lines added
            tree[p] = File(tree[p].data + self._note_text(p.split("/")[0], 2), PLAIN)
        if notes:
            p = self.rnd.choice(notes)
            if p in tree:  # a shrink: half the lines go
                lines = tree[p].data.splitlines(keepends=True)
                tree[p] = File(b"".join(lines[: max(1, len(lines) // 2)]), PLAIN)
        gone = self.rnd.sample(notes, min(15 if n % 4 == 0 else 1, len(notes)))
        for p in gone:
            tree.pop(p, None)
        did.append(f"-{len(gone)} notes")
        if self.rnd.random() < 0.6:
            self._new_twins(tree)
            did.append("+twins")
        if images and self.rnd.random() < 0.5:  # one image's twins dropped (every path of it)
            victim = tree.get(self.rnd.choice(images))
            if victim is not None:
                for p in [p for p, f in tree.items() if f.data == victim.data]:
                    del tree[p]
                did.append("-twins")
        if images:  # a twin's exec bit flipped (its siblings keep theirs)
            p = self.rnd.choice(images)
            if p in tree:
                tree[p] = File(tree[p].data, PLAIN if tree[p].executable else EXEC)
        svgs = [p for p in images if p.endswith(".svg") and p in tree]
        if svgs:  # an svg edited at one path (it is no longer its siblings' twin)
            p = self.rnd.choice(svgs)
            tree[p] = File(svg(self._images + 100 + n, tone=n), tree[p].mode)
        if n % 5 == 0:  # a note folder renamed
            lang = self.rnd.choice(list(SCRIPTS))
            old, new = self.folders[lang], f"{SCRIPTS[lang][0]} {n}"
            prefix = f"{lang}/{old}/"
            for p in [p for p in tree if p.startswith(prefix)]:
                tree[f"{lang}/{new}/{p[len(prefix):]}"] = tree.pop(p)
            self.folders[lang] = new
            did.append(f"mv {old} -> {new}")
        self.trees.append(tree)
        self.messages.append(f"step {n}: " + ", ".join(did))
        return tree


def write_tree(root: Path, tree: Tree) -> None:
    """Make ``root``'s files exactly ``tree`` (``.git`` left alone)."""
    for p in files_of(root):
        if p not in tree:
            (root / p).unlink()
    for p, f in tree.items():
        target = root / p
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_bytes() != f.data:
            target.write_bytes(f.data)
        os.chmod(target, f.mode)
    for d in sorted((d for d in root.rglob("*") if d.is_dir() and ".git" not in d.relative_to(root).parts),
                    key=lambda d: len(d.parts), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()


def commit_history(repo: Path, history: History) -> list[str]:
    """Each tree of ``history`` committed in turn in a new repository; the commits' ids."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q")
    git(repo, "config", "core.fileMode", "true")
    ids = []
    for tree, message in zip(history.trees, history.messages, strict=True):
        write_tree(repo, tree)
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", message)
        ids.append(git(repo, "rev-parse", "HEAD").strip())
    return ids


def files_of(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and ".git" not in p.relative_to(root).parts
                  and not p.name.startswith(".stet"))


def shape_of(root: Path) -> dict[str, tuple[str, bool]]:
    """Each file's sha256 and exec bit (what two sides must agree on), ``.git`` left out."""
    out: dict[str, tuple[str, bool]] = {}
    for p in files_of(root):
        try:
            st = (root / p).stat()
            out[p] = (hashlib.sha256((root / p).read_bytes()).hexdigest(), bool(st.st_mode & stat.S_IXUSR))
        except FileNotFoundError:
            continue  # went while we looked: the next look sees it gone
    return out


def expected_shape(tree: Tree) -> dict[str, tuple[str, bool]]:
    return {p: (hashlib.sha256(f.data).hexdigest(), f.executable) for p, f in tree.items()}
