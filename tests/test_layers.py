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
    docs/decisions/0116-attachments-foundations.md, *Folder side*) -- no mixins, no
    ``__getattr__`` -- and no part grows back
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


# -- daemon/'s packages: layers, independence, no one else's private names (issue 31) --------

# A package may import the packages of lower layers, and its own layer's unless the pair is
# independent; base and identity sit below everything in daemon/, sync/ below that.
DAEMON_LAYERS = {
    "app": 6,  # the composition root: the only package that names and builds the Daemon
    "api": 5, "ui": 5, "live": 5,  # the HTTP faces
    "ops": 4,  # the operations every face calls
    "safety": 3, "folder": 3, "attachments": 3, "peers": 3,  # the write path's listeners and replicas
    "notes": 2,  # the one write path
    "base": 1, "identity": 1,
}
INDEPENDENT = [{"api", "ui"}, {"api", "live"}, {"ui", "live"}, {"folder", "peers"}, {"base", "identity"}]
# The daemon/ modules outside every package: the package's version and the entry point.
DAEMON_ROOT_MODULES = {"__init__": 0, "__main__": DAEMON_LAYERS["app"]}

# Temporary exceptions, each (importing module, imported module) -> why it is tolerated. None
# now: the HTTP faces reach the daemon through ``ops/host.py`` (``ApiHost``, the app's typed
# key), the page calls ops/ rather than REST handlers, and the aiohttp app is composed in
# ``app/http.py`` (issue 31 item 3, docs/decisions/6342-the-http-door.md). The list is exact:
# an exception no longer needed fails too, and a new crossing fails until it is fixed or
# listed here with its reason.
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _module_of(name: str, daemon_root: Path) -> str:
    """The module an imported name lives in (``stet.daemon.ui.routes.register`` ->
    ``stet.daemon.ui.routes``); a package stands for its ``__init__``."""
    parts = name.split(".")
    while len(parts) > 2:
        rel = daemon_root.joinpath(*parts[2:])
        if rel.with_suffix(".py").is_file() or (rel / "__init__.py").is_file():
            return ".".join(parts)
        parts.pop()
    return ".".join(parts)


def _layer_of(rel: Path) -> tuple[str, int]:
    """The package of a daemon/ module (by its path under daemon/) and its layer."""
    if len(rel.parts) == 1:
        return "", DAEMON_ROOT_MODULES[rel.stem]
    return rel.parts[0], DAEMON_LAYERS[rel.parts[0]]


def daemon_layer_crossings(daemon_root: Path) -> dict[tuple[str, str], int]:
    """Every import from one daemon/ package of another that the layers forbid, as
    (importing module, imported module) -> the line of its first import."""
    out: dict[tuple[str, str], int] = {}
    for path in sorted(daemon_root.rglob("*.py")):
        rel = path.relative_to(daemon_root)
        package, layer = _layer_of(rel)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        here = ["stet", "daemon", *rel.with_suffix("").parts]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level] if node.level else []
                mod = ".".join([*base, node.module] if node.module else base) if node.level else node.module
                # ``from stet.daemon.ui import routes`` imports the module ``ui.routes``.
                names = [f"{mod}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[:2] != ["stet", "daemon"] or len(parts) < 3 or parts[2] == package:
                    continue
                target = parts[2]
                if target not in DAEMON_LAYERS:  # a root module (the version)
                    continue
                if DAEMON_LAYERS[target] > layer or {package, target} in INDEPENDENT:
                    out.setdefault((rel.as_posix(), _module_of(name, daemon_root)), node.lineno)
    return out


def private_imports(root: Path, package: str) -> list[str]:
    """``from x import _name`` of another module's private name, anywhere under ``root``
    (an alias made private by the importer, ``import when as _when``, is its own business)."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        bad.append(f"{package}/{path.relative_to(root).as_posix()}:{node.lineno}: "
                                   f"from {'.' * node.level}{node.module or ''} import {alias.name}")
    return bad


def test_every_daemon_package_has_a_layer() -> None:
    packages = {p.name for p in (ROOT / "daemon").iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(DAEMON_LAYERS), "give each daemon/ package a layer in DAEMON_LAYERS"


def test_daemon_packages_import_only_down_the_layers() -> None:
    crossings = daemon_layer_crossings(ROOT / "daemon")
    new = [f"daemon/{mod}:{line}: imports {target}" for (mod, target), line in sorted(crossings.items())
           if (mod, target) not in LAYER_EXCEPTIONS]
    assert not new, ("imports against the layers (app -> api|ui|live -> ops -> safety|folder|attachments|"
                     "peers -> notes -> base|identity; api, ui, live independent; folder, peers "
                     "independent):\n" + "\n".join(new))
    stale = sorted(set(LAYER_EXCEPTIONS) - set(crossings))
    assert not stale, f"listed as exceptions but no longer imported (take them off LAYER_EXCEPTIONS): {stale}"


def test_the_layer_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    """A copy of the layout with one import against the layers (notes -> peers), one between
    independent packages (folder -> peers) and one allowed (ops -> notes): the check names
    the two, with their lines, and nothing else."""
    for package in DAEMON_LAYERS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "peers" / "hub.py").write_text("class PeerHub: ...\n")
    (tmp_path / "notes" / "service.py").write_text(
        '"""The write path."""\n\nfrom stet.daemon.peers.hub import PeerHub\n')
    (tmp_path / "folder" / "bridge.py").write_text("def f() -> None:\n    from ..peers import hub\n")
    (tmp_path / "ops" / "notes.py").write_text("from stet.daemon.notes import service\n")
    assert daemon_layer_crossings(tmp_path) == {("notes/service.py", "stet.daemon.peers.hub"): 3,
                                                ("folder/bridge.py", "stet.daemon.peers.hub"): 2}


@pytest.mark.parametrize("package", ["sync", "daemon", "client"])
def test_no_module_imports_another_ones_private_names(package: str) -> None:
    bad = private_imports(ROOT / package, package)
    assert not bad, "imports of another module's _private name (make it public, or move it):\n" + \
        "\n".join(bad)


def test_the_private_name_check_catches_one(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def _helper() -> None: ...\n")
    (tmp_path / "b.py").write_text("from .a import _helper\nfrom .a import helper as _mine\n")
    assert private_imports(tmp_path, "pkg") == ["pkg/b.py:1: from .a import _helper"]
