"""The attachment planner (folder ↔ index) with the replicated index and the winner rule,
driven on in-memory folders: scenario tests, and a hypothesis model in which random
edits, renames, deletes and syncs on three machines always end with every folder
byte-identical (executable bits included) and nothing lost that the rules keep."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from stet.sync.attachment_entry import AttachmentEntry, moved
from stet.sync.attachment_index import AttachmentIndex
from stet.sync.attachment_plan import (
    Fetch,
    Forget,
    MoveFile,
    OnDisk,
    RecordChange,
    RecordDelete,
    RecordMove,
    RemoveFile,
    SeenFile,
    SetExecutable,
    Touch,
    WriteFile,
    needs_hash,
    plan_intake,
    plan_outflow,
)
from stet.sync.hlc import Hlc

DEVICES = ("AAAAAAA-DEVICE0", "BBBBBBB-DEVICE1", "CCCCCCC-DEVICE2")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class File:
    data: bytes
    executable: bool
    ino: int
    mtime: int


@dataclass
class Machine:
    """A folder (in memory), the daemon's seen-state, blobs and versions, and its index."""

    device: str
    ms: int = 1_000_000
    files: dict[str, File] = field(default_factory=dict)
    seen: dict[str, SeenFile] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    versions: list[tuple[str, str]] = field(default_factory=list)  # (kind, sha256)
    index: AttachmentIndex = field(default_factory=AttachmentIndex)
    tick: int = 0

    def __post_init__(self) -> None:
        self.clock = self.index.clock(lambda: self.ms)

    # the user, in the folder
    def _next(self) -> int:
        self.tick += 1
        return self.tick

    def write(self, path: str, data: bytes, executable: bool = False) -> None:
        old = self.files.get(path)
        self.files[path] = File(data, executable, old.ino if old else self._next() + 10_000, self._next())

    def chmod(self, path: str, executable: bool) -> None:
        f = self.files[path]
        self.files[path] = replace(f, executable=executable, mtime=self._next())

    def rename(self, old: str, new: str) -> None:
        self.files[new] = self.files.pop(old)

    def delete(self, path: str) -> None:
        del self.files[path]

    # the daemon
    def disk(self) -> dict[str, OnDisk]:
        return {p: OnDisk(len(f.data), f.mtime, f.ino, f.executable) for p, f in self.files.items()}

    def _seen(self, path: str, entry: AttachmentEntry) -> SeenFile:
        f = self.files[path]
        return SeenFile(entry.id, sha(f.data), len(f.data), f.mtime, f.ino, f.executable, entry.hlc)

    def intake(self) -> list[object]:
        disk = self.disk()
        hashes = {p: sha(self.files[p].data) for p in needs_hash(disk, self.seen)}
        actions = plan_intake(disk, hashes, self.seen, self.index.live())
        for a in actions:
            now = self.clock.now().pack()
            if isinstance(a, RecordChange):
                self.blobs[a.sha256] = self.files[a.path].data
                entry, _ = self.index.record(a.path, sha256=a.sha256, size=a.size, executable=a.executable,
                                             hlc=now, device=self.device, att_id=a.att_id, base=a.base)
                self.seen[a.path] = self._seen(a.path, entry)
            elif isinstance(a, RecordMove):
                entry = replace(moved(a.entry, a.new_path, hlc=now, device=self.device),
                                executable=a.executable)
                self.index.put(entry)
                del self.seen[a.old_path]
                self.seen[a.new_path] = self._seen(a.new_path, entry)
            elif isinstance(a, RecordDelete):
                s = a.seen
                self.index.record(a.path, sha256=s.sha256, size=s.size, executable=s.executable, hlc=now,
                                  device=self.device, deleted=True, att_id=s.att_id, base=s.hlc)
                del self.seen[a.path]
            elif isinstance(a, Touch):
                s = self.seen[a.path]
                self.seen[a.path] = replace(s, mtime_ns=a.disk.mtime_ns, ino=a.disk.ino)
        return actions

    def outflow(self, network: list[Machine]) -> list[object]:
        actions = plan_outflow(self.disk(), self.seen, self.index.live(), lambda h: h in self.blobs)
        for a in actions:
            if isinstance(a, WriteFile):
                if a.replaces is not None and a.version_kind is not None:
                    self.versions.append((a.version_kind, a.replaces.sha256))
                self.write(a.path, self.blobs[a.entry.sha256], a.entry.executable)
                self.seen[a.path] = self._seen(a.path, a.entry)
            elif isinstance(a, MoveFile):
                self.rename(a.old_path, a.new_path)
                del self.seen[a.old_path]
                self.seen[a.new_path] = self._seen(a.new_path, a.entry)
            elif isinstance(a, RemoveFile):
                self.versions.append((a.version_kind, a.seen.sha256))
                self.delete(a.path)
                del self.seen[a.path]
            elif isinstance(a, SetExecutable):
                self.chmod(a.path, a.entry.executable)
                self.seen[a.path] = self._seen(a.path, a.entry)
            elif isinstance(a, Fetch):
                for other in network:  # a transfer from whoever holds the blob
                    if a.sha256 in other.blobs:
                        self.blobs[a.sha256] = other.blobs[a.sha256]
                        break
            elif isinstance(a, Forget):
                del self.seen[a.path]
        return actions

    def step(self, network: list[Machine]) -> bool:
        """One pass of the daemon; whether it did anything."""
        did = bool(self.intake())
        out = self.outflow(network)
        return did or bool(out)

    def receive(self, other: Machine) -> None:
        self.index.apply_update(other.index.full_update())
        for e in other.index.slots():
            self.clock.observe(Hlc.unpack(e.hlc))

    def folder(self) -> dict[str, tuple[bytes, bool]]:
        return {p: (f.data, f.executable) for p, f in self.files.items()}


def settle(machines: list[Machine], rounds: int = 12) -> None:
    """Every daemon steps and every index syncs until nothing moves (bounded)."""
    for _ in range(rounds):
        moved_any = False
        for m in machines:
            moved_any |= m.step(machines)
        for a in machines:
            for b in machines:
                if a is not b:
                    before = a.index.state_vector()
                    a.receive(b)
                    moved_any |= a.index.state_vector() != before
        if not moved_any:
            return
    raise AssertionError("did not settle")


def converged(machines: list[Machine]) -> None:
    first = machines[0].folder()
    for m in machines[1:]:
        assert m.folder() == first, (m.device, sorted(m.folder()), sorted(first))
    live = machines[0].index.live()
    assert {p: e.sha256 for p, e in live.items()} == {p: sha(d) for p, (d, _) in first.items()}
    assert {p: e.executable for p, e in live.items()} == {p: x for p, (_, x) in first.items()}


# -- scenarios --------------------------------------------------------------------------------------


def test_binary_empty_and_executable_files_reach_everyone() -> None:
    ms = [Machine(d) for d in DEVICES]
    ms[0].write("img/cat.png", b"\x89PNG\x00\x00\x01")
    ms[0].write("empty.dat", b"")
    ms[1].write("tools/run.sh", b"#!/bin/sh\n", executable=True)
    settle(ms)
    converged(ms)
    assert ms[2].folder()["tools/run.sh"] == (b"#!/bin/sh\n", True)


def test_rename_while_the_other_is_offline_is_one_file_at_the_new_path() -> None:
    a, b = Machine(DEVICES[0]), Machine(DEVICES[1])
    a.write("img/cat.png", b"cat")
    settle([a, b])
    a.rename("img/cat.png", "pets/cat.png")
    a.step([a])  # b is offline
    settle([a, b])
    converged([a, b])
    assert list(b.folder()) == ["pets/cat.png"]
    assert b.versions == []  # a move, not a delete plus a copy


def test_modify_beats_delete() -> None:
    a, b = Machine(DEVICES[0]), Machine(DEVICES[1])
    a.write("doc.pdf", b"v1")
    settle([a, b])
    a.write("doc.pdf", b"v2, modified")
    a.step([a])
    b.ms += 60_000  # the delete is later by the clock, but did not see the modification
    b.delete("doc.pdf")
    b.step([b])
    settle([a, b])
    converged([a, b])
    assert a.folder() == {"doc.pdf": (b"v2, modified", False)}


def test_delete_after_seeing_the_change_deletes_and_keeps_a_version() -> None:
    a, b = Machine(DEVICES[0]), Machine(DEVICES[1])
    a.write("doc.pdf", b"v1")
    settle([a, b])
    b.delete("doc.pdf")
    settle([a, b])
    converged([a, b])
    assert a.folder() == {}
    assert a.versions == [("before-deletion", sha(b"v1"))]


def test_concurrent_modification_one_winner_everywhere_loser_kept_as_concurrent() -> None:
    ms = [Machine(d) for d in DEVICES]
    ms[0].write("board.canvas", b"base")
    settle(ms)
    for i, m in enumerate(ms):
        m.ms += 100 + i  # machine 2 changes last
        m.write("board.canvas", f"by {m.device}".encode())
        m.step([m])
    settle(ms)
    converged(ms)
    assert ms[0].folder()["board.canvas"][0] == f"by {DEVICES[2]}".encode()
    kinds = {k for m in ms[:2] for k, _ in m.versions}
    assert kinds == {"concurrent"}  # never a conflict-copy file
    assert list(ms[0].folder()) == ["board.canvas"]


def test_a_local_edit_is_never_overwritten_before_it_is_recorded() -> None:
    a = Machine(DEVICES[0])
    a.write("x.bin", b"one")
    a.step([a])
    entry = a.index.live()["x.bin"]
    a.write("x.bin", b"edited, not yet seen")
    # the index (say, a peer) wants other bytes there: the outflow leaves the file alone
    later = replace(entry, sha256=sha(b"remote"), hlc=Hlc(9_999_999).pack(), device=DEVICES[1],
                    base=entry.hlc)
    a.blobs[later.sha256] = b"remote"
    assert plan_outflow(a.disk(), a.seen, {"x.bin": later}, lambda h: True) == []
    intake = plan_intake(a.disk(), {"x.bin": sha(b"edited, not yet seen")}, a.seen, {"x.bin": later})
    assert intake == [RecordChange("x.bin", sha(b"edited, not yet seen"), 20, False, entry.id, entry.hlc)]


def test_a_missing_blob_is_fetched_first() -> None:
    a = Machine(DEVICES[0])
    e = AttachmentEntry("a" * 32, "p.png", sha(b"p"), 1, False, Hlc(5).pack(), DEVICES[1])
    assert plan_outflow({}, {}, {"p.png": e}, lambda h: False) == [Fetch(sha(b"p"), 1, "p.png")]
    assert plan_outflow({}, {}, {"p.png": e}, lambda h: True) == [WriteFile("p.png", e, None, None)]
    assert a.versions == []


# -- the model ------------------------------------------------------------------------------------

PATHS = ("a.png", "dir/b.pdf", "c.bin", "run.sh")
CONTENTS = (b"", b"\x00one", b"two\x00\x00", b"three" * 10)
OPS = st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["write", "write", "delete", "rename", "chmod",
                                                             "step", "step", "sync"]),
                         st.integers(0, 3), st.integers(0, 3), st.integers(0, 3000)),
               max_size=35)


@settings(max_examples=80, deadline=None)
@given(OPS)
def test_any_history_ends_with_identical_folders(ops: list[tuple[int, str, int, int, int]]) -> None:
    ms = [Machine(d, ms=1_000_000 + 7 * i) for i, d in enumerate(DEVICES)]
    for who, op, p, c, step in ops:
        m = ms[who]
        m.ms += step - 1000  # clocks wander, sometimes back
        path = PATHS[p]
        if op == "write":
            m.write(path, CONTENTS[c], executable=c == 3)
        elif op == "delete" and path in m.files:
            m.delete(path)
        elif op == "rename" and path in m.files and PATHS[c] not in m.files:
            m.rename(path, PATHS[c])
        elif op == "chmod" and path in m.files:
            m.chmod(path, not m.files[path].executable)
        elif op == "step":
            m.step([m])
        elif op == "sync":
            other = ms[c % 3]
            if other is not m:
                m.receive(other)
    settle(ms)
    converged(ms)
    for m in ms:  # no stray state: every seen path is in the folder and the index
        assert set(m.seen) == set(m.files)
