"""The layers, checked by a tool (issue 11): an AST walk over every module's imports --
at the top, inside functions and under ``TYPE_CHECKING`` alike, relative ones resolved --
rather than a grep of line starts; and mypy ``--strict`` on the write path's modules in
daemon/ (sync/ is checked whole by ``test_code_quality``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sync", "daemon", "client")

# What each layer may not import (prefix match on the absolute module name).
FORBIDDEN = {
    "sync": ("stet.daemon", "stet.client", "aiohttp", "watchdog", "zeroconf", "keyring", "mcp"),
    "client": ("stet.daemon", "watchdog", "zeroconf", "pycrdt"),
}
# The write path's modules kept mypy --strict (the folder side included: no mixins typed Any).
STRICT_DAEMON = ("write_unit", "changes", "replaced_files", "notes_service", "remote_changes",
                 "folder_replica", "disk_writes", "rename_detection", "file_bridge", "promotion",
                 "live_write_path")


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


def test_the_write_path_is_mypy_strict(tmp_path: Path) -> None:
    pkg = tmp_path / "stet"
    pkg.mkdir()
    for name in PACKAGES:
        (pkg / name).symlink_to(ROOT / name, target_is_directory=True)
    modules = [arg for m in STRICT_DAEMON for arg in ("-m", f"stet.daemon.{m}")]
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--config-file",
         str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / ".mypy_cache"), *modules],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


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
