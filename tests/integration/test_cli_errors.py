"""Every ``stet`` command, listed from the click group (subcommands included), given bad
arguments and run with no daemon: a non-zero exit, one line on stderr, never a traceback
(SPEC §7: "Errors are one clear sentence and a non-zero exit, never a traceback").

The commands run in-process through ``stet.client.cli.main`` (the console script's entry:
the same error handling) so the whole sweep takes seconds; a few run as real processes at
the end. ``os.execv`` and ``subprocess.Popen`` are disabled meanwhile: no case may start a
daemon. ``stet service`` runs against fake service managers (tests/service_fakes.py).
"""

from __future__ import annotations

import io
import shutil
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from stet.client import cli as cli_module
from tests.harness import DaemonProcess, run_stet
from tests.service_fakes import install_fakes, service_env

BAD = "not-a-value"


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def all_commands() -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command and group under ``stet``, as (path, command)."""
    cli_module._register_command_modules()
    found: list[tuple[tuple[str, ...], click.Command]] = []

    def walk(group: click.Group, prefix: tuple[str, ...]) -> None:
        for name, cmd in sorted(group.commands.items()):
            found.append(((*prefix, name), cmd))
            if isinstance(cmd, click.Group):
                walk(cmd, (*prefix, name))

    walk(cli_module.cli, ())
    return found


Invoke = Callable[..., Result]
COMMANDS = all_commands()
IDS = [" ".join(path) for path, _ in COMMANDS]


@pytest.fixture
def invoke(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Invoke:
    """Run ``stet ARGS`` in-process; returns its exit code, stdout and stderr."""

    def no_exec(*_args: object, **_kw: object) -> None:
        raise AssertionError("a case tried to start a process")

    monkeypatch.setattr(cli_module.os, "execv", no_exec)
    # `stet start` spawns with cli.py's `subprocess.Popen`; other modules' subprocesses may run.
    monkeypatch.setattr(cli_module, "subprocess", types.SimpleNamespace(Popen=no_exec, DEVNULL=-3))
    bin_dir = install_fakes(tmp_path / "fakebin")
    for key, value in service_env(bin_dir, tmp_path / "units", "nobus").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("STET_DEBUG", raising=False)

    def run(*args: str, stdin: bytes = b"") -> Result:
        out, err = io.BytesIO(), io.BytesIO()
        streams = (io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"),
                   io.TextIOWrapper(out, encoding="utf-8", write_through=True),
                   io.TextIOWrapper(err, encoding="utf-8", write_through=True))
        monkeypatch.setattr(sys, "argv", ["stet", *args])
        monkeypatch.setattr(sys, "stdin", streams[0])
        monkeypatch.setattr(sys, "stdout", streams[1])
        monkeypatch.setattr(sys, "stderr", streams[2])
        code = 0
        try:
            cli_module.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            cli_module._OPTIONS["verbose"] = False
            monkeypatch.setattr(sys, "stdin", sys.__stdin__)
            monkeypatch.setattr(sys, "stdout", sys.__stdout__)
            monkeypatch.setattr(sys, "stderr", sys.__stderr__)
        return Result(code, out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace"))

    return run


def assert_one_line_error(result: Result, *, code: int | None = None) -> str:
    assert "Traceback" not in result.err + result.out, result.err
    assert "unexpected error" not in result.err, result.err
    assert result.code != 0, result
    if code is not None:
        assert result.code == code, result
    assert len(result.err_lines) == 1, result.err
    return result.err_lines[0]


def _is_help_only_group(cmd: click.Command) -> bool:
    return isinstance(cmd, click.Group) and not cmd.invoke_without_command


# -- bad arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_an_unknown_option_is_one_line_naming_the_help(invoke: Invoke, tmp_path: Path,
                                                       path: tuple[str, ...], cmd: click.Command) -> None:
    result = invoke("--home", str(tmp_path / "home"), *path, "--no-such-option")
    line = assert_one_line_error(result, code=2)
    assert "no such option" in line
    assert f"stet {' '.join(path)} --help" in line


REQUIRED = [(p, c) for p, c in COMMANDS if any(x.required for x in c.params)]


@pytest.mark.parametrize(("path", "cmd"), REQUIRED, ids=[" ".join(p) for p, _ in REQUIRED])
def test_missing_arguments_are_one_line(invoke: Invoke, tmp_path: Path, path: tuple[str, ...],
                                        cmd: click.Command) -> None:
    result = invoke("--home", str(tmp_path / "home"), *path)
    assert "missing" in assert_one_line_error(result, code=2)


def _typed_cases() -> list[tuple[tuple[str, ...], click.Command, click.Parameter]]:
    cases = []
    for path, cmd in COMMANDS:
        for p in cmd.params:
            typed = isinstance(p.type, click.types.IntParamType | click.types.FloatParamType | click.Choice)
            dir_only = isinstance(p.type, click.Path) and not p.type.file_okay
            if (typed or dir_only) and not getattr(p, "is_flag", False):
                cases.append((path, cmd, p))
    return cases


TYPED = _typed_cases()


@pytest.mark.parametrize(("path", "cmd", "param"), TYPED,
                         ids=[f"{' '.join(p)} {x.name}" for p, _, x in TYPED])
def test_a_bad_value_is_one_line(invoke: Invoke, tmp_path: Path, path: tuple[str, ...], cmd: click.Command,
                                 param: click.Parameter) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder\n")
    bad = str(a_file) if isinstance(param.type, click.Path) else BAD
    args: list[str] = []
    for p in cmd.params:
        if isinstance(p, click.Argument) and (p is param or p.required):
            args.append(bad if p is param else "x")
    if isinstance(param, click.Option):
        args += [param.opts[0], bad]
    result = invoke("--home", str(tmp_path / "home"), *path, *args)
    assert "invalid value" in assert_one_line_error(result, code=2)


# -- no daemon running -------------------------------------------------------------------------------

# Each command with arguments that would be fine if a daemon ran, and what it must do without
# one: "ok" (it works without a daemon), "help" (a group: prints its help), "report" (stet
# doctor: a report and exit 1), or a word its one-line error must contain.
NO_DAEMON: dict[tuple[str, ...], tuple[list[str], str]] = {
    ("init",): (["{new}", "--create"], "ok"),
    ("daemon",): ([], "port"),  # with a bad config.toml: the daemon must not start at all
    ("start",): ([], "port"),
    ("stop",): ([], "ok"),
    ("status",): ([], "ok"),
    ("read",): (["a.md"], "stet start"),
    ("ls",): ([], "stet start"),
    ("append",): (["a.md", "more"], "stet start"),
    ("write",): (["a.md"], "stet start"),
    ("edit",): (["a.md", "--old", "a", "--new", "b"], "stet start"),
    ("section",): (["a.md", "Heading", "text"], "stet start"),
    ("tick",): (["a.md", "a task"], "stet start"),
    ("links",): (["a.md"], "stet start"),
    ("frontmatter",): (["a.md"], "stet start"),
    ("context",): (["a.md"], "stet start"),
    ("log",): ([], "stet start"),
    ("conflicts",): ([], "stet start"),
    ("conflicts", "show"): (["1"], "stet start"),
    ("conflicts", "apply"): (["1"], "stet start"),
    ("search",): (["word"], "stet start"),
    ("versions",): (["a.md"], "stet start"),
    ("show",): (["a.md", "--version", "1"], "stet start"),
    ("diff",): (["a.md", "1"], "stet start"),
    ("restore",): (["a.md"], "stet start"),
    ("held",): ([], "stet start"),
    ("release",): (["--all"], "stet start"),
    ("revert",): (["1"], "stet start"),
    ("ui",): ([], "stet start"),
    ("invite",): ([], "stet start"),
    ("join",): (["stet-invite:1:garbage", "{new}"], "invite"),
    ("devices",): ([], "stet start"),
    ("devices", "remove"): (["ABCDEFG"], "stet start"),
    ("token",): ([], "help"),
    ("token", "create"): (["bot", "--write", "agents/**"], "ok"),
    ("token", "list"): ([], "ok"),
    ("token", "revoke"): (["nobody"], "no token named"),
    ("mcp-config",): (["claude"], "ok"),
    ("mcp",): (["--stdio"], "STET_TOKEN"),
    ("doctor",): ([], "report"),
    ("service",): ([], "help"),
    ("service", "install"): ([], "stet start"),
    ("service", "uninstall"): ([], "ok"),
    ("service", "status"): ([], "ok"),
    ("vaults",): ([], "ok"),
    ("vaults", "remove"): (["nosuch"], "no vault named 'nosuch'"),
}


def test_the_no_daemon_table_names_every_command() -> None:
    assert set(NO_DAEMON) == {path for path, _ in COMMANDS}, "add the new command to NO_DAEMON"


@pytest.fixture(scope="module")
def initialised(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with one vault "notes" (holding a.md) and no daemon."""
    root = tmp_path_factory.mktemp("no-daemon")
    (root / "vault").mkdir()
    (root / "vault" / "a.md").write_text("a note\n")
    run_stet(root / "home", "init", str(root / "vault"), "--name", "notes")
    return root


@pytest.mark.parametrize("path", sorted(NO_DAEMON), ids=[" ".join(p) for p in sorted(NO_DAEMON)])
def test_every_command_without_a_daemon(invoke: Invoke, initialised: Path, tmp_path: Path,
                                        path: tuple[str, ...]) -> None:
    home = tmp_path / "home"
    shutil.copytree(initialised / "home", home)
    if path in (("daemon",), ("start",)):
        (home / "config.toml").write_text("[api]\nport = 'x'\n")
    args, expect = NO_DAEMON[path]
    args = [a.replace("{new}", str(tmp_path / "new-folder")) for a in args]
    result = invoke("--home", str(home), *path, *args, stdin=b"new text\n")
    assert "Traceback" not in result.err + result.out, result.err
    assert "unexpected error" not in result.err, result.err
    if expect == "ok":
        assert result.code == 0, result
    elif expect == "help":
        assert result.code != 0
        assert "Commands:" in result.err + result.out
    elif expect == "report":
        assert result.code == 1, result
        assert "stet start" in result.out
    else:
        assert expect in assert_one_line_error(result, code=1)


# -- a daemon running, and a vault that does not exist ------------------------------------------------------

WITH_VAULT = sorted(p for p, c in COMMANDS
                    if any(isinstance(x, click.Option) and x.name == "vault" for x in c.params))


@pytest.fixture(scope="module")
def running(initialised: Path) -> Iterator[Path]:
    d = DaemonProcess(initialised / "home").start()
    try:
        yield initialised / "home"
    finally:
        d.stop()


@pytest.mark.parametrize("path", WITH_VAULT, ids=[" ".join(p) for p in WITH_VAULT])
def test_an_unknown_vault_with_the_daemon_running_is_one_line(invoke: Invoke, running: Path,
                                                              path: tuple[str, ...]) -> None:
    args = [a for a in NO_DAEMON[path][0] if a != "{new}"]
    result = invoke("--home", str(running), *path, *args, "--vault", "nosuch", stdin=b"new text\n")
    assert "nosuch" in assert_one_line_error(result, code=1)


def test_an_invite_to_an_unknown_vault_is_one_line(invoke: Invoke, running: Path) -> None:
    assert "nosuch" in assert_one_line_error(invoke("--home", str(running), "invite", "nosuch"), code=1)


# -- a broken home, verbose, and the real console entry ---------------------------------------------------


@pytest.mark.parametrize("args", [["init", "{dir}"], ["token", "list"], ["read", "a.md"], ["doctor"],
                                  ["service", "install"]])
def test_a_home_that_is_a_file_is_one_line(invoke: Invoke, tmp_path: Path, args: list[str]) -> None:
    home = tmp_path / "home-file"
    home.write_text("not a folder\n")
    (tmp_path / "d").mkdir()
    argv = [a.replace("{dir}", str(tmp_path / "d")) for a in args]
    result = invoke("--home", str(home), *argv)
    if args == ["doctor"]:
        assert result.code == 1
        assert "is not a folder" in result.out
        return
    line = assert_one_line_error(result, code=1)
    assert str(home) in line


def test_verbose_shows_the_traceback(tmp_path: Path) -> None:
    plain = run_stet(tmp_path / "home", "read", "a.md", check=False)
    assert "Traceback" not in plain.stderr.decode()
    verbose = run_stet(tmp_path / "home", "--verbose", "read", "a.md", check=False)
    err = verbose.stderr.decode()
    assert verbose.returncode == 1
    assert "Traceback" in err
    assert err.rstrip().splitlines()[-1].startswith("stet: the daemon is not running")


def test_usage_errors_from_the_console_entry_are_one_line(tmp_path: Path) -> None:
    proc = run_stet(tmp_path / "home", "log", "--limit", "many", check=False)
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert err.strip() == ("stet log: invalid value for '--limit': 'many' is not a valid integer range "
                           "(see `stet log --help`)")


# -- issue 13: errors in the CLI's words, never the API's field names ----------------------------------

WORDS: list[tuple[list[str], str, list[str]]] = [
    # (arguments, what the one line must say, API words it must not say)
    (["log", "--since", "last tuesday"], "--since 'last tuesday' is not a time: give 10m, 2h, 1d",
     ["since must", "timestamp (seconds)"]),
    (["conflicts", "--since", "soon"], "--since 'soon' is not a time", ["since must"]),
    (["log", "--since", "nan"], "--since 'nan' is not a time", ["since must"]),
    (["search", ""], "give the words to search for", ["q must"]),
    (["search", "   "], "give the words to search for", ["q must"]),
    (["invite", "--hours", "-5"], "invalid value for '--hours': -5.0 is not in the range 0<x<=720",
     ["ttlHours"]),
    (["invite", "--hours", "0"], "invalid value for '--hours'", ["ttlHours"]),
    (["token", "create", "x", "--read", "["], "--read '[' is not a valid glob: [ is not glob syntax here",
     ["invalid scope glob"]),
    (["token", "create", "x", "--write", "notes/{a,b}/**"], "--write 'notes/{a,b}/**' is not a valid glob",
     []),
    (["token", "create", "x", "--append", "/etc/**"], "starts with /", []),
    (["mcp-config", "x", "--read", "a[0-9].md"], "--read 'a[0-9].md' is not a valid glob", []),
    (["append", "a.md", "--vualt", "x"], "no such option '--vualt'", []),
    (["mcp"], "`stet mcp --stdio`", []),
]


@pytest.mark.parametrize(("args", "says", "never"), WORDS, ids=[" ".join(a) for a, _, _ in WORDS])
def test_errors_speak_the_cli_words(invoke: Invoke, initialised: Path, tmp_path: Path, args: list[str],
                                    says: str, never: list[str]) -> None:
    """Checked before any daemon is asked (these run with none): the same line either way."""
    home = tmp_path / "home"
    shutil.copytree(initialised / "home", home, ignore=shutil.ignore_patterns("*.sock"))
    line = assert_one_line_error(invoke("--home", str(home), *args))
    assert says in line
    for word in never:
        assert word not in line
    if args[:2] == ["token", "create"] or args[0] == "mcp-config":
        assert "x" not in invoke("--home", str(home), "token", "list").out.split()  # nothing created
