"""A peer's burst of attachment changes is written in batches (``write_blobs``,
``remove_files``: one worker-thread trip, one folder fsync per folder), with each file's
own rule kept: a path the user changed since it was seen is left alone (None / False),
an error is that file's outcome and not the batch's, identical bytes land as separate
files with their own modes, and a folder a removal emptied goes. Real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from stet.daemon.attachments import disk as attachment_disk
from stet.sync.attachment_plan import OnDisk, SeenFile
from stet.sync.attachment_scan import on_disk
from stet.sync.blob_store import BlobStore


def seen_of(path: Path, sha: str) -> SeenFile:
    st = on_disk(os.lstat(path))
    return SeenFile("a" * 32, sha, st.size, st.mtime_ns, st.ino, st.executable, "0")


def test_a_batch_writes_each_file_and_leaves_a_changed_path_alone(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    root = tmp_path / "vault"
    root.mkdir()
    sha = blobs.put_bytes(b"\x89PNG twin bytes").sha256
    other = blobs.put_bytes(b"newer bytes").sha256
    (root / "kept").mkdir()
    (root / "kept" / "mine.png").write_bytes(b"the user's own")  # expected empty: not ours to replace
    (root / "old.png").write_bytes(b"older")
    old_seen = seen_of(root / "old.png", "0" * 64)
    outcomes = attachment_disk.write_blobs(blobs, root, [
        ("ελληνικά/σχήμα.png", sha, False, None),
        ("日本語/図.png", sha, True, None),
        ("kept/mine.png", sha, False, None),
        ("old.png", other, False, old_seen),
        ("../outside.png", sha, False, None),
    ])
    first, second, mine, replaced, outside = outcomes
    assert isinstance(first, OnDisk)
    assert isinstance(second, OnDisk)
    assert (root / "ελληνικά/σχήμα.png").read_bytes() == b"\x89PNG twin bytes"
    assert (root / "日本語/図.png").read_bytes() == b"\x89PNG twin bytes"
    assert os.lstat(root / "ελληνικά/σχήμα.png").st_ino != os.lstat(root / "日本語/図.png").st_ino
    assert stat.S_IMODE(os.lstat(root / "日本語/図.png").st_mode) == 0o755
    assert stat.S_IMODE(os.lstat(root / "ελληνικά/σχήμα.png").st_mode) == 0o644
    assert mine is None
    assert (root / "kept" / "mine.png").read_bytes() == b"the user's own"
    assert isinstance(replaced, OnDisk)
    assert (root / "old.png").read_bytes() == b"newer bytes"
    assert isinstance(outside, Exception)  # that file's error, not the batch's
    assert not (tmp_path / "outside.png").exists()
    assert not [p.name for p in root.rglob(".stet-*")]  # no temp file left behind


def test_a_batch_removes_what_was_seen_and_the_folders_it_emptied(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    for rel in ("gone/a.png", "gone/deeper/b.png", "stays/c.png", "stays/other.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(rel.encode())
    seen = {rel: seen_of(root / rel, "0" * 64) for rel in ("gone/a.png", "gone/deeper/b.png", "stays/c.png")}
    (root / "stays" / "c.png").write_bytes(b"changed by the user after it was seen")
    outcomes = attachment_disk.remove_files(root, [(p, s) for p, s in seen.items()] + [
        ("never/there.png", seen["gone/a.png"])])
    assert outcomes[:3] == [True, True, False]
    assert outcomes[3] is False  # nothing there: not what was seen
    assert not (root / "gone").exists()  # emptied, deepest first
    assert (root / "stays" / "c.png").read_bytes() == b"changed by the user after it was seen"
    assert (root / "stays" / "other.txt").exists()
