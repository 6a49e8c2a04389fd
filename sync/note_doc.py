"""A note's CRDT document: a pycrdt ``Doc`` holding one ``Text`` named "content".

Every local change is a minimal diff (``text_diff``) applied in one transaction with
UTF-8 byte offsets; every foreign update passes through one guarded entry point that
contains pycrdt panics. The first import of a file is deterministic (``genesis``) so
that two machines importing the same file produce the same update and merge to one
copy of the text.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pycrdt

from .errors import CrdtError
from .snapshot_state import state_at
from .state_vectors import decode_state_vector
from .text_diff import ByteSplice, Splice, diff_splices, to_byte_splices

logger = logging.getLogger(__name__)

TEXT_NAME = "content"
# The largest update a peer or agent may hand us before we decode it.
MAX_UPDATE_BYTES = 64 * 1024 * 1024
EMPTY_UPDATE = b"\x00\x00"  # no items, no deletions


# Local edits after which a large note's in-memory document is loaded again (NoteDoc._reload).
RELOAD_AFTER_EDITS = 256
RELOAD_MIN_BYTES = 32 * 1024


def revision_of(data: bytes) -> str:
    """A note revision: lowercase hex SHA-256 of its exact UTF-8 bytes."""
    return hashlib.sha256(data).hexdigest()


def text_revision(text: str) -> str:
    return revision_of(text.encode("utf-8"))


def genesis_client_id(path: str, text: str) -> int:
    """The client id of a file's first import: a function of its path and text only.

    Two machines importing the same file therefore create the same CRDT items (same
    ids, same content, same origins) and merging them is a no-op instead of a copy.
    32 bits like Yjs, kept away from 0.
    """
    digest = hashlib.sha256(b"stet-genesis\0" + path.encode() + b"\0" + text.encode()).digest()
    return int.from_bytes(digest[:4], "big") | 1


def genesis_note_id(path: str, text: str) -> str:
    """The note id given to a file's first import (same inputs, same id, on any machine)."""
    digest = hashlib.sha256(b"stet-note\0" + path.encode() + b"\0" + text.encode()).digest()
    return digest[:16].hex()


def _is_panic(exc: BaseException) -> bool:
    return type(exc).__name__ == "PanicException"


def apply_checked(doc: pycrdt.Doc[Any], update: bytes, what: str) -> None:
    """``doc.apply_update(update)`` with decode errors and pycrdt's ``PanicException`` (a
    BaseException) contained as ``CrdtError``: one bad message never takes the daemon down."""
    try:
        doc.apply_update(update)
    except Exception as exc:
        raise CrdtError(f"cannot apply {what}: {exc}") from None
    except BaseException as exc:
        if _is_panic(exc):
            raise CrdtError(f"cannot apply {what} (decoder panic)") from None
        raise


def join_updates(updates: list[bytes]) -> bytes | None:
    """The updates captured from several transactions as one (None if there were none)."""
    if not updates:
        return None
    if len(updates) == 1:
        return updates[0]
    return bytes(pycrdt.merge_updates(*updates))


def update_since(doc: pycrdt.Doc[Any], state_vector: bytes) -> bytes:
    """What ``doc`` holds beyond a peer's ``state_vector``; a malformed one is a
    ``CrdtError`` (yrs's decoder may panic on it), never an exception of pycrdt's."""
    try:
        return bytes(doc.get_update(state_vector))
    except Exception as exc:
        raise CrdtError(f"bad state vector: {exc}") from None
    except BaseException as exc:
        if _is_panic(exc):
            raise CrdtError("bad state vector (decoder panic)") from None
        raise


class NoteDoc:
    """One note's CRDT state with the operations Stet performs on it."""

    def __init__(self, doc: pycrdt.Doc[pycrdt.Text] | None = None, *,
                 client: tuple[int, int] | None = None) -> None:
        """``client``: the client id to write with and the edits already made with it (the
        note's ``client`` when it was last loaded here, see ``NotesService``); else a new one."""
        # skip_gc: deleted text stays in the document (marked deleted), so the note as
        # it stood at any earlier snapshot can be rebuilt (three-way merge of a disk
        # edit, ``baseRevision`` rewrites). Notes are small; this is the price of it.
        if doc is None:
            doc = pycrdt.Doc(skip_gc=True) if client is None else pycrdt.Doc(client_id=client[0],
                                                                             skip_gc=True)
        self.doc = doc
        self._text = self.doc.get(TEXT_NAME, type=pycrdt.Text)
        # The text and its revision, kept until the next change (every change goes
        # through this class): a busy note is read several times per write.
        self._text_cache: str | None = None
        self._revision_cache: tuple[str, int] | None = None
        # SHA-256 state of the text's bytes when known: an append then hashes only what
        # it adds (a revision is the hash of the whole note; notes that grow by appends
        # -- agents' logs -- would otherwise be hashed whole on every write).
        self._hasher: hashlib._Hash | None = None
        self._edits_since_load = client[1] if client is not None else 0
        # Set once this object is no longer the note's document (evicted, replaced): a
        # local edit of it then fails instead of making items whose (client, clock) the
        # note's next document makes too (one would be dropped as known: a silent loss).
        self.retired = False

    @contextmanager
    def _capture(self) -> Iterator[list[bytes]]:
        """Collect the updates of the transactions made inside the block.

        The observer lives only for the block and holds nothing but the list: a
        permanent ``observe(self._method)`` would be a cycle through the Rust side that
        Python's collector cannot see, and every document ever loaded would leak
        (measured: 3,000 documents of 20 KB kept 75 MB after they were dropped).
        """
        captured: list[bytes] = []
        own = self._own_clock() if self.retired else None
        sub = self.doc.observe(lambda event: captured.append(event.update))
        self._changed()
        try:
            yield captured
        finally:
            self.doc.unobserve(sub)
            self._changed()
        if own is not None and self._own_clock() != own:
            raise CrdtError("a note's document was edited after it stopped being the note's document "
                            "(its client id goes on in the next one): the edit is refused")

    def _own_clock(self) -> int:
        return decode_state_vector(self.doc.get_state()).get(self.doc.client_id, 0)

    @property
    def client(self) -> tuple[int, int]:
        """The client id this document writes with and the local edits made with it: what
        the note's next document goes on with (``NotesService``), so that a note reloaded
        often does not gain a client in its state vector at each load (issue 35, P13)."""
        return self.doc.client_id, self._edits_since_load

    # -- construction ------------------------------------------------------------

    @classmethod
    def from_updates(cls, updates: Iterable[bytes], *, client: tuple[int, int] | None = None) -> NoteDoc:
        """A document from updates this side made or stored (no consistency check needed);
        ``client`` as for the constructor."""
        # Applied as they are, no transaction observed: nothing is asked of the part that
        # was new (``_apply``'s capture re-encodes each update; for a note loaded by the
        # search index's worker or a cache miss, that was half of building it).
        note = cls(client=client)
        for update in updates:
            apply_checked(note.doc, update, "update")
        note._changed()
        return note

    @staticmethod
    def genesis(path: str, text: str) -> bytes:
        """The deterministic first update of a note imported from a file."""
        doc: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(client_id=genesis_client_id(path, text), skip_gc=True)
        ytext = doc.get(TEXT_NAME, type=pycrdt.Text)
        if text:
            ytext.insert(0, text)
        return doc.get_update()

    @staticmethod
    def genesis_state(path: str, text: str) -> tuple[bytes, bytes]:
        """``genesis`` and the snapshot of a document holding exactly it (what a file's
        base records), from the one document made for it: a bulk intake needs no
        ``NoteDoc`` of its own per new note (it is loaded from the store when used)."""
        doc: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(client_id=genesis_client_id(path, text), skip_gc=True)
        ytext = doc.get(TEXT_NAME, type=pycrdt.Text)
        if text:
            ytext.insert(0, text)
        return doc.get_update(), bytes(pycrdt.Snapshot.from_doc(doc).encode())

    # -- reading ---------------------------------------------------------------------

    @property
    def text(self) -> str:
        if self._text_cache is None:
            self._text_cache = str(self._text)
        return self._text_cache

    def _encoded(self) -> tuple[str, int]:
        if self._revision_cache is None:
            data = self.text.encode("utf-8")
            hasher = hashlib.sha256(data)
            self._hasher = hasher
            self._revision_cache = (hasher.hexdigest(), len(data))
        return self._revision_cache

    @property
    def revision(self) -> str:
        """``text_revision(self.text)``, computed once per change."""
        return self._encoded()[0]

    @property
    def byte_size(self) -> int:
        """The text's size in UTF-8 bytes."""
        return self._encoded()[1]

    def hash_state(self) -> tuple[Any, int]:
        """A copy of the SHA-256 state of the text's bytes, and their count: to hash the
        note after appends without hashing it whole (a group of appends, P2)."""
        if self._hasher is None:
            self._revision_cache = None
        size = self._encoded()[1]
        assert self._hasher is not None
        return self._hasher.copy(), size

    def _changed(self) -> None:
        self._text_cache = self._revision_cache = None
        self._hasher = None

    def state_vector(self) -> bytes:
        return self.doc.get_state()

    def full_update(self) -> bytes:
        return self.doc.get_update()

    def snapshot(self) -> bytes:
        """The current state as an encoded snapshot (state vector + delete set): small."""
        return bytes(pycrdt.Snapshot.from_doc(self.doc).encode())

    def fork_at(self, snapshot: bytes, revision: str | None = None) -> NoteDoc:
        """A private copy of the note as it stood at ``snapshot``, with its own client id.

        Edits made on the fork and merged back are concurrent with everything that
        happened since the snapshot: they move nothing that was written after it.
        ``revision``: the revision the note had at ``snapshot``, if known; a rebuild by
        pycrdt that does not give it is done again by cutting the update.
        """
        try:
            past = pycrdt.Doc.from_snapshot(pycrdt.Snapshot.decode(snapshot), self.doc)
            state = past.get_update()
        except Exception as exc:
            logger.debug("pycrdt cannot rebuild a snapshot (%s); cutting the update instead", exc)
            state = self._state_at(snapshot)
        except BaseException as exc:
            if not _is_panic(exc):
                raise
            # pycrdt 0.14 panics here on some notes holding merged concurrent rewrites
            # (tests/unit/test_fork_at_snapshot.py): cut the full update at the snapshot.
            state = self._state_at(snapshot)
        fork = NoteDoc()
        fork.apply_update(state)
        if revision is not None and fork.revision != revision:
            logger.warning("pycrdt rebuilt a snapshot as another text (%s, not %s); cutting the update",
                           fork.revision[:12], revision[:12])
            fork = NoteDoc()
            fork.apply_update(self._state_at(snapshot))
        return fork

    def _state_at(self, snapshot: bytes) -> bytes:
        try:
            return state_at(self.doc.get_update(), snapshot)
        except CrdtError as exc:
            raise CrdtError(f"cannot rebuild the note at that snapshot: {exc}") from None

    def update_since(self, state_vector: bytes) -> bytes:
        return update_since(self.doc, state_vector)

    # -- writing -------------------------------------------------------------------

    def apply_update(self, update: bytes) -> bytes | None:
        """Apply a foreign update; returns the part that was new to us, or None.

        Contains pycrdt's ``PanicException`` (a BaseException) and decode errors as
        ``CrdtError`` so one bad message never takes the daemon down.
        """
        if len(update) > MAX_UPDATE_BYTES:
            raise CrdtError(f"update of {len(update)} bytes is over the cap")
        before = self.doc.get_update()
        if before == EMPTY_UPDATE and update != EMPTY_UPDATE and self._took_whole(update):
            return update
        new = self._apply(update)
        if before == EMPTY_UPDATE and new == update:
            # An empty document took in exactly ``update`` (a peer's new note: its whole
            # state): rebuilding ``before`` + ``new`` is the same apply to the same empty
            # document, so nothing can be unaccounted -- no second document built (one
            # per new note of a first sync or a peer's bulk, ~4 % of the receiving loop).
            return new
        self._keep_accounted(before, new)
        return new

    def _took_whole(self, update: bytes) -> bool:
        """Into this empty document: ``update`` applied as it is, no transaction observed;
        True if the document now holds exactly it (a peer's new note: its whole state) --
        then the part new to us is ``update`` itself, as the observed transaction's would
        have been (the two agree: tests/unit/test_note_doc_whole.py), without the
        observer's re-encoding of it (~25 us of a 5 KB note's ~55 on a receiving peer's
        loop). Else the document is made empty again for the observed apply (an update
        encoded otherwise, say merged from several: its new part is what yrs integrates)."""
        apply_checked(self.doc, update, "update")
        self._changed()
        if self.doc.get_update() == update:
            return True
        self.doc = pycrdt.Doc(client_id=self.doc.client_id, skip_gc=True)
        self._text = self.doc.get(TEXT_NAME, type=pycrdt.Text)
        return False

    def _apply(self, update: bytes) -> bytes | None:
        with self._capture() as captured:
            apply_checked(self.doc, update, "update")
        new = join_updates(captured)
        return None if new == EMPTY_UPDATE else new

    def _keep_accounted(self, before: bytes, new: bytes | None) -> None:
        """Make the document hold exactly ``before`` + ``new`` (what can be stored and sent).

        pycrdt 0.14 (yrs) integrates an item whose client has a gap in its clocks before it
        when the item's neighbours are present (a damaged update, or one that overtook the
        items before it): the text shows it, but neither the state vector nor the
        transaction's update does, so it would never be stored or sent on, and this note
        would differ from its store and from every peer for good. Such items are dropped
        by rebuilding from what is accounted for; a peer that really has them sends them
        again, with the items before them, at the next state-vector exchange.
        """
        check: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(skip_gc=True)
        check.apply_update(before)
        if new is not None:
            check.apply_update(new)
        text = check.get(TEXT_NAME, type=pycrdt.Text)
        if str(text) != self.text:
            self.doc, self._text = check, text
            self._changed()

    def apply_splices(self, old: str, splices: list[Splice]) -> bytes | None:
        """Apply code-point splices computed against ``old`` (which must be the current text)."""
        if not splices:
            return None
        tail = splices[0] if len(splices) == 1 else None
        appended = tail is not None and tail.start == tail.end == len(old) and old is self._text_cache
        known = (self._hasher.copy(), self._encoded()[1]) if appended and self._hasher is not None else None
        if known is not None and tail is not None:  # at the end: its byte offset is the size
            byte_splices = [ByteSplice(known[1], 0, tail.text)]
        else:
            byte_splices = to_byte_splices(old, splices)
        update = self._apply_byte_splices(byte_splices)
        if known is not None and tail is not None and update is not None and self._text_cache is None:
            hasher, size = known
            data = tail.text.encode("utf-8")
            hasher.update(data)
            self._text_cache = old + tail.text
            self._hasher, self._revision_cache = hasher, (hasher.hexdigest(), size + len(data))
        return update

    def set_text(self, new: str) -> bytes | None:
        """Make the text equal ``new`` by a minimal diff; returns the update, or None."""
        old = self.text
        if old == new:
            return None
        return self.apply_splices(old, diff_splices(old, new))

    def _apply_byte_splices(self, splices: list[ByteSplice]) -> bytes | None:
        with self._capture() as captured, self.doc.transaction():
            for s in splices:  # descending order: earlier offsets stay valid
                if s.length:
                    del self._text[s.start : s.start + s.length]
                if s.text:
                    self._text.insert(s.start, s.text)
        self._edits_since_load += 1
        if self._edits_since_load >= RELOAD_AFTER_EDITS and self.byte_size >= RELOAD_MIN_BYTES:
            self._reload()
        return join_updates(captured)

    def _reload(self) -> None:
        """Continue in a fresh in-memory document (a new client id) loaded from this state.

        yrs merges each local insertion into the block of the insertion before it when
        both are this client's and adjacent, copying the block's text: appends to a large
        note made by one client id cost ever more (6,000 appends of 60 B: ~700 us per
        append, against ~30 us on a fresh client; measured with pycrdt 0.14). A new
        client id starts a new block. Loading a note from the store does the same (every
        load is a new client id), so this adds one state-vector entry per
        ``RELOAD_AFTER_EDITS`` edits of a large note, nothing else.
        """
        fresh: pycrdt.Doc[pycrdt.Text] = pycrdt.Doc(skip_gc=True)
        fresh.apply_update(self.doc.get_update())
        self.doc, self._text = fresh, fresh.get(TEXT_NAME, type=pycrdt.Text)
        self._edits_since_load = 0
        self._changed()

