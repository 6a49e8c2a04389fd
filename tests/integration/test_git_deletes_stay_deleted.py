"""A deletion is final unless something newer says otherwise (issue 37, item 3), end to end:
the regression test of the path that brought files back (a twin seen as another attachment)
is tests/unit/test_attachment_twin_seen_id.py; these guard the git scenarios around it (they
passed before that fix too). In a real git repository as the vault, with a paired peer,
attachments that git deletes (``git checkout -- . && git clean -fq`` after untracked
attachments were added: 31 identical twins of one png at different paths, plus unique files;
a tracked twin's edit put back by the checkout; branch switches that move and drop twins) are never
written back on A -- not by A's own outflow, not from B's index, not by a pending write -- and
A's working copy is clean afterwards; B follows once the deletions are due."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, run_stet, wait_until
from tests.integration.attachment_pairs import write_files
from tests.integration.attachment_support import live, wait_recorded
from tests.integration.git_support import git, wait_git_quiet
from tests.integration.live_support import free_port
from tests.integration.peer_support import invite, join, start_daemon, wait_linked
from tests.integration.vault_shape import (
    EXEC,
    PLAIN,
    File,
    History,
    commit_history,
    expected_shape,
    png,
    shape_of,
    svg,
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

LANGS = [f"l{i:02d}" for i in range(31)]
PNG = b"\x89PNG\r\n\x1a\n\x00" + b"date-time" * 300 + b"\x00end"
ICON = b"\x00\x00\x01\x00" + b"favicon" * 200
COMMITTED = ({f"{lang}/Mac-OS-DateTime.png": PNG for lang in LANGS}
             | {"nl/favicon.ico": ICON, "readme.md": b"a note\n"})
NEW_PNG = b"\x89PNG\r\n\x1a\n\x00" + b"screenshot" * 300 + b"\x00end"
UNTRACKED = ({f"{lang}/Screenshot.png": NEW_PNG for lang in LANGS}
             | {f"nl/favicon-{n}.png": bytes([n]) * 900 + b"unique" for n in range(4)})
EDITED = {f"{lang}/Mac-OS-DateTime.png": NEW_PNG for lang in LANGS[:3]}  # put back by the checkout
DELAY_S = 4.0


class Reappearances:
    """Watches A's folder from a thread: any deleted path that shows up again, ever."""

    def __init__(self, root: Path, paths: list[str]) -> None:
        self.root = root
        self.paths = paths
        self.gone: set[str] = set()
        self.back: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Reappearances:
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + 120
        while not self._stop.is_set() and time.monotonic() < deadline:
            for p in self.paths:
                exists = (self.root / p).exists()
                if not exists:
                    self.gone.add(p)
                elif p in self.gone:
                    self.back.add(p)
            self._stop.wait(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_attachments_git_deleted_do_not_come_back(tmp_path: Path,
                                                  daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    git(va, "init", "-q")
    write_files(va, COMMITTED)
    git(va, "add", "-A")
    git(va, "commit", "-qm", "main")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    (tmp_path / "ha" / "config.toml").write_text(f"[peer]\ndelete_delay_seconds = {DELAY_S}\n")
    (tmp_path / "hb").mkdir()
    (tmp_path / "hb" / "config.toml").write_text(f"[peer]\ndelete_delay_seconds = {DELAY_S}\n")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    for path in COMMITTED:
        if not path.endswith(".md"):
            wait_recorded(a.home, path)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)

    # A person adds untracked attachments and edits three tracked twins; B gets them all.
    wait_git_quiet(va)
    write_files(va, UNTRACKED | EDITED)
    for path in UNTRACKED | EDITED:
        wait_recorded(a.home, path)
    wait_until(lambda: all((vb / p).is_file() and (vb / p).read_bytes() == d
                           for p, d in (COMMITTED | UNTRACKED | EDITED).items()),
               timeout=60, what="every file on B")

    watch = Reappearances(va, sorted(UNTRACKED)).start()
    try:
        git(va, "checkout", "--", ".")
        git(va, "clean", "-fq")
        # Once the deletions are due, B removes them too; A never wrote any back meanwhile.
        wait_until(lambda: not any((vb / p).exists() for p in UNTRACKED), timeout=60,
                   what="the deletions to reach B")
        wait_until(lambda: all((vb / p).read_bytes() == COMMITTED[p] for p in EDITED), timeout=30,
                   what="the checkout's restored twins on B")
        wait_until(lambda: not (set(UNTRACKED) & set(live(a.home))), timeout=30,
                   what="the deletions recorded on A")
    finally:
        watch.stop()
    assert watch.back == set(), f"deleted by git, written back by Stet on A: {sorted(watch.back)}"
    assert not any((va / p).exists() for p in UNTRACKED)
    assert git(va, "status", "--porcelain") == ""
    assert not any((vb / p).exists() for p in UNTRACKED)


COPIES = {f"{lang}/copy-of-DateTime.png": PNG for lang in LANGS}  # untracked twins of a committed file
REMOVED = [f"{lang}/Mac-OS-DateTime.png" for lang in LANGS[:5]]  # rm'd by a person, restored by git


def test_untracked_twins_of_committed_files_git_cleaned_do_not_come_back(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    git(va, "init", "-q")
    write_files(va, COMMITTED)
    git(va, "add", "-A")
    git(va, "commit", "-qm", "main")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    (tmp_path / "ha" / "config.toml").write_text(f"[peer]\ndelete_delay_seconds = {DELAY_S}\n")
    (tmp_path / "hb").mkdir()
    (tmp_path / "hb" / "config.toml").write_text(f"[peer]\ndelete_delay_seconds = {DELAY_S}\n")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    for path in COMMITTED:
        if not path.endswith(".md"):
            wait_recorded(a.home, path)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_until(lambda: all((vb / p).is_file() for p in COMMITTED), timeout=60, what="every file on B")

    wait_git_quiet(va)
    for p in REMOVED:
        (va / p).unlink()
    wait_until(lambda: not any((vb / p).exists() for p in REMOVED), timeout=60, what="the rm on B")
    write_files(va, COPIES)
    wait_until(lambda: all((vb / p).is_file() for p in COPIES), timeout=60, what="the copies on B")

    watch = Reappearances(va, sorted(COPIES)).start()
    try:
        git(va, "checkout", "--", ".")
        git(va, "clean", "-fq")
        wait_until(lambda: all((vb / p).is_file() for p in REMOVED), timeout=60, what="the restored on B")
        wait_until(lambda: not any((vb / p).exists() for p in COPIES), timeout=60,
                   what="the deletions to reach B")
        wait_until(lambda: not (set(COPIES) & set(live(a.home))), timeout=30,
                   what="the deletions recorded on A")
    finally:
        watch.stop()
    assert watch.back == set(), f"deleted by git, written back by Stet on A: {sorted(watch.back)}"
    assert git(va, "status", "--porcelain") == ""
    assert not any((vb / p).exists() for p in COPIES)


OTHER_TWINS = {f"docs/{lang}/Mac-OS-DateTime.png": PNG for lang in LANGS[:10]}  # moved and fewer
ON_OTHER = OTHER_TWINS | {"nl/favicon.ico": ICON}


def test_branch_switches_of_twins_leave_a_clean_working_copy(
        tmp_path: Path, daemon_factory: list[DaemonProcess]) -> None:
    va, vb = tmp_path / "a", tmp_path / "b"
    va.mkdir()
    git(va, "init", "-q")
    write_files(va, COMMITTED)
    git(va, "add", "-A")
    git(va, "commit", "-qm", "main")
    git(va, "checkout", "-qb", "other")
    git(va, "rm", "-rq", *[p for p in COMMITTED if p.endswith(".png")])
    write_files(va, OTHER_TWINS)
    git(va, "add", "-A")
    git(va, "commit", "-qm", "other")
    git(va, "checkout", "-q", "main")
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    (tmp_path / "ha" / "config.toml").write_text(f"[peer]\ndelete_delay_seconds = {DELAY_S}\n")
    (tmp_path / "hb").mkdir()
    (tmp_path / "hb" / "config.toml").write_text(f"[peer]\ndelete_delay_seconds = {DELAY_S}\n")
    a = start_daemon(tmp_path / "ha", daemon_factory)
    b = start_daemon(tmp_path / "hb", daemon_factory)
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_until(lambda: all((vb / p).is_file() for p in COMMITTED), timeout=60, what="every file on B")
    watched = sorted(set(COMMITTED) | set(OTHER_TWINS))
    for branch, expect in (("other", ON_OTHER), ("main", COMMITTED), ("other", ON_OTHER)):
        watch = Reappearances(va, watched).start()
        try:
            git(va, "checkout", "-q", branch)
            here = [p for p in expect if not p.endswith(".md")]
            gone = [p for p in watched if p not in expect and not p.endswith(".md")]

            def b_follows(here: list[str] = here, gone: list[str] = gone) -> bool:
                return all((vb / p).is_file() for p in here) and not any((vb / p).exists() for p in gone)

            wait_until(b_follows, timeout=60, what=f"B on {branch}")
            gone_set = set(gone)
            wait_until(lambda: not (gone_set & set(live(a.home))), timeout=30,  # noqa: B023 - used at once
                       what="A's index")
        finally:
            watch.stop()
        status = git(va, "status", "--porcelain")
        assert status == "", f"after checkout {branch}: {status}; came back: {sorted(watch.back)}"
        assert watch.back <= set(expect), sorted(watch.back)


# Issue 37 item 3 end to end, in the real vault's shape: png/svg twins of different modes under
# non-ASCII names; a commit that deletes some of them (a whole twin group, and one twin of
# another); a person on B adds images (untracked on A); B goes offline holding all of them in
# its index; A checks the commit out and `git clean -fd`s. Neither A's outflow, nor B's stale
# index once it is back, nor a write pending on either side brings one back on A.
PIC, ICON_SVG = png(1), svg(2)
SHAPED = {
    "ja/添付/図 1.png": File(PIC, EXEC), "ru/вложения/図 1.png": File(PIC, PLAIN),
    "ar/مرفقات/図 1.png": File(PIC, PLAIN), "emoji/🎉 fotos/図 1.png": File(PIC, EXEC),
    "ja/添付/icône.svg": File(ICON_SVG, PLAIN), "ru/вложения/icône.svg": File(ICON_SVG, EXEC),
    "en/keep/kept.svg": File(svg(3), PLAIN),
    "ja/ノート/メモ.md": File("いろはにほへと\n".encode(), PLAIN),
    "ru/Заметки/заметка.md": File("Съешь же ещё\n".encode(), PLAIN),
}
SHAPED_AFTER = {p: f for p, f in SHAPED.items()  # all of icône.svg, and two twins of 図 1.png go
                if "icône" not in p and p not in ("ru/вложения/図 1.png", "emoji/🎉 fotos/図 1.png")}
FROM_B = {f"{lang}/скриншоты/Снимок экрана {n}.png": png(10 + n) for lang in ("ja", "ru") for n in range(3)}


@pytest.mark.parametrize("offline", ["b", "a"])
def test_a_checkout_and_clean_of_twins_stays_so_through_a_peer_back_from_offline(
        tmp_path: Path, daemon_factory: list[DaemonProcess], offline: str) -> None:
    """``offline`` b: B is stopped during the checkout (its stale index meets A's deletions
    when it is back); a: A itself is stopped (git works while no daemon watches: its start
    finds the files gone that its index and seen state list)."""
    va, vb = tmp_path / "a", tmp_path / "b"
    history = History()
    history.trees = [SHAPED, SHAPED_AFTER]
    history.messages = ["twins", "fewer twins"]
    ids = commit_history(va, history)
    git(va, "checkout", "-q", ids[0])
    run_stet(tmp_path / "ha", "init", str(va), "--name", "notes")
    for home in ("ha", "hb"):
        (tmp_path / home).mkdir(exist_ok=True)
        (tmp_path / home / "config.toml").write_text(f"[peer]\ndelete_delay_seconds = {DELAY_S}\n")
    # Fixed peer ports: the one restarted is found again where it was.
    a = DaemonProcess(tmp_path / "ha", extra_args=("--peer-port", str(free_port())))
    b = DaemonProcess(tmp_path / "hb", extra_args=("--peer-port", str(free_port())))
    daemon_factory.extend((a, b))
    a.start()
    b.start()
    join(b, invite(a), vb)
    wait_linked(a, b)
    wait_until(lambda: shape_of(vb) == expected_shape(SHAPED), timeout=60, what="B to hold the vault")

    write_files(vb, FROM_B)  # a person on B adds screenshots: untracked files on A
    wait_until(lambda: all((va / p).is_file() for p in FROM_B), timeout=60, what="B's images on A")
    for path in FROM_B:
        wait_recorded(b.home, path)
        wait_recorded(a.home, path)
    away = b if offline == "b" else a
    away.stop()  # its index still lists every attachment

    deleted = sorted(set(SHAPED) - set(SHAPED_AFTER)) + sorted(FROM_B)
    watch = Reappearances(va, deleted).start()
    try:
        wait_git_quiet(va)
        git(va, "checkout", "-q", ids[1])
        git(va, "clean", "-fdq")
        assert shape_of(va) == expected_shape(SHAPED_AFTER)
        if offline == "b":
            wait_until(lambda: not (set(deleted) & set(live(a.home))), timeout=30,
                       what="the deletions recorded on A")
        away.start()
        wait_linked(a, b, timeout=30)
        wait_until(lambda: not (set(deleted) & set(live(a.home))), timeout=30,
                   what="the deletions recorded on A")
        wait_until(lambda: shape_of(vb) == expected_shape(SHAPED_AFTER), timeout=60,
                   what="B to follow the checkout and the clean")
        wait_until(lambda: not (set(deleted) & set(live(b.home))), timeout=30, what="B's index")
    finally:
        watch.stop()
    assert watch.back == set(), f"deleted by git, written back by Stet on A: {sorted(watch.back)}"
    assert shape_of(va) == expected_shape(SHAPED_AFTER)
    assert git(va, "status", "--porcelain") == ""
