"""``jobs``: create, list, show and cancel notebook jobs; the runner's reports; ``stop-when-done``."""

from __future__ import annotations

import logging

from tornado import web

from jupyterhub_gpu.ledger.models import JobRecord, SessionRecord
from jupyterhub_gpu.ledger.queries.jobs import (
    ACTIVE_STATES,
    active_jobs,
    create_job,
    get_job,
    job_session,
    list_jobs,
    update_job,
)
from jupyterhub_gpu.service.domain.jobs import (
    RUNNER_END_STATES,
    JobError,
    parse_job_request,
)
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.web.auth import SCOPE_USAGE_READ, BaseHandler, is_server_token
from jupyterhub_gpu.service.web.params import BadRequest, query_flag, query_values
from jupyterhub_gpu.service.web.views import job_json
from jupyterhub_gpu.session import StopReason

log = logging.getLogger("jupyterhub_gpu.jobs")


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
        prefix = self.ctx.base_url
        self.write_json(job_json(job, job_session(self.ledger, job), now, self.ctx.currency, prefix), status)

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


class JobsHandler(JobBase):
    """``GET jobs``: the caller's jobs (others' with custom:gpu-usage:read); ``POST``: a new job."""

    @web.authenticated
    def get(self):
        try:
            values = query_values(self.request.query_arguments, ("user", "all"))
            everyone = query_flag(values, "all")
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        user = values.get("user")
        if everyone or (user is not None and user != (self.current_user or {}).get("name")):
            self.require_scope(SCOPE_USAGE_READ)
            user = None if everyone else user
        else:
            user = self.own_name("give user= or all=true")
        now = self.now()
        currency = self.ctx.currency
        prefix = self.ctx.base_url
        jobs = list_jobs(self.ledger, user)
        self.write_json(
            {
                "user": user,
                "max_concurrent_jobs": self.ctx.max_concurrent_jobs,
                "jobs": [job_json(j, job_session(self.ledger, j), now, currency, prefix) for j in jobs],
            }
        )

    @web.authenticated
    async def post(self):
        name = self.own_name("a job runs in a user's server; services cannot own jobs")
        ctx = self.ctx
        try:
            request = parse_job_request(self.json_body(), ctx.job_time_limit_max_minutes, ctx.job_time_limit_minutes)
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
        if len(running) >= ctx.max_concurrent_jobs:
            raise web.HTTPError(
                429,
                f"You already have {len(running)} job(s) running; at most {ctx.max_concurrent_jobs}"
                " may run at once. Wait for one to finish or cancel one.",
            )
        job = create_job(self.ledger, name, request, slug, self.now())
        try:
            await ctx.hub.start_server(name, job.server_name, {"profile": slug, "job_id": job.id}, display_name=job.id)
        except HubAPIError as e:
            status, message = e.refusal()
            update_job(self.ledger, job.id, state="failed", finished=self.now(), error=message)
            raise web.HTTPError(status, f"The job's server could not start: {message}") from None
        log.info("job %s of %s: %s on %s", job.id, name, job.notebook, slug)
        self.show(get_job(self.ledger, job.id), 201)


class JobHandler(JobBase):
    """``GET jobs/{id}``: one job (one's own, or anyone's with custom:gpu-usage:read)."""

    @web.authenticated
    def get(self, job_id: str):
        self.show(self.job_or_404(job_id))


class JobCancelHandler(JobBase):
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
            self.ledger.set_pending_stop_reason(session.id, StopReason.JOB_CANCELLED)
        update_job(self.ledger, job.id, state="cancelled", finished=self.now(), error="Cancelled by its owner.")
        try:
            await self.ctx.hub.remove_server(job.user, job.server_name)
        except HubAPIError as e:
            self.log.error("could not stop the server of cancelled job %s: %s", job.id, e)
        self.show(get_job(self.ledger, job.id))


class JobStartedHandler(JobBase):
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


class JobFinishedHandler(JobBase):
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
        self.ledger.set_pending_stop_reason(session.id, StopReason.JOB_FINISHED)
        self.show(get_job(self.ledger, job.id))


class StopWhenDoneHandler(JobBase):
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
        self.ledger.set_pending_stop_reason(session.id, StopReason.STOP_WHEN_DONE)
        self.write_json({"session_id": session.id, "stop_reason": StopReason.STOP_WHEN_DONE})
