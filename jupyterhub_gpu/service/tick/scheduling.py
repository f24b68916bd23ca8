"""The schedule in the tick: the hub scheduler's stop orders carried out (preemptions, reservation ends), and
the preempted servers that asked for it put back in the queue.

The scheduler decides in the hub (:mod:`jupyterhub_gpu.scheduler`) and writes its orders to the ledger; this
pass tells each order's user first, then stops the server at the order's time, as a cull warns before it
stops.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.ledger.models import SessionRecord
from jupyterhub_gpu.ledger.queries.jobs import SERVER_PREFIX, get_job
from jupyterhub_gpu.ledger.queries.schedule import (
    StopOrder,
    get_reservation,
    mark_order,
    preemptions,
    reservations,
    stop_orders,
)
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.scheduler.snapshot import Reservation
from jupyterhub_gpu.service.domain.notices import CHANNELS, Once
from jupyterhub_gpu.service.domain.schedule import (
    PREEMPTED,
    RESUME_CLAIM,
    booking_cancelled,
    order_message,
    order_once,
    resume_once,
    resume_options,
    resume_refused_message,
    withdrawn_message,
    withdrawn_once,
)
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.tick.context import ScheduleFollow, TickContext
from jupyterhub_gpu.service.tick.stops import stop_session
from jupyterhub_gpu.session import StopReason, kept_stop_reason

log = logging.getLogger("jupyterhub_gpu.service")

#: How long after a preemption's stop its server is still put back in the queue: the hub stops a server within
#: a minute; a service that was down longer than this leaves the restart to the user.
RESUME_WITHIN = timedelta(hours=6)


def claim_resume(ledger: Ledger, key: Once, now: datetime) -> bool:
    """Claim the one restart of a preempted server (or job) in ``gpu_alerts``: False when it was claimed before."""
    return ledger.claim_alert(key.user, key.key, key.period_start, key.threshold, RESUME_CLAIM, now, key.revision)


def release_resume(ledger: Ledger, key: Once) -> None:
    """Release the claim of a restart that did not happen (the hub did not answer): the next tick tries again."""
    ledger.release_alert(key.user, key.key, key.period_start, key.threshold, RESUME_CLAIM, key.revision)


async def back_already(ctx: TickContext, user: str, server_name: str, since: datetime) -> bool:
    """Whether the server is back (started again after ``since``, or waiting in the hub's queue) without us."""
    if any(
        s.server_name == server_name and aware_utc(s.started) > since
        for s in ctx.ledger.open_sessions_of(user, ctx.ledger.hub)
    ):
        return True
    model = await ctx.hub.user(user)
    server = ((model or {}).get("servers") or {}).get(server_name)
    return server is not None and bool(server.get("pending") or server.get("ready"))


async def enforce_schedule(ctx: TickContext, now: datetime, follow: ScheduleFollow | None = None) -> dict:
    """Carry out the hub scheduler's stop orders (preemptions, reservation ends), and resume what asked for it.

    Each order (:func:`~jupyterhub_gpu.ledger.queries.schedule.stop_orders`, the pending ones, one query):

    - whose session has closed (stopped by its user, culled...): done, nothing else (but a session the hub
      stopped for this very preemption, the service gone before it marked the order done, is still resumed);
    - withdrawn by the hub (its cause is gone: the GPU is not needed after all, the booking was cancelled):
      it never stops the server; if its notice went out, its user is told the stop is off, and why where the
      order's row tells it (a reservation's end whose booking is gone), through the same gateway and events
      (:func:`.domain.schedule.withdrawn_message`), once per withdrawal; then it is done;
    - not noticed yet (new, or moved earlier by the hub): its notice goes out at once through the gateway
      (JupyterLab, and mail and webhooks where configured; event ``preemption`` or ``cull``:
      :func:`.domain.schedule.order_message`), once per channel for the order as given, and it is noticed;
    - whose time has come (:func:`due_at`: a preemption gives its whole grace from its notice, even a late one),
      noticed in an earlier tick (the notice comes before the stop, as an idle warning does): read
      again (the hub may have withdrawn it during this tick's awaits), the session's pending stop reason becomes
      the order's kind (``preempted`` or ``reserved``), the hub stops the server, and the order is done. A hub
      that fails is tried next tick.

    A preempted session whose user asked to be put back in the queue (``resume``) is started again through the
    hub once its session has closed, with the same profile and pool, once (its claim in ``gpu_alerts``): it
    then waits in the hub's queue like any request. A notebook job's server is put back by
    :func:`enforce_jobs` (the job goes back to ``starting``). ``follow`` keeps the preemptions whose sessions
    have not closed yet between ticks (None: read them from the ledger each time).
    """
    ledger, notifier, tz = ctx.ledger, ctx.notifier, ctx.tz
    result = {"noticed": [], "stopped": [], "closed": [], "withdrawn": [], "resumed": [], "refused": []}
    follow = follow if follow is not None else ScheduleFollow()
    if not follow.loaded:
        for order in preemptions(ledger, now - RESUME_WITHIN, hub=ledger.hub):
            if order.done_at is not None and now - order.done_at <= RESUME_WITHIN:
                follow.waiting.setdefault(order.session_id, order)
        follow.loaded = True
    orders = stop_orders(ledger, hub=ledger.hub)  # the orders of this hub's sessions (its scheduler's)
    models: dict[str, str] | None = None  # profile -> GPU model, read at the first notice
    for order in orders:
        session = ledger.get_session(order.session_id)
        if session is None or session.stopped is not None:
            if session is not None and evicted_untold(order):
                # Kueue stopped it before this tick: its student is told all the same, as of a preemption
                if models is None:
                    models = {p["slug"]: p["gpu_model"] for p in ledger.pricing() if p.get("gpu_model")}
                message = order_message(order, session, tz, now, notifier.settings, models.get(session.profile))
                await notifier.send(message, CHANNELS, once=order_once(order), now=now)
            await ctx.write(mark_order, order.session_id, done=now)
            result["closed"].append(order.session_id)
            if _preempted_for_this(order, session, now):
                # stopped by the hub for this order, the service gone before it marked it done: resume all the same
                follow.waiting.setdefault(order.session_id, replace(order, done_at=now))
            continue
        if order.withdrawn_at is not None:
            await _close_withdrawn(ctx, order, now, result)
            continue
        if kept_stop_reason(session.pending_stop_reason, order.kind) != order.kind:
            # a stop is under way for a reason that stays (its budget, a cull, its user's own): it frees the GPU,
            # so the order is done, with no notice of a stop that will not be the order's
            await _overtaken(ctx, session, order, now, result)
            continue
        if order.noticed_at is None:
            if models is None:
                models = {p["slug"]: p["gpu_model"] for p in ledger.pricing() if p.get("gpu_model")}
            job_id = _job_id(ledger, session)
            told = replace(order, stop_at=due_at(order, now))  # a late preemption's notice names the later stop
            message = order_message(told, session, tz, now, notifier.settings, models.get(session.profile), job_id)
            await notifier.send(message, CHANNELS, once=order_once(order), now=now)
            if not await ctx.write(mark_order, order.session_id, noticed=now, as_read=order):
                # moved (told again next tick) or withdrawn (called off next tick) while the notice went out
                log.info("%s/%s: the order changed while its notice went out", order.user, order.server_name)
                continue
            result["noticed"].append(order.session_id)
            log.info("%s/%s told: %s at %s", order.user, order.server_name, order.kind, told.stop_at)
            continue
        if due_at(order, order.noticed_at) > now:
            continue
        # the notices and stops above awaited: the hub may have withdrawn (or moved) this order meanwhile
        current = next(iter(stop_orders(ledger, [order.session_id])), None)
        if current is None or current.noticed_at is None or due_at(current, current.noticed_at) > now:
            continue  # done, or moved later or earlier (told again first)
        if current.withdrawn_at is not None:
            await _close_withdrawn(ctx, current, now, result)
            continue
        try:
            kept = await stop_session(ctx, session, current.kind)
        except HubAPIError as e:
            log.error("could not stop %s/%s (%s): %s", session.user, session.server_name, current.kind, e)
            continue
        if kept is None:
            continue  # closed since it was read: the next tick marks its order done
        await ctx.write(mark_order, order.session_id, done=now)
        if kept != current.kind:  # another pass of this tick (the budget's) stopped it first, for a reason that stays
            log.info(
                "%s/%s: its %s order is done by the %s stop", session.user, session.server_name, current.kind, kept
            )
            result["closed"].append(order.session_id)
            continue
        log.info("stopped %s/%s: %s", session.user, session.server_name, current.kind)
        result["stopped"].append((session.user, session.server_name))
        if current.kind == PREEMPTED:
            follow.waiting[order.session_id] = replace(current, done_at=now)
    for session_id, order in list(follow.waiting.items()):
        session = ledger.get_session(session_id)
        if session is None or (session.stopped is None and now - (order.done_at or now) > RESUME_WITHIN):
            follow.waiting.pop(session_id, None)
            continue
        if session.stopped is None:
            continue  # the hub is stopping it
        follow.waiting.pop(session_id, None)
        if session.stop_reason != StopReason.PREEMPTED or not session.resume:
            continue
        if session.server_name.startswith(SERVER_PREFIX):
            continue  # a job's server: enforce_jobs puts its job back in the queue
        outcome = await resume_server(ctx, session, now)
        if outcome == "retry":
            follow.waiting[session_id] = order
        elif outcome in ("resumed", "refused"):
            result[outcome].append(session_id)
    return result


def evicted_untold(order: StopOrder) -> bool:
    """Whether an order is a Kueue eviction (written by the spawner when Kueue stopped the pod: cause
    ``kueue:...``) whose notice has not gone out: the server may have ended before the tick saw the order."""
    return order.kind == PREEMPTED and order.noticed_at is None and (order.cause or "").startswith("kueue:")


def due_at(order: StopOrder, noticed: datetime) -> datetime:
    """When an order noticed at ``noticed`` may be carried out: a preemption no sooner than the grace the hub
    promised (``stop_at - decided_at``) after its notice, so a notice that went out late (the service was down)
    still gives the whole grace; a reservation's end at its time (the class needs its GPUs), a tick after its
    notice at the earliest."""
    if order.kind != PREEMPTED:
        return order.stop_at
    return max(order.stop_at, noticed + (order.stop_at - order.decided_at))


async def _overtaken(ctx: TickContext, session: SessionRecord, order: StopOrder, now: datetime, result: dict) -> None:
    """An order whose session is stopping for a reason that stays: the hub is asked to stop it (as that stop
    has), and the order is done; a hub that fails is asked again next tick."""
    try:
        kept = await stop_session(ctx, session, order.kind)
    except HubAPIError as e:
        log.error("could not stop %s/%s (%s): %s", session.user, session.server_name, session.pending_stop_reason, e)
        return
    await ctx.write(mark_order, order.session_id, done=now)
    result["closed"].append(order.session_id)
    log.info("%s/%s: its %s order is done by the %s stop", order.user, order.server_name, order.kind, kept)


def _preempted_for_this(order: StopOrder, session: SessionRecord | None, now: datetime) -> bool:
    """Whether a closed session was stopped by its preemption order (and recently enough to be resumed)."""
    return (
        session is not None
        and order.kind == PREEMPTED
        and session.stop_reason == StopReason.PREEMPTED
        and now - aware_utc(session.stopped) <= RESUME_WITHIN
    )


async def _close_withdrawn(ctx: TickContext, order: StopOrder, now: datetime, result: dict) -> None:
    """A withdrawn order never stops its server: its user, if told of the stop, is told it is off; then it is done."""
    ledger, notifier, tz = ctx.ledger, ctx.notifier, ctx.tz
    if order.noticed_at is not None:
        told = replace(order, stop_at=due_at(order, order.noticed_at))  # the time its notice named
        cancelled = booking_cancelled(order, lambda booking: get_reservation(ledger, booking, tz) is not None)
        message = withdrawn_message(told, tz, now, notifier.settings, cancelled=cancelled)
        await notifier.send(message, CHANNELS, once=withdrawn_once(order), now=now)
    if not await ctx.write(mark_order, order.session_id, done=now, as_read=order):
        # ordered again while the "stop is off" went out: the new order is told, and carried out, as any other
        log.info("%s/%s: ordered again while its withdrawal was told", order.user, order.server_name)
        return
    result["withdrawn"].append(order.session_id)
    log.info("%s/%s: the %s stop at %s is withdrawn", order.user, order.server_name, order.kind, order.stop_at)


def _job_id(ledger: Ledger, session: SessionRecord) -> str | None:
    """The notebook job a session's server runs (its own: the user's server ``job-<id>``), or None."""
    if not session.server_name.startswith(SERVER_PREFIX):
        return None
    job = get_job(ledger, session.server_name[len(SERVER_PREFIX) :])
    return job.id if job is not None and job.user == session.user else None


async def resume_server(ctx: TickContext, session: SessionRecord, now: datetime) -> str:
    """Start a preempted server again, once: ``resumed``, ``back`` (its user started it already), ``told``
    (resumed before), ``retry`` (the hub did not answer) or ``refused`` (the hub said no: its user is told)."""
    notifier = ctx.notifier
    key = resume_once(session)
    if not await ctx.write(claim_resume, key, now):
        return "told"
    try:
        if await back_already(ctx, session.user, session.server_name, aware_utc(session.stopped)):
            return "back"
        await ctx.hub.start_server(
            session.user, session.server_name, resume_options(session), language=session.language
        )
    except HubAPIError as e:
        status, message = e.refusal()
        if status >= 500:
            await ctx.write(release_resume, key)
            log.warning("could not put %s/%s back in the queue yet: %s", session.user, session.server_name, e)
            return "retry"
        log.error("the hub would not put %s/%s back in the queue: %s", session.user, session.server_name, message)
        await notifier.send(resume_refused_message(session, message, notifier.settings), CHANNELS, now=now)
        return "refused"
    log.info("preempted %s/%s is back in the queue", session.user, session.server_name)
    return "resumed"


async def move_quotas(ctx: TickContext, now: datetime) -> list[str]:
    """Class reservations kept by Kueue (``c.Kueue.cluster_queues``): the bookings handed to the quota mover
    (``ctx.kueue_quota``), which gives each window in force its ClusterQueue's quota and gives back the others'
    (docs/kubernetes.md, "Class reservations through Kueue"). The ClusterQueues written; none without Kueue."""
    if ctx.kueue_quota is None or getattr(ctx.kueue_quota, "idle", False):
        return []  # no Kueue reservations here (any quota moved before has been given back)
    bookings = [
        Reservation(str(r.id), r.group, r.gpu_model, r.count, r.start, r.end, r.weekly_until, r.note)
        for r in reservations(ctx.ledger, ctx.tz)
    ]
    return await ctx.kueue_quota(bookings, now)
