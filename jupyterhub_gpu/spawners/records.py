"""A session as the spawner keeps it (its state) and writes it to the ledger (its start and its stop).

The spawner records its own session's start and stop, so that nothing is lost
while the gpu service is down; the service's reconciliation only catches what a
killed hub could not write. Every write is idempotent (docs/service.md).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from datetime import datetime

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.spawners.budget import reserve_lock
from jupyterhub_gpu.spawners.profiles import Profile


def new_session_state(
    profile: Profile, devices: list[GPUDevice], started: datetime, currency: str, *, groups, pool: str | None
) -> dict:
    """The ``gpu`` part of a starting server's state: a new session id, its GPUs, rate and start.

    Kept in the spawner's state, so that a restarted hub rebuilds the assignment and bills the same
    session; ``pool`` is the one group that pays (checked at the pre-spawn hook).
    """
    return {
        "profile": profile.slug,
        "devices": [d.uuid for d in devices],
        "device_names": [d.name for d in devices],
        "simulated": any(d.simulated for d in devices),
        "session_id": uuid.uuid4().hex,
        "started": isoformat(started),
        "rate_per_minute": str(profile.rate_per_minute),
        "currency": currency,
        "groups": sorted(groups),
        "pool": pool,
    }


async def record_start(ledger, start_of: Callable[[], SessionStart], recorded: Callable[[], None]) -> None:
    """Write a session's start; ``recorded()`` runs once it is written, still under the budget check's lock.

    Under that lock a concurrent budget check sees this spawn either held (reserved) or recorded,
    never both. ``start_of()`` is read under the lock too: a server stopped while this waited has
    no session any more (it raises), and no start is written for it.
    """
    async with reserve_lock():
        await asyncio.to_thread(ledger.record_start, start_of())
        recorded()


async def record_stop(ledger, start: SessionStart, stopped: datetime, reason: str, log: logging.Logger) -> None:
    """Write a session's stop; a failure is logged, never raised."""
    try:
        await asyncio.to_thread(ledger.record_stop, start.id, stopped, reason, start)
    except Exception:
        # the service's reconciliation closes it later; never keep a server running for this
        log.exception("could not record the stop of session %s in the ledger", start.id)
