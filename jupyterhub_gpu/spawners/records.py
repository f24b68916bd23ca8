"""A session as the spawner makes it (:func:`new_session`) and writes it to the ledger (its start and its stop).

The spawner records its own session's start and stop, so that nothing is lost
while the gpu service is down; the service's reconciliation only catches what a
killed hub could not write. Every write is idempotent (docs/service.md). For a
server found ended, the ledger also holds the evidence of when it was last alive
(:func:`evidence_of_life`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from jupyterhub import orm

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.ledger.queries.sessions import last_signs_of_life
from jupyterhub_gpu.money import to_micros
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.spawners.budget import reserve_lock
from jupyterhub_gpu.spawners.profiles import Profile


def new_session(
    profile: Profile,
    devices: list[GPUDevice],
    started: datetime,
    currency: str,
    *,
    user: str,
    server_name: str,
    groups,
    pool: str | None,
    language: str = "en",
    resume: bool = False,
    server_token: str | None = None,
) -> SessionStart:
    """A starting server's session: a new session id, its units, rate and start.

    Kept in the spawner's state (:meth:`SessionStart.to_spawner_state`), so that a restarted hub
    rebuilds the assignment and bills the same session; ``pool`` is the one group that pays (checked
    at the pre-spawn hook); ``language`` the spawn's, recorded with the start so that the service's
    notices and mail to the user speak it; ``resume`` counts only for a preemptible profile.
    """
    return SessionStart(
        id=uuid.uuid4().hex,
        user=user,
        server_name=server_name,
        groups=tuple(sorted(groups)),
        profile=profile.slug,
        gpus=tuple(d.uuid for d in devices),
        rate_micros=to_micros(profile.rate_per_minute),
        currency=currency,
        started=started,
        simulated=any(d.simulated for d in devices),
        pool=pool,
        language=language,
        tier="preemptible" if profile.preemptible else None,
        resume=resume if profile.preemptible else False,
        server_token=server_token,
        visible_gpus=tuple(dict.fromkeys(d.visible_uuid for d in devices)),
        gpu_names=tuple(d.name for d in devices),
    )


def server_token_id(spawner) -> str | None:
    """The id JupyterHub gives the server's own API token (``a17``: what its ``/api/user`` answers as
    ``token_id``), from the hub's database; None where the spawner has none."""
    # the user's session of the hub's database (Spawner.db is deprecated)
    db, token = getattr(getattr(spawner, "user", None), "db", None), getattr(spawner, "api_token", "")
    if db is None or not token:
        return None
    try:
        found = orm.APIToken.find(db, token)
    except Exception:
        return None
    return found.api_id if found is not None else None


async def record_start(ledger, start_of: Callable[[], SessionStart], recorded: Callable[[], None]) -> None:
    """Write a session's start; ``recorded()`` runs once it is written, still under the budget check's lock.

    ``recorded()`` drops the spawn's hold in the ledger after the record, ahead of this hub's next check: a
    concurrent check of any hub sees this spawn held or recorded (for an instant both, on another hub), never
    neither. ``start_of()`` is read under the lock too: a server stopped while this waited has no session any
    more (it raises), and no start is written for it.

    A stop that cancels the spawn while the write runs (JupyterHub cancels a spawn it is asked to stop)
    cannot stop the write, which goes on in its thread: the cancellation waits for it, so that
    ``recorded()`` has run when the start that was written is unwound, and its stop is written at the stop
    (docs/service.md, "Spawn races"), instead of a session left open for reconciliation to close.
    """
    async with reserve_lock():
        write = asyncio.ensure_future(asyncio.to_thread(ledger.record_start, start_of()))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            await _finished(write)
            if write.exception() is None:
                recorded()
            raise
        recorded()


async def _finished(task: asyncio.Future) -> None:
    """Wait until ``task`` has ended, whatever is cancelled meanwhile (a thread's work cannot be cancelled)."""
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            continue
        except Exception:
            return


async def record_stop(ledger, start: SessionStart, stopped: datetime, reason: str, log: logging.Logger) -> None:
    """Write a session's stop; a failure is logged, never raised."""
    try:
        await asyncio.to_thread(ledger.record_stop, start.id, stopped, reason, start)
    except Exception:
        # the service's reconciliation closes it later; never keep a server running for this
        log.exception("could not record the stop of session %s in the ledger", start.id)


#: When this hub process started (see :func:`evidence_of_life`).
_PROCESS_STARTED = utcnow()


async def note_alive(ledger, session_id: str, when: datetime, log: logging.Logger) -> None:
    """Keep in the ledger that this hub saw ``session_id``'s server running at ``when`` (its ``last_seen``).

    Evidence for a hub killed before it learns the end: its successor, finding the server ended, bills
    it to no earlier than this (:func:`evidence_of_life`), not to a sample that a dead service never got.
    A failure is logged, never raised.
    """
    try:
        await asyncio.to_thread(ledger.mark_seen, [session_id], when)
    except Exception:
        log.debug("could not note session %s as running in the ledger", session_id, exc_info=True)


def evidence_of_life(ledger, session_id: str, push_interval: float) -> list[datetime]:
    """The ledger's evidence that a session's server was alive: last sample + one push interval, last listing.

    For a server found ended whose real end is unknown (docs/service.md, billing rule). A minute row
    says a push fell in that minute; its start is the latest moment that is certain. The service's
    last listing (``last_seen``) counts only if it is older than this hub process: a hub that was
    down lists a server it has not polled yet as running. Blocking: run it in a thread.
    """
    found = []
    last, seen = last_signs_of_life(ledger, session_id)
    if last is not None:
        found.append(last + timedelta(seconds=push_interval))
    if seen is not None and seen <= _PROCESS_STARTED:
        found.append(seen)
    return found
