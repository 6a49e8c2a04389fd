#!/usr/bin/env python3
"""Describe the machine a benchmark ran on, for the sections of bench/history/rounds.md and RESULTS.md.

    python bench/machine_info.py            # JSON
    python bench/machine_info.py --header   # the markdown header a RESULTS.md section starts with

From a benchmark::

    from machine_info import append_results, machine_info, results_header

    append_results("| metric | value |\\n|---|---|\\n| p50 | 12 ms |\\n", title="P1 ...")

Standard library only; Linux first (``/proc``, cgroup v2 files), with portable fallbacks.
Reads only: nothing here changes the machine.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["machine_info", "results_header", "append_results", "write_latest_run", "RESULTS_PATH",
           "HISTORY_PATH"]

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_PATH = BENCH_DIR / "RESULTS.md"  # the latest full run only (run_all.py rewrites it)
HISTORY_PATH = BENCH_DIR / "history" / "rounds.md"  # every section, appended, newest last


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _cpuinfo() -> dict[str, Any]:
    text = _read("/proc/cpuinfo")
    model = None
    cores: dict[tuple[str, str], None] = {}
    phys, core = "0", None
    if text:
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key in ("model name", "Model", "Hardware", "cpu model") and model is None:
                model = value
            elif key == "physical id":
                phys = value
            elif key == "core id":
                core = value
            elif not key and core is not None:
                cores[(phys, core)] = None
                core = None
        if core is not None:
            cores[(phys, core)] = None
    return {
        "cpu_model": model or platform.processor() or platform.machine(),
        "cpu_physical_cores": len(cores) or None,
    }


def _meminfo() -> dict[str, int | None]:
    out: dict[str, int | None] = {"mem_total_bytes": None, "mem_available_bytes": None}
    text = _read("/proc/meminfo")
    if text:
        for line in text.splitlines():
            key, _, value = line.partition(":")
            parts = value.split()
            if not parts:
                continue
            n = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
            if key == "MemTotal":
                out["mem_total_bytes"] = n
            elif key == "MemAvailable":
                out["mem_available_bytes"] = n
    return out


def _cgroup_limits() -> dict[str, Any]:
    """CPU quota and memory limit of this cgroup (v2), if any: containers often have one."""
    out: dict[str, Any] = {"cgroup_cpu_limit": None, "cgroup_mem_limit_bytes": None}
    cpu_max = _read("/sys/fs/cgroup/cpu.max")
    if cpu_max:
        quota, _, period = cpu_max.strip().partition(" ")
        if quota != "max" and period:
            out["cgroup_cpu_limit"] = round(int(quota) / int(period), 2)
    mem_max = _read("/sys/fs/cgroup/memory.max")
    if mem_max and mem_max.strip() != "max":
        out["cgroup_mem_limit_bytes"] = int(mem_max.strip())
    return out


def _fs_type(path: str) -> str | None:
    """Filesystem type of the mount holding ``path`` (longest /proc/mounts prefix)."""
    mounts = _read("/proc/mounts")
    if not mounts:
        return None
    real = os.path.realpath(path)
    best, best_len = None, -1
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mnt = fields[1].replace("\\040", " ")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > best_len:
            best, best_len = fields[2], len(mnt)
    return best


def _run(*cmd: str) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _git() -> dict[str, Any]:
    commit = _run("git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD")
    status = _run("git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}


def _syncthing_version() -> str | None:
    exe = shutil.which("syncthing")
    if not exe:
        return None
    out = _run(exe, "--version") or _run(exe, "version")
    return out.splitlines()[0] if out else None


def machine_info() -> dict[str, Any]:
    """CPU, cores, memory, OS, Python, filesystems and date of this run, as plain JSON data."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    info: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        **_cpuinfo(),
        "cpu_logical": os.cpu_count(),
        "cpu_affinity": affinity,
        **_cgroup_limits(),
        **_meminfo(),
        "platform": platform.platform(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "python_executable": sys.executable,
        "tmp_dir": tempfile.gettempdir(),
        "tmp_fs": _fs_type(tempfile.gettempdir()),
        "repo_fs": _fs_type(str(REPO_ROOT)),
        **_git(),
        "syncthing_version": _syncthing_version(),
    }
    return info


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def _default_command() -> str:
    argv = list(sys.argv)
    if argv and argv[0]:
        with contextlib.suppress(ValueError):  # another drive on Windows
            argv[0] = os.path.relpath(argv[0], REPO_ROOT)
    return "python " + shlex.join(argv)


def results_header(
    title: str | None = None,
    command: str | None = None,
    info: dict[str, Any] | None = None,
) -> str:
    """The markdown that opens a section of the bench results.

    ``title`` defaults to the script name; ``command`` to the command line this process was
    started with (``python <script relative to the repo> <args>``); ``info`` to
    :func:`machine_info`. Ends with a blank line, ready for the results to follow.
    """
    m = info if info is not None else machine_info()
    cmd = command if command is not None else _default_command()
    if title is None:
        title = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "benchmark"
    cores = f"{m['cpu_logical']} logical CPUs"
    if m.get("cpu_physical_cores"):
        cores += f" ({m['cpu_physical_cores']} physical)"
    if m.get("cpu_affinity") and m["cpu_affinity"] != m["cpu_logical"]:
        cores += f", affinity {m['cpu_affinity']}"
    if m.get("cgroup_cpu_limit"):
        cores += f", cgroup quota {m['cgroup_cpu_limit']} CPUs"
    mem = f"{_gib(m.get('mem_total_bytes'))} RAM ({_gib(m.get('mem_available_bytes'))} available"
    if m.get("cgroup_mem_limit_bytes"):
        mem += f", cgroup limit {_gib(m['cgroup_mem_limit_bytes'])}"
    mem += ")"
    commit = m.get("git_commit") or "unknown"
    if m.get("git_dirty"):
        commit += " + uncommitted changes"
    lines = [
        f"## {title} ({m['date_utc']})",
        "",
        f"- Command: `{cmd}`",
        f"- Machine: {m['cpu_model']}, {cores}, {mem}",
        f"- OS: {m['platform']}; filesystems: tmp {m.get('tmp_fs') or '?'}"
        f" ({m.get('tmp_dir')}), repo {m.get('repo_fs') or '?'}",
        f"- Python: {m['python_implementation']} {m['python_version']} ({m['python_executable']})",
        f"- Commit: {commit}",
    ]
    if m.get("syncthing_version"):
        lines.append(f"- Reference: {m['syncthing_version']}")
    return "\n".join(lines) + "\n\n"


def append_results(
    body: str,
    *,
    title: str | None = None,
    command: str | None = None,
    path: Path | None = None,
) -> Path:
    """Append ``results_header(title, command)`` and ``body`` to bench/history/rounds.md."""
    target = path if path is not None else HISTORY_PATH
    text = results_header(title, command) + body.rstrip("\n") + "\n\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a", encoding="utf-8", newline="\n") as f:
        if f.tell() == 0:
            f.write("# Stet benchmark history: every round, newest last\n\nSee bench/README.md.\n\n")
        f.write(text)
    return target


def write_latest_run(body: str, *, title: str, command: str | None = None) -> Path:
    """Replace bench/RESULTS.md with this full run (it is the latest one; the history keeps
    every run: call ``append_results`` too)."""
    text = ("# Stet benchmark results\n\nThe latest full run of every SPEC §9 benchmark, Stet beside "
            "Syncthing, as `bench/run_all.py` wrote it. Every earlier section is in "
            "[`bench/history/rounds.md`](history/rounds.md), newest last.\n\n"
            + results_header(title, command) + body.rstrip("\n") + "\n")
    RESULTS_PATH.write_text(text, encoding="utf-8", newline="\n")
    return RESULTS_PATH


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--header" in args:
        sys.stdout.write(results_header())
    else:
        print(json.dumps(machine_info(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
