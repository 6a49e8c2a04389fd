"""Which blobs a vault's attachment index refers to, read again only when it changed."""

from __future__ import annotations

import hashlib

import pycrdt

from stet.sync.attachment_index import AttachmentIndex
from stet.sync.blob_references import IndexShas, index_refers_to


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_every_slot_counts_and_a_change_is_seen() -> None:
    doc: pycrdt.Doc = pycrdt.Doc(skip_gc=True)
    index = AttachmentIndex(doc)
    index.record("a.png", sha256=sha(b"a"), size=1, executable=False, hlc="0000000000010000", device="D1")
    cache = IndexShas()
    assert cache.refers_to(doc, sha(b"a"))
    assert not cache.refers_to(doc, sha(b"b"))
    # Another device's slot of the same attachment (a concurrent loser's bytes) counts too.
    index.record("a.png", sha256=sha(b"b"), size=1, executable=False, hlc="0000000000020000", device="D2",
                 base="0000000000000000")
    assert cache.refers_to(doc, sha(b"b"))
    assert cache.refers_to(doc, sha(b"a"))
    assert index_refers_to(doc, sha(b"b"))
    assert not index_refers_to(doc, sha(b"c"))
