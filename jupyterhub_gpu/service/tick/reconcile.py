"""Reconciliation with the hub: ledger sessions whose servers the hub no longer runs are closed, missed starts
recorded.

The spawners record starts and stops themselves; this catches what they could not (a hub killed at the wrong
moment). It lists the hub's active servers, which costs the hub about 0.6 ms of CPU per server, so it runs
rarely (``c.GPUService.reconcile_interval``).
"""

from __future__ import annotations

from datetime import datetime

from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.tick.context import TickContext
from jupyterhub_gpu.session import SessionStart, StopReason


async def reconcile(ctx: TickContext, now: datetime, missing: dict[str, datetime]) -> dict:
    """One reconciliation: ``{"alive": n, "closed": [ids], "recorded": [ids]}``.

    Only the sessions of this service's hub (``ledger.hub``) are compared with its hub's listing: another hub's,
    even of equal user and server names, are its own service's. A session is closed only after it has been
    missing from two listings in a row, at the last moment it was
    seen running; ``missing`` (kept by the caller between calls: :attr:`.context.TickState.missing`) holds the
    sessions missing from the last listing and since when. A user the hub lists as active with no server shown
    (a hub that is starting has not loaded their servers yet) has their sessions neither seen nor missing, and
    so has a server pending the restarted hub's check that it still runs (``"pending": "check"``).
    """
    ledger = ctx.ledger
    listing = await ctx.hub.active_listing()
    active = {(s["user"], s["name"]): s for s in listing.servers}
    open_sessions = ledger.open_sessions(hub=ledger.hub)  # the hub lists only its own servers
    alive, closed, recorded = [], [], []
    newest: dict[tuple[str, str], str] = {}
    for s in sorted(open_sessions, key=lambda s: s.started):
        newest[(s.user, s.server_name)] = s.id
    for s in open_sessions:
        key = (s.user, s.server_name)
        if key in active and newest[key] == s.id:
            if (active[key]["server"] or {}).get("pending") == "check":
                continue  # listed, but not yet known to run
            alive.append(s.id)
            missing.pop(s.id, None)
            continue
        if s.user in listing.unshown:
            continue  # unknown, not gone: the next listings tell
        if s.id not in missing:
            missing[s.id] = now
            continue
        stop_at = aware_utc(s.last_seen) or aware_utc(s.started)
        if await ctx.write(Ledger.record_stop, s.id, stop_at, StopReason.RECONCILED):
            closed.append(s.id)
        missing.pop(s.id, None)
    # starts the spawner could not record: taken from the hub's server state where readable
    known = {s.id for s in open_sessions}
    for (user, name), entry in active.items():
        gpu = ((entry["server"] or {}).get("state") or {}).get("gpu") or {}
        sid = gpu.get("session_id")
        if not sid or sid in known or ledger.get_session(sid) is not None:
            continue
        await ctx.write(Ledger.record_start, SessionStart.from_spawner_state(user, name, entry.get("groups", []), gpu))
        recorded.append(sid)
        alive.append(sid)
    await ctx.write(Ledger.mark_seen, alive, now)
    return {"alive": len(alive), "closed": closed, "recorded": recorded}
