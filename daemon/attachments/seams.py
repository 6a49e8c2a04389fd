"""The seams between the attachment pieces (SPEC §3.14): who calls whom.

Three parts meet here, each owned by its own module:

- the folder side (``AttachmentReplica``, daemon/attachments/replica.py, composing the
  daemon/attachment_* modules it names): scans the folder's non-note files, records what
  changed in the attachment index (``sync/attachment_plan``), writes to the folder what the
  index shows, keeps versions of what it replaces;
- the transfers (the peer link): fetches the blobs the index names and this home lacks,
  chunk by chunk with per-link credit, and serves the blobs this home holds;
- the safety faces (brake, revert, ``stet versions/show/restore``, status, join bar).

Each side sees the others only through these Protocols, so each can be built and tested
alone, with the trivial implementations below standing in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from stet.sync.attachment_plan import IntakeAction

# (vault, sha256): a blob this home wanted has landed in the blob store, verified.
BlobArrived = Callable[[str, str], None]


class BlobFetcher(Protocol):
    """What the folder side asks of the transfers."""

    def want(self, vault: str, sha256: str, size: int) -> None:
        """Fetch this blob from any peer that holds it (idempotent; resumes a partial)."""
        ...

    def unwant(self, vault: str, sha256: str) -> None:
        """The index no longer needs it (deleted or replaced before it arrived)."""
        ...

    def progress(self) -> dict[str, int]:
        """``{"files": n, "bytes": total, "done": received}`` of what is wanted now."""
        ...


class NoPeersFetcher:
    """Stands in when no transfer machinery is wired: nothing ever arrives."""

    def __init__(self) -> None:
        self.wanted: dict[tuple[str, str], int] = {}

    def want(self, vault: str, sha256: str, size: int) -> None:
        self.wanted[(vault, sha256)] = size

    def unwant(self, vault: str, sha256: str) -> None:
        self.wanted.pop((vault, sha256), None)

    def progress(self) -> dict[str, int]:
        return {"files": len(self.wanted), "bytes": sum(self.wanted.values()), "done": 0}


class AttachmentGate(Protocol):
    """What the folder side asks of the brake before recording changes made on disk.

    ``admit`` returns the actions that may be recorded in the index (and so reach peers)
    now; the others are held: the gate keeps them and hands them back through
    ``AttachmentReplicaApi.record_held`` on release, or undoes them through
    ``write_back`` on revert.
    """

    def admit(self, vault: str, actions: Sequence[IntakeAction], source: str) -> list[IntakeAction]: ...


class PassGate:
    """No brake: every change is recorded at once."""

    def admit(self, vault: str, actions: Sequence[IntakeAction], source: str) -> list[IntakeAction]:
        return list(actions)


class AttachmentReplicaApi(Protocol):
    """What the brake, revert/restore and status ask of the folder side."""

    async def record_held(self, vault: str, actions: Sequence[IntakeAction]) -> None:
        """Record actions a gate held earlier (release), re-checked against the folder now."""
        ...

    async def write_back(self, vault: str, path: str, sha256: str, executable: bool) -> None:
        """Put these bytes (a blob this home holds) at ``path`` (revert, restore); the
        folder side records the result like any other change."""
        ...

    def deleted_waiting(self, vault: str) -> set[str]:
        """Paths whose deletion waits the delete delay (SPEC §5.6): gone from the folder,
        not recorded yet (their seen state is still there)."""
        ...

    def counts(self, vault: str) -> dict[str, int]:
        """``{"attachments": n, "bytes": b, "skipped": k}`` (skipped: over ``max_bytes``)."""
        ...
