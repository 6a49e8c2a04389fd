"""Is a file found after a crash our own write cut short? (SPEC §3.3, §6.6)

The writer renames a batch of files into place without an fsync each and makes the batch
durable at once (``syncfs``) before recording it as written. A power loss (or an OS
crash) in between may leave a renamed file empty, cut short, or -- on some file
systems -- filled with zero bytes where its data had not reached the disk yet. The
writes are recorded as begun before any rename, so at the next start the replica knows
which files may be like that and what each was to hold. Such a file is not the user's
edit (taken as one, it would empty or cut the note on every device): the note keeps its
text and the file is written again.
"""

from __future__ import annotations


def torn_write(found: str, intended: str) -> bool:
    """``found`` (a file's text after a crash) is ``intended`` (what our write was to put
    there) cut short: empty, a proper prefix of it, or zero bytes no longer than it
    (optionally after a prefix of it)."""
    if found == intended:
        return False
    if intended.startswith(found):
        return True
    stripped = found.rstrip("\0")
    return len(found) <= len(intended) and stripped != found and intended.startswith(stripped)
