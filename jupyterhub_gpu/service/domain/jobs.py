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
runs (which would free a ``c.Jobs.max_concurrent`` slot and lift its time limit).
A server that reported its job's end but is still running a margin later is
stopped by the tick. The hub keeps names beginning with ``job-`` for the servers
this service starts (the spawner refuses a user's own), and a finished-run
notice names a job only for the job's own user and server (docs/security.md).

*Stop when done* is the same end for an interactive server: when every kernel
has gone idle after the flagged run, the server reports here (the ledger's
reason becomes ``stop_when_done``) and stops itself.

Each finished run is announced once, with its cost, in JupyterLab and by email
and webhook where those are set up (:func:`run_notice`, sent by the metering
tick's :func:`..tick.jobs.announce_finished_runs`). The tick also ends jobs the runner
could not end itself (:func:`..tick.jobs.enforce_jobs`): over their time limit
(stopped, ``job_time_limit``), or whose server went away.

Here are the rules and the messages; the tick (:mod:`..tick`) ends jobs through
the hub client and announces runs through the gateway (:mod:`..notify`), and the
REST handlers under ``/services/gpu/api/v1/jobs`` live in :mod:`..web.api.jobs`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.money import from_micros
from jupyterhub_gpu.service.domain.notices import AlertSettings, Message, Once, user_address
from jupyterhub_gpu.session import StopReason

log = logging.getLogger("jupyterhub_gpu.jobs")

#: States the runner may report at the end of its run.
RUNNER_END_STATES = ("succeeded", "failed", "timed_out")

JOB_FIELDS = ("notebook", "profile", "parameters", "time_limit_minutes")
#: The runner's own time limit is enforced in the server; the service stops a job this much later.
TIME_LIMIT_MARGIN = timedelta(seconds=60)
#: A job whose server has not reported its start after this long (plus the queue) has failed to start.
START_TIMEOUT = timedelta(minutes=15)
MAX_PARAMETERS_BYTES = 64 * 1024


class JobError(ValueError):
    """A job request that cannot be accepted; ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


# -- what the rules read of a run (the ledger's session and job rows have these) -------------


class RunSession(Protocol):
    """A finished run's session: whose, which server, when it started, why it stopped, what it cost."""

    id: str
    user: str
    server_name: str
    started: datetime
    stop_reason: str | None
    minutes: int | None
    cost_micros: int | None
    currency: str


class RunJob(Protocol):
    """A job as its finished run's notice names it."""

    id: str
    user: str
    server_name: str
    notebook: str
    state: str
    error: str | None

    @property
    def output_notebook(self) -> str: ...

    @property
    def log_file(self) -> str: ...


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


def run_job(session: RunSession, job: RunJob | None) -> RunJob | None:
    """The job a finished run's notice names: only a job of the run's own user and server (docs/security.md)."""
    if job is not None and (job.user != session.user or job.server_name != session.server_name):
        return None  # a server named after another user's job: its notice names no job
    return job


def run_once(session: RunSession) -> Once:
    """A finished run is announced once per channel (the ``run:<session>`` claim in ``gpu_alerts``)."""
    return Once(session.user, f"run:{session.id}", session.started, 100)


#: A finished job's subject and text by its state (catalogue ids: their Chinese is in :mod:`jupyterhub_gpu.i18n`).
JOB_SUBJECTS = {
    "succeeded": "[GPU] Job {job} finished: {notebook}",
    "failed": "[GPU] Job {job} failed: {notebook}",
    "timed_out": "[GPU] Job {job} was stopped at its time limit: {notebook}",
    "cancelled": "[GPU] Job {job} was cancelled: {notebook}",
    "ended": "[GPU] Job {job} ended: {notebook}",
}
JOB_TEXTS = {
    "succeeded": "Job {job} ({notebook}) finished: {billed}. Output: ~/{output}, log: ~/{log}.",
    "failed": "Job {job} ({notebook}) failed: {billed}. Output: ~/{output}, log: ~/{log}.",
    "timed_out": "Job {job} ({notebook}) was stopped at its time limit: {billed}. Output: ~/{output}, log: ~/{log}.",
    "cancelled": "Job {job} ({notebook}) was cancelled: {billed}. Output: ~/{output}, log: ~/{log}.",
    "ended": "Job {job} ({notebook}) ended: {billed}. Output: ~/{output}, log: ~/{log}.",
}


def run_message(session: RunSession, job: RunJob | None, currency, lang: str = "en") -> tuple[str, str]:
    """(subject, text) of a finished run's notice in ``lang``, with its billed minutes and cost."""
    _ = translator(lang)
    cost = currency.format(from_micros(session.cost_micros or 0), locale=lang)
    minutes = session.minutes or 0
    billed = _.plural(
        "{minutes} minute billed, {cost}", "{minutes} minutes billed, {cost}", minutes, minutes=minutes, cost=cost
    )
    server = session.server_name or _("(default)")
    if job is None and session.stop_reason == StopReason.PLATEAU:
        subject = _("[GPU] Your server stopped: training reached a plateau")
        text = _(
            "Your server {server} stopped when training reached a plateau (a checkpoint was saved; the GPU is free):"
            " {billed}.",
            server=server,
            billed=billed,
        )
        return subject, text
    if job is None:
        subject = _("[GPU] Your server stopped when its cells finished")
        text = _(
            "Your server {server} stopped when its running cells finished: {billed}.", server=server, billed=billed
        )
        return subject, text
    state = job.state if job.state in JOB_TEXTS else "ended"
    subject = _(JOB_SUBJECTS[state], job=job.id, notebook=job.notebook)
    text = _(
        JOB_TEXTS[state],
        job=job.id,
        notebook=job.notebook,
        billed=billed,
        output=job.output_notebook,
        log=job.log_file,
    )
    if job.error:
        text += f" {job.error}"
    return subject, text


def run_notice(session: RunSession, job: RunJob | None, currency, settings: AlertSettings, lang: str = "en") -> Message:
    """A finished job or stop-when-done run, with its cost: in JupyterLab, to the user by mail, by webhook.

    Worded in ``lang``, and in another language on the gateway's demand."""
    subject, text = run_message(session, job, currency, lang)
    address = user_address(settings, session.user)
    return Message(
        user=session.user,
        kind="run",
        text=text,
        level="error" if job is not None and job.state != "succeeded" else "info",
        session_id=session.id,
        subject=subject,
        to=(address,) if address else (),
        payload={
            "event": "job_finished" if job is not None else session.stop_reason or "stop_when_done",
            "user": session.user,
            "server_name": session.server_name,
            "session_id": session.id,
            "job_id": job.id if job is not None else None,
            "state": job.state if job is not None else None,
            "minutes_billed": session.minutes,
            "cost": f"{from_micros(session.cost_micros or 0):f}",
            "currency": session.currency,
            "text": text,
            "title": subject,
        },
        what=f"run notice of {session.id}",
        source=log.name,
        event="job",
        lang=lang,
        words=lambda other: run_notice(session, job, currency, settings, other),
    )
