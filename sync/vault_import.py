"""First import of a folder into an empty (or partial) vault store: ``stet init``.

Each file becomes a note through its deterministic genesis update (``NoteDoc.genesis``),
so the same file imported on two machines yields the same note id and the same CRDT
items; merging the two stores later adds nothing twice.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .attachment_entry import attachment_id
from .attachment_files import TAKEN_AT_INIT, AttachmentFiles
from .attachment_plan import SeenFile
from .attachment_scan import ingest, scan_attachments
from .blob_store import FILE_MODE, BlobStore
from .folder_scan import FileChanged, SkipFile, decode_note, read_note_file, scan_folder
from .ignore_rules import IgnoreRules
from .note_doc import NoteDoc, genesis_note_id, revision_of, text_revision
from .note_rows import DiskState, NoteRow
from .search_index import SearchIndex, search_db_path
from .store import VaultStore

BATCH = 500


@dataclass(slots=True)
class ImportReport:
    imported: int = 0
    already_known: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    other_files: int = 0
    other_bytes: int = 0
    bytes: int = 0
    attachments: int = 0  # taken in (blob stored, seen row written)
    attachment_bytes: int = 0


def genesis_row(
    path: str, text: str, source: str, now: float, disk: DiskState | None
) -> tuple[NoteRow, bytes]:
    """The index row and first update of a note created with ``text`` at ``path``."""
    row = NoteRow(
        id=genesis_note_id(path, text),
        path=path,
        deleted=False,
        revision=text_revision(text),
        size=len(text.encode("utf-8")),
        created_at=now,
        updated_at=now,
        updated_by=source,
        disk=disk,
        update_count=1,
    )
    return row, NoteDoc.genesis(path, text)


def import_folder(
    store: VaultStore,
    root: Path,
    *,
    extensions: tuple[str, ...],
    max_bytes: int,
    source: str = "disk",
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import every note file of ``root`` that the store does not hold yet."""
    rules = IgnoreRules.load(root)
    scan = scan_folder(root, rules, extensions, max_bytes)
    report = ImportReport(skipped=dict(scan.skipped), other_files=scan.other_files,
                          other_bytes=scan.other_bytes)
    paths = sorted(scan.notes)
    total = len(paths)
    done = 0
    # The search index is a database of its own (derived: the daemon catches it up with
    # the store at start, should this import be cut short).
    index = SearchIndex(search_db_path(store.path))
    for start in range(0, total, BATCH):
        with store.transaction(), index.batch():
            for path in paths[start : start + BATCH]:
                done += 1
                if store.note_at(path) is not None:
                    report.already_known += 1
                    continue
                try:
                    data, fst = read_note_file(root, path, max_bytes)
                    text = decode_note(data)
                except (FileNotFoundError, FileChanged):
                    continue  # the daemon's first scan picks it up once it settles
                except SkipFile as exc:
                    report.skipped[path] = exc.message
                    continue
                disk = DiskState(revision_of(data), fst.mtime_ns, fst.size, fst.ino)
                row, update = genesis_row(path, text, source, time.time(), disk)
                existing = store.note(row.id)
                if existing is not None:
                    report.already_known += 1
                    continue
                store.put_note(row)
                store.append_update(row.id, update, source)
                index.put(row.id, path, row.revision, text)
                report.imported += 1
                report.bytes += len(data)
        if progress is not None:
            progress(done, total)
    index.close()
    store.replace_skipped(report.skipped)
    return report


def import_attachments(store: VaultStore, blobs: BlobStore, root: Path, *, extensions: tuple[str, ...],
                       max_bytes: int, report: ImportReport) -> None:
    """Take in the folder's attachments (SPEC §3.14) as ``stet init`` imports the notes:
    each file's bytes into the home's blob store, and a seen row (``TAKEN_AT_INIT``) that
    the daemon's first pass records as the attachment's creation. From then on the brake
    and versions cover them: a file deleted before the daemon first looked (right after
    `stet start`) is a deletion, its bytes kept -- before, it was never known (issue 37)."""
    scan = scan_attachments(root, IgnoreRules.load(root), extensions, max_bytes)
    files = AttachmentFiles(store)
    known = set(files.all())
    for path in sorted(scan.files):
        if path in known:
            continue
        try:
            got = ingest(blobs, root, path, max_bytes)
        except OSError:
            continue  # unreadable now: the daemon's passes report it
        if got is None:
            continue  # changed while read (or gone): the daemon's first pass takes it in
        info, st = got
        with contextlib.suppress(OSError):  # private, as the store makes its own (blob_store.FILE_MODE)
            blob = blobs.path_of(info.sha256)
            # Never through a link: a store file an older Stet hard-linked into the vault is
            # also the person's file (the daemon gives each its own inode at start).
            if os.lstat(blob).st_nlink == 1:
                os.chmod(blob, FILE_MODE)
        files.put(path, SeenFile(attachment_id(path), info.sha256, st.size, st.mtime_ns, st.ino,
                                 st.executable, TAKEN_AT_INIT))
        report.attachments += 1
        report.attachment_bytes += st.size


def import_new_vault(
    db_path: Path,
    root: Path,
    *,
    synchronous: str,
    extensions: tuple[str, ...],
    max_bytes: int,
    progress: Callable[[int, int], None] | None = None,
    blobs_dir: Path | None = None,
    attachment_max_bytes: int = 0,
) -> ImportReport:
    """``stet init``'s import: open (or create) the vault's store at ``db_path``, import
    ``root`` into it and close it. The CLI's one write to a store (before any daemon
    knows the vault); client/ never opens a ``VaultStore`` itself. ``blobs_dir``: the
    home's blob store, where the attachments' bytes go (None: notes only)."""
    store = VaultStore(db_path, synchronous=synchronous)
    try:
        report = import_folder(store, root, extensions=extensions, max_bytes=max_bytes, progress=progress)
        if blobs_dir is not None:
            # The home is private (SPEC R4): folders made here 0700, and each blob stored
            # 0400 (what ``secure_home`` would make of it at the next CLI call, with a warning).
            mask = os.umask(0o077)
            try:
                # clean=False: a running daemon may be writing in its tmp/ right now.
                blobs = BlobStore(blobs_dir, clean=False)
                import_attachments(store, blobs, root, extensions=extensions, max_bytes=attachment_max_bytes,
                                   report=report)
            finally:
                os.umask(mask)
        return report
    finally:
        store.close()
