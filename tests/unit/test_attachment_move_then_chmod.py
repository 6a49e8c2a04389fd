"""A peer's change that moves an attachment and flips its executable bit (a checkout across
branches where a file was renamed and ``chmod +x``-ed) plans ``MoveFile`` then
``SetExecutable`` at the new path, in one outflow (issue 37, item 4). The second step found
the path's seen state in the snapshot taken before the move (``seen[a.path]``): a
``KeyError`` every pass, the rest of the pass never done, until a restart.

In process, on a real folder, store and blob store (``attachment_replica_rig``); the peer's
change goes into the index as a peer's index update would."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from stet.sync.attachment_entry import moved
from stet.sync.attachment_plan import MoveFile, SetExecutable, plan_outflow
from stet.sync.hlc import Hlc
from tests.unit.attachment_replica_rig import make_replica

SCRIPT = b"#!/bin/sh\necho the bytes every device has\n" * 20


def later(hlc: str) -> str:
    return Hlc.unpack(hlc).next().pack()


async def test_a_move_and_an_executable_bit_in_one_plan_are_both_carried_out(tmp_path: Path) -> None:
    r, root = make_replica(tmp_path)
    (root / "tools").mkdir()
    (root / "tools" / "run.sh").write_bytes(SCRIPT)
    await r.sync_now()
    created = r.index.live()["tools/run.sh"]
    assert not created.executable

    # The peer renamed it and made it executable in one change.
    r.index.put(moved(created, "bin/run.sh", hlc=later(created.hlc), device="DEVICE-B", executable=True))
    disk = await r.view.scan(r.rules())
    plan = plan_outflow(disk, r.seen.by_path, r.index.live(), r.blobs.has)
    assert [type(a) for a in plan] == [MoveFile, SetExecutable]  # the plan this is about

    await r.sync_now()  # raised KeyError: 'bin/run.sh'
    assert not (root / "tools" / "run.sh").exists()
    mode = os.stat(root / "bin" / "run.sh").st_mode
    assert mode & stat.S_IXUSR, oct(mode)
    assert (root / "bin" / "run.sh").read_bytes() == SCRIPT
    seen = r.seen.get("bin/run.sh")
    assert seen is not None
    assert (seen.executable, seen.att_id) == (True, created.id)
    assert r.seen.get("tools/run.sh") is None
    # Nothing left to do: the next pass plans nothing.
    disk = await r.view.scan(r.rules())
    assert plan_outflow(disk, r.seen.by_path, r.index.live(), r.blobs.has) == []
