"""Notebook jobs in the ledger (``gpu_jobs``): their states, ids and server names, and the reads and writes.

The rules of a job (what a request may ask, when the tick ends a job, the notices) are in
:mod:`jupyterhub_gpu.service.domain.jobs`; the REST handlers in :mod:`jupyterhub_gpu.service.web.api.jobs`.
"""

from __future__ import annotations

import json
import re
import secrets
from datetime import datetime, timedelta

from sqlalchemy import select, update

from jupyterhub_gpu.clock import naive_utc
from jupyterhub_gpu.ledger.models import JobRecord, SessionRecord
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import RUN_REASONS

#: A job's life: queued (recorded) -> starting (server requested) -> running -> one of the ends.
STATES = ("starting", "running", "succeeded", "failed", "timed_out", "cancelled")
ACTIVE_STATES = ("starting", "running")
END_STATES = ("succeeded", "failed", "timed_out", "cancelled")
#: A job runs in the user's named server ``job-<id>`` (the spawner keeps such names for the service's jobs).
SERVER_PREFIX = "job-"
_JOB_ID_RE = re.compile(r"^[0-9a-f]{12}$")


def job_server_name(job_id: str) -> str:
    return f"{SERVER_PREFIX}{job_id}"


def new_job_id() -> str:
    return secrets.token_hex(6)


def is_job_id(value: str) -> bool:
    return bool(_JOB_ID_RE.fullmatch(value or ""))


def create_job(ledger: Ledger, user: str, request, profile: str, now: datetime) -> JobRecord:
    """Record a new job (state ``starting``) of a :class:`~jupyterhub_gpu.service.domain.jobs.JobRequest`."""
    job_id = new_job_id()
    job = JobRecord(
        id=job_id,
        hub=ledger.hub,
        user=user,
        server_name=job_server_name(job_id),
        notebook=request.notebook,
        profile=profile,
        parameters=json.dumps(request.parameters, sort_keys=True),
        time_limit_seconds=request.time_limit_seconds,
        state="starting",
        created=naive_utc(now),
    )
    with ledger.Session() as db:
        db.add(job)
        db.commit()
    return job


def get_job(ledger: Ledger, job_id: str) -> JobRecord | None:
    if not is_job_id(job_id):
        return None
    with ledger.Session() as db:
        return db.get(JobRecord, job_id)


def list_jobs(ledger: Ledger, user: str | None = None, limit: int = 200) -> list[JobRecord]:
    query = select(JobRecord).order_by(JobRecord.created.desc(), JobRecord.id).limit(limit)
    if user is not None:
        query = query.where(JobRecord.user == user)
    with ledger.Session() as db:
        return list(db.scalars(query))


def active_jobs(ledger: Ledger, user: str | None = None, hub: str | None = None) -> list[JobRecord]:
    """The jobs not ended yet (of ``user``; of the service of ``hub``: every hub's count against a user's limit)."""
    query = select(JobRecord).where(JobRecord.state.in_(ACTIVE_STATES))
    if user is not None:
        query = query.where(JobRecord.user == user)
    if hub is not None:
        query = query.where(JobRecord.hub == hub)
    with ledger.Session() as db:
        return list(db.scalars(query))


def update_job(ledger: Ledger, job_id: str, only_if: tuple[str, ...] = ACTIVE_STATES, **values) -> bool:
    """Change a job that is still in one of ``only_if``; False if it had already moved on."""
    for key in ("started", "finished"):
        if values.get(key) is not None:
            values[key] = naive_utc(values[key])
    with ledger.Session() as db:
        changed = db.execute(
            update(JobRecord).where(JobRecord.id == job_id, JobRecord.state.in_(only_if)).values(**values)
        ).rowcount
        db.commit()
    return bool(changed)


def job_session(ledger: Ledger, job: JobRecord) -> SessionRecord | None:
    """The ledger session of the job's server (by its id once reported, else by its unique server name)."""
    if job.session_id:
        return ledger.get_session(job.session_id)
    query = select(SessionRecord).where(SessionRecord.user == job.user, SessionRecord.server_name == job.server_name)
    with ledger.Session() as db:
        return db.scalars(query.order_by(SessionRecord.started.desc())).first()


def ended_jobs_still_running(
    ledger: Ledger, now: datetime, margin: timedelta, hub: str | None = None
) -> list[tuple[JobRecord, SessionRecord]]:
    """Jobs (of ``hub``) reported ended more than ``margin`` ago whose server still runs (the runner did not stop
    it)."""
    query = select(JobRecord).where(
        JobRecord.state.in_(END_STATES),
        JobRecord.finished <= naive_utc(now - margin),
        JobRecord.finished >= naive_utc(now - timedelta(days=2)),
        JobRecord.session_id.is_not(None),
    )
    if hub is not None:
        query = query.where(JobRecord.hub == hub)
    with ledger.Session() as db:
        jobs = list(db.scalars(query))
    found = []
    for job in jobs:
        session = ledger.get_session(job.session_id)
        if session is not None and session.stopped is None:
            found.append((job, session))
    return found


def finished_runs(ledger: Ledger, since: datetime, hub: str | None = None) -> list[SessionRecord]:
    """Sessions (of ``hub``) stopped since ``since`` by a job's end or by stop-when-done (the index on
    ``stopped``)."""
    query = select(SessionRecord).where(
        SessionRecord.stopped >= naive_utc(since), SessionRecord.stop_reason.in_(RUN_REASONS)
    )
    if hub is not None:
        query = query.where(SessionRecord.hub == hub)
    with ledger.Session() as db:
        return list(db.scalars(query.order_by(SessionRecord.stopped)))
