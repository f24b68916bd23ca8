"""A server's end: found ended by a poll, stopped, or stuck, and the GPUs it held given back only once it has ended.

The mixin's ``poll`` and ``stop`` delegate here. A server found ended is billed to its real end
(:func:`end_of`, docs/service.md's billing rule); a running server's stop claims its reason in the
ledger first; a backend's stop that fails is made sure of (polled, stopped again, removed by its session
id) and, if the server may still run, its GPUs stay taken under a key of their own until it is gone
(:func:`park`). The stop itself is always recorded.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from jupyterhub import orm

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.session import SessionStart, StopReason
from jupyterhub_gpu.spawners.records import evidence_of_life, note_alive, record_stop

#: seconds the immediate stop after a failed one may take before the server is removed by its session id
FORCED_STOP_TIMEOUT = 30

#: the tasks that remove servers whose stop failed (:func:`park`), kept from the collector
_STUCK: set[asyncio.Task] = set()


async def after_poll(spawner, session: SessionStart | None, status):
    """What a poll's ``status`` means for the session: a running server is noted alive (at most once a push
    interval), one found ended has its stop recorded here. JupyterHub calls ``stop()`` only for servers that
    still run: one that ended on its own (or while the hub was down) is only ever polled."""
    if spawner._gpu_launching:
        return status  # start() owns the session until it returns
    if status is None:
        if session is not None:
            spawner._gpu_last_alive = now = utcnow()
            noted = spawner._gpu_alive_noted
            if noted is None or (now - noted).total_seconds() >= spawner.sample_push_interval:
                await mark_alive(spawner, session, now)
    elif session is not None and not spawner._gpu_stopping:
        end = await end_of(spawner, session)
        spawner.log.info(
            "%s found ended (status %s): session %s billed to %s", spawner._log_name, status, session.id, end
        )
        await spawner._gpu_record_stop(session, end, StopReason.EXITED)
    return status


async def record(spawner, session: SessionStart | None, stopped: datetime, reason: str) -> None:
    """Write a session's stop to the ledger (where there is one); a failure is logged, never raised."""
    ledger = spawner.ledger
    if ledger is None or session is None:
        return
    await record_stop(ledger, session, stopped, reason, spawner.log)


async def mark_alive(spawner, session: SessionStart, now: datetime) -> None:
    """Write that the server runs now (at most once a push interval from polls, and as a stop begins)."""
    ledger = spawner.ledger
    if ledger is not None and session.id:
        spawner._gpu_alive_noted = now
        await note_alive(ledger, session.id, now, spawner.log)


async def end_of(spawner, session: SessionStart) -> datetime:
    """When the server of ``session``, found ended, really ended (docs/service.md, billing rule).

    The end the backend knows (``gpu_stopped_at``) where it falls inside the session, so a stale exit time
    of an earlier server never closes a later session; otherwise the last evidence that it was alive: the
    last poll of this hub process that found it running, its last pushed sample plus one push interval, or
    the service's last listing of it before this hub process started; never later than now, and never the
    moment a restarted hub found it gone.
    """
    now = utcnow()
    started = session.started
    try:
        known = await spawner.gpu_stopped_at()
    except Exception:
        spawner.log.exception("could not read when %s ended", spawner._log_name)
        known = None
    if known is not None:
        if started <= known <= now:
            return known
        spawner.log.warning(
            "%s: end time %s is outside its session (started %s); not used", spawner._log_name, known, started
        )
    evidence = [started]
    if spawner._gpu_last_alive is not None:
        evidence.append(spawner._gpu_last_alive)
    ledger = spawner.ledger
    if ledger is not None:
        try:
            evidence += await asyncio.to_thread(evidence_of_life, ledger, session.id, spawner.sample_push_interval)
        except Exception:
            spawner.log.exception("could not read the last samples of %s", spawner._log_name)
    return min(max(evidence), now)


async def stop(spawner, now: bool, backend_stop):
    """The spawner's ``stop()``: the backend's stop (``backend_stop``), made sure of, and the stop recorded."""
    spawner.allocator.cancel(spawner._gpu_key)  # still waiting in the queue
    if spawner._gpu_in_start:
        spawner._gpu_abort = True  # start() gives up at its next step
    session = spawner._gpu_session
    reason = StopReason.STOPPED
    stopped_at = None
    if session is not None:
        try:
            if await spawner.poll() is not None:
                reason = StopReason.EXITED  # the server ended on its own
                stopped_at = await end_of(spawner, session)
            else:
                # it runs as the stop begins: a hub killed during the stop must not bill it to earlier
                await mark_alive(spawner, session, spawner._gpu_last_alive or utcnow())
        except Exception:
            spawner.log.debug("poll before stop failed", exc_info=True)
    if reason == StopReason.STOPPED and session is not None and session.id and spawner.ledger_db_url:
        # a running server: its stop is the cause from now on, so that a service pass during the seconds the
        # stop takes does not relabel it; a reason claimed before stays (the one precedence rule, in the
        # ledger's claim; docs/admin.md, "Why a server stopped"). A failure never holds up the stop.
        try:
            await asyncio.to_thread(spawner.ledger.claim_stop_reason, session.id, StopReason.STOPPED)
        except Exception as e:
            spawner.log.warning("jupyterhub-gpu: cannot note the stop of %s in the ledger: %s", spawner._log_name, e)
    spawner._gpu_stopping = True  # the spawner's own polls while stopping are not an exit
    ended = True
    try:
        return await backend_stop(now=now)
    except Exception as e:
        if session is None:
            raise
        ended = await end_by_force(spawner, session, e, backend_stop)
        if not ended:
            raise
        # the backend's stop failed, but its server has ended: the stop is done
    finally:
        spawner._gpu_stopping = False
        if ended:
            spawner._gpu_release()
        else:
            park(spawner, session)
        if session is not None:
            await spawner._gpu_record_stop(session, stopped_at or utcnow(), reason)


async def end_by_force(spawner, session: SessionStart, error: Exception, backend_stop) -> bool:
    """The backend's stop failed (an engine that timed out, an API error), and JupyterHub forgets the server
    all the same: its GPUs would go to the next request while it may still run on them. Whether it has
    ended now: polled, stopped again at once, then removed by its session id the way a restarted hub
    removes an orphan (``gpu_orphans``, ``gpu_reap``)."""
    spawner.log.error("jupyterhub-gpu: the stop of %s failed (%s); making sure it has ended", spawner._log_name, error)
    try:
        if await spawner.poll() is not None:
            return True
    except Exception as e:
        spawner.log.warning("jupyterhub-gpu: cannot poll %s after its failed stop: %s", spawner._log_name, e)
    try:
        # bounded: the first stop may have failed by waiting out a timeout of its own
        await asyncio.wait_for(backend_stop(now=True), FORCED_STOP_TIMEOUT)
        if await spawner.poll() is not None:
            return True
    except Exception as e:  # asyncio.TimeoutError included (it is TimeoutError)
        spawner.log.warning("jupyterhub-gpu: the immediate stop of %s failed too: %r", spawner._log_name, e)
    try:
        return await reap_session(spawner, session.id)
    except Exception as e:
        spawner.log.error("jupyterhub-gpu: cannot remove the server of %s: %s", spawner._log_name, e)
        return False


async def reap_session(spawner, session_id: str) -> bool:
    """Remove the servers of this hub that run ``session_id``; whether it has ended (found and removed, or
    found by nothing and ended by its poll)."""
    found, left = await spawner._gpu_remove_session(session_id)
    if left:
        return False
    return found or await spawner.poll() is not None


async def remove_session(spawner, session_id: str) -> tuple[bool, bool]:
    """Remove (force) the servers of this hub running ``session_id`` through ``gpu_orphans`` and ``gpu_reap``
    (blocking calls, in a thread): whether any was found, and whether one is still there after."""
    cls, api_url = type(spawner), spawner.hub.api_url
    found = [o for o in await asyncio.to_thread(cls.gpu_orphans, spawner, api_url) if o[0] == session_id]
    for _sid, what, handle, _env in found:
        spawner.log.warning("jupyterhub-gpu: removing %s of session %s: its stop failed", what, session_id)
        await asyncio.to_thread(cls.gpu_reap, spawner, handle)
    if not found:
        return False, False
    left = await asyncio.to_thread(cls.gpu_orphans, spawner, api_url)
    return True, any(o[0] == session_id for o in left)


def park(spawner, session: SessionStart | None) -> None:
    """Keep the GPUs of a server that may still run taken (under a key of their own: the server's name is free
    for a new start), and try to remove it every ``stuck_server_retry`` seconds; free them once it is gone."""
    session_id = session.id if session is not None else ""
    key = f"{spawner._gpu_key}#stuck:{session_id}"
    uuids = spawner._gpu_release(park_as=key)
    revoke_token(spawner)
    spawner.log.error(
        "jupyterhub-gpu: the server of %s (session %s) may still run: its GPUs %s stay taken until it has"
        " ended (tried again every %g s; a hub restart removes it too)",
        spawner._log_name,
        session_id,
        ", ".join(uuids) or "(none)",
        spawner.stuck_server_retry,
    )
    task = asyncio.ensure_future(free_when_gone(spawner, key, session_id))
    _STUCK.add(task)
    task.add_done_callback(_STUCK.discard)


def revoke_token(spawner) -> None:
    """The server's API token goes now: JupyterHub deletes it only after a stop that succeeded, and a server
    that may still run must not report activity or samples, nor act for its user, after its stop."""
    db, token = getattr(spawner, "db", None), getattr(spawner, "api_token", "")
    if db is None or not token:
        return
    try:
        found = orm.APIToken.find(db, token)
        if found is not None:
            db.delete(found)
            db.commit()
    except Exception as e:
        spawner.log.error("jupyterhub-gpu: cannot revoke the API token of %s: %s", spawner._log_name, e)


async def free_when_gone(spawner, key: str, session_id: str) -> None:
    """Try to remove a stuck server every ``stuck_server_retry`` seconds; free its GPUs once it has ended."""
    while True:
        await asyncio.sleep(spawner.stuck_server_retry)
        try:
            _found, left = await spawner._gpu_remove_session(session_id)
        except Exception as e:
            spawner.log.warning("jupyterhub-gpu: session %s still cannot be removed: %s", session_id, e)
            continue
        if left:
            continue
        freed = spawner.allocator.release(key)
        spawner.log.warning("jupyterhub-gpu: the server of session %s has ended: %s free", session_id, freed)
        return


def release(spawner, park_as: str | None = None) -> list[str]:
    """Give back the GPUs a server holds, or keep them taken under the key ``park_as`` (a server that may still
    run); either way the spawner forgets its session. The units given back, or kept."""
    if park_as:
        uuids = spawner.allocator.park(spawner._gpu_key, park_as)
    else:
        uuids = spawner.allocator.release(spawner._gpu_key)
    spawner._gpu_session = None
    spawner._gpu_env = {}
    return uuids
