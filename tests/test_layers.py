"""The layers, checked by a tool (issue 11): an AST walk over every module's imports --
at the top, inside functions and under ``TYPE_CHECKING`` alike, relative ones resolved --
rather than a grep of line starts. (mypy ``--strict`` covers sync/, daemon/ and client/
whole: ``test_code_quality``.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What each layer may not import (prefix match on the absolute module name).
FORBIDDEN = {
    "sync": ("stet.daemon", "stet.client", "aiohttp", "watchdog", "zeroconf", "keyring", "mcp"),
    "client": ("stet.daemon", "watchdog", "zeroconf", "pycrdt"),
}
# The write path's modules (all of daemon/ is mypy --strict: tests/test_code_quality.py).
STRICT_DAEMON = ("notes/write_unit", "notes/changes", "folder/replaced_files", "notes/service",
                 "notes/remote_changes", "folder/replica", "folder/writer/disk_writes", "folder/writer/plans",
                 "folder/writer/temp_files", "folder/writer/deletes_and_moves", "folder/rename_detection",
                 "folder/bridge", "ops/promotion", "live/write_path")
MAX_ATTACHMENT_LINES = 400  # each daemon/attachments/*.py module (the folder side's parts and their peers)


def imports_of(path: Path, package: str) -> list[tuple[int, str]]:
    """Every module ``path`` imports, as absolute names, with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = ["stet", package, *path.relative_to(ROOT / package).with_suffix("").parts]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            out.append((node.lineno, name))
            out += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return out


def test_the_walker_sees_every_kind_of_import(tmp_path: Path) -> None:
    src = ROOT / "sync" / "store.py"
    names = {name for _, name in imports_of(src, "sync")}
    assert "sqlite3" in names
    assert "stet.sync.errors" in names  # `from .errors import ...`, resolved


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_only_what_they_may(layer: str) -> None:
    bad = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for line, name in imports_of(path, layer):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[layer]):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not bad, "\n".join(bad)


def test_the_write_path_is_composed_not_mixed_in() -> None:
    """No class of the write path reaches another's state through ``__getattr__`` (the
    mixins did); the bridge and the service are composed of collaborators, each given a
    typed Protocol of what it needs."""
    bad = []
    for name in STRICT_DAEMON:
        path = ROOT / "daemon" / f"{name}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                bad.append(f"daemon/{name}.py:{node.lineno}: __getattr__")
            if isinstance(node, ast.ClassDef) and node.name in ("FileBridge", "NotesService") and node.bases:
                bad.append(f"daemon/{name}.py:{node.lineno}: {node.name} has base classes (mixins)")
    assert not bad, "\n".join(bad)
def test_the_attachment_folder_side_is_composed_of_small_parts() -> None:
    """``AttachmentReplica`` composes one part per responsibility (``daemon/attachments/*.py``:
    ARCHITECTURE.md, *Folder side*) -- no mixins, no ``__getattr__`` -- and no part grows back
    into the 948-line module it was split from."""
    bad = []
    for path in sorted((ROOT / "daemon" / "attachments").glob("*.py")):
        source = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT)
        if len(source.splitlines()) > MAX_ATTACHMENT_LINES:
            bad.append(f"{rel}: {len(source.splitlines())} lines (> {MAX_ATTACHMENT_LINES})")
        for node in ast.walk(ast.parse(source, filename=str(path))):
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                bad.append(f"{rel}:{node.lineno}: __getattr__")
            if isinstance(node, ast.ClassDef) and node.name == "AttachmentReplica" and node.bases:
                bad.append(f"{rel}:{node.lineno}: AttachmentReplica has base classes (mixins)")
    assert not bad, "\n".join(bad)


def test_the_peer_hub_takes_a_narrow_host_not_the_daemon() -> None:
    """``PeerHub`` sees the daemon only through ``peers.host.PeerHost`` (issue 11)."""
    names = {name for _, name in imports_of(ROOT / "daemon" / "peers" / "hub.py", "daemon")}
    assert not any(n == "stet.daemon.app.runtime" or n.startswith("stet.daemon.app.runtime.") for n in names)
    source = (ROOT / "daemon" / "peers" / "hub.py").read_text(encoding="utf-8")
    assert "Daemon" not in source
    assert "stet.daemon.peers.host.PeerHost" in names


# -- client/ reaches stores only through the daemon or one read-only module -------------------

# The one client module that may read a store itself (read-only, ``mode=ro``).
CLIENT_STORE_READER = "store_reader"
# Sync modules client/ may import although they touch SQLite: the home's registry
# (``home.db``: tokens, vaults, joins -- the CLI's own, daemon or not) and ``stet init``'s
# first import (``vault_import.import_new_vault``, the CLI's one write to a vault store).
CLIENT_MAY_USE = {"stet.sync.home", "stet.sync.vault_import"}


def _sync_modules_opening_stores() -> set[str]:
    """Sync modules that reach a vault store: ``store`` and every module importing it."""
    out = {"stet.sync.store"}
    for path in sorted((ROOT / "sync").glob("*.py")):
        names = [n for _, n in imports_of(path, "sync")]
        if any(n == "stet.sync.store" or n.startswith("stet.sync.store.") for n in names):
            out.add(f"stet.sync.{path.stem}")
    return out


def test_client_reaches_stores_only_through_its_read_only_module() -> None:
    store_modules = _sync_modules_opening_stores() - CLIENT_MAY_USE
    assert "stet.sync.held_changes" in store_modules  # the walk finds the store's tables
    bad = []
    for path in sorted((ROOT / "client").rglob("*.py")):
        if path.stem == CLIENT_STORE_READER:
            continue
        for line, name in imports_of(path, "client"):
            base = name.rsplit(".", 1)[0] if name.count(".") > 2 else name
            if name.split(".")[0] == "sqlite3" or name in store_modules or base in store_modules:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not bad, "client/ opens a store outside store_reader.py:\n" + "\n".join(bad)


def test_the_store_reader_opens_sqlite_read_only_only() -> None:
    tree = ast.parse((ROOT / "client" / f"{CLIENT_STORE_READER}.py").read_text(encoding="utf-8"))
    connects = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "connect"]
    assert len(connects) == 1, "one connect, in read_only()"
    call = connects[0]
    assert any(k.arg == "uri" and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)
    consts = [n.value for n in ast.walk(call) if isinstance(n, ast.Constant)]
    assert "?mode=ro" in consts


def test_the_store_reader_cannot_write(tmp_path: Path) -> None:
    import sqlite3

    from stet.client.store_reader import read_only

    db_path = tmp_path / "x.db"
    db = sqlite3.connect(db_path)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with read_only(db_path) as ro, pytest.raises(sqlite3.OperationalError, match="readonly"):
        ro.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.OperationalError):
        read_only(tmp_path / "missing.db").__enter__()  # never created
    assert not (tmp_path / "missing.db").exists()


# -- a pure core: which sync/ modules may do I/O ---------------------------------------------

# Modules whose import means file, socket, process or SQLite I/O.
IO_IMPORTS = ("sqlite3", "socket", "os", "shutil", "tempfile", "io", "fcntl", "mmap", "ssl",
              "subprocess", "select", "selectors", "asyncio", "urllib", "http")
# Path methods that touch the filesystem.
IO_CALLS = {"read_text", "write_text", "read_bytes", "write_bytes", "mkdir", "unlink", "iterdir", "rglob",
            "glob", "touch", "rmdir", "symlink_to", "chmod", "exists", "is_file", "is_dir", "stat", "lstat",
            "resolve", "expanduser"}
# The sync/ modules allowed I/O, and why; every other module is the pure core (issue 11:
# "a pure core apart from storage and scanning"). The list is exact: a module listed here
# that does no I/O fails too, so it stays true.
SYNC_IO_ALLOWED = {
    # storage: the SQLite store and the tables kept in it
    "store": "the vault store (SQLite)",
    "change_log": "a table of the store", "conflict_log": "a table of the store",
    "held_changes": "a table of the store", "idempotency": "a table of the store",
    "revision_memory": "a table of the store",
    "search_index": "the search index (FTS5, a database of its own per vault)",
    "snapshots": "a table of the store", "version_store": "a table of the store",
    "attachment_versions": "a table of the store", "attachment_files": "a table of the store",
    "held_attachments": "a table of the store (the brake's held attachment changes)",
    "vault_import": "stet init's import into the store",
    # storage: the home
    "home": "home.db (the registry) and the home's private files",
    "home_layout": "the home's folders (created on first use)",
    "device_name": "the home's device-name file, and the host's name as its default",
    "blob_store": "attachment blobs under the home (temp + fsync + rename)",
    "direct_io": "attachment bytes written past the page cache (O_DIRECT), for blob_store and the vault",
    # scanning: reading the vault folder
    "folder_scan": "stat-only scans and contained, no-follow reads of note files",
    "ignore_rules": "reads .stetignore",
    "note_paths": "proves a path is inside the vault (lstat per component)",
    "vault_files": "reads the vault's other files",
    "attachment_scan": "stat-only scan of the vault's attachments, hashed while copied to blobs",
    "folder_walk": "the one stat-only walk of the vault folder (notes' and attachments' scans)",
}


def _does_io(path: Path) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for line, name in imports_of(path, "sync"):
        if name.split(".")[0] in IO_IMPORTS or name == "stet.sync.store":
            found.append(f"{line}: imports {name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "open":
                found.append(f"{node.lineno}: open()")
            elif isinstance(node.func, ast.Attribute) and node.func.attr in IO_CALLS:
                found.append(f"{node.lineno}: .{node.func.attr}()")
    return found


def test_the_sync_core_is_pure_apart_from_storage_and_scanning() -> None:
    doing_io = {p.stem: _does_io(p) for p in sorted((ROOT / "sync").glob("*.py"))}
    doing_io = {m: f for m, f in doing_io.items() if f}
    unexpected = {m: f[:3] for m, f in doing_io.items() if m not in SYNC_IO_ALLOWED}
    assert not unexpected, f"I/O in the pure core of sync/ (move it, or list it with a reason): {unexpected}"
    stale = sorted(set(SYNC_IO_ALLOWED) - set(doing_io))
    assert not stale, f"listed as doing I/O but pure now (take them off SYNC_IO_ALLOWED): {stale}"
