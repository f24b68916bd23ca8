"""Notebook jobs and "stop when done": unattended runs whose billing ends the minute they finish.

A *job* runs one notebook top to bottom in a server of its own: the service
records the job, asks the hub to start the user's named server ``job-<id>``
with the chosen profile (so budgets and the GPU queue apply exactly as for an
interactive spawn), and the runner inside that server (``serverext/jobs.py``)
executes the notebook, writes the executed copy and a log to
``~/work/jobs/<id>/``, reports the end here and stops its own server through the
hub with the server's own token. The ledger records the stop as
``job_finished``; billing is per started minute as always.

Only a job's own server may report on it: the runner's reports must come with
that server's token (``servers!server=USER/job-<id>``); another server of the
same user, or the user's own token, gets a 403, so it cannot end a job that still
runs (which would free a ``max_concurrent_jobs`` slot and lift its time limit).
A server that reported its job's end but is still running a margin later is
stopped by the tick. The hub keeps names beginning with ``job-`` for the servers
this service starts (the spawner refuses a user's own), and a finished-run
notice names a job only for the job's own user and server (docs/security.md).

*Stop when done* is the same end for an interactive server: when every kernel
has gone idle after the flagged run, the server reports here (the ledger's
reason becomes ``stop_when_done``) and stops itself.

Each finished run is announced once, with its cost, in JupyterLab and by email
and webhook where those are set up (:func:`announce_finished_runs`, run by the
metering tick). The tick also ends jobs the runner could not end itself: over
their time limit (stopped, ``job_time_limit``), or whose server went away.

Everything here is plain functions over the ledger and the hub client, and the
REST handlers under ``/services/gpu/api/v1/jobs`` that use them.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote

from sqlalchemy import DateTime, Integer, String, Text, select, update
from sqlalchemy.orm import Mapped, mapped_column
from tornado import web

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.ledger.store import Base, Ledger, SessionRecord, _aware, _naive
from jupyterhub_gpu.service.hubapi import HubAPIError, HubClient

log = logging.getLogger("jupyterhub_gpu.jobs")

#: A job's life: queued (recorded) -> starting (server requested) -> running -> one of the ends.
STATES = ("starting", "running", "succeeded", "failed", "timed_out", "cancelled")
ACTIVE_STATES = ("starting", "running")
END_STATES = ("succeeded", "failed", "timed_out", "cancelled")
#: States the runner may report at the end of its run.
RUNNER_END_STATES = ("succeeded", "failed", "timed_out")

#: Ledger stop reasons of these stops.
REASON_JOB = "job_finished"
REASON_JOB_TIME_LIMIT = "job_time_limit"
REASON_JOB_CANCELLED = "job_cancelled"
REASON_STOP_WHEN_DONE = "stop_when_done"
RUN_REASONS = (REASON_JOB, REASON_JOB_TIME_LIMIT, REASON_JOB_CANCELLED, REASON_STOP_WHEN_DONE)

JOB_FIELDS = ("notebook", "profile", "parameters", "time_limit_minutes")
SERVER_PREFIX = "job-"
#: The runner's own time limit is enforced in the server; the service stops a job this much later.
TIME_LIMIT_MARGIN = timedelta(seconds=60)
#: A job whose server has not reported its start after this long (plus the queue) has failed to start.
START_TIMEOUT = timedelta(minutes=15)
MAX_PARAMETERS_BYTES = 64 * 1024
_JOB_ID_RE = re.compile(r"^[0-9a-f]{12}$")


class JobRecord(Base):
    """One notebook job: what to run, in which profile, and how it ended."""

    __tablename__ = "gpu_jobs"

    id: Mapped[str] = mapped_column(String(12), primary_key=True)
    user: Mapped[str] = mapped_column(String(255), index=True)
    server_name: Mapped[str] = mapped_column(String(255))
    notebook: Mapped[str] = mapped_column(String(1024))  # relative to the user's home (the server's root)
    profile: Mapped[str] = mapped_column(String(64))
    parameters: Mapped[str] = mapped_column(Text, default="{}")  # a JSON object, papermill-style
    time_limit_seconds: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), index=True)
    created: Mapped[datetime] = mapped_column(DateTime)
    started: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    session_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)

    @property
    def parameter_dict(self) -> dict:
        return json.loads(self.parameters or "{}")

    @property
    def output_dir(self) -> str:
        return f"work/jobs/{self.id}"

    @property
    def output_notebook(self) -> str:
        return f"{self.output_dir}/{self.notebook.rsplit('/', 1)[-1]}"

    @property
    def log_file(self) -> str:
        return f"{self.output_dir}/job.log"


class JobError(ValueError):
    """A job request that cannot be accepted; ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


# -- pure helpers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class JobRequest:
    notebook: str
    profile: str | None
    parameters: dict
    time_limit_seconds: int


def validate_notebook_path(value) -> str:
    """A notebook path relative to the home folder: ``.ipynb``, no ``..``, no absolute path."""
    if not isinstance(value, str) or not value.strip():
        raise JobError("notebook is required: the notebook's path in your home folder, e.g. 'work/train.ipynb'")
    path = value.strip()
    if path.startswith(("/", "~")) or "\\" in path:
        raise JobError(f"notebook must be a path relative to your home folder, got {value!r}")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise JobError(f"notebook must not contain '..', '.' or empty parts, got {value!r}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in path) or len(path) > 1024:
        raise JobError("notebook contains a control character or is longer than 1024 characters")
    if not path.endswith(".ipynb"):
        raise JobError(f"notebook must be a .ipynb file, got {value!r}")
    return path


def parse_job_request(data, max_minutes: int, default_minutes: int) -> JobRequest:
    """The job a ``POST jobs`` body describes; JobError names the first problem."""
    if not isinstance(data, dict):
        raise JobError('The body must be a JSON object such as {"notebook": "work/train.ipynb", "profile": "t4"}')
    unknown = sorted(set(data) - set(JOB_FIELDS))
    if unknown:
        raise JobError(f"Unknown field(s) {', '.join(map(repr, unknown))}; the fields are {', '.join(JOB_FIELDS)}")
    notebook = validate_notebook_path(data.get("notebook"))
    profile = data.get("profile")
    if profile is not None and (not isinstance(profile, str) or not 0 < len(profile) <= 64):
        raise JobError(f"profile must be a profile name such as 't4', got {json.dumps(profile)}")
    parameters = data.get("parameters", {})
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict) or not all(isinstance(k, str) and k.isidentifier() for k in parameters):
        raise JobError('parameters must be a JSON object of Python names, e.g. {"epochs": 5, "lr": 0.001}')
    if len(json.dumps(parameters)) > MAX_PARAMETERS_BYTES:
        raise JobError(f"parameters are larger than {MAX_PARAMETERS_BYTES // 1024} KiB")
    minutes = data.get("time_limit_minutes", default_minutes)
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not 0 < minutes <= max_minutes:
        raise JobError(f"time_limit_minutes must be a number of minutes from 1 to {max_minutes}, got {minutes!r}")
    return JobRequest(notebook, profile, parameters, max(1, round(minutes * 60)))


def job_server_name(job_id: str) -> str:
    return f"{SERVER_PREFIX}{job_id}"


def new_job_id() -> str:
    return secrets.token_hex(6)


def is_job_id(value: str) -> bool:
    return bool(_JOB_ID_RE.fullmatch(value or ""))


# -- the ledger -------------------------------------------------------------------------------


def create_job(ledger: Ledger, user: str, request: JobRequest, profile: str, now: datetime) -> JobRecord:
    job_id = new_job_id()
    job = JobRecord(
        id=job_id,
        user=user,
        server_name=job_server_name(job_id),
        notebook=request.notebook,
        profile=profile,
        parameters=json.dumps(request.parameters, sort_keys=True),
        time_limit_seconds=request.time_limit_seconds,
        state="starting",
        created=_naive(now),
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


def active_jobs(ledger: Ledger, user: str | None = None) -> list[JobRecord]:
    query = select(JobRecord).where(JobRecord.state.in_(ACTIVE_STATES))
    if user is not None:
        query = query.where(JobRecord.user == user)
    with ledger.Session() as db:
        return list(db.scalars(query))


def update_job(ledger: Ledger, job_id: str, only_if: tuple[str, ...] = ACTIVE_STATES, **values) -> bool:
    """Change a job that is still in one of ``only_if``; False if it had already moved on."""
    for key in ("started", "finished"):
        if values.get(key) is not None:
            values[key] = _naive(values[key])
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


def job_json(job: JobRecord, session: SessionRecord | None, now: datetime, currency, prefix: str = "/") -> dict:
    """A job as the API shows it: state, times, duration, the billed minutes and cost, and its output."""
    from jupyterhub_gpu.service.web.api import session_json

    billing = session_json(session, now, currency) if session is not None else None
    started = _aware(job.started)
    end = _aware(job.finished) or (now if job.state == "running" else None)
    user = quote(job.user, safe="")
    return {
        "id": job.id,
        "user": job.user,
        "server_name": job.server_name,
        "notebook": job.notebook,
        "profile": job.profile,
        "parameters": job.parameter_dict,
        "time_limit_minutes": job.time_limit_seconds / 60
        if job.time_limit_seconds % 60
        else job.time_limit_seconds // 60,
        "state": job.state,
        "error": job.error,
        "created": isoformat(_aware(job.created)),
        "started": isoformat(started) if started else None,
        "finished": isoformat(_aware(job.finished)) if job.finished else None,
        "duration_seconds": round((end - started).total_seconds()) if started and end else None,
        "output_notebook": job.output_notebook,
        "log_file": job.log_file,
        "output_url": f"{prefix}user/{user}/lab/tree/{quote(job.output_notebook)}",
        "session_id": session.id if session is not None else job.session_id,
        "minutes_billed": billing["minutes_billed"] if billing else 0,
        "cost": billing["cost"] if billing else "0",
        "cost_display": billing["cost_display"] if billing else currency.format(0),
        "currency": billing["currency"] if billing else currency.code,
        "stop_reason": billing["stop_reason"] if billing else None,
        "running": bool(billing and billing["running"]),
    }


# -- the tick ---------------------------------------------------------------------------------


def ended_jobs_still_running(ledger: Ledger, now: datetime) -> list[tuple[JobRecord, SessionRecord]]:
    """Jobs reported ended more than ``TIME_LIMIT_MARGIN`` ago whose server still runs (the runner did not stop it)."""
    query = select(JobRecord).where(
        JobRecord.state.in_(END_STATES),
        JobRecord.finished <= _naive(now - TIME_LIMIT_MARGIN),
        JobRecord.finished >= _naive(now - timedelta(days=2)),
        JobRecord.session_id.is_not(None),
    )
    with ledger.Session() as db:
        jobs = list(db.scalars(query))
    found = []
    for job in jobs:
        session = ledger.get_session(job.session_id)
        if session is not None and session.stopped is None:
            found.append((job, session))
    return found


async def enforce_jobs(ledger: Ledger, hub: HubClient, now: datetime) -> dict:
    """End the jobs the runner could not: over the time limit, never started, or whose server went away.

    A job reported ended whose server still runs a margin later is stopped too: an ended
    job holds no slot and no time limit, so its server must not keep running.
    """
    summary = {"time_limit": [], "lost": [], "ended_still_running": []}
    for job, session in ended_jobs_still_running(ledger, now):
        ledger.set_pending_stop_reason(session.id, REASON_JOB)
        try:
            await hub.remove_server(job.user, job.server_name)
        except HubAPIError as e:
            log.error("could not stop the server of ended job %s: %s", job.id, e)
            continue
        summary["ended_still_running"].append(job.id)
    for job in active_jobs(ledger):
        session = job_session(ledger, job)
        if session is not None and session.stopped is not None:
            # the server is gone and the runner never reported the end (killed, crashed, stopped by hand)
            reason = session.stop_reason or "stopped"
            error = f"The job's server stopped ({reason}) before the notebook finished."
            if update_job(ledger, job.id, state="failed", finished=_aware(session.stopped), error=error):
                summary["lost"].append(job.id)
            continue
        started = _aware(job.started) or (_aware(session.started) if session else None)
        if started is not None and now - started > timedelta(seconds=job.time_limit_seconds) + TIME_LIMIT_MARGIN:
            if session is not None:
                ledger.set_pending_stop_reason(session.id, REASON_JOB_TIME_LIMIT)
            error = f"Stopped by the service: over the time limit of {job.time_limit_seconds // 60} minute(s)."
            try:
                await hub.remove_server(job.user, job.server_name)
            except HubAPIError as e:
                log.error("could not stop job %s over its time limit: %s", job.id, e)
                continue
            update_job(ledger, job.id, state="timed_out", finished=now, error=error)
            summary["time_limit"].append(job.id)
            continue
        if job.state == "starting" and session is None and now - _aware(job.created) > START_TIMEOUT:
            user = await hub.user(job.user)
            server = ((user or {}).get("servers") or {}).get(job.server_name)
            if server is None or not server.get("pending"):
                update_job(ledger, job.id, state="failed", finished=now, error="The job's server did not start.")
                summary["lost"].append(job.id)
    return summary


#: Called once per finished run and channel: (session, job or None, channel) -> delivered.
AnnounceRun = Callable[[SessionRecord, "JobRecord | None", str], Awaitable[None]]


def finished_runs(ledger: Ledger, since: datetime) -> list[SessionRecord]:
    """Sessions stopped since ``since`` by a job's end or by stop-when-done (the index on ``stopped``)."""
    query = select(SessionRecord).where(
        SessionRecord.stopped >= _naive(since), SessionRecord.stop_reason.in_(RUN_REASONS)
    )
    with ledger.Session() as db:
        return list(db.scalars(query.order_by(SessionRecord.stopped)))


async def announce_finished_runs(
    ledger: Ledger, now: datetime, announce: AnnounceRun, channels: tuple[str, ...], window=timedelta(hours=1)
) -> int:
    """Tell each user once per channel that their run finished, with its cost; returns how many were sent.

    The claim in ``gpu_alerts`` (key ``run:<session>``) comes before the send,
    as for budget alerts: a failed send releases it and is tried next tick.
    """
    sent = 0
    for session in finished_runs(ledger, now - window):
        job = None
        if session.server_name.startswith(SERVER_PREFIX):
            job = get_job(ledger, session.server_name[len(SERVER_PREFIX) :])
            if job is not None and (job.user != session.user or job.server_name != session.server_name):
                job = None  # a server named after another user's job: its notice names no job
            if job is not None and job.state in ACTIVE_STATES:
                continue  # the runner's report (or the tick) settles the state first
        for channel in channels:
            key = f"run:{session.id}"
            if not ledger.claim_alert(session.user, key, session.started, 100, channel, now):
                continue
            try:
                await announce(session, job, channel)
                sent += 1
            except Exception as e:
                log.warning("run notice of %s on %s not delivered: %s", session.id, channel, e)
                ledger.release_alert(session.user, key, session.started, 100, channel)
    return sent


def run_message(session: SessionRecord, job: JobRecord | None, currency) -> tuple[str, str]:
    """(subject, text) of a finished run's notice, with its billed minutes and cost."""
    from jupyterhub_gpu.service.domain.metering import from_micros

    cost = currency.format(from_micros(session.cost_micros or 0))
    minutes = session.minutes or 0
    billed = f"{minutes} minute{'s' if minutes != 1 else ''} billed, {cost}"
    if job is None:
        subject = "[GPU] Your server stopped when its cells finished"
        text = f"Your server {session.server_name or '(default)'} stopped when its running cells finished: {billed}."
        return subject, text
    outcome = {
        "succeeded": "finished",
        "failed": "failed",
        "timed_out": "was stopped at its time limit",
        "cancelled": "was cancelled",
    }.get(job.state, "ended")
    subject = f"[GPU] Job {job.id} {outcome}: {job.notebook}"
    text = f"Job {job.id} ({job.notebook}) {outcome}: {billed}. Output: ~/{job.output_notebook}, log: ~/{job.log_file}."
    if job.error:
        text += f" {job.error}"
    return subject, text


# -- REST -------------------------------------------------------------------------------------


def _hub_error_message(e: HubAPIError) -> tuple[int, str]:
    """The status and message of the hub's refusal (e.g. a budget that cannot pay, an unknown profile)."""
    cause = e.__cause__
    response = getattr(cause, "response", None)
    code = getattr(cause, "code", 502) or 502
    message = str(e)
    if response is not None and response.body:
        try:
            message = json.loads(response.body).get("message") or message
        except (ValueError, AttributeError):
            pass
    return (code if 400 <= code < 500 else 502), message


def make_job_handlers(api: str) -> list:
    """The routes under ``api/v1/``: jobs (create, list, show, cancel, the runner's reports) and stop-when-done."""
    from jupyterhub.utils import url_path_join

    from jupyterhub_gpu.service.web.api import SCOPE_USAGE_READ, BaseHandler
    from jupyterhub_gpu.service.web.usage import is_server_token

    class JobBase(BaseHandler):
        def job_or_404(self, job_id: str, write: bool = False) -> JobRecord:
            """The job, if the caller may see it; another user's job is "not found" (ids reveal nothing)."""
            job = get_job(self.ledger, job_id)
            mine = job is not None and self.is_user and job.user == self.current_user["name"]
            if job is None or not (mine or (not write and self.has_scope(SCOPE_USAGE_READ))):
                raise web.HTTPError(404, f"You have no job {job_id!r}")
            return job

        def show(self, job: JobRecord, status: int = 200) -> None:
            now = self.now()
            prefix = self.service.prefix.split("services/")[0] or "/"
            self.write_json(
                job_json(job, job_session(self.ledger, job), now, self.service.currency_info, prefix), status
            )

        def runner_session(self, job: JobRecord, body) -> SessionRecord:
            """The job's own server session, named in a runner's report."""
            if not isinstance(body, dict) or not isinstance(body.get("session_id"), str):
                raise web.HTTPError(400, 'The body must be a JSON object with "session_id" (the server\'s session)')
            session = self.ledger.get_session(body["session_id"])
            if session is None or session.user != job.user or session.server_name != job.server_name:
                raise web.HTTPError(403, "Only the job's own server may report on the job.")
            # the session id is no secret (GET usage shows it): the token must be the job server's own
            if not is_server_token(self.current_user, job.user, job.server_name):
                raise web.HTTPError(403, "Only the job's own server may report on the job, with its own token.")
            return session

    class Jobs(JobBase):
        """``GET jobs``: the caller's jobs (others' with custom:gpu-usage:read); ``POST``: a new job."""

        @web.authenticated
        def get(self):
            from jupyterhub_gpu.service.web.api import BadRequest, query_values

            try:
                values = query_values(self.request.query_arguments, ("user", "all"))
            except BadRequest as e:
                raise web.HTTPError(400, str(e)) from None
            everyone = values.get("all", "false").lower()
            if everyone not in ("true", "false", "1", "0"):
                raise web.HTTPError(400, f"all must be true or false, got {values['all']!r}")
            user = values.get("user")
            if everyone in ("true", "1") or (user is not None and user != (self.current_user or {}).get("name")):
                self.require_scope(SCOPE_USAGE_READ)
                user = None if everyone in ("true", "1") else user
            else:
                user = self.own_name("give user= or all=true")
            now = self.now()
            currency = self.service.currency_info
            prefix = self.service.prefix.split("services/")[0] or "/"
            jobs = list_jobs(self.ledger, user)
            self.write_json(
                {
                    "user": user,
                    "max_concurrent_jobs": self.service.max_concurrent_jobs,
                    "jobs": [job_json(j, job_session(self.ledger, j), now, currency, prefix) for j in jobs],
                }
            )

        @web.authenticated
        async def post(self):
            name = self.own_name("a job runs in a user's server; services cannot own jobs")
            service = self.service
            try:
                request = parse_job_request(
                    self.json_body(), service.job_time_limit_max_minutes, service.job_time_limit_minutes
                )
            except JobError as e:
                raise web.HTTPError(e.status, str(e)) from None
            profiles = self.ledger.pricing()
            groups = set(self.groups)
            allowed = [p for p in profiles if not p["allowed_groups"] or groups & set(p["allowed_groups"])]
            slug = request.profile
            if profiles:
                if slug is None:
                    if not allowed:
                        raise web.HTTPError(403, "No profile is available to you.")
                    slug = allowed[0]["slug"]
                elif slug not in {p["slug"] for p in profiles}:
                    raise web.HTTPError(400, f"Unknown profile {slug!r}; see GET pricing")
                elif slug not in {p["slug"] for p in allowed}:
                    raise web.HTTPError(403, f"You may not use the profile {slug!r}: it is reserved for other groups.")
            elif slug is None:
                raise web.HTTPError(400, "profile is required (the hub has not published its profiles yet)")
            running = active_jobs(self.ledger, name)
            if len(running) >= service.max_concurrent_jobs:
                raise web.HTTPError(
                    429,
                    f"You already have {len(running)} job(s) running; at most {service.max_concurrent_jobs}"
                    " may run at once. Wait for one to finish or cancel one.",
                )
            job = create_job(self.ledger, name, request, slug, self.now())
            path = f"/users/{quote(name, safe='')}/servers/{quote(job.server_name, safe='')}"
            try:
                await service.hub.request(
                    "POST", path, body={"user_options": {"profile": slug, "job_id": job.id}, "display_name": job.id}
                )
            except HubAPIError as e:
                status, message = _hub_error_message(e)
                update_job(self.ledger, job.id, state="failed", finished=self.now(), error=message)
                raise web.HTTPError(status, f"The job's server could not start: {message}") from None
            log.info("job %s of %s: %s on %s", job.id, name, job.notebook, slug)
            self.show(get_job(self.ledger, job.id), 201)

    class Job(JobBase):
        """``GET jobs/{id}``: one job (one's own, or anyone's with custom:gpu-usage:read)."""

        @web.authenticated
        def get(self, job_id: str):
            self.show(self.job_or_404(job_id))

    class JobCancel(JobBase):
        """``POST jobs/{id}/cancel``: stop one's own running job (its server; billing ends)."""

        @web.authenticated
        async def post(self, job_id: str):
            job = self.job_or_404(job_id, write=True)
            body = self.json_body(allow_empty=True)
            if body not in (None, {}):
                raise web.HTTPError(400, "Cancelling a job takes no body (or {})")
            if job.state not in ACTIVE_STATES:
                raise web.HTTPError(409, f"Job {job.id} has already ended ({job.state})")
            session = job_session(self.ledger, job)
            if session is not None:
                self.ledger.set_pending_stop_reason(session.id, REASON_JOB_CANCELLED)
            update_job(self.ledger, job.id, state="cancelled", finished=self.now(), error="Cancelled by its owner.")
            try:
                await self.service.hub.remove_server(job.user, job.server_name)
            except HubAPIError as e:
                self.log.error("could not stop the server of cancelled job %s: %s", job.id, e)
            self.show(get_job(self.ledger, job.id))

    class JobStarted(JobBase):
        """``POST jobs/{id}/started``: the job's server began the run (its session id in the body)."""

        @web.authenticated
        def post(self, job_id: str):
            job = self.job_or_404(job_id, write=True)
            session = self.runner_session(job, self.json_body())
            if not update_job(
                self.ledger, job.id, only_if=("starting",), state="running", started=self.now(), session_id=session.id
            ):
                raise web.HTTPError(409, f"Job {job.id} is {job.state}, not starting")
            self.show(get_job(self.ledger, job.id))

    class JobFinished(JobBase):
        """``POST jobs/{id}/finished``: the runner's end: state and error; the server then stops itself."""

        @web.authenticated
        def post(self, job_id: str):
            job = self.job_or_404(job_id, write=True)
            body = self.json_body()
            session = self.runner_session(job, body)
            state = body.get("state")
            if state not in RUNNER_END_STATES:
                raise web.HTTPError(400, f"state must be one of {', '.join(RUNNER_END_STATES)}, got {state!r}")
            error = body.get("error")
            if error is not None and not isinstance(error, str):
                raise web.HTTPError(400, "error must be a string or null")
            if not update_job(
                self.ledger,
                job.id,
                state=state,
                finished=self.now(),
                error=(error or None) and error[:4000],
                session_id=session.id,
            ):
                raise web.HTTPError(409, f"Job {job.id} has already ended ({job.state})")
            self.ledger.set_pending_stop_reason(session.id, REASON_JOB)
            self.show(get_job(self.ledger, job.id))

    class StopWhenDone(JobBase):
        """``POST stop-when-done``: a server about to stop itself after its flagged run (its session id)."""

        @web.authenticated
        def post(self):
            name = self.own_name("only a user's server stops when done")
            body = self.json_body()
            if not isinstance(body, dict) or set(body) != {"session_id"} or not isinstance(body["session_id"], str):
                raise web.HTTPError(400, 'The body must be {"session_id": "<the server\'s session>"}')
            session = self.ledger.get_session(body["session_id"])
            if session is None or session.user != name:
                raise web.HTTPError(403, "A server may only flag its own session.")
            if not is_server_token(self.current_user, session.user, session.server_name):
                raise web.HTTPError(403, "A server may only flag its own session, with its own token.")
            if session.stopped is not None:
                raise web.HTTPError(409, "The session has already stopped.")
            self.ledger.set_pending_stop_reason(session.id, REASON_STOP_WHEN_DONE)
            self.write_json({"session_id": session.id, "stop_reason": REASON_STOP_WHEN_DONE})

    return [
        (url_path_join(api, "jobs"), Jobs),
        (url_path_join(api, r"jobs/([^/]+)"), Job),
        (url_path_join(api, r"jobs/([^/]+)/cancel"), JobCancel),
        (url_path_join(api, r"jobs/([^/]+)/started"), JobStarted),
        (url_path_join(api, r"jobs/([^/]+)/finished"), JobFinished),
        (url_path_join(api, "stop-when-done"), StopWhenDone),
    ]
