"""Which blobs this device still needs, which link fetches each, and how far each got
(SPEC §3.14): pure bookkeeping for the peer session, and the numbers ``stet status`` and
the ``stet join`` bar show. No I/O: the caller asks the blob store where a partial stands.

- A wanted blob is requested from one link at a time (never the same bytes twice at once),
  at most ``per_link`` blobs in flight per link so one link's queue stays short.
- A link that answers MISSING is not asked for that blob again until it reconnects; when
  every link said MISSING the blob waits for a new link.
- A link that drops puts its blobs back; the next request resumes from what the partial
  file holds (the caller passes ``partial_size``), never from zero.
- An ask that nothing came back for (no chunk, no MISSING) within ``stall_s`` while the
  link stays up is taken back (``stalled``): asked again, of another link first (that link
  is passed over for ``stall_s``), so no blob waits for good on an answer that was lost
  (issue 14: a winner's bytes asked of a member once, never answered for minutes). A link
  that sends anything at all counts as answering: its later asks wait in its queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

STALL_S = 15.0  # an ask with no answer for this long (the link up) is asked again


@dataclass(slots=True)
class Wanted:
    vault: str
    sha256: str
    size: int
    have: int = 0  # bytes held (the partial's size, kept current by ``received``)
    link: str | None = None  # the link fetching it now
    missing_at: set[str] = field(default_factory=set)  # links that do not hold it
    asked_at: float = 0.0  # when ``link`` was asked (the clock's time)
    avoid: str | None = None  # a link that left an ask unanswered: passed over until ``avoid_until``
    avoid_until: float = 0.0


@dataclass(frozen=True, slots=True)
class Request:
    vault: str
    sha256: str
    offset: int
    total: int


class Transfers:
    def __init__(self, per_link: int = 2, *, stall_s: float = STALL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_link = per_link
        self.stall_s = stall_s
        self.clock = clock
        self._wanted: dict[str, Wanted] = {}  # in the order they were wanted
        self._heard: dict[str, float] = {}  # link -> when it last sent a chunk or a MISSING
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
        now = self.clock()
        out = []
        for w in self._wanted.values():
            if free <= 0:
                break
            if w.link is not None or w.vault not in shared or link in w.missing_at:
                continue
            if w.avoid == link and now < w.avoid_until:
                continue
            w.link, w.asked_at = link, now
            w.have = partial_size(w.sha256)
            out.append(Request(w.vault, w.sha256, w.have, w.size))
            free -= 1
        return out

    def received(self, link: str, sha256: str, end: int) -> bool:
        """A chunk ending at ``end`` was written. False: not asked of this link (ignore it)."""
        self._heard[link] = self.clock()
        w = self._wanted.get(sha256)
        if w is None or w.link != link:
            return False
        if end > w.have:
            self.received_bytes += end - w.have
            w.have = end
        return True

    def missing(self, link: str, sha256: str) -> None:
        self._heard[link] = self.clock()
        w = self._wanted.get(sha256)
        if w is not None:
            w.missing_at.add(link)
            if w.link == link:
                w.link = None

    def link_down(self, link: str) -> list[str]:
        """The link dropped: its blobs go back to the queue; returns them."""
        back = []
        self._heard.pop(link, None)
        for w in self._wanted.values():
            if w.link == link:
                w.link = None
                back.append(w.sha256)
            w.missing_at.discard(link)  # it may hold them when it comes back
        return back

    def stalled(self) -> list[tuple[str, str]]:
        """Asks nothing came back for within ``stall_s`` (neither for them nor from their
        link): taken back, to be asked again (of another link first); returns (sha, link)."""
        now = self.clock()
        out = []
        for w in self._wanted.values():
            if w.link is None:
                continue
            if now - max(w.asked_at, self._heard.get(w.link, 0.0)) > self.stall_s:
                out.append((w.sha256, w.link))
                w.avoid, w.avoid_until = w.link, now + self.stall_s
                w.link = None
        return out

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
