"""Which blobs this device still needs, which link fetches each, and how far each got
(SPEC §3.14): pure bookkeeping for the peer session, and the numbers ``stet status`` and
the ``stet join`` bar show. No I/O: the caller asks the blob store where a partial stands.

- A wanted blob is requested from one link at a time (never the same bytes twice at once),
  at most ``per_link`` blobs in flight per link so one link's queue stays short.
- A link that answers MISSING is not asked for that blob again until it reconnects; when
  every link said MISSING the blob waits for a new link.
- A link that drops puts its blobs back; the next request resumes from what the partial
  file holds (the caller passes ``partial_size``), never from zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Wanted:
    vault: str
    sha256: str
    size: int
    have: int = 0  # bytes held (the partial's size, kept current by ``received``)
    link: str | None = None  # the link fetching it now
    missing_at: set[str] = field(default_factory=set)  # links that do not hold it


@dataclass(frozen=True, slots=True)
class Request:
    vault: str
    sha256: str
    offset: int
    total: int


class Transfers:
    def __init__(self, per_link: int = 2) -> None:
        self.per_link = per_link
        self._wanted: dict[str, Wanted] = {}  # in the order they were wanted
        self.received_bytes = 0  # over the wire since start (resumes do not count twice)

    # -- what is needed ---------------------------------------------------------------------

    def want(self, vault: str, sha256: str, size: int, have: int = 0) -> None:
        if sha256 not in self._wanted:
            self._wanted[sha256] = Wanted(vault, sha256, size, have)

    def drop(self, sha256: str) -> str | None:
        """No longer needed (landed, or nothing refers to it); returns the link that was
        fetching it, which the caller may tell to stop."""
        w = self._wanted.pop(sha256, None)
        return None if w is None else w.link

    def wanted(self) -> list[Wanted]:
        return list(self._wanted.values())

    def get(self, sha256: str) -> Wanted | None:
        return self._wanted.get(sha256)

    def restart(self, sha256: str) -> None:
        """The bytes held were thrown away (they did not verify): ask again from zero."""
        w = self._wanted.get(sha256)
        if w is not None:
            w.have, w.link = 0, None

    # -- the links ----------------------------------------------------------------------------

    def in_flight(self, link: str) -> list[str]:
        return [w.sha256 for w in self._wanted.values() if w.link == link]

    def next_requests(self, link: str, vaults: Iterable[str],
                      partial_size: Callable[[str], int]) -> list[Request]:
        """What ``link`` (a member of ``vaults``) should be asked for now."""
        shared = set(vaults)
        free = self.per_link - len(self.in_flight(link))
        out = []
        for w in self._wanted.values():
            if free <= 0:
                break
            if w.link is not None or w.vault not in shared or link in w.missing_at:
                continue
            w.link = link
            w.have = partial_size(w.sha256)
            out.append(Request(w.vault, w.sha256, w.have, w.size))
            free -= 1
        return out

    def received(self, link: str, sha256: str, end: int) -> bool:
        """A chunk ending at ``end`` was written. False: not asked of this link (ignore it)."""
        w = self._wanted.get(sha256)
        if w is None or w.link != link:
            return False
        if end > w.have:
            self.received_bytes += end - w.have
            w.have = end
        return True

    def missing(self, link: str, sha256: str) -> None:
        w = self._wanted.get(sha256)
        if w is not None:
            w.missing_at.add(link)
            if w.link == link:
                w.link = None

    def link_down(self, link: str) -> list[str]:
        """The link dropped: its blobs go back to the queue; returns them."""
        back = []
        for w in self._wanted.values():
            if w.link == link:
                w.link = None
                back.append(w.sha256)
            w.missing_at.discard(link)  # it may hold them when it comes back
        return back

    # -- progress -------------------------------------------------------------------------------

    def progress(self) -> dict[str, int]:
        wanted = list(self._wanted.values())
        return {
            "blobs": len(wanted),
            "bytes": sum(w.size for w in wanted),
            "haveBytes": sum(min(w.have, w.size) for w in wanted),
            "inFlight": sum(1 for w in wanted if w.link is not None),
            "receivedBytes": self.received_bytes,
        }
