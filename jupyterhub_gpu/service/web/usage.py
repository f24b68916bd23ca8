"""GPU usage samples: what each server's extension reports, kept as per-minute aggregates.

Every 30 s the server extension of a running session posts the averages of its
GPU samples since its last post (``POST /services/gpu/api/v1/samples``, with the
server's own token). They are merged into one row per session and minute:
utilization as a sum and a count (so that merging is exact), memory as a
maximum, and the kernels' activity. Culling and the reports read these rows.

Everything in a sample is what a user's server says, so none of it is trusted
(invariant 7, docs/security.md): every time must lie in ``[session start, end +
MAX_CLOCK_SKEW]`` (the end is now for a running session), every number within
its range, and a minute takes at most ``MAX_SAMPLES_PER_MINUTE`` samples,
``MAX_PUSHES_PER_MINUTE`` pushes and as many distinct GPUs as the session holds.
So a session has at most one row per minute it really ran (plus the skew), and
no sample can move its last activity past now. Memory sizes a server reports
are kept for its own charts only: right-sizing takes a GPU's memory from the
profile or the inventory (:mod:`.advice`).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from tornado import web

from jupyterhub_gpu.ledger.store import Ledger, SessionRecord, UsageMinute, _aware, _naive

#: How far a server's clock may run ahead of the service's (its sample times are refused beyond this).
MAX_CLOCK_SKEW = timedelta(seconds=60)
#: Caps on one session's minute row: a server samples every few seconds and pushes every 30 s.
MAX_SAMPLES_PER_MINUTE = 6000
MAX_PUSHES_PER_MINUTE = 600

SAMPLE_FIELDS = {
    "session_id",
    "sampled_until",
    "interval_seconds",
    "samples",
    "utilization_avg",
    "memory_used_avg_mib",
    "memory_used_max_mib",
    "memory_total_mib",
    "kernels",
    "busy_kernels",
    "last_kernel_activity",
    "last_activity",
    "gpus",
}


class SampleError(ValueError):
    """A sample body that cannot be used; the message says why."""


@dataclass(frozen=True)
class Sample:
    session_id: str
    sampled_until: datetime
    samples: int
    utilization_avg: float
    memory_used_max_mib: int
    memory_total_mib: int
    kernels: int
    busy_kernels: int
    last_kernel_activity: datetime | None
    last_activity: datetime | None
    gpus: tuple[tuple[str, float, int], ...]


def _moment(value, what: str) -> datetime:
    """An aware UTC time; a time whose UTC form does not exist (``9999-12-31T23:00-05:00``) is refused too."""
    if not isinstance(value, str) or len(value) > 64:
        raise SampleError(f"{what} must be an ISO 8601 time, got {value!r:.80}")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        moment = moment.astimezone(timezone.utc) if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        # the ledger's arithmetic (minute floors, the skew) must not overflow either
        _ = (moment + MAX_CLOCK_SKEW, moment - MAX_CLOCK_SKEW)
    except (ValueError, OverflowError):
        raise SampleError(f"{what} must be an ISO 8601 time, got {value!r}") from None
    return moment


def _count(data: dict, name: str, maximum: int = 10**7) -> int:
    value = data.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise SampleError(f"{name} must be an integer from 0 to {maximum}, got {value!r:.80}")
    return value


def _percent(value, name: str) -> float:
    # (NaN fails the range test too; an int of 400 digits is refused before float() could overflow)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise SampleError(f"{name} must be a number from 0 to 100, got {value!r:.80}")
    return float(value)


def _seconds(value, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise SampleError(f"{name} must be a number of seconds from 0 to 3600, got {value!r:.80}")
    return float(value)


def parse_sample(data) -> Sample:
    """A validated sample from a request body."""
    if not isinstance(data, dict):
        raise SampleError("The body must be a JSON object.")
    unknown = sorted(set(data) - SAMPLE_FIELDS)
    if unknown:
        raise SampleError(f"Unknown field(s): {', '.join(unknown)}.")
    session_id = data.get("session_id")
    if not isinstance(session_id, str) or not 0 < len(session_id) <= 64:
        raise SampleError("session_id must be the session's id.")
    gpus = data.get("gpus", [])
    if not isinstance(gpus, list) or len(gpus) > 64:
        raise SampleError("gpus must be a list of at most 64 GPUs.")
    parsed_gpus = []
    for g in gpus:
        if (
            not isinstance(g, dict)
            or not isinstance(g.get("uuid"), str)
            or set(g)
            - {
                "uuid",
                "utilization_avg",
                "memory_used_max_mib",
            }
        ):
            raise SampleError("each of gpus must be {uuid, utilization_avg, memory_used_max_mib}.")
        parsed_gpus.append(
            (
                g["uuid"][:100],
                _percent(g.get("utilization_avg", 0), "utilization_avg"),
                _count(g, "memory_used_max_mib"),
            )
        )
    last = data.get("last_kernel_activity")
    activity = data.get("last_activity")
    _seconds(data.get("interval_seconds"), "interval_seconds")
    _count(data, "memory_used_avg_mib")  # not kept, but checked like the rest: no field is taken unseen
    return Sample(
        session_id=session_id,
        sampled_until=_moment(data.get("sampled_until"), "sampled_until"),
        samples=_count(data, "samples", 100_000),
        utilization_avg=_percent(data.get("utilization_avg", 0), "utilization_avg"),
        memory_used_max_mib=_count(data, "memory_used_max_mib"),
        memory_total_mib=_count(data, "memory_total_mib"),
        kernels=_count(data, "kernels", 10_000),
        busy_kernels=_count(data, "busy_kernels", 10_000),
        last_kernel_activity=_moment(last, "last_kernel_activity") if last is not None else None,
        last_activity=_moment(activity, "last_activity") if activity is not None else None,
        gpus=tuple(parsed_gpus),
    )


def check_sample_times(sample: Sample, record: SessionRecord, now: datetime) -> None:
    """Every time of the sample inside ``[session start, end + MAX_CLOCK_SKEW]``, or SampleError.

    The end is now for a running session and its stop for a stopped one (its last push comes
    late). A time outside would make a minute row the session never ran, or an activity in
    the future that the ``inactive`` rule would wait for.
    """
    started = _aware(record.started)
    end = min(_aware(record.stopped) or now, now) + MAX_CLOCK_SKEW
    for what, moment in (
        ("sampled_until", sample.sampled_until),
        ("last_kernel_activity", sample.last_kernel_activity),
        ("last_activity", sample.last_activity),
    ):
        if moment is None:
            continue
        if moment < started:
            raise SampleError(f"{what} {moment.isoformat()} is before the session started ({started.isoformat()}).")
        if moment > end:
            raise SampleError(
                f"{what} {moment.isoformat()} is later than the session's end or now"
                f" ({end.isoformat()}, with {MAX_CLOCK_SKEW.seconds} s of clock skew)."
            )


def record_sample(ledger: Ledger, user: str, sample: Sample, max_gpus: int = 64) -> UsageMinute:
    """Merge a sample into its session's row for that minute; SampleError when the minute is full.

    ``max_gpus`` is how many GPUs the session holds: a minute's row names at most that many.
    """
    minute = _naive(sample.sampled_until).replace(second=0, microsecond=0)
    for _attempt in range(3):
        with ledger.Session() as db:
            row = db.get(UsageMinute, (sample.session_id, minute))
            if row is None:
                row = UsageMinute(session_id=sample.session_id, minute=minute, user=user, gpus="{}")
                row.pushes = row.samples = row.utilization_tenths_sum = 0
                row.memory_used_max_mib = row.kernels_max = row.busy_kernels_max = 0
                db.add(row)
            # bounded sums: a 32-bit integer column must never overflow, whatever a server sends
            if row.pushes >= MAX_PUSHES_PER_MINUTE or row.samples + sample.samples > MAX_SAMPLES_PER_MINUTE:
                raise SampleError(
                    f"The minute {minute.isoformat()}Z already has {row.pushes} pushes and {row.samples} samples;"
                    f" a minute takes at most {MAX_PUSHES_PER_MINUTE} pushes and {MAX_SAMPLES_PER_MINUTE} samples."
                )
            row.pushes += 1
            row.samples += sample.samples
            row.utilization_tenths_sum += round(sample.utilization_avg * 10 * sample.samples)
            row.memory_used_max_mib = max(row.memory_used_max_mib, sample.memory_used_max_mib)
            row.memory_total_mib = max(row.memory_total_mib or 0, sample.memory_total_mib)
            row.kernels_max = max(row.kernels_max, sample.kernels)
            row.busy_kernels_max = max(row.busy_kernels_max, sample.busy_kernels)
            if sample.last_kernel_activity is not None:
                last = _naive(sample.last_kernel_activity)
                row.last_kernel_activity = max(row.last_kernel_activity or last, last)
            gpus = json.loads(row.gpus or "{}")
            for uuid, util, mem in sample.gpus:
                if uuid not in gpus and len(gpus) >= max(max_gpus, 1):
                    raise SampleError(f"The session holds {max_gpus} GPU(s); {uuid!r} would be one more.")
                g = gpus.setdefault(uuid, {"utilization_max": 0, "memory_used_max_mib": 0})
                g["utilization_max"] = max(g["utilization_max"], util)
                g["memory_used_max_mib"] = max(g["memory_used_max_mib"], mem)
            row.gpus = json.dumps(gpus, sort_keys=True)
            try:
                db.commit()
                return row
            except IntegrityError:  # another push created the row first
                db.rollback()
    raise RuntimeError("could not record the sample")


#: A spreadsheet runs a cell that starts with one of these as a formula (CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER_RE = re.compile(r"^-?[0-9]+(?:\.[0-9]+)?$")


def csv_cell(value) -> object:
    """A CSV cell a spreadsheet shows as text: text that could start a formula gets a leading ``'``.

    Plain numbers (``-3``, ``0.05``: a budget's negative remainder) stay numbers;
    anything else that starts with ``= + - @``, a tab or a carriage return is
    quoted, whoever wrote it (user, server, group and profile names, budget
    subjects, stop reasons, notebook paths).
    """
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    text = str(value)
    if text[:1] in FORMULA_START and not _PLAIN_NUMBER_RE.fullmatch(text):
        return "'" + text
    return text


class FormulaSafeWriter:
    """``csv.writer`` (CRLF lines) that passes every cell through :func:`csv_cell`: every CSV the service serves."""

    def __init__(self, out):
        self._writer = csv.writer(out, lineterminator="\r\n")

    def writerow(self, row) -> None:
        self._writer.writerow([csv_cell(cell) for cell in row])


def session_minutes(ledger: Ledger, session_id: str, since: datetime | None = None) -> list[UsageMinute]:
    query = select(UsageMinute).where(UsageMinute.session_id == session_id).order_by(UsageMinute.minute)
    if since is not None:
        query = query.where(UsageMinute.minute >= _naive(since))
    with ledger.Session() as db:
        return list(db.scalars(query))


def is_server_token(caller: dict | None, user: str, server_name: str) -> bool:
    """Whether the caller's token is the one JupyterHub gave the server ``user/server_name``.

    A server's token holds ``servers!server=USER/NAME`` (the spawner's
    ``server_token_scopes``); another server of the same user, or the user's own
    token, holds another filter or none, so it cannot report for this server.
    """
    caller = caller or {}
    if caller.get("kind", "user") != "user" or caller.get("name") != user:
        return False
    return f"servers!server={user}/{server_name}" in set(caller.get("scopes") or ())


def samples_handler():
    from jupyterhub_gpu.service.web.api import BaseHandler

    class Samples(BaseHandler):
        """``POST samples``: a running server reports its GPU usage (its own session only)."""

        @web.authenticated
        def post(self):
            try:
                sample = parse_sample(self.json_body())
            except SampleError as e:
                raise web.HTTPError(400, str(e)) from None
            user = self.current_user["name"]
            record = self.ledger.get_session(sample.session_id)
            if record is None or record.user != user or not self.is_user:
                raise web.HTTPError(403, "A server may only report the usage of its own session.")
            if not is_server_token(self.current_user, record.user, record.server_name):
                raise web.HTTPError(403, "Only the session's own server may report its usage (its token).")
            now = self.now()
            try:
                check_sample_times(sample, record, now)
                row = record_sample(self.ledger, user, sample, max_gpus=record.gpu_count)
            except SampleError as e:
                raise web.HTTPError(400, str(e)) from None
            moments = [m for m in (sample.last_activity, sample.last_kernel_activity) if m is not None]
            if moments:
                # within the skew a server's clock may run ahead: its activity is never later than now
                self.ledger.note_activity(sample.session_id, min(max(moments), now))
            self.write_json({"session_id": sample.session_id, "minute": row.minute.isoformat() + "Z"}, status=201)

    return Samples
