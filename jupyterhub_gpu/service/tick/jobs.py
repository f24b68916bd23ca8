"""Notebook jobs in the tick: the jobs the runner could not end, a preempted job's server started again, and
the notice of each finished run with its cost.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.ledger.models import JobRecord, SessionRecord
from jupyterhub_gpu.ledger.queries.jobs import (
    ACTIVE_STATES,
    SERVER_PREFIX,
    active_jobs,
    ended_jobs_still_running,
    finished_runs,
    get_job,
    job_session,
    update_job,
)
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.moves import restart_options
from jupyterhub_gpu.service.domain.jobs import START_TIMEOUT, TIME_LIMIT_MARGIN, run_job, run_notice, run_once
from jupyterhub_gpu.service.domain.schedule import resume_once
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.notify import send_once
from jupyterhub_gpu.service.tick.context import TickContext
from jupyterhub_gpu.service.tick.scheduling import back_already, claim_resume, release_resume
from jupyterhub_gpu.session import StopReason

job_log = logging.getLogger("jupyterhub_gpu.jobs")


async def enforce_jobs(ctx: TickContext, now: datetime) -> dict:
    """End the jobs the runner could not: over the time limit, never started, or whose server went away.

    A job reported ended whose server still runs a margin later is stopped too: an ended
    job holds no slot and no time limit, so its server must not keep running. A job whose server was
    preempted is not lost: it goes back to ``starting`` and its server is started again, once
    (:func:`requeue_job`); the runner then resumes it (from its checkpoint with ``CheckpointAndResume``).
    """
    ledger, hub = ctx.ledger, ctx.hub
    summary = {"time_limit": [], "lost": [], "ended_still_running": [], "requeued": []}
    for job, session in ended_jobs_still_running(ledger, now, TIME_LIMIT_MARGIN, hub=ledger.hub):
        await ctx.write(Ledger.claim_stop_reason, session.id, StopReason.JOB_FINISHED)
        try:
            await hub.remove_server(job.user, job.server_name)
        except HubAPIError as e:
            job_log.error("could not stop the server of ended job %s: %s", job.id, e)
            continue
        summary["ended_still_running"].append(job.id)
    for job in active_jobs(ledger, hub=ledger.hub):
        session = job_session(ledger, job)
        if session is not None and session.stopped is not None and session.stop_reason == StopReason.PREEMPTED:
            outcome = await requeue_job(ctx, job, session, now)
            if outcome == "requeued":
                summary["requeued"].append(job.id)
            elif outcome == "failed":
                summary["lost"].append(job.id)
            continue
        if session is not None and session.stopped is not None:
            # the server is gone and the runner never reported the end (killed, crashed, stopped by hand)
            reason = session.stop_reason or StopReason.STOPPED
            error = f"The job's server stopped ({reason}) before the notebook finished."
            if await ctx.write(update_job, job.id, state="failed", finished=aware_utc(session.stopped), error=error):
                summary["lost"].append(job.id)
            continue
        started = aware_utc(job.started) or (aware_utc(session.started) if session else None)
        if started is not None and now - started > timedelta(seconds=job.time_limit_seconds) + TIME_LIMIT_MARGIN:
            kept = StopReason.JOB_TIME_LIMIT
            if session is not None:
                kept = await ctx.write(Ledger.claim_stop_reason, session.id, StopReason.JOB_TIME_LIMIT) or kept
            error = f"Stopped by the service: over the time limit of {job.time_limit_seconds // 60} minute(s)."
            try:
                await hub.remove_server(job.user, job.server_name)
            except HubAPIError as e:
                job_log.error("could not stop job %s over its time limit: %s", job.id, e)
                continue
            if kept != StopReason.JOB_TIME_LIMIT:
                # stopping already for a reason that stays (its budget): the job ends with that reason once its
                # server has stopped (above)
                job_log.info("job %s over its time limit while its server stops (%s)", job.id, kept)
                continue
            await ctx.write(update_job, job.id, state="timed_out", finished=now, error=error)
            summary["time_limit"].append(job.id)
            continue
        if job.state == "starting" and session is None and now - aware_utc(job.created) > START_TIMEOUT:
            user = await hub.user(job.user)
            server = ((user or {}).get("servers") or {}).get(job.server_name)
            if server is None or not server.get("pending"):
                await ctx.write(
                    update_job, job.id, state="failed", finished=now, error="The job's server did not start."
                )
                summary["lost"].append(job.id)
    return summary


async def requeue_job(ctx: TickContext, job: JobRecord, session: SessionRecord, now: datetime) -> str:
    """Put a job whose server was preempted back in the queue, once: ``requeued``, ``waiting`` (requeued before:
    its server waits in the hub's queue; or the job moved on since ``job`` was read, cancelled say: its server is
    not started, and the next tick judges it afresh), ``retry`` (the hub did not answer: next tick) or ``failed``.

    The job goes back to ``starting`` (its time limit counts again from the new run's start) and its server
    ``job-<id>`` is started again with the job's profile: it waits in the hub's queue like any request, and its
    runner runs the notebook again (``CheckpointAndResume`` goes on from its last checkpoint). A refusal by the
    hub (a budget that cannot pay, a profile gone) fails the job with the hub's message.
    """
    key = resume_once(session)
    if await ctx.write(claim_resume, key, now):
        # only from the state read before this tick's awaits: a job cancelled (or ended) since is not started again
        if not await ctx.write(
            update_job, job.id, only_if=(job.state,), state="starting", started=None, session_id=session.id, error=None
        ):
            await ctx.write(release_resume, key)  # the next tick judges the job as it is now
            job_log.info(
                "job %s moved on (%s before) while its server was preempted: not started again", job.id, job.state
            )
            return "waiting"
        # the same group pays as for the run it replaces (rules/moves.py)
        options = {**restart_options(session, job.profile), "job_id": job.id}
        try:
            await ctx.hub.start_server(
                job.user, job.server_name, options, display_name=job.id, language=session.language
            )
        except HubAPIError as e:
            status, message = e.refusal()
            if status >= 500:
                await ctx.write(release_resume, key)
                job_log.warning("job %s: its server was preempted and could not be started again yet: %s", job.id, e)
                return "retry"
            error = f"The job's server was preempted and could not be started again: {message}"
            await ctx.write(update_job, job.id, state="failed", finished=now, error=error)
            job_log.error("job %s: %s", job.id, error)
            return "failed"
        job_log.info("job %s: its server was preempted; back in the queue to run again", job.id)
        return "requeued"
    if job.state == "starting" and now - aware_utc(session.stopped) > START_TIMEOUT:
        if not await back_already(ctx, job.user, job.server_name, aware_utc(session.stopped)):
            error = "The job's server did not start again after it was preempted."
            await ctx.write(update_job, job.id, state="failed", finished=now, error=error)
            return "failed"
    return "waiting"


#: Called once per finished run and channel: (session, job or None, channel) -> delivered.
AnnounceRun = Callable[[SessionRecord, "JobRecord | None", str], Awaitable[None]]


def run_announcer(ctx: TickContext) -> AnnounceRun:
    """The ``announce`` of :func:`announce_finished_runs`: a run's notice on one channel (raises if not delivered)."""
    notifier, currency = ctx.notifier, ctx.currency

    async def announce(session: SessionRecord, job: JobRecord | None, channel: str) -> None:
        message = run_notice(session, job, currency, notifier.settings)
        await notifier.deliver(channel, message, once=run_once(session))

    return announce


async def announce_finished_runs(
    ctx: TickContext, now: datetime, announce: AnnounceRun | None = None, window=timedelta(hours=1)
) -> int:
    """Tell each user once per channel (``ctx.alert_channels``) that their run finished, with its cost; returns
    how many were sent. ``announce`` delivers one notice on one channel (:func:`run_announcer` by default).

    The claim in ``gpu_alerts`` (key ``run:<session>``) comes before the send,
    as for budget alerts: a failed send releases it and is tried next tick.
    """
    ledger, channels = ctx.ledger, ctx.alert_channels or ()
    announce = announce if announce is not None else run_announcer(ctx)
    sent = 0
    for session in finished_runs(ledger, now - window, hub=ledger.hub):
        job = None
        if session.server_name.startswith(SERVER_PREFIX):
            job = run_job(session, get_job(ledger, session.server_name[len(SERVER_PREFIX) :]))
            if job is not None and job.state in ACTIVE_STATES:
                continue  # the runner's report (or the tick) settles the state first
        key = run_once(session)
        for channel in channels:
            send = lambda session=session, job=job, channel=channel: announce(session, job, channel)  # noqa: E731
            sent += await send_once(ledger, key, channel, now, send, f"run notice of {session.id}", job_log.name)
    return sent
