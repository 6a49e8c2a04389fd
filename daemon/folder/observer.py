"""A watchdog observer that never watches ``.git/`` (SPEC §3.16).

watchdog's inotify backend puts a watch on every folder below the vault, and a git
repository's ``.git`` holds most of a vault's folders (issue 13: 230 of 260 watches):
wasted watches (``max_user_watches`` is per user), and a stream of events about objects,
refs and logs that are never notes. watchdog 7 has no option to leave folders out, so
the recursive registration of its inotify watch group is replaced by one that prunes
``.git`` at every level: at start, for folders created or moved in later, and when the
watches are rebuilt after a queue overflow. Git's own activity is read from the stat of
``.git/index`` and ``.git/HEAD`` instead (``git_activity``).

This leans on watchdog internals (``InotifyWatchGroup._add_all_callbacks``). If they
change, ``make_observer`` falls back to watchdog's own observer and says so in the log;
``tests/integration/test_git_not_watched.py`` counts the daemon's inotify watches.
Other platforms (FSEvents, kqueue, Windows) use watchdog's observer as it is: their
events inside ``.git`` are not notes and are dropped by the file bridge.

The same watch group drops the arrival of a file we renamed into place (``own_arrival``:
``DiskWrites.arrived_as_written``) as inotify reports it, in watchdog's reading thread:
before watchdog makes event objects of it and hands them through two more threads (its
emitter's and its dispatcher's: two wake-ups per note written, about 0.1 ms of CPU a
note on a receiving peer, whose one core the loop needs). Where this observer is not
used, the handler drops those arrivals later, as before (``folder_watcher``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

GIT_DIR = b".git"
TEMP_DIR = b".stet-tmp"  # our own temp files (atomic_files.TEMP_DIR): never notes
_UNWATCHED = (GIT_DIR, TEMP_DIR)


def _is_git_dir(path: bytes) -> bool:
    return os.path.basename(path.rstrip(b"/")) in _UNWATCHED


def _pruned_observer_class() -> Any:
    from watchdog.observers.inotify import InotifyEmitter, InotifyObserver, InotifyWatchGroup

    if not callable(getattr(InotifyWatchGroup, "_add_all_callbacks", None)) or not callable(
            getattr(InotifyWatchGroup, "_add_callback", None)):
        raise ImportError("watchdog's inotify watch group has changed")

    class WatchGroupWithoutGit(InotifyWatchGroup):
        # Asked of a file's unpaired IN_MOVED_TO (absolute path): True drops it here.
        own_arrival: Callable[[bytes], bool] | None = None

        def on_event(self, event: Any) -> None:
            if self.own_arrival is not None and event.is_moved_to and not event.is_directory:
                with self._lock:
                    # What watchdog would make of it: a file's "created" (moved in from
                    # outside the watches: our temp folder is one) only if no watched
                    # IN_MOVED_FROM pairs with it (then it is a move, never dropped).
                    path = self._build_event_source_path(event) if self.is_active else None
                    unpaired = path is not None and self._source_for_move(event.cookie) is None
                if path is not None and unpaired and self.own_arrival(path):
                    return
            super().on_event(event)

        def _add_all_callbacks(self, path: bytes) -> None:
            if _is_git_dir(path):
                return
            is_dir = os.path.isdir(path)
            self._add_callback(path)
            if is_dir and self.is_recursive:
                for root, dirnames, _ in os.walk(path, followlinks=self.follow_symlink):
                    dirnames[:] = [d for d in dirnames if d not in _UNWATCHED]
                    for dirname in dirnames:
                        full_path = os.path.join(root, dirname)
                        if not self.follow_symlink and os.path.islink(full_path):
                            continue
                        self._add_callback(full_path)

    class EmitterWithoutGit(InotifyEmitter):
        def arrival_check(self) -> Callable[[bytes], bool] | None:
            return None  # (the observer's own subclass says: ``ObserverWithoutGit``)

        def on_thread_start(self) -> None:
            group = WatchGroupWithoutGit(
                self._inotify_fd,
                os.fsencode(self.watch.path),
                is_recursive=self.watch.is_recursive,
                event_mask=self.get_event_mask_from_filter(),
                follow_symlink=self.watch.follow_symlink,
            )
            group.own_arrival = self.arrival_check()
            self._inotify = group

    class ObserverWithoutGit(InotifyObserver):
        def __init__(self, own_arrival: Callable[[bytes], bool] | None = None) -> None:
            super().__init__()

            class Emitter(EmitterWithoutGit):  # (watchdog makes the emitters: no argument of ours)
                def arrival_check(self) -> Callable[[bytes], bool] | None:
                    return own_arrival

            self._emitter_class = Emitter

    return ObserverWithoutGit


def make_observer(own_arrival: Callable[[bytes], bool] | None = None) -> Any:
    """An observer for a vault: on Linux one that leaves ``.git`` folders unwatched and
    drops the arrivals ``own_arrival`` (asked with a file's absolute path) says are ours."""
    from watchdog.observers import Observer

    try:
        from watchdog.observers.inotify import InotifyObserver
    except Exception:  # not Linux
        return Observer()
    if Observer is not InotifyObserver:
        return Observer()
    try:
        cls = _pruned_observer_class()
        return cls(own_arrival)
    except Exception as exc:
        logger.warning("cannot leave .git folders unwatched with this watchdog (%s): watching them", exc)
        return Observer()
