"""What each attachment path of a vault held when the folder side last looked or wrote
(SPEC §3.14): the store's ``attachment_files`` rows and a copy in memory, read by the intake
(what changed), the outflow (what may be written over) and the blob bookkeeping.

After each step the seen state is what was written, so the folder side's own writes never
come back as changes.
"""

from __future__ import annotations

from stet.sync.attachment_files import AttachmentFiles
from stet.sync.attachment_plan import SeenFile


class SeenFiles:
    def __init__(self, files: AttachmentFiles) -> None:
        self.files = files
        self.by_path: dict[str, SeenFile] = files.all()

    def get(self, path: str) -> SeenFile | None:
        return self.by_path.get(path)

    def set(self, path: str, seen: SeenFile | None) -> None:
        """Remember (or forget) what a path holds, in the store and here."""
        if seen is None:
            self.files.remove(path)
            self.by_path.pop(path, None)
        else:
            self.files.put(path, seen)
            self.by_path[path] = seen

    def reload(self) -> None:
        """Memory as the store has it again (after a pass failed)."""
        self.by_path = self.files.all()
