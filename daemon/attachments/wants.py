"""The blobs one vault's folder side waits for (SPEC §3.14), asked of the ``BlobFetcher``:
the bytes of files the index shows that this home lacks (``to_write``) and of concurrent
losers to keep as versions (``losers``). What is no longer needed is unwanted; what is still
awaited is asked for again, less often the longer it takes (a member that lacked a blob when
first asked may have fetched it since). Once every wanted blob has landed, ``all_landed``
cuts the next pass's spacing short (the last file of a transfer goes to its path at once).
"""

from __future__ import annotations

import asyncio

from stet.daemon.attachments.seams import BlobFetcher

# Blobs still awaited are asked for again after these many seconds (doubling up to the
# last): a member that lacked one when first asked may have fetched it since.
REWANT_S = (1.0, 30.0)


class BlobWants:
    def __init__(self, vault_id: str, fetcher: BlobFetcher) -> None:
        self.vault_id = vault_id
        self.fetcher = fetcher
        self.wanted: dict[str, int] = {}  # sha256 -> size, asked of the fetcher
        self.to_write: dict[str, int] = {}  # of those: blobs the folder waits for
        self.losers: dict[tuple[str, str], int] = {}  # of those: (id, sha) of losers' bytes to keep
        self._rewant: asyncio.TimerHandle | None = None
        # Wanted blobs that landed since asked; once every one has, the next pass is not
        # spaced out (the last file of a transfer goes to its path at once).
        self._landed_wanted: set[str] = set()
        self.all_landed = asyncio.Event()
        self._rewant_s = REWANT_S[0]

    def arrived(self, sha256: str) -> bool:
        """A blob landed: whether it was wanted."""
        if sha256 not in self.wanted:
            return False
        self._landed_wanted = {s for s in self._landed_wanted if s in self.wanted}
        self._landed_wanted.add(sha256)
        if len(self._landed_wanted) == len(self.wanted):
            self.all_landed.set()
        return True

    def refresh(self) -> None:
        """Want what the folder and the losers wait for now."""
        self.want({**self.to_write, **self.loser_blobs()})

    def loser_blobs(self) -> dict[str, int]:
        return {sha: size for (_att_id, sha), size in self.losers.items()}

    def want(self, fetch: dict[str, int]) -> None:
        """Ask the fetcher for what is missing now; drop what is no longer needed."""
        for sha in sorted(self.wanted.keys() - fetch.keys()):
            self.fetcher.unwant(self.vault_id, sha)
        new = bool(fetch.keys() - self.wanted.keys())
        if new:
            self._rewant_s = REWANT_S[0]
        for sha, size in sorted(fetch.items()):
            if sha not in self.wanted:
                self.fetcher.want(self.vault_id, sha, size)
        self.wanted = fetch
        # A pending ask-again stays: passes come more often than it when the folder or the
        # index is busy, and putting it off at each one asked a link that lacked a blob
        # never again while they came (issue 14).
        if self._rewant is not None and (new or not fetch):
            self._rewant.cancel()
            self._rewant = None
        if fetch and self._rewant is None:
            self._rewant = asyncio.get_running_loop().call_later(self._rewant_s, self._want_again)

    def _want_again(self) -> None:
        """Still waiting: ask again (``want`` is idempotent; the fetcher may try links that
        lacked the blob before), less often the longer it takes."""
        self._rewant = None
        for sha, size in sorted(self.wanted.items()):
            self.fetcher.want(self.vault_id, sha, size)
        self._rewant_s = min(self._rewant_s * 2, REWANT_S[1])
        if self.wanted:
            self._rewant = asyncio.get_running_loop().call_later(self._rewant_s, self._want_again)

    def cancel(self) -> None:
        """No more asking again (the replica stops)."""
        if self._rewant is not None:
            self._rewant.cancel()
