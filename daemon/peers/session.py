"""One sync session with one peer over an authenticated websocket (SPEC §4.5).

Both sides run the same code. After HELLO (the vaults each side wants, answered only
with vaults the peer is a member of), per shared vault: INDEX_SYNC (index state vector
+ a digest of every note's state vector) → INDEX_UPDATE (what the other lacks) and,
only if the digests differ, NOTE_SVS → NOTE_UPDATES. Then live updates stream both
ways. Anything malformed closes this link with a logged reason; the daemon, its other
links and its stores are untouched.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pycrdt

from stet.daemon.base.loop_slices import TimeSlice
from stet.daemon.base.memory import settle as settle_now
from stet.sync import peer_protocol as pp
from stet.sync.change_kinds import ChangeKind, Source, made_on, peer_source
from stet.sync.errors import CrdtError, StetError
from stet.sync.state_vectors import vault_digest

if TYPE_CHECKING:
    from stet.daemon.notes.changes import Change
    from stet.daemon.notes.service import NotesService

logger = logging.getLogger(__name__)

# A frame of updates at most this large (plus one note's update). asyncio's TLS transport
# encrypts a frame whole into an OpenSSL buffer that keeps its largest size for the life of
# the link: 4 MiB frames left the serving daemon holding ~4.3 MiB after a first sync (P7,
# bench/history/rounds.md "P7: below Syncthing"); 1 MiB frames leave ~1 MiB.
BATCH_BYTES = 1024 * 1024
Send = Callable[[bytes], Awaitable[None]]


class LinkClosed(Exception):
    pass


@dataclass
class PeerLink:
    """A live, authenticated connection to one device."""

    device_id: str
    send_raw: Send
    initiator: bool
    vaults: set[str] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    bytes_sent: int = 0
    bytes_received: int = 0
    closed: bool = False

    async def send(self, data: bytes) -> None:
        if self.closed:
            return
        async with self.lock:
            await self.send_raw(data)  # the hub's writer counts bytes_sent


class VaultAccess:
    """What a session needs from the daemon for one vault."""

    def __init__(self, vault_id: str, service: NotesService, is_member: Callable[[str], bool],
                 may_send: Callable[[str], bool] | None = None,
                 settle: Callable[[], None] | None = None,
                 room: Callable[[], Awaitable[None]] | None = None) -> None:
        self.vault_id = vault_id
        self.service = service
        self.is_member = is_member
        self.may_send = may_send or (lambda note_id: True)
        # After a first sync: drop its documents and give its heap back once the writes
        # and indexing it caused are over (``memory.SettleWhenCaughtUp``); at once if alone.
        self.settle = settle or (lambda: settle_now(service))
        # Before each slice of a peer's notes: room for them in the folder's writer
        # (``DiskWrites.room_for_new_notes``); none without a folder.
        self.room = room


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str) or len(text) > 1 << 20:
        raise pp.ProtocolError("bad base64 field")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise pp.ProtocolError("bad base64 field") from None


# Bytes of updates served in one round after which the serving side settles too (its
# merged updates and frames; a reconnect with nothing changed sends a few hundred bytes).
SETTLE_AFTER_SERVING = 4 * 2**20


class PeerSession:
    def __init__(self, link: PeerLink, my_device: str, vaults: dict[str, VaultAccess]) -> None:
        self.link = link
        self.my_device = my_device
        self.vaults = vaults
        self.synced = asyncio.Event()

    # -- outgoing ---------------------------------------------------------------------

    async def start(self) -> None:
        wanted = [vid for vid, v in self.vaults.items() if v.is_member(self.link.device_id)]
        await self.link.send(pp.encode(pp.HELLO, {"device": self.my_device, "vaults": wanted}))

    async def _send_index_sync(self, vault: VaultAccess) -> None:
        service = vault.service
        digest = vault_digest(service.content_states())
        await self.link.send(pp.encode(pp.INDEX_SYNC, {
            "vault": vault.vault_id, "sv": _b64(service.index.state_vector()), "digest": digest,
        }))

    def frame_for_change(self, vault_id: str, change: Change) -> bytes | None:
        """The frame for one local (or forwarded) change on its own (the hub gathers a
        turn's changes with ``frames_for_changes`` instead)."""
        frames = self.frames_for_changes([(vault_id, change)])
        return frames[0] if frames else None

    def frames_for_changes(self, changes: list[tuple[str, Change]]) -> list[bytes]:
        """The frames for a turn's worth of local (or forwarded) changes: per vault, one
        INDEX_UPDATE with the index updates merged, then the note updates in order, in
        batches of at most ``BATCH_BYTES`` (``change_frames``)."""
        index: dict[str, list[bytes]] = {}
        notes: dict[str, list[pp.UpdateItem]] = {}
        for vault_id, change in changes:
            if vault_id not in self.link.vaults or change.update is None:
                continue
            if change.device == self.link.device_id:
                continue  # it came from there
            index.setdefault(vault_id, [])
            notes.setdefault(vault_id, [])
            if change.kind == ChangeKind.INDEX:
                index[vault_id].append(change.update)
                continue
            vault = self.vaults.get(vault_id)
            if vault is None or not vault.may_send(change.note_id):
                continue
            notes[vault_id].append(pp.UpdateItem(change.note_id, change.update, change.source,
                                                 change.device or self.my_device))
        frames: list[bytes] = []
        for vault_id, updates in index.items():
            if updates:
                merged = updates[0] if len(updates) == 1 else bytes(pycrdt.merge_updates(*updates))
                frames.append(pp.encode(pp.INDEX_UPDATE, {"vault": vault_id}, merged))
            batch, size = pp.UpdateBatch(vault_id), 0
            for item in notes[vault_id]:
                if batch.items and size + len(item.update) > BATCH_BYTES:
                    frames.append(pp.encode_updates(batch))
                    batch, size = pp.UpdateBatch(vault_id), 0
                batch.items.append(item)
                size += len(item.update)
            if batch.items:
                frames.append(pp.encode_updates(batch))
        return frames

    # -- incoming ---------------------------------------------------------------------

    async def handle(self, data: bytes) -> None:
        self.link.bytes_received += len(data)
        frame = pp.decode(data)
        if frame.type == pp.HELLO:
            await self._on_hello(frame)
            return
        if frame.type == pp.ERROR:
            raise LinkClosed(f"peer reported: {frame.header.get('message')!r}")
        vault_id = pp.field_str(frame.header, "vault")
        vault = self.vaults.get(vault_id)
        if vault is None or vault_id not in self.link.vaults:
            raise pp.ProtocolError("message for a vault this link does not share")
        try:
            if frame.type == pp.INDEX_SYNC:
                await self._on_index_sync(vault, frame)
            elif frame.type == pp.INDEX_UPDATE:
                vault.service.apply_remote_index(frame.payload, self.link.device_id)
                self._check_membership(vault)
            elif frame.type == pp.NOTE_SVS:
                await self._on_note_svs(vault, frame)
            elif frame.type == pp.NOTE_UPDATES:
                await self._on_note_updates(vault, frame)
            elif frame.type == pp.SYNCED:
                self.synced.set()
                vault.settle()  # after a first sync: drop its documents, give its heap back
            else:
                raise pp.ProtocolError(f"unexpected message type {frame.type}")
        except CrdtError as exc:
            raise pp.ProtocolError(f"bad update: {exc.message}") from None

    def _check_membership(self, vault: VaultAccess) -> None:
        if not vault.is_member(self.link.device_id):
            self.link.vaults.discard(vault.vault_id)
            raise LinkClosed("the peer is no longer a member of the vault")

    async def _on_hello(self, frame: pp.Frame) -> None:
        device = pp.field_str(frame.header, "device")
        if device != self.link.device_id:
            raise pp.ProtocolError("hello names another device than its certificate")
        theirs = frame.header.get("vaults")
        if not isinstance(theirs, list) or not all(isinstance(v, str) for v in theirs):
            raise pp.ProtocolError("bad vault list")
        shared = {v for v in theirs if v in self.vaults and self.vaults[v].is_member(device)}
        self.link.vaults = shared
        if not shared:
            raise LinkClosed("no shared vault")
        for vid in sorted(shared):
            await self._send_index_sync(self.vaults[vid])

    async def _on_index_sync(self, vault: VaultAccess, frame: pp.Frame) -> None:
        service = vault.service
        their_sv = _unb64(frame.header.get("sv"))
        update = service.index.update_since(their_sv)
        await self.link.send(pp.encode(pp.INDEX_UPDATE, {"vault": vault.vault_id}, update))
        states = service.content_states()
        if frame.header.get("digest") != vault_digest(states):
            notes = [[note_id, _b64(sv)] for note_id, sv in states]
            await self.link.send(pp.encode(pp.NOTE_SVS, {"vault": vault.vault_id, "notes": notes}))
        else:
            await self.link.send(pp.encode(pp.SYNCED, {"vault": vault.vault_id}))

    async def _on_note_svs(self, vault: VaultAccess, frame: pp.Frame) -> None:
        raw = frame.header.get("notes")
        if not isinstance(raw, list):
            raise pp.ProtocolError("notes must be a list")
        theirs: dict[str, bytes] = {}
        for item in raw:
            if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
                raise pp.ProtocolError("bad note state entry")
            theirs[item[0]] = _unb64(item[1])
        service = vault.service
        batch = pp.UpdateBatch(vault.vault_id)
        size = sent = 0
        slice_ = TimeSlice()  # 10,000 notes' updates are not built in one step of the loop
        for note_id, my_sv in service.content_states():
            await slice_.pause_if_over()
            if self.link.closed:
                return
            if not vault.may_send(note_id):
                continue
            their_sv = theirs.get(note_id)
            if their_sv == my_sv:
                continue
            if their_sv is None:
                # A note they lack entirely (a first sync): its stored updates as they are,
                # merged -- no document built (nor pushed out of the cache) for it.
                stored = service.store.updates(note_id)
                update = stored[0] if len(stored) == 1 else bytes(pycrdt.merge_updates(*stored))
            else:
                doc = service.doc(note_id)
                update = doc.update_since(their_sv)
            if len(update) <= 2 and their_sv is not None:
                continue  # nothing they lack (an empty note they lack still goes)
            # Where they have the note, what we had when we built this goes with it: they can
            # then tell what we both had, and merge by lines what we both changed.
            if their_sv is None:
                batch.items.append(pp.UpdateItem(note_id, update, Source.SYNC, self.my_device))
            else:
                # And who last wrote our text, should they find we both changed the same words.
                row = service.store.note(note_id)
                batch.items.append(pp.UpdateItem(
                    note_id, update, Source.SYNC, self.my_device, doc.snapshot(),
                    made_on(row.updated_by, self.my_device)[:256] if row is not None else None))
            size += len(update)
            if size >= BATCH_BYTES:
                await self.link.send(pp.encode_updates(batch))
                sent += size
                batch, size = pp.UpdateBatch(vault.vault_id), 0
        if batch.items:
            await self.link.send(pp.encode_updates(batch))
        await self.link.send(pp.encode(pp.SYNCED, {"vault": vault.vault_id}))
        if sent + size >= SETTLE_AFTER_SERVING:  # a first sync served: give its heap back once sent
            vault.settle()

    async def _on_note_updates(self, vault: VaultAccess, frame: pp.Frame) -> None:
        """Apply a frame of notes in time slices: each slice one unit of work (one commit,
        then announced), the loop let run between slices (a first sync's 4 MB frame holds
        ~800 notes: applied at once it held B's loop for seconds). Frames of this link
        wait meanwhile (``run_session`` handles one at a time), so their order holds."""
        decoded = pp.decode_updates(frame).items
        items = [(item.note_id, item.update,
                  item.source if item.source != Source.SYNC else peer_source(item.device), item.device)
                 for item in decoded]
        snapshots = {item.note_id: item.snapshot for item in decoded if item.snapshot is not None}
        writers = {item.note_id: item.writer for item in decoded if item.writer is not None}
        service = vault.service
        slice_ = TimeSlice()
        i = 0
        while i < len(items):
            if slice_.cut_before_it_began():
                # Cut for a request in flight (requests first) before it began: nothing
                # this turn, as the folder's intake does. Its "one item" was a unit of
                # work -- a commit, an index lookup, a frame of announcements -- for one
                # note: with an agent polling every 20 ms, most of a receiving peer's
                # 10,000 notes went so (P8: 956 units, half of them of one note).
                await slice_.pause()
                if self.link.closed or vault.vault_id not in self.link.vaults:
                    return  # (as below)
                continue
            if vault.room is not None:
                await vault.room()
                if self.link.closed or vault.vault_id not in self.link.vaults:
                    return  # (as below)
            # One unit per slice. A bad item: the items before it were valid and are kept
            # (one commit, then announced); its own writes are undone, its document
            # forgotten, nothing of it announced (``apply_remote_slice``).
            i, failed = service.apply_remote_slice(items, i, slice_.over, snapshots, writers)
            if failed is not None:
                raise failed
            if i < len(items):
                await slice_.pause()
                if self.link.closed or vault.vault_id not in self.link.vaults:
                    return  # the link (or the vault) went meanwhile: the next sync resends


async def run_session(session: PeerSession, receive: Callable[[], Awaitable[bytes | None]]) -> str:
    """Drive a session until the link ends; returns why it ended."""
    try:
        await session.start()
        slice_ = TimeSlice()
        while True:
            data = await receive()
            if data is None:
                return "closed by peer"
            await session.handle(data)
            # Frames already received come back from ``receive`` without letting the loop
            # run: after a slice's worth of them, let it (a bulk intake on the peer sends
            # a stream of small frames).
            await slice_.pause_if_over()
    except LinkClosed as exc:
        return str(exc)
    except (pp.ProtocolError, StetError) as exc:
        logger.warning("closing link to %s: %s", session.link.device_id[:7], exc)
        with contextlib.suppress(Exception):
            await session.link.send(pp.encode(pp.ERROR, {"code": "protocol", "message": str(exc)[:200]}))
        return f"protocol error: {exc}"
    except BaseException as exc:
        if type(exc).__name__ == "PanicException":
            logger.error("closing link to %s: CRDT panic contained", session.link.device_id[:7])
            return "crdt panic"
        raise
