"""The attachment writers of the mixed R1 run (tests/integration/test_convergence_mixed.py).

A person's binary files (NULs throughout; a few KB to a few MB, one ~20 MB) are created,
modified, renamed and deleted in any daemon's folder, up or down, cut off or not, and some
are changed on two machines at once. Every write's bytes are unique and start with a
header naming the attachment's lineage (``lid``), so the bytes at the end say which write
they are. Each write records the bytes it replaced (read from the same open file), so the
writes of one lineage form a tree: a *leaf* is bytes no later write or delete replaced --
one side's last bytes. At the end every leaf must be either the bytes at the lineage's
path or a loser of a concurrent change, kept as a ``concurrent`` version and listed in
``stet conflicts``; a lineage at two paths is a conflict copy; bytes no one wrote are a
partial or foreign file.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"STETR1\x00"
NOTE_SUFFIXES = (".md", ".markdown", ".txt")
FOLDERS = ("", "img/", "files/", "files/deep/")
SUFFIXES = (".bin", ".png", ".pdf", ".zip")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_attachment(path: Path, root: Path) -> bool:
    rel = path.relative_to(root)
    return (path.is_file() and not path.is_symlink() and path.suffix not in NOTE_SUFFIXES
            and not any(part.startswith(".") for part in rel.parts))


def attachment_files(root: Path) -> list[Path]:
    """os.walk, not rglob: a daemon's temp folder may vanish while it is listed."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        out += [p for p in (Path(folder) / f for f in files) if is_attachment(p, root)]
    return sorted(out)


def attachment_tree(root: Path) -> dict[str, bytes]:
    """Every attachment of a folder by path (our temp files and hidden folders aside)."""
    out = {}
    for p in attachment_files(root):
        try:
            out[p.relative_to(root).as_posix()] = p.read_bytes()
        except FileNotFoundError:  # replaced or removed while listed: the next look sees it
            continue
    return out


def lineage(data: bytes) -> int | None:
    if not data.startswith(MAGIC):
        return None
    head = data[len(MAGIC):len(MAGIC) + 64].split(b"\x00", 1)[0]
    try:
        return int(head.split(b":")[0])
    except ValueError:
        return None


@dataclass
class Version:
    lid: int
    number: int
    node: str
    parent: str | None  # the sha of the bytes this write replaced on that node's disk
    size: int
    how: str


@dataclass
class AttachmentLedger:
    seed: int
    big_bytes: int
    versions: dict[str, Version] = field(default_factory=dict)  # sha -> the write
    replaced: set[str] = field(default_factory=set)  # shas a later write or delete replaced
    deletes: list[tuple[int, str, str]] = field(default_factory=list)  # (lid, sha deleted, node)
    overwritten: set[str] = field(default_factory=set)  # shas a later write replaced (not a delete)
    renamed_to: dict[str, str] = field(default_factory=dict)  # path a rename made -> the node it ran on
    ops: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)  # seen during the run: unknown bytes at a path
    # In-place writes whose path no longer held the file when they were done: the daemon
    # moved the file (a peer's winning rename keeps the inode, so the bytes live on at the
    # new path) or replaced it (then they went to an unlinked file). Known bytes, not
    # required to survive; once seen in a folder they are a version like any other.
    orphans: dict[str, Version] = field(default_factory=dict)
    bytes_written: int = 0
    lids: int = 0
    numbers: Counter[int] = field(default_factory=Counter)
    biggest: int = 0

    # -- making bytes -------------------------------------------------------------------

    def size(self, rng: random.Random) -> int:
        r = rng.random()
        if r < 0.6:
            return rng.randint(1 << 10, 64 << 10)
        if r < 0.92:
            return rng.randint(64 << 10, 1 << 20)
        return rng.randint(1 << 20, 4 << 20)

    def content(self, rng: random.Random, lid: int, node: str, size: int) -> tuple[bytes, int]:
        self.numbers[lid] += 1
        number = self.numbers[lid]
        head = MAGIC + f"{lid}:{number}:{node}:{self.seed}".encode() + b"\x00"
        runs = b"\x00" * rng.randint(1, 512)  # NUL runs as well as the random bytes' own NULs
        body = rng.randbytes(max(0, size - len(head) - len(runs)))
        cut = rng.randrange(len(body) + 1)
        return head + body[:cut] + runs + body[cut:], number

    def known(self, digest: str) -> Version | None:
        """The write that made these bytes (an orphan seen on disk becomes a version)."""
        v = self.versions.get(digest)
        if v is None and digest in self.orphans:
            v = self.versions[digest] = self.orphans.pop(digest)
            if v.parent is not None:
                self.replaced.add(v.parent)
                self.overwritten.add(v.parent)
        return v

    def _record(self, data: bytes, lid: int, number: int, node: str, parent: str | None, how: str) -> None:
        self.versions[sha(data)] = Version(lid, number, node, parent, len(data), how)
        if parent is not None:
            self.replaced.add(parent)
            self.overwritten.add(parent)
        self.bytes_written += len(data)
        self.biggest = max(self.biggest, len(data))

    # -- the ops (on one node's folder, its daemon up or down) ---------------------------

    def create(self, rng: random.Random, vault: Path, node: str, trash: Path, *,
               size: int | None = None) -> None:
        self.lids += 1
        lid = self.lids
        rel = f"{rng.choice(FOLDERS)}a{lid}{rng.choice(SUFFIXES)}"
        path = vault / rel
        if path.exists():
            self.skipped["attachment create"] += 1
            return
        data, number = self.content(rng, lid, node, size if size is not None else self.size(rng))
        path.parent.mkdir(parents=True, exist_ok=True)
        if rng.random() < 0.5:
            with open(path, "xb") as f:  # written in place: the daemon must wait for it to settle
                f.write(data)
        else:  # saved elsewhere and moved in whole, as many apps save
            tmp = trash / f"new-{lid}{path.suffix}"
            tmp.write_bytes(data)
            os.replace(tmp, path)
        self._record(data, lid, number, node, None, f"create on {node} of {rel}")
        self.ops["attachment create"] += 1

    def pick(self, rng: random.Random, vault: Path) -> Path | None:
        files = attachment_files(vault)
        return rng.choice(files) if files else None

    def modify(self, rng: random.Random, vault: Path, node: str, trash: Path, path: Path | None = None,
               *, op: str = "attachment modify") -> str | None:
        """Replace an attachment's bytes; returns the new sha (None: skipped)."""
        path = path if path is not None else self.pick(rng, vault)
        if path is None:
            self.skipped[op] += 1
            return None
        try:
            f = open(path, "r+b")  # noqa: SIM115
        except FileNotFoundError:
            self.skipped[op] += 1
            return None
        with f:
            old = f.read()
            read_ino = os.fstat(f.fileno()).st_ino
            parent = sha(old)
            known = self.known(parent)
            if known is None:
                self.problems.append(f"{node}:{path.relative_to(vault)} holds {len(old)} bytes no one wrote "
                                     f"(sha {parent[:12]}, lineage {lineage(old)})")
                self.skipped[op] += 1
                return None
            size = self.big_bytes if known.size >= self.big_bytes // 2 else self.size(rng)
            data, number = self.content(rng, known.lid, node, size)
            in_place = rng.random() < 0.5
            if in_place:
                f.seek(0)
                f.truncate()
                f.write(data)
                f.flush()
                ino = os.fstat(f.fileno()).st_ino
        if in_place:
            try:
                still = os.stat(path).st_ino == ino
            except FileNotFoundError:
                still = False
            if not still:  # the daemon moved or replaced the file under the open handle
                self.orphans[sha(data)] = Version(known.lid, number, node, parent, len(data),
                                                  f"{op} on {node} of {path.relative_to(vault)} "
                                                  "(in place, the file moved or replaced under it)")
                self.skipped[op + " (file replaced under it)"] += 1
                return None
        else:
            tmp = trash / f"mod-{known.lid}-{number}{path.suffix}"
            tmp.write_bytes(data)
            try:
                still = os.stat(path).st_ino == read_ino
            except FileNotFoundError:
                still = False
            if not still:  # the daemon replaced (or a peer's delete removed) what was read
                tmp.unlink()
                self.skipped[op + " (file replaced under it)"] += 1
                return None
            os.replace(tmp, path)
        way = "in place" if in_place else "replaced"
        rel = path.relative_to(vault)
        self._record(data, known.lid, number, node, parent, f"{op} on {node} of {rel} ({way})")
        self.ops[op] += 1
        return sha(data)

    def rename(self, rng: random.Random, vault: Path, node: str) -> None:
        src = self.pick(rng, vault)
        if src is None:
            self.skipped["attachment rename"] += 1
            return
        dst = vault / f"{rng.choice(FOLDERS)}m{rng.randrange(1 << 30):x}{src.suffix}"
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists():
            self.skipped["attachment rename"] += 1
            return
        try:
            os.rename(src, dst)
        except FileNotFoundError:
            self.skipped["attachment rename"] += 1
            return
        self.renamed_to[dst.relative_to(vault).as_posix()] = node
        self.ops["attachment rename"] += 1

    def delete(self, rng: random.Random, vault: Path, node: str, trash: Path) -> None:
        src = self.pick(rng, vault)
        if src is None or len(attachment_files(vault)) <= 2:
            self.skipped["attachment delete"] += 1
            return
        gone = trash / f"del-{node}-{rng.randrange(1 << 40):x}"
        try:
            os.rename(src, gone)  # out of the vault: a delete, and the bytes it had, atomically
        except FileNotFoundError:
            self.skipped["attachment delete"] += 1
            return
        data = gone.read_bytes()
        gone.unlink()
        digest = sha(data)
        known = self.known(digest)
        if known is None:
            self.problems.append(f"{node}: deleted {src.relative_to(vault)} holding {len(data)} bytes no one "
                                 f"wrote (lineage {lineage(data)})")
            return
        self.replaced.add(digest)
        self.deletes.append((known.lid, digest, node))
        self.ops["attachment delete"] += 1

    def look(self, vault: Path, node: str) -> int:
        """A reader's look at one folder mid-run: every attachment holds bytes someone wrote."""
        seen = 0
        for rel, data in attachment_tree(vault).items():
            seen += 1
            if self.known(sha(data)) is None:
                self.problems.append(f"{node}:{rel} held {len(data)} bytes no one wrote "
                                     f"(lineage {lineage(data)}): a partial or foreign file")
        return seen

    # -- the end ------------------------------------------------------------------------

    kept_renamed: int = 0  # bytes a delete removed that a rename elsewhere kept (see below)

    def renamed_while_deleted(self, digest: str, paths: list[str]) -> bool:
        """Bytes only a delete replaced, ending at paths a rename on another node made: a
        rename is a change of the attachment, and a change beats a delete made without
        seeing it (SPEC §3.14: the move survives; or, when the delete reached the renaming
        daemon before it looked, the renamed file is taken in as a new one)."""
        if digest in self.overwritten:
            return False
        deleters = {node for _lid, sha, node in self.deletes if sha == digest}
        return bool(deleters) and all(p in self.renamed_to and self.renamed_to[p] not in deleters
                                      for p in paths)

    def leaves(self) -> dict[str, Version]:
        return {s: v for s, v in self.versions.items() if s not in self.replaced}

    def check_final(self, final: dict[str, bytes]) -> tuple[dict[str, int], dict[str, Version], list[str]]:
        """(final path -> lineage, losers by sha, problems) of the converged attachments.

        A lineage may end at two paths with different bytes: a file renamed and changed
        before its daemon looked is a delete and a new file there, and a change made
        elsewhere meanwhile beats the delete (SPEC §3.14, modify beats delete). The same
        bytes at two paths would be a copy, and bytes a later write replaced at a path are
        not one side's last bytes."""
        problems = []
        paths_of: dict[str, list[str]] = {}
        lineage_at: dict[str, int] = {}
        for rel, data in final.items():
            digest = sha(data)
            v = self.known(digest)
            if v is None:
                problems.append(f"{rel}: {len(data)} bytes no one wrote (lineage {lineage(data)})")
                continue
            paths_of.setdefault(digest, []).append(rel)
            lineage_at[rel] = v.lid
        for digest, paths in paths_of.items():
            if len(paths) > 1:
                problems.append(f"the bytes of {self.versions[digest].how} at {len(paths)} paths (a copy): "
                                f"{sorted(paths)}")
        leaves = self.leaves()
        losers = {digest: v for digest, v in leaves.items() if digest not in paths_of}
        for digest, paths in paths_of.items():
            if digest not in leaves and self.renamed_while_deleted(digest, paths):
                self.kept_renamed += 1
                continue
            if digest not in leaves:
                v = self.versions[digest]
                problems.append(f"{paths[0]} ends with write {v.number} of lineage {v.lid} ({v.how}), "
                                "which a later write replaced: not one side's last bytes")
        return lineage_at, losers, problems
