"""The human form of ``stet status``: a verdict line, then compact tables.

``stet status --json`` prints the daemon's ``/v1/status`` (or the offline equivalent)
unchanged; this view adds, for people, what other calls know: held changes
(``/v1/vaults/{v}/held``, or the store's ``held`` table without a daemon), the devices of
each vault with connected / last seen (``/v1/vaults/{v}/devices``) and the agent tokens'
last use (``home.db``). A call that fails leaves a ``?`` in its cell, never an error.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stet.sync.errors import StetError
from stet.sync.home import HomeRegistry, TokenRecord
from stet.sync.home_layout import HomeLayout

from .daemon_link import DaemonClient, quote_path
from .progress_display import sync_progress


def ago(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "never"
    delta = (time.time() if now is None else now) - ts
    if delta < 60:
        return "now" if delta < 5 else f"{delta:.0f} s ago"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if delta >= size:
            return f"{delta / size:.0f} {unit} ago"
    return "now"  # pragma: no cover


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], right: tuple[int, ...] = ()) -> list[str]:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        return "  ".join(cells).rstrip()

    return [line(header), *(line(r) for r in rows)]


@dataclass
class Extras:
    held: dict[str, int | None] = field(default_factory=dict)  # vault name -> held changes
    engaged: dict[str, list[str]] = field(default_factory=dict)  # vault name -> braked sources
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)  # device id -> merged info
    devices_known: bool = False
    tokens: list[TokenRecord] = field(default_factory=list)
    vault_names: dict[str, str] = field(default_factory=dict)


def gather(layout: HomeLayout, data: dict[str, Any], client: DaemonClient | None) -> Extras:
    extras = Extras()
    for v in data["vaults"]:
        extras.vault_names[v["id"]] = v["name"]
        if client is not None:
            base = f"/v1/vaults/{quote_path(v['name'])}"
            try:
                held = client.request("GET", f"{base}/held")
                extras.held[v["name"]] = len(held["held"])
                extras.engaged[v["name"]] = [e["source"] for e in held["engaged"]]
            except (StetError, KeyError, TypeError):
                extras.held[v["name"]] = None
            try:
                for d in client.request("GET", f"{base}/devices")["devices"]:
                    if d.get("self") or d.get("removed"):
                        continue
                    merged = extras.devices.setdefault(d["device"], {
                        "name": d.get("name") or "", "vaults": [], "connected": False, "lastSeen": None,
                    })
                    merged["vaults"].append(v["name"])
                    merged["connected"] = merged["connected"] or bool(d.get("connected"))
                    seen = d.get("lastSeen")
                    if isinstance(seen, int | float) and (merged["lastSeen"] or 0) < seen:
                        merged["lastSeen"] = float(seen)
                extras.devices_known = True
            except (StetError, KeyError, TypeError):
                pass
        else:
            extras.held[v["name"]] = _offline_held(layout, v["id"])
    if layout.home_db.exists():
        try:
            registry = HomeRegistry(layout)
            try:
                extras.tokens = [t for t in registry.tokens() if t.revoked_at is None]
            finally:
                registry.close()
        except StetError:
            pass
    return extras


def _offline_held(layout: HomeLayout, vault_id: str) -> int | None:
    from .store_reader import held_count  # read-only, only without a daemon

    return held_count(layout.vault_db(vault_id))


def _uptime(started: Any) -> str:
    if not isinstance(started, int | float):
        return "?"
    s = max(0, int(time.time() - started))
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _scopes(scopes: dict[str, list[str]]) -> str:
    kinds = ("read", "append", "write")
    return "; ".join(f"{k} {' '.join(scopes[k])}" for k in kinds if scopes.get(k)) or "-"


def waiting_deletes_line(vault: dict[str, Any]) -> str | None:
    """"Waiting: 2 deletions in notes reach peers in 41 s: ...": a person's deletes wait the
    brake's window (``[peer] delete_delay_seconds``) before peers hear of them (SPEC §5.6);
    git's bursts do not (§3.16). The line says why, in the words a person reads."""
    waiting = vault.get("pendingDeletes") or {}
    n = int(waiting.get("count", 0))
    if n <= 0:
        return None
    verb = "reaches" if n == 1 else "reach"
    return (f"Waiting: {plural(n, 'deletion')} in {vault['name']} {verb} peers in "
            f"{waiting.get('reachPeersInSeconds', 0)} s: a person's deletions wait "
            "[peer] delete_delay_seconds so the brake can stop an rm -rf before any peer has it "
            "(git's go at once).")


def size_text(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    x = float(n)
    for unit in ("KB", "MB", "GB"):
        x /= 1024
        if x < 1024 or unit == "GB":
            break
    return f"{x:.1f} {unit}"


def attachments_cell(v: dict[str, Any]) -> str:
    a = v.get("attachments")
    if not isinstance(a, dict):
        return "-"
    return f"{a.get('count', 0)} ({size_text(int(a.get('bytes', 0)))})"


def transfers_line(data: dict[str, Any]) -> str | None:
    """"Working: receiving 3 attachments from peers: 12.0 MB of 40.0 MB"."""
    t = data.get("transfers")
    if not isinstance(t, dict) or not t.get("files"):
        return None
    return (f"Working: receiving {plural(int(t['files']), 'attachment')} from peers: "
            f"{size_text(int(t.get('done', 0)))} of {size_text(int(t.get('bytes', 0)))}.")


def health_problems(data: dict[str, Any]) -> list[str]:
    """The daemon's failing tasks (``health.problems`` of ``/v1/status``), one phrase each:
    "the attachment pass of notes fails since 13:02:11 (8 times; KeyError: 'x'), tried again in 16 s"."""
    health = data.get("health")
    if not isinstance(health, dict):
        return []
    out = []
    for p in health.get("problems", []):
        where = f" of {p['vault']}" if p.get("vault") else ""
        since = time.strftime("%H:%M:%S", time.localtime(float(p.get("since", 0))))
        n = int(p.get("failures", 1))
        out.append(f"the {p.get('task', 'task')}{where} fails since {since} ({plural(n, 'time')}; "
                   f"{p.get('lastError', '?')}), tried again in {float(p.get('retryInSeconds', 0)):.0f} s")
    return out


def _skipped(v: dict[str, Any]) -> int:
    """Notes skipped, and attachments over ``max_bytes``."""
    att = v.get("attachments")
    return len(v.get("skipped", [])) + (int(att.get("skipped", 0)) if isinstance(att, dict) else 0)


def _still_landing(v: dict[str, Any]) -> str | None:
    """"12 of 4,647 attachments in place in notes" while a vault's attachments are not all
    in its folder (a first sync); None when they are, or the daemon does not say."""
    filling = sync_progress(v)
    if filling is not None:
        return f"{filling[0]:,} of {filling[1]:,} notes on disk in {v['name']}"
    att = v.get("attachments")
    if not isinstance(att, dict) or "placedFiles" not in att:
        return None
    count, placed = int(att.get("count") or 0), int(att.get("placedFiles") or 0)
    if placed >= count:
        return None
    return f"{placed:,} of {count:,} attachments in place in {v['name']}"


def render(data: dict[str, Any], extras: Extras) -> list[str]:
    """ATTACHMENTS: what each vault syncs besides notes (count, bytes); OTHER counts the
    files on disk that are not notes (attachments, and files skipped as too large)."""
    out: list[str] = []
    running = bool(data.get("running"))
    if running:
        device = data.get("deviceId") or ""
        out.append(f"Daemon: running (pid {data['pid']}, {data['apiUrl']}), home {data['home']}, "
                   f"version {data.get('version', '?')}, up {_uptime(data.get('startedAt'))}"
                   + (f", device {device[:7]}" if device else ""))
    else:
        out.append(f"Daemon: not running, home {data['home']}")
    vaults = data["vaults"]
    if not vaults:
        out.append("No vaults yet: `stet init PATH`.")
        return out

    notes = sum(int(v.get("notes", 0)) for v in vaults)
    pending = sum(int(v.get("pendingWrites", 0)) for v in vaults)
    held = sum(n for n in extras.held.values() if n)
    skipped = sum(_skipped(v) for v in vaults)
    peers = len(extras.devices)
    connected = sum(1 for d in extras.devices.values() if d["connected"])
    summary = (f"{plural(len(vaults), 'vault')}, {plural(notes, 'note')}, "
               f"{plural(pending, 'pending write')}, {held} held, {skipped} skipped")
    if extras.devices_known and peers:
        summary += f", {connected} of {plural(peers, 'peer')} connected"
    attention = []
    if not running:
        attention.append("the daemon is not running (`stet start`)")
    if held:
        attention.append(f"{held} change{'s' if held != 1 else ''} held by the burst brake (`stet held`)")
    braked = sorted({s for sources in extras.engaged.values() for s in sources})
    if braked:
        attention.append(f"brake engaged for {', '.join(braked)} (`stet held`)")
    if extras.devices_known and peers and not connected:
        attention.append("no peer connected")
    landing = [line for v in vaults if (line := _still_landing(v)) is not None]
    broken = health_problems(data)
    if broken:
        verdict = "not healthy: " + "; ".join(broken + attention)
    elif attention:
        verdict = "needs attention: " + "; ".join(attention)
    elif landing:
        verdict = "syncing: " + "; ".join(landing)  # not healthy until the files are in
    else:
        verdict = "healthy"
    out.append(f"Sync: {verdict}. {summary[0].upper()}{summary[1:]}.")
    for v in vaults:
        filling = sync_progress(v)
        if filling is not None:
            out.append(f"Working: syncing {v['name']}: {filling[0]:,} of {filling[1]:,} notes on disk.")
    moving = transfers_line(data)
    if moving is not None:
        out.append(moving)
    for v in vaults:
        line = waiting_deletes_line(v)
        if line is not None:
            out.append(line)

    out.append("")
    rows: list[tuple[str, ...]] = []
    for v in vaults:
        h = extras.held.get(v["name"])
        other = v.get("otherFiles")
        rows.append((v["name"], str(v.get("notes", 0)), attachments_cell(v), str(v.get("pendingWrites", 0)),
                     "?" if h is None else str(h), str(_skipped(v)),
                     "-" if other is None else str(other), v["path"]))
    header = ("VAULT", "NOTES", "ATTACHMENTS", "PENDING", "HELD", "SKIPPED", "OTHER", "PATH")
    out += table(header, rows, right=(1, 2, 3, 4, 5, 6))
    out.append("OTHER: files in the folder that are not notes (the attachments among them, and files "
               "ignored or skipped).")
    for v in vaults:
        for s in v.get("skipped", []):
            out.append(f"  skipped {v['name']}/{s['path']}: {s['reason']}")
        att = v.get("attachments") if isinstance(v.get("attachments"), dict) else {}
        for t in att.get("tooLarge", []):
            out.append(f"  skipped {v['name']}/{t['path']}: {size_text(int(t['size']))}, "
                       "over [attachments] max_bytes")
        for r in v.get("membersCannotHold", []):  # synced here; that member's folder cannot hold it
            out.append(f"  not on {r['member']} ({r['platform']}) {v['name']}/{r['path']}: {r['reason']}")

    if running:
        out.append("")
        if not extras.devices_known:
            out.append("Peers: unknown (peer sync is not answering).")
        elif not extras.devices:
            out.append("Peers: none yet (`stet invite` on this device, `stet join` on the other).")
        else:
            peer_rows: list[tuple[str, ...]] = []
            for device, d in sorted(extras.devices.items()):
                state = "connected" if d["connected"] else "not connected"
                seen = "now" if d["connected"] else (
                    ago(d["lastSeen"]) if d["lastSeen"] else "not since the daemon started")
                peer_rows.append((device[:7], d["name"] or "-", ",".join(d["vaults"]), state, seen))
            out += table(("PEER", "NAME", "VAULTS", "STATE", "LAST SEEN"), peer_rows)

    if extras.tokens:
        out.append("")
        token_rows = [(t.name, extras.vault_names.get(t.vault_id, t.vault_id[:8]), _scopes(t.scopes),
                       ago(t.last_used_at)) for t in extras.tokens]
        out += table(("AGENT TOKEN", "VAULT", "SCOPES", "LAST USED"), token_rows)
    return out
