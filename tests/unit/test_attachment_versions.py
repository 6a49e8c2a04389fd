"""Attachment versions within ``attachments.keep_bytes`` (SPEC §3.14): the pure retention
rule, the table (schema step 6, migrated from a step-5 store; step 7's cost kept by
triggers, migrated from a step-6 store with versions), blobs released."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stet.sync.attachment_versions import (
    BEFORE_DELETION,
    BEFORE_OVERWRITE,
    CONCURRENT,
    AttachmentVersion,
    AttachmentVersionStore,
    versions_to_drop,
)
from stet.sync.store import VaultStore
from stet.sync.store_schema import SCHEMA_VERSION


def sha(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def v(i: int, size: int, *, blob: int | None = None, pinned: bool = False) -> AttachmentVersion:
    return AttachmentVersion(i, "a" * 32, f"f{i}.png", BEFORE_OVERWRITE, "disk", float(i),
                             sha(blob if blob is not None else i), size, False, pinned)


def distinct_bytes(vs: list[AttachmentVersion]) -> int:
    return sum({x.sha256: x.size for x in vs}.values())


def test_oldest_dropped_first_until_it_fits() -> None:
    vs = [v(1, 40), v(2, 40), v(3, 40)]
    assert versions_to_drop(vs, 100) == [1]
    assert versions_to_drop(vs, 120) == []
    assert versions_to_drop(vs, 79) == [1, 2]
    assert versions_to_drop(vs, 39) == [1, 2, 3]  # the newest alone is over the budget


def test_shared_blobs_count_once() -> None:
    vs = [v(1, 50, blob=7), v(2, 50, blob=7), v(3, 50)]
    assert versions_to_drop(vs, 100) == []
    # dropping version 1 frees nothing (2 holds the same bytes): both old ones go
    assert versions_to_drop(vs, 60) == [1, 2]


def test_pinned_versions_stay() -> None:
    vs = [v(1, 80, pinned=True), v(2, 40), v(3, 40)]
    assert versions_to_drop(vs, 100) == [2, 3]
    assert versions_to_drop([v(1, 80), v(2, 40)], 100, pinned={1}) == [2]


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5), st.booleans()), max_size=30),
       st.integers(0, 3000))
def test_retention_properties(specs: list[tuple[int, int, bool]], keep: int) -> None:
    vs = [v(i + 1, size, blob=blob, pinned=pin) for i, (size, blob, pin) in enumerate(specs)]
    # one blob has one size
    sizes: dict[str, int] = {}
    vs = [AttachmentVersion(x.id, x.attachment_id, x.path, x.kind, x.source, x.created_at, x.sha256,
                            sizes.setdefault(x.sha256, x.size), x.executable, x.pinned) for x in vs]
    drop = set(versions_to_drop(vs, keep))
    kept = [x for x in vs if x.id not in drop]
    assert all(not x.pinned for x in vs if x.id in drop)
    unpinned_kept = [x for x in kept if not x.pinned]
    if distinct_bytes(kept) > keep:  # still over: only because of pins
        assert unpinned_kept == []
    if drop:  # what goes is older than what stays (oldest first)
        newest_dropped = max(x.created_at for x in vs if x.id in drop)
        assert all(x.created_at > newest_dropped for x in unpinned_kept)


def test_table_keeps_and_releases_blobs(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    versions = AttachmentVersionStore(store, keep_bytes=100)
    first, released = versions.add(attachment_id="a" * 32, path="img/a.png", kind=BEFORE_OVERWRITE,
                                   source="disk", created_at=1.0, sha256=sha(1), size=60, executable=True)
    assert first is not None
    assert first.executable
    assert released == set()
    second, released = versions.add(attachment_id="a" * 32, path="img/a.png", kind=BEFORE_DELETION,
                                    source="peer:X", created_at=2.0, sha256=sha(2), size=60, executable=False)
    assert second is not None
    assert released == {sha(1)}  # the first version went: its blob is free to remove
    assert versions.get(first.id) is None
    assert [x.id for x in versions.for_attachment("a" * 32)] == [second.id]
    assert versions.holds(sha(2))
    assert not versions.holds(sha(1))
    too_big, released = versions.add(attachment_id="b" * 32, path="big.zip", kind=CONCURRENT, source="peer:Y",
                                      created_at=3.0, sha256=sha(3), size=101, executable=False)
    assert too_big is None
    assert sha(3) in released
    assert versions.used_bytes() == 0  # the big one pushed out the older one as well
    with pytest.raises(ValueError, match="kind"):
        versions.add(attachment_id="c" * 32, path="x", kind="conflict-copy", source="disk", created_at=4.0,
                     sha256=sha(4), size=1, executable=False)
    store.close()


def test_pinned_version_survives_retention(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    versions = AttachmentVersionStore(store, keep_bytes=50)
    held, _ = versions.add(attachment_id="a" * 32, path="a.png", kind=BEFORE_DELETION, source="disk",
                           created_at=1.0, sha256=sha(1), size=40, executable=False, pinned=True)
    newer, released = versions.add(attachment_id="b" * 32, path="b.png", kind=BEFORE_DELETION, source="disk",
                                   created_at=2.0, sha256=sha(2), size=40, executable=False)
    assert held is not None
    assert newer is None  # the budget is held by the pinned one
    assert released == {sha(2)}
    versions.set_pinned(held.id, False)
    assert versions.apply_retention() == set()  # 40 <= 50: it may stay now
    store.close()


def test_a_schema_5_store_migrates_to_6_keeping_its_notes(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    store = VaultStore(path)
    store.set_meta("kept", "yes")
    store.close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE attachment_versions")
    db.execute("DROP TABLE attachment_files")
    db.execute("DROP TABLE attachment_version_blobs")
    db.execute("DROP TABLE attachment_versions_used")
    db.execute("PRAGMA user_version=5")
    db.commit()
    db.close()
    store = VaultStore(path)
    assert store.schema_version == SCHEMA_VERSION == 7
    assert store.get_meta("kept") == "yes"
    versions = AttachmentVersionStore(store, keep_bytes=10)
    assert versions.all() == []
    assert store.db.execute("SELECT count(*) FROM attachment_files").fetchone()[0] == 0
    store.close()


@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 6), st.booleans(), st.integers(0, 8)),
                max_size=25),
       st.integers(0, 1500), st.lists(st.integers(0, 24), max_size=6))
def test_the_table_drops_what_the_rule_drops(
        specs: list[tuple[int, int, bool, int]], keep: int, unpins: list[int]) -> None:
    """Versions kept one by one (out of time order too, blobs shared, some pinned, some
    unpinned later): after each step the table holds what the pure rule keeps, its cost
    row equals the distinct bytes held, and what it says it released no version holds."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store = VaultStore(Path(tmp) / "v.db")
        versions = AttachmentVersionStore(store, keep_bytes=keep)
        sizes: dict[int, int] = {}
        expected: list[AttachmentVersion] = []
        for size, blob, pin, at in specs:
            size = sizes.setdefault(blob, size)
            made, released = versions.add(attachment_id="a" * 32, path=f"b{blob}.png", kind=BEFORE_DELETION,
                                          source="disk", created_at=float(at), sha256=sha(blob), size=size,
                                          executable=False, pinned=pin)
            vid = int(store.db.execute(  # the row just inserted, kept or not (AUTOINCREMENT)
                "SELECT seq FROM sqlite_sequence WHERE name = 'attachment_versions'").fetchone()[0])
            candidate = [*expected, AttachmentVersion(vid, "a" * 32, f"b{blob}.png", BEFORE_DELETION, "disk",
                                                      float(at), sha(blob), size, False, pin)]
            drop = set(versions_to_drop(candidate, keep))
            expected = [x for x in candidate if x.id not in drop]
            assert [x.id for x in versions.all()] == [x.id for x in expected]
            assert (made is None) == (vid in drop)
            assert versions.used_bytes() == distinct_bytes(expected)
            assert not any(versions.holds(s) for s in released)
            assert released == {x.sha256 for x in candidate if x.id in drop} - {x.sha256 for x in expected}
        for i in unpins:
            if i < len(expected) and expected[i].pinned:
                versions.set_pinned(expected[i].id, False)
                expected[i] = AttachmentVersion(*[getattr(expected[i], f) for f in (
                    "id", "attachment_id", "path", "kind", "source", "created_at", "sha256", "size",
                    "executable")], pinned=False)
                drop = set(versions_to_drop(expected, keep))
                versions.apply_retention()
                expected = [x for x in expected if x.id not in drop]
                assert [x.id for x in versions.all()] == [x.id for x in expected]
                assert versions.used_bytes() == distinct_bytes(expected)
        store.close()


def test_a_schema_6_store_with_versions_migrates_its_cost(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    store = VaultStore(path)
    versions = AttachmentVersionStore(store, keep_bytes=1000)
    for i, blob in enumerate((1, 2, 2, 3)):
        versions.add(attachment_id="a" * 32, path=f"f{i}.png", kind=BEFORE_OVERWRITE, source="disk",
                     created_at=float(i), sha256=sha(blob), size=10 * blob, executable=False)
    store.close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE attachment_version_blobs")
    db.execute("DROP TABLE attachment_versions_used")
    db.execute("DROP INDEX attachment_versions_by_age")
    db.execute("DROP TRIGGER attachment_version_added")
    db.execute("DROP TRIGGER attachment_version_dropped")
    db.execute("PRAGMA user_version=6")
    db.commit()
    db.close()
    store = VaultStore(path)
    assert store.schema_version == 7
    versions = AttachmentVersionStore(store, keep_bytes=45)
    assert versions.used_bytes() == 10 + 20 + 30
    # 60 > 45: the oldest goes (50), then both holding blob 2 (the first frees nothing)
    assert versions.apply_retention() == {sha(1), sha(2)}
    assert versions.used_bytes() == 30
    store.close()


def test_seen_files_table_round_trips_and_survives_reopen(tmp_path: Path) -> None:
    from stet.sync.attachment_files import AttachmentFiles
    from stet.sync.attachment_plan import SeenFile

    store = VaultStore(tmp_path / "v.db")
    files = AttachmentFiles(store)
    seen = SeenFile("a" * 32, sha(1), 10, 123456789012345678, 42, True, "0000018c2f3a4b5c")
    files.put("img/a.png", seen)
    files.put("img/a.png", seen)  # an upsert, not a second row
    assert files.get("img/a.png") == seen
    assert files.get("nothing") is None
    store.close()
    store = VaultStore(tmp_path / "v.db")
    files = AttachmentFiles(store)
    assert files.all() == {"img/a.png": seen}
    assert files.shas() == {sha(1)}
    files.remove("img/a.png")
    assert files.all() == {}
    store.close()
