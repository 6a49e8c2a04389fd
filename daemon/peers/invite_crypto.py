"""Pairing's Ed25519 work (SPEC §5: invites and join proofs), done in a short-lived child.

Making an invite key, signing a join proof and checking one need ``cryptography`` (~8 MB
resident once loaded); pairing happens a few times in a daemon's life, and the library
would stay loaded for the rest of it (P7). So each operation runs
``python -m stet.daemon.peers.invite_crypto`` with its arguments as JSON on stdin and the answer
as JSON on stdout (pipes: the invite secret never touches the disk). A failure is a
``StetError`` with the child's message (e.g. "the invite is damaged").
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sys
from typing import Any

from stet.sync.errors import StetError

CHILD_TIMEOUT_S = 60.0


class KeyWork:
    """The child for one operation, started ahead: its interpreter and ``cryptography``
    load (the child imports them before it reads its question) while the caller waits for
    what to ask -- the joiner while it dials the inviter, the inviter while the joiner signs
    its proof. Each child answered one question after its ~0.1 s start, two of them one
    after the other in every join (P9's and P4's clocks)."""

    def __init__(self) -> None:
        self._proc: asyncio.Task[asyncio.subprocess.Process] = asyncio.ensure_future(_spawn())

    async def ask(self, op: str, **args: Any) -> Any:
        proc = await self._proc
        return await _answer(proc, op, args)

    async def close(self) -> None:
        """End the child unless it answered (never asked, or its question cut short)."""
        try:
            proc = await self._proc
        except Exception:
            return  # never started: nothing to end
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


async def _spawn() -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "stet.daemon.peers.invite_crypto",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def _run(op: str, **args: Any) -> Any:
    return await KeyWork().ask(op, **args)


async def _answer(proc: asyncio.subprocess.Process, op: str, args: dict[str, Any]) -> Any:
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps({"op": op, **args}).encode()),
                                          CHILD_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise StetError(f"pairing's key work took over {CHILD_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        raise StetError(f"pairing's key work failed (exit {proc.returncode}): "
                        f"{err.decode('utf-8', 'replace').strip()[-500:]}")
    answer = json.loads(out)
    if "error" in answer:
        raise StetError(str(answer["error"]))
    return answer["result"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


async def new_invite_key() -> tuple[str, str]:
    """(the secret for the invite line, the verify key to keep): ``invites.new_invite_key``."""
    secret, verify_key = await _run("new_key")
    return str(secret), str(verify_key)


async def proof_for_secret(secret: str, vault_id: str, inviter_cert_der: bytes,
                           joiner_cert_der: bytes, work: KeyWork | None = None) -> str:
    return str(await (work or KeyWork()).ask("prove", secret=secret, vault_id=vault_id,
                                             inviter=_b64(inviter_cert_der), joiner=_b64(joiner_cert_der)))


async def check_proof(proof: str, verify_keys: list[str], vault_id: str, inviter_cert_der: bytes,
                      joiner_cert_der: bytes, work: KeyWork | None = None) -> str | None:
    result = await (work or KeyWork()).ask("check", proof=proof, keys=verify_keys, vault_id=vault_id,
                                           inviter=_b64(inviter_cert_der), joiner=_b64(joiner_cert_der))
    return None if result is None else str(result)


def _child() -> int:
    # Loaded before the question is read: a child started ahead (``KeyWork``) loads them
    # while its parent waits for what to ask.
    import cryptography.hazmat.primitives.asymmetric.ed25519  # noqa: F401
    import cryptography.hazmat.primitives.serialization  # noqa: F401

    from stet.sync import invites

    req = json.loads(sys.stdin.read())
    op = req["op"]
    inviter, joiner = base64.b64decode(req.get("inviter", "")), base64.b64decode(req.get("joiner", ""))
    try:
        if op == "new_key":
            result: Any = list(invites.new_invite_key())
        elif op == "prove":
            result = invites.proof_for_secret(req["secret"], req["vault_id"], inviter, joiner)
        elif op == "check":
            result = invites.check_proof(req["proof"], list(req["keys"]), req["vault_id"], inviter, joiner)
        else:
            raise StetError(f"unknown operation {op!r}")
    except StetError as exc:
        sys.stdout.write(json.dumps({"error": str(exc)}))
        return 0
    sys.stdout.write(json.dumps({"result": result}))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
