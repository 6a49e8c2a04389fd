"""The vault store's schema: its tables, indexes and triggers as numbered migrations.

``VaultStore`` (store.py) applies them step by step on open, and refuses a store written
by a newer schema (``SCHEMA_VERSION``) instead of starting empty. A new version appends a
tuple here; a released one is never edited.
"""

from __future__ import annotations

# Live notes whose path holds a character outside ASCII (a partial index's condition; a
# query must repeat it word for word for SQLite to use that index).
NON_ASCII_LIVE = "deleted = 0 AND path GLOB '*[^\x01-\x7f]*'"

SCHEMA_VERSION = 7

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
        """CREATE TABLE notes (
            id TEXT PRIMARY KEY,
            path TEXT NOT NULL,
            deleted INTEGER NOT NULL DEFAULT 0,
            revision TEXT NOT NULL,
            size INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            updated_by TEXT NOT NULL,
            disk_revision TEXT,
            disk_mtime_ns INTEGER,
            disk_size INTEGER,
            disk_ino INTEGER,
            disk_snapshot BLOB,
            update_count INTEGER NOT NULL DEFAULT 0
        )""",
        """CREATE UNIQUE INDEX notes_live_path ON notes(path) WHERE deleted = 0""",
        """CREATE TABLE updates (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            note_id TEXT NOT NULL,
            data BLOB NOT NULL,
            source TEXT NOT NULL,
            created_at REAL NOT NULL
        )""",
        """CREATE INDEX updates_by_note ON updates(note_id, seq)""",
        """CREATE TABLE skipped (
            path TEXT PRIMARY KEY,
            reason TEXT NOT NULL,
            seen_at REAL NOT NULL
        )""",
    ),
    2: (
        # The CRDT snapshot behind every revision handed out (baseRevision, SPEC §6.4).
        """CREATE TABLE revision_states (
            note_id TEXT NOT NULL,
            revision TEXT NOT NULL,
            snapshot BLOB NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (note_id, revision)
        )""",
        # Local versions (SPEC §5): the text of a note at a moment worth keeping.
        """CREATE TABLE versions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            note_id TEXT NOT NULL,
            path TEXT NOT NULL,
            kind TEXT NOT NULL,
            source TEXT NOT NULL,
            created_at REAL NOT NULL,
            revision TEXT NOT NULL,
            text TEXT NOT NULL
        )""",
        """CREATE INDEX versions_by_note ON versions(note_id, created_at)""",
        # The attributed change log (SPEC §6.10).
        """CREATE TABLE change_log (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            note_id TEXT NOT NULL,
            path TEXT NOT NULL,
            kind TEXT NOT NULL,
            source TEXT NOT NULL,
            device TEXT,
            at REAL NOT NULL,
            revision_before TEXT,
            revision_after TEXT,
            inserted INTEGER NOT NULL DEFAULT 0,
            deleted INTEGER NOT NULL DEFAULT 0,
            old_path TEXT
        )""",
        """CREATE INDEX change_log_by_path ON change_log(path, id)""",
        # Refused writes (SPEC §6.8).
        """CREATE TABLE conflicts (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at REAL NOT NULL,
            token TEXT NOT NULL,
            path TEXT NOT NULL,
            operation TEXT NOT NULL,
            code TEXT NOT NULL,
            attempted TEXT NOT NULL,
            current_revision TEXT
        )""",
        # Idempotency keys, scoped to (token, vault) -- the vault is this database.
        """CREATE TABLE idempotency (
            token TEXT NOT NULL,
            key TEXT NOT NULL,
            payload_hash TEXT NOT NULL,
            result TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (token, key)
        )""",
        # Changes held by the burst brake (SPEC §5.6).
        """CREATE TABLE held (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            note_id TEXT NOT NULL,
            path TEXT NOT NULL,
            source TEXT NOT NULL,
            kind TEXT NOT NULL,
            held_at REAL NOT NULL,
            version_id INTEGER,
            state TEXT NOT NULL DEFAULT 'held',
            resolved_at REAL
        )""",
        # Full-text search over live notes (SPEC §6.4 search_notes).
        """CREATE VIRTUAL TABLE notes_fts USING fts5(note_id UNINDEXED, path, content,
            tokenize = 'unicode61 remove_diacritics 2')""",
    ),
    3: (
        # Notes edited since their last idle version (SPEC §5.2); when they were last
        # edited is notes.updated_at, so this only records membership.
        """CREATE TABLE version_due (note_id TEXT PRIMARY KEY)""",
        # Sources whose burst brake is engaged (SPEC §5.6).
        """CREATE TABLE brakes (source TEXT PRIMARY KEY, engaged_at REAL NOT NULL)""",
        """ALTER TABLE held ADD COLUMN resolved_by TEXT""",
        """CREATE INDEX held_by_state ON held(state, held_at)""",
        """CREATE INDEX versions_by_path ON versions(path)""",
    ),
    4: (
        # The search index's rows are now keyed by the note's rowid (an indexed lookup)
        # instead of a scan of its unindexed note_id column (quadratic on import). Its
        # old rows are dropped; the daemon rebuilds the index from the notes at start.
        """DELETE FROM notes_fts""",
    ),
    5: (
        # Snapshot reads (SPEC §6.4): a snapshot is a store position, never a copy. The
        # updates table gives each note's content as of ``update_seq``; where notes were
        # (paths, deletions) as of ``history_seq`` comes from ``note_history``.
        """CREATE TABLE snapshots (
            id TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            update_seq INTEGER NOT NULL,
            history_seq INTEGER NOT NULL
        )""",
        # A note's path and deleted flag before each change of either, recorded by the
        # trigger below in the same transaction as the change (every writer of the notes
        # table is covered), and only while a snapshot exists: nothing otherwise.
        """CREATE TABLE note_history (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            note_id TEXT NOT NULL,
            path TEXT NOT NULL,
            deleted INTEGER NOT NULL
        )""",
        """CREATE INDEX note_history_by_note ON note_history(note_id, seq)""",
        """CREATE TRIGGER note_history_keep AFTER UPDATE OF path, deleted ON notes
            WHEN (old.path IS NOT new.path OR old.deleted IS NOT new.deleted)
                 AND EXISTS (SELECT 1 FROM snapshots)
            BEGIN
                INSERT INTO note_history (note_id, path, deleted) VALUES (old.id, old.path, old.deleted);
            END""",
        # Promotion (SPEC §6.4): which note a refused write was aimed at, the CRDT state
        # of the text it was made against (so it can be applied as made there, later),
        # and whether a person promoted it.
        """ALTER TABLE conflicts ADD COLUMN note_id TEXT""",
        """ALTER TABLE conflicts ADD COLUMN base_revision TEXT""",
        """ALTER TABLE conflicts ADD COLUMN base_state BLOB""",
        """ALTER TABLE conflicts ADD COLUMN promoted_at REAL""",
        """ALTER TABLE conflicts ADD COLUMN promoted_by TEXT""",
        """ALTER TABLE conflicts ADD COLUMN promoted_revision TEXT""",
    ),
    6: (
        # Old bytes of replaced/deleted attachments (SPEC §3.14): the bytes are blobs in
        # the home's blob store, named by sha256; these rows say which are kept and why.
        """CREATE TABLE attachment_versions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            attachment_id TEXT NOT NULL,
            path TEXT NOT NULL,
            kind TEXT NOT NULL,
            source TEXT NOT NULL,
            created_at REAL NOT NULL,
            sha256 TEXT NOT NULL,
            size INTEGER NOT NULL,
            executable INTEGER NOT NULL DEFAULT 0,
            pinned INTEGER NOT NULL DEFAULT 0
        )""",
        """CREATE INDEX attachment_versions_by_attachment ON attachment_versions(attachment_id, id)""",
        """CREATE INDEX attachment_versions_by_path ON attachment_versions(path, id)""",
        """CREATE INDEX attachment_versions_by_sha ON attachment_versions(sha256)""",
        # What the daemon last saw at (or wrote to) each attachment path, and the index
        # change those bytes are (sync/attachment_plan.py's SeenFile).
        """CREATE TABLE attachment_files (
            path TEXT PRIMARY KEY,
            attachment_id TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            ino INTEGER NOT NULL,
            executable INTEGER NOT NULL,
            hlc TEXT NOT NULL
        )""",
    ),
    7: (
        # What the attachment versions cost (each distinct blob once), kept by triggers in
        # the transaction of every insert and delete, so retention reads one row instead of
        # grouping the whole table at each version kept (a checkout deleting 1,300
        # attachments kept 1,300 versions at O(n) each).
        """CREATE TABLE attachment_version_blobs (
            sha256 TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            refs INTEGER NOT NULL
        ) WITHOUT ROWID""",
        """CREATE TABLE attachment_versions_used (
            id INTEGER PRIMARY KEY CHECK (id = 0),
            bytes INTEGER NOT NULL
        )""",
        """INSERT INTO attachment_version_blobs (sha256, size, refs)
            SELECT sha256, max(size), count(*) FROM attachment_versions GROUP BY sha256""",
        """INSERT INTO attachment_versions_used (id, bytes)
            SELECT 0, coalesce(sum(size), 0) FROM attachment_version_blobs""",
        """CREATE TRIGGER attachment_version_added AFTER INSERT ON attachment_versions
            BEGIN
                UPDATE attachment_versions_used SET bytes = bytes + new.size
                    WHERE NOT EXISTS (SELECT 1 FROM attachment_version_blobs WHERE sha256 = new.sha256);
                INSERT INTO attachment_version_blobs (sha256, size, refs) VALUES (new.sha256, new.size, 1)
                    ON CONFLICT (sha256) DO UPDATE SET refs = refs + 1;
            END""",
        """CREATE TRIGGER attachment_version_dropped AFTER DELETE ON attachment_versions
            BEGIN
                UPDATE attachment_version_blobs SET refs = refs - 1 WHERE sha256 = old.sha256;
                UPDATE attachment_versions_used SET bytes = bytes - coalesce(
                    (SELECT size FROM attachment_version_blobs WHERE sha256 = old.sha256 AND refs = 0), 0);
                DELETE FROM attachment_version_blobs WHERE sha256 = old.sha256 AND refs = 0;
            END""",
        # Retention walks the oldest first.
        """CREATE INDEX attachment_versions_by_age ON attachment_versions(created_at, id)""",
    ),
}
