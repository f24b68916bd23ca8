"""``jobs``: create, list, show and cancel notebook jobs; the runner's reports; ``stop-when-done``;
``restart-bigger`` (a server restarted on the bigger profile its GPU-memory notice named)."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from tornado import web

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.ledger.models import JobRecord, SessionRecord
from jupyterhub_gpu.ledger.queries.jobs import (
    ACTIVE_STATES,
    SERVER_PREFIX,
    active_jobs,
    create_job,
    get_job,
    job_session,
    list_jobs,
    update_job,
)
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.moves import Chosen, bigger_moves, purse_of, restart_options
from jupyterhub_gpu.service.domain.jobs import (
    RUNNER_END_STATES,
    JobError,
    parse_job_request,
)
from jupyterhub_gpu.service.feeds.advice import profile_options
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.web.auth import SCOPE_USAGE_READ, BaseHandler, is_server_token
from jupyterhub_gpu.service.web.params import BadRequest, query_flag, query_values
from jupyterhub_gpu.service.web.views import job_json
from jupyterhub_gpu.service.web.writes import written
from jupyterhub_gpu.session import SELF_STOP_REASONS, StopReason

log = logging.getLogger("jupyterhub_gpu.jobs")


class JobBase(BaseHandler):
    def job_or_404(self, job_id: str, write: bool = False) -> JobRecord:
        """The job, if the caller may see it; another user's job is "not found" (ids reveal nothing).

        A job is run by the service of its hub: it is read through any hub's service (a user's jobs are listed
        across hubs), but cancelled or reported on only through its own, as another hub's bookings are.
        """
        job = get_job(self.ledger, job_id)
        mine = job is not None and self.is_user and job.user == self.current_user["name"]
        if job is None or not (mine or (not write and self.has_scope(SCOPE_USAGE_READ))):
            raise web.HTTPError(404, f"You have no job {job_id!r}")
        if write and job.hub != self.ledger.hub:
            raise web.HTTPError(404, f"You have no job {job_id!r} on this hub: it runs on the hub {job.hub!r}")
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
        if not is_server_token(self.current_user, session, self.ledger.hub):
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
        job, running = await written(
            self, create_within_limit, name, request, slug, self.now(), ctx.max_concurrent_jobs
        )
        if job is None:
            raise web.HTTPError(
                429,
                f"You already have {running} job(s) running; at most {ctx.max_concurrent_jobs}"
                " may run at once. Wait for one to finish or cancel one.",
            )
        try:
            await ctx.hub.start_server(name, job.server_name, {"profile": slug, "job_id": job.id}, display_name=job.id)
        except HubAPIError as e:
            status, message = e.refusal()
            await written(self, update_job, job.id, state="failed", finished=self.now(), error=message)
            raise web.HTTPError(status, f"The job's server could not start: {message}") from None
        log.info("job %s of %s: %s on %s", job.id, name, job.notebook, slug)
        self.show(get_job(self.ledger, job.id), 201)


def create_within_limit(ledger: Ledger, user: str, request, slug: str, now, limit: int):
    """(the new job, None), or (None, the user's running jobs) when ``limit`` already run: one write, so that two
    submissions at once cannot both pass the count."""
    running = len(active_jobs(ledger, user))
    if running >= limit:
        return None, running
    return create_job(ledger, user, request, slug, now), None


def cancel_job(ledger: Ledger, job_id: str, session_id: str | None, now) -> None:
    """Cancel a job and ask for its session's stop reason in one write (a runner's report cannot come between)."""
    if session_id is not None:
        ledger.claim_stop_reason(session_id, StopReason.JOB_CANCELLED)  # a cull or budget stop keeps its own
    update_job(ledger, job_id, state="cancelled", finished=now, error="Cancelled by its owner.")


def finish_job(ledger: Ledger, job_id: str, session_id: str, state: str, now, error: str | None) -> bool:
    """The runner's end of a job and its session's stop reason in one write; False when the job had ended."""
    if not update_job(ledger, job_id, state=state, finished=now, error=error, session_id=session_id):
        return False
    ledger.claim_stop_reason(session_id, StopReason.JOB_FINISHED)  # a cull or budget stop keeps its own
    return True


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
        await written(self, cancel_job, job.id, session.id if session is not None else None, self.now())
        try:
            await self.ctx.hub.remove_server(job.user, job.server_name)
        except HubAPIError as e:
            self.log.error("could not stop the server of cancelled job %s: %s", job.id, e)
        self.show(get_job(self.ledger, job.id))


class JobStartedHandler(JobBase):
    """``POST jobs/{id}/started``: the job's server began the run (its session id in the body)."""

    @web.authenticated
    async def post(self, job_id: str):
        job = self.job_or_404(job_id, write=True)
        session = self.runner_session(job, self.json_body())
        if not await written(
            self, update_job, job.id, only_if=("starting",), state="running", started=self.now(), session_id=session.id
        ):
            raise web.HTTPError(409, f"Job {job.id} is {job.state}, not starting")
        self.show(get_job(self.ledger, job.id))


class JobFinishedHandler(JobBase):
    """``POST jobs/{id}/finished``: the runner's end: state and error; the server then stops itself."""

    @web.authenticated
    async def post(self, job_id: str):
        job = self.job_or_404(job_id, write=True)
        body = self.json_body()
        session = self.runner_session(job, body)
        state = body.get("state")
        if state not in RUNNER_END_STATES:
            raise web.HTTPError(400, f"state must be one of {', '.join(RUNNER_END_STATES)}, got {state!r}")
        error = body.get("error")
        if error is not None and not isinstance(error, str):
            raise web.HTTPError(400, "error must be a string or null")
        preempted = StopReason.PREEMPTED in (session.pending_stop_reason, session.stop_reason)
        if preempted and state != "succeeded":
            # its kernel died because the service is stopping the server for a preemption: the job is not over,
            # it goes back to the queue and runs again (the tick's enforce_jobs)
            raise web.HTTPError(
                409, f"Job {job.id}'s server is being preempted: the job goes back to the queue and runs again."
            )
        if not await written(self, finish_job, job.id, session.id, state, self.now(), (error or None) and error[:4000]):
            raise web.HTTPError(409, f"Job {job.id} has already ended ({job.state})")
        self.show(get_job(self.ledger, job.id))


class StopWhenDoneHandler(JobBase):
    """``POST stop-when-done``: a server about to stop itself after its flagged run (its session id)."""

    @web.authenticated
    async def post(self):
        name = self.own_name("only a user's server stops when done")
        body = self.json_body()
        if (
            not isinstance(body, dict)
            or not {"session_id"} <= set(body) <= {"session_id", "reason"}
            or not isinstance(body["session_id"], str)
        ):
            raise web.HTTPError(
                400, 'The body must be {"session_id": "<the server\'s session>"} with an optional "reason"'
            )
        reason = body.get("reason", StopReason.STOP_WHEN_DONE.value)
        if reason not in SELF_STOP_REASONS:
            raise web.HTTPError(400, f"reason must be one of {', '.join(SELF_STOP_REASONS)}, got {json.dumps(reason)}")
        session = self.ledger.get_session(body["session_id"])
        if session is None or session.user != name:
            raise web.HTTPError(403, "A server may only flag its own session.")
        if not is_server_token(self.current_user, session, self.ledger.hub):
            raise web.HTTPError(403, "A server may only flag its own session, with its own token.")
        if session.stopped is not None:
            raise web.HTTPError(409, "The session has already stopped.")
        kept = await written(self, Ledger.claim_stop_reason, session.id, StopReason(reason))
        if kept is None:
            raise web.HTTPError(409, "The session has already stopped.")
        if kept != reason:
            raise web.HTTPError(409, f"The service is already stopping this session ({kept}); its reason stays.")
        # the reason stands for a stop under way: the service asks the hub for it too, so that a reason claimed
        # by a server that then keeps running (a kernel holds the server's token) cannot label a later budget
        # stop or cull, nor overtake a stop order (docs/admin.md, "Why a server stopped")
        task = asyncio.ensure_future(_stop_flagged(self.ctx.hub, name, session.server_name))
        _self_stops.add(task)
        task.add_done_callback(_self_stops.discard)
        self.write_json({"session_id": session.id, "stop_reason": StopReason(reason)})


#: The hub stops asked for servers that said they are done (a reference keeps each task alive until it ends).
_self_stops: set[asyncio.Task] = set()


async def _stop_flagged(hub, user: str, server_name: str) -> None:
    """Ask the hub to stop a server that said it is done (it asks too: a stop under way is not started twice)."""
    try:
        await hub.stop_server(user, server_name)
    except Exception as e:  # the server's own request, or the next tick's, stops it all the same
        log.warning("%s/%s said it is done, but the hub did not take its stop: %s", user, server_name, e)


#: How long a restart on a bigger profile waits for the hub to stop the server before it gives up.
RESTART_STOP_TIMEOUT = 120
#: The restarts under way (a reference keeps each task alive until it ends).
_restarts: set[asyncio.Task] = set()
#: The restarts being checked (their own awaits), so that a second request meanwhile is refused.
_validating: set[str] = set()


class RestartBiggerHandler(JobBase):
    """``POST restart-bigger``: a server asks to be restarted on the bigger profile its memory notice named.

    Only the session's own server may ask, with its own token. The service works the bigger profile out
    again (:func:`.moves.next_bigger`, as the notice did: the same tier, the same group paying, a unit that
    grows, a budget that can pay) and takes only that slug, so a student gets no profile they may not use
    and restarts no one else's server. Everything the new spawn will be checked for is checked before the
    stop (:meth:`validated_move`): a restart that would be refused is refused here, and the server runs on.
    The answer (202) comes before the stop: the server asking is the one stopped. Then the hub stops the
    server and starts it again with the new profile, the same pool and the same resume choice (the
    spawner's budget check and queue apply again; the same home directory).
    """

    @web.authenticated
    async def post(self):
        name = self.own_name("only a user's server restarts on a bigger profile")
        body = self.json_body()
        if (
            not isinstance(body, dict)
            or set(body) != {"session_id", "profile"}
            or not all(isinstance(body[k], str) for k in body)
        ):
            raise web.HTTPError(
                400, 'The body must be {"session_id": "<the server\'s session>", "profile": "<the bigger profile>"}'
            )
        session = self.ledger.get_session(body["session_id"])
        if session is None or session.user != name:
            raise web.HTTPError(403, "A server may only restart its own session.")
        if not is_server_token(self.current_user, session, self.ledger.hub):
            raise web.HTTPError(403, "A server may only restart its own session, with its own token.")
        if session.stopped is not None:
            raise web.HTTPError(409, "The session has already stopped.")
        if session.server_name.startswith(SERVER_PREFIX):
            # its restart would start job-<id> without its job: the job would fail and nothing would run
            raise web.HTTPError(409, "A notebook job's server is not restarted on another profile.")
        key = f"restart:{name}/{session.server_name}"
        if key in _validating or any(r.get_name() == key for r in _restarts):
            raise web.HTTPError(409, "The server is already restarting.")
        _validating.add(key)
        try:
            bigger = await self.validated_move(session, name, body["profile"])
            # the same group pays and the same resume choice holds (the spawner checks both again), and the new
            # spawn speaks the user's language
            options = restart_options(session, bigger.slug)
            task = asyncio.ensure_future(restart(self.ctx.hub, name, session.server_name, options, session.language))
            task.set_name(key)
            _restarts.add(task)
            task.add_done_callback(_restarts.discard)
        finally:
            _validating.discard(key)
        log.info("restarting %s/%s on %s (was %s)", name, session.server_name, bigger.slug, session.profile)
        self.write_json({"session_id": session.id, "from_profile": session.profile, "profile": bigger.slug}, status=202)

    async def validated_move(self, session: SessionRecord, name: str, slug: str):
        """The profile to restart on, checked before anything is stopped: the next bigger one that keeps the
        session's tier and paying group (rules/moves.py), open to the user's groups now, and one its
        budgets can pay for as the spawner's check will judge it. A refusal (in the session's language) leaves
        the server running."""
        _ = translator(session.language or "en")
        try:
            model = await self.ctx.hub.user(name)
        except HubAPIError as e:
            raise web.HTTPError(502, f"The hub could not say which groups {name} is in: {e}") from None
        chosen = Chosen.of(session, (model or {}).get("groups") or ())
        moves = bigger_moves(profile_options(self.ledger, self.ctx.advice_settings), chosen)
        if not moves:
            raise web.HTTPError(
                409,
                _(
                    "No profile bigger than {profile} is open to you at the same tier, paid by the same group:"
                    " your server keeps running.",
                    profile=repr(session.profile),
                ),
            )
        purse = await asyncio.to_thread(purse_of, self.ledger, chosen, name, self.now(), self.ctx.tz)
        money = self.ctx.currency.format
        refusals = {o.slug: purse.refusal(o, money, session.language or "en") for o in moves}
        affordable = [o for o in moves if refusals[o.slug] is None]
        if affordable and slug == affordable[0].slug:
            return affordable[0]
        refused = next((o for o in moves if o.slug == slug and refusals[o.slug]), None)
        if refused is None and not affordable:
            refused = moves[0]
        if refused is not None:
            raise web.HTTPError(
                403,
                _(
                    "The restart on {profile} would be refused: {reason} Your server keeps running.",
                    profile=refused.display_name,
                    reason=refusals[refused.slug],
                ),
            )
        raise web.HTTPError(
            400, f"profile must be {affordable[0].slug!r}, the next bigger profile open to you, got {slug!r}"
        )


async def restart(hub, user: str, server_name: str, options: dict, language: str | None = None) -> bool:
    """Stop ``user``'s server, wait until the hub has stopped it, and start it with ``options`` (the bigger
    profile and the session's pool) in the user's ``language``; True when started."""
    slug = options["profile"]
    try:
        await hub.stop_server(user, server_name)
        deadline = time.monotonic() + RESTART_STOP_TIMEOUT
        while True:
            model = await hub.user(user)
            server = ((model or {}).get("servers") or {}).get(server_name)
            if server is None or (not server.get("pending") and not server.get("ready")):
                break
            if time.monotonic() > deadline:
                log.error("restart of %s/%s: the hub did not stop it in %ss", user, server_name, RESTART_STOP_TIMEOUT)
                return False
            await asyncio.sleep(0.5)  # polling the hub's model of the server: the hub has no stop event to wait on
        await hub.start_server(user, server_name, options, language=language)
    except HubAPIError as e:
        log.error("restart of %s/%s on %s refused: %s", user, server_name, slug, e)
        return False
    return True
