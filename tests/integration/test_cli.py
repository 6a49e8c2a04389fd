"""The ``stet`` CLI against real daemons (SPEC §7, §6.1, §8): init, the daemon's life
(daemon / start / stop, one daemon per home), status, read, and errors that are one
sentence and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stet.client.daemon_link import pid_alive, read_daemon_info
from stet.sync.home import HomeLayout
from tests.harness import DaemonProcess, env_for, run_stet, wait_until

DAEMON_FLAGS = ("--api-port", "0", "--peer-port", "0", "--no-mdns")

SEED: dict[str, bytes] = {
    "crlf.md": b"line one\r\nline two\r\n",
    "bom.md": "\ufeff# Title\nbody".encode(),                 # BOM, no final newline
    "no-newline.txt": "caf\u00e9 \U0001f600".encode(),        # no final newline
    "dir/sp ace \u00e9.md": b"spaces and accents\n",
}


def one_sentence(proc: subprocess.CompletedProcess[bytes]) -> str:
    """The error contract: exit 1, one line on stderr, no traceback."""
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 1, (proc.returncode, err, proc.stdout)
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def seed(folder: Path, notes: dict[str, bytes]) -> None:
    for rel, data in notes.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


@pytest.fixture
def cli_started(tmp_path: Path) -> Iterator[list[Path]]:
    """Homes whose daemon a test started through ``stet start``; killed if left running."""
    homes: list[Path] = []
    yield homes
    for home in homes:
        info = read_daemon_info(HomeLayout(home))
        if info is not None:
            os.kill(info.pid, signal.SIGKILL)
            wait_until(lambda pid=info.pid: not pid_alive(pid), timeout=10, what="leftover daemon to die")


@pytest.fixture(scope="module")
def seeded_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """A daemon serving a vault "notes" imported with SEED by ``stet init`` (read-only
    tests share it)."""
    root = tmp_path_factory.mktemp("cli")
    home, vault = root / "home", root / "vault"
    seed(vault, SEED)
    run_stet(home, "init", str(vault), "--name", "notes", "--json")
    d = DaemonProcess(home)
    try:
        yield d.start()
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.kill9()


# -- init --------------------------------------------------------------------------------


def test_init_imports_the_folder_and_reports_the_count(home: Path, tmp_path: Path) -> None:
    first = tmp_path / "first"
    seed(first, {**SEED, "picture.png": b"\x89PNG\r\n\x1a\n"})
    proc = run_stet(home, "init", str(first))
    out = proc.stdout.decode()
    assert f"{len(SEED)} notes imported" in out
    assert "'first'" in out  # named after the folder
    assert "stet start" in out  # no daemon: says how to keep it in sync

    second = tmp_path / "second"
    seed(second, {"a.md": b"a\n", "b/c.md": b"c\n"})
    data = json.loads(run_stet(home, "init", str(second), "--name", "two", "--json").stdout)
    assert data["imported"] == 2
    assert data["vault"] == "two"
    assert data["path"] == str(second.resolve())
    assert data["daemonReloaded"] is False
    assert data["skipped"] == {}
    assert data["otherFiles"] == 0


def test_init_refusals_are_one_sentence(home: Path, vault_dir: Path, tmp_path: Path) -> None:
    run_stet(home, "init", str(vault_dir), "--name", "notes")
    again = one_sentence(run_stet(home, "init", str(vault_dir), check=False))
    assert str(vault_dir.resolve()) in again
    assert "already" in again

    other = tmp_path / "other"
    other.mkdir()
    same_name = one_sentence(run_stet(home, "init", str(other), "--name", "notes", check=False))
    assert "--name" in same_name

    nested = vault_dir / "inner"
    nested.mkdir()
    assert "lies inside" in one_sentence(run_stet(home, "init", str(nested), check=False))

    a_file = tmp_path / "file.md"
    a_file.write_text("x")
    proc = run_stet(home, "init", str(a_file), check=False)
    assert proc.returncode != 0
    assert b"Traceback" not in proc.stderr


# -- status ------------------------------------------------------------------------------


def test_status_without_a_daemon(home: Path, vault_dir: Path) -> None:
    seed(vault_dir, SEED)
    run_stet(home, "init", str(vault_dir), "--name", "notes")
    data = json.loads(run_stet(home, "status", "--json").stdout)
    assert data["running"] is False
    assert data["home"] == str(home.resolve())
    [vault] = data["vaults"]
    assert vault["name"] == "notes"
    assert vault["notes"] == len(SEED)
    text = run_stet(home, "status").stdout.decode()
    assert "not running" in text
    assert f"{len(SEED)} notes" in text


def test_status_of_an_empty_home(tmp_path: Path) -> None:
    home = tmp_path / "never-used"
    data = json.loads(run_stet(home, "status", "--json").stdout)
    assert data == {"running": False, "home": str(home.resolve()), "vaults": []}


def test_status_with_the_daemon_running(seeded_daemon: DaemonProcess) -> None:
    data = json.loads(run_stet(seeded_daemon.home, "status", "--json").stdout)
    assert data["running"] is True
    assert data["pid"] == seeded_daemon.proc.pid  # type: ignore[union-attr]
    assert data["apiUrl"] == seeded_daemon.api_url
    [vault] = data["vaults"]
    assert vault["name"] == "notes"
    assert vault["notes"] == len(SEED)
    assert vault["pendingWrites"] == 0
    text = run_stet(seeded_daemon.home, "status").stdout.decode()
    assert f"running (pid {seeded_daemon.proc.pid}" in text  # type: ignore[union-attr]


# -- read --------------------------------------------------------------------------------


def test_read_prints_the_exact_bytes(seeded_daemon: DaemonProcess) -> None:
    for rel, data in SEED.items():
        proc = run_stet(seeded_daemon.home, "read", rel)
        assert proc.stdout == data, rel
        assert proc.stderr == b""
    note = json.loads(run_stet(seeded_daemon.home, "read", "bom.md", "--json").stdout)
    assert note == {"path": "bom.md", "content": SEED["bom.md"].decode(),
                    "revision": hashlib.sha256(SEED["bom.md"]).hexdigest()}
    listed = json.loads(run_stet(seeded_daemon.home, "ls", "--json").stdout)
    assert sorted(n["path"] for n in listed) == sorted(SEED)


def test_read_missing_note_is_one_sentence(seeded_daemon: DaemonProcess) -> None:
    proc = run_stet(seeded_daemon.home, "read", "missing.md", check=False)
    assert "missing.md" in one_sentence(proc)
    assert proc.stdout == b""
    bad = run_stet(seeded_daemon.home, "read", "../outside.md", check=False)
    assert "outside.md" in one_sentence(bad)


def test_commands_needing_the_daemon_say_to_start_it(home: Path, vault_dir: Path,
                                                     daemon_factory: list[DaemonProcess]) -> None:
    seed(vault_dir, {"a.md": b"a\n"})
    run_stet(home, "init", str(vault_dir), "--name", "notes")
    # Never started.
    for args in (("read", "a.md"), ("ls",)):
        assert "stet start" in one_sentence(run_stet(home, *args, check=False)), args
    # Killed with -9: daemon.json is left behind, naming a dead pid.
    d = DaemonProcess(home)
    daemon_factory.append(d)
    d.start()
    d.kill9()
    assert HomeLayout(home).daemon_json.exists()
    assert "stet start" in one_sentence(run_stet(home, "read", "a.md", check=False))
    assert json.loads(run_stet(home, "status", "--json").stdout)["running"] is False


# -- the daemon's life: start / stop / daemon ----------------------------------------------


def test_start_then_stop_on_a_fresh_home(tmp_path: Path, cli_started: list[Path]) -> None:
    home = tmp_path / "fresh"
    cli_started.append(home)
    assert "not running" in run_stet(home, "stop").stdout.decode()

    out = run_stet(home, "start", *DAEMON_FLAGS).stdout.decode()
    info = read_daemon_info(HomeLayout(home))
    assert info is not None
    assert f"Started the daemon (pid {info.pid}, {info.api_url})" in out
    assert info.api_url.startswith("http://127.0.0.1:")
    assert not info.api_url.endswith(":0")
    status = json.loads(run_stet(home, "status", "--json").stdout)
    assert status["running"] is True
    assert status["pid"] == info.pid
    assert status["vaults"] == []

    again = run_stet(home, "start", *DAEMON_FLAGS)
    assert "already running" in again.stdout.decode()
    assert read_daemon_info(HomeLayout(home)) == info

    out = run_stet(home, "stop").stdout.decode()
    assert f"Stopped the daemon (pid {info.pid})" in out
    assert not pid_alive(info.pid)
    assert not HomeLayout(home).daemon_json.exists()
    assert not HomeLayout(home).socket.exists()

    proc = run_stet(home, "stop")
    assert proc.returncode == 0
    assert "not running" in proc.stdout.decode()


def test_init_while_the_daemon_runs_takes_the_vault_up_at_once(daemon: DaemonProcess,
                                                               tmp_path: Path) -> None:
    other = tmp_path / "other"
    seed(other, {"x.md": b"taken up\r\n", "sub/y.md": b"y"})
    data = json.loads(run_stet(daemon.home, "init", str(other), "--json").stdout)
    assert data["daemonReloaded"] is True
    assert data["imported"] == 2
    # No waiting and no restart: the daemon serves it as init returns.
    assert daemon.client.read_note("other", "x.md")["content"] == "taken up\r\n"
    assert run_stet(daemon.home, "read", "--vault", "other", "sub/y.md").stdout == b"y"
    names = {v["name"] for v in json.loads(run_stet(daemon.home, "status", "--json").stdout)["vaults"]}
    assert names == {"notes", "other"}
    # And watches it: a file saved now reaches the store.
    (other / "later.md").write_bytes(b"saved after init\n")
    daemon.wait_content("later.md", "saved after init\n", vault="other")
    # With two vaults, a command without --vault asks for one.
    assert "--vault" in one_sentence(run_stet(daemon.home, "read", "x.md", check=False))
    # The plain output says so too.
    third = tmp_path / "third"
    seed(third, {"p.md": b"p"})
    out = run_stet(daemon.home, "init", str(third)).stdout.decode()
    assert "1 notes imported" in out
    assert "running daemon has taken the vault up" in out
    assert daemon.client.read_note("third", "p.md")["content"] == "p"


@pytest.mark.parametrize(("config", "must_name"), [
    ("[api]\nbogus = 1\n", "'bogus'"),
    ("[notes]\nmax_bytes = \"10MiB\"\n", "[notes] max_bytes"),
    ("[api\nport = 1\n", "config.toml"),  # not TOML at all
])
def test_bad_config_fails_daemon_and_start_in_one_sentence(tmp_path: Path, cli_started: list[Path],
                                                           config: str, must_name: str) -> None:
    """(Every kind of refusal is in tests/unit/test_config.py; this is the wiring.)"""
    home = tmp_path / "badcfg"
    home.mkdir()
    (home / "config.toml").write_text(config)
    cli_started.append(home)
    for command in ("daemon", "start"):
        proc = run_stet(home, command, *DAEMON_FLAGS, check=False, timeout=30)
        assert must_name in one_sentence(proc), command
        assert read_daemon_info(HomeLayout(home)) is None


def test_bad_config_fails_the_daemon_entry_point_too(tmp_path: Path) -> None:
    """What services run (python -m stet.daemon) refuses it the same way."""
    home = tmp_path / "badcfg"
    home.mkdir()
    (home / "config.toml").write_text("[brake]\non_timeout = \"explode\"\n")
    proc = subprocess.run([sys.executable, "-m", "stet.daemon", "--home", str(home), *DAEMON_FLAGS],
                          env=env_for(home), capture_output=True, timeout=30)
    assert proc.returncode != 0
    err = proc.stderr.decode()
    assert "[brake] on_timeout" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not HomeLayout(home).daemon_json.exists()


def test_a_second_daemon_on_the_same_home_refuses_to_start(daemon: DaemonProcess) -> None:
    before = json.loads(daemon.layout.daemon_json.read_text())
    # A blob being written by the running daemon (temp file) must survive the second
    # daemon's start: it opened its blob store, and cleaned blobs/tmp, before the lock.
    in_progress = daemon.home / "blobs" / "tmp" / "write-in-progress"
    in_progress.parent.mkdir(parents=True, exist_ok=True)
    in_progress.write_bytes(b"half of a blob")
    proc = subprocess.run([sys.executable, "-m", "stet.daemon", "--home", str(daemon.home), *DAEMON_FLAGS],
                          env=env_for(daemon.home), capture_output=True, timeout=30)
    assert proc.returncode == 1
    assert b"already running" in proc.stderr
    assert b"Traceback" not in proc.stderr
    # The first daemon keeps its daemon.json, its socket and its API.
    assert json.loads(daemon.layout.daemon_json.read_text()) == before
    assert daemon.layout.socket.exists()
    assert daemon.client.status()["pid"] == daemon.proc.pid  # type: ignore[union-attr]
    assert in_progress.read_bytes() == b"half of a blob"
    cli = run_stet(daemon.home, "daemon", *DAEMON_FLAGS, check=False, timeout=30)
    assert "already running" in one_sentence(cli)
    assert daemon.client.status()["pid"] == daemon.proc.pid  # type: ignore[union-attr]


def test_stale_daemon_json_naming_another_live_process(home: Path, vault_dir: Path,
                                                       cli_started: list[Path]) -> None:
    """After a crash and a reboot, daemon.json may name a pid now used by something else:
    the CLI must not take it for the daemon, and `stet stop` must not signal it."""
    seed(vault_dir, {"a.md": b"a\n"})
    run_stet(home, "init", str(vault_dir), "--name", "notes")
    bystander = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                 stdin=subprocess.PIPE)
    cli_started.append(home)
    try:
        HomeLayout(home).daemon_json.write_text(json.dumps({
            "pid": bystander.pid, "api_url": "http://127.0.0.1:9", "peer_port": None,
            "device_id": None, "version": "0.1.0",
        }))
        assert json.loads(run_stet(home, "status", "--json").stdout)["running"] is False
        assert "stet start" in one_sentence(run_stet(home, "read", "a.md", check=False))
        assert "not running" in run_stet(home, "stop").stdout.decode()
        assert bystander.poll() is None

        run_stet(home, "start", *DAEMON_FLAGS)
        info = read_daemon_info(HomeLayout(home))
        assert info is not None
        assert info.pid != bystander.pid
        assert run_stet(home, "read", "a.md").stdout == b"a\n"
        run_stet(home, "stop")
        assert bystander.poll() is None
    finally:
        assert bystander.stdin is not None
        bystander.stdin.close()
        bystander.wait(timeout=10)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_an_exited_but_unreaped_process_counts_as_stopped() -> None:
    """A daemon from `stet start` is reparented to PID 1, which in a container may reap
    it late or never; `stet stop` must not wait on the zombie."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        def zombie() -> bool:
            stat = Path(f"/proc/{child.pid}/stat").read_text()
            return stat.rpartition(")")[2].split()[0] == "Z"

        wait_until(zombie, timeout=10, what="the child to exit (unreaped)")
        assert not pid_alive(child.pid)
    finally:
        child.wait(timeout=10)
    assert pid_alive(os.getpid())
