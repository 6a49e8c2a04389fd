"""RevisionMemory (SPEC §6.4 ``baseRevision``): the state behind a revision is kept at
least an hour, then forgotten (``revision_unknown``), with the clock injected."""

from __future__ import annotations

from pathlib import Path

from stet.sync.revision_memory import DEFAULT_MAX_AGE_S, RevisionMemory
from stet.sync.store import VaultStore

T0 = 1_800_000_000.0


def test_a_revision_is_kept_an_hour_and_then_unknown(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    memory = RevisionMemory(store)
    assert DEFAULT_MAX_AGE_S == 3600.0
    memory.remember("n1", "rev-a", b"state-a", T0)
    assert memory.lookup("n1", "rev-a", T0) == b"state-a"
    assert memory.lookup("n1", "rev-a", T0 + 3600) == b"state-a"  # at least one hour
    assert memory.lookup("n1", "rev-a", T0 + 3600.001) is None  # older than an hour
    assert memory.lookup("n1", "never-handed-out", T0) is None
    assert memory.lookup("n2", "rev-a", T0) is None  # per note
    store.close()


def test_handing_a_revision_out_again_renews_it_and_prune_forgets_only_old_ones(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    memory = RevisionMemory(store)
    memory.remember("n1", "rev-a", b"state-a", T0)
    memory.remember("n1", "rev-b", b"state-b", T0 + 1000)
    memory.remember("n1", "rev-a", b"state-a", T0 + 3000)  # read again: an hour from now
    assert memory.lookup("n1", "rev-a", T0 + 5000) == b"state-a"
    assert memory.prune(T0 + 4700) == 1  # rev-b is 3,700 s old
    assert memory.lookup("n1", "rev-b", T0 + 4700) is None
    assert memory.lookup("n1", "rev-a", T0 + 4700) == b"state-a"
    store.close()


def test_a_file_write_in_progress_is_remembered_until_it_ends(tmp_path: Path) -> None:
    store = VaultStore(tmp_path / "v.db")
    memory = RevisionMemory(store)
    assert memory.file_write_in_progress("n1") is None
    memory.begin_file_write("n1", "rev-x", b"state-x", T0)
    store.close()
    store = VaultStore(tmp_path / "v.db")  # survives the process
    memory = RevisionMemory(store)
    assert memory.file_write_in_progress("n1") == ("rev-x", b"state-x")
    assert memory.file_write_in_progress("n2") is None
    memory.end_file_write("n1")
    assert memory.file_write_in_progress("n1") is None
    store.close()
