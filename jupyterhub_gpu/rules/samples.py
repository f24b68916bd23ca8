"""GPU usage samples, the rule: what a valid sample is, of what each server's extension reports.

Every 30 s the server extension of a running session posts the averages of its
GPU samples since its last post (``POST /services/gpu/api/v1/samples``, with the
server's own token). They are merged into one row per session and minute:
utilization as a sum and a count (so that merging is exact), memory as a
maximum, and the kernels' activity. Culling and the reports read these rows.

Everything in a sample is what a user's server says, so none of it is trusted
(docs/security.md, "What a user's server reports cannot be forged"): every time must lie in ``[session start, end +
MAX_CLOCK_SKEW]`` (the end is now for a running session), every number within
its range, and a minute takes at most ``MAX_SAMPLES_PER_MINUTE`` samples,
``MAX_PUSHES_PER_MINUTE`` pushes and as many distinct GPUs as the session holds
(the ledger's bounds, :mod:`jupyterhub_gpu.ledger.queries.samples`).
So a session has at most one row per minute it really ran (plus the skew), and
no sample can move its last activity past now. Memory sizes a server reports
are kept for its own charts only: right-sizing takes a GPU's memory from the
profile or the inventory (:mod:`.advice`).

On a shared GPU or a MIG slice (docs/admin.md, "Shared GPUs") a server's figures are its own: its
memory is that of its own processes and its cap the share's; each of its
``gpus`` may say whose utilization it is (``scope``: ``own`` or the whole
``gpu``'s, where the driver gives no per-process figure), how many of its own
processes are on the GPU (``processes``, the most over the period) and how
many servers share the GPU (``shared_by``). A GPU reported with scope ``gpu``
and no own process did no work of this server's: its utilization is kept as 0
(:func:`.idle.own_gpu_utilization`), so a neighbour's work neither keeps this
server from ``gpu_idle`` nor moves anything of the neighbour's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.rules.idle import own_gpu_utilization

#: How far a server's clock may run ahead of the service's (its sample times are refused beyond this).
MAX_CLOCK_SKEW = timedelta(seconds=60)
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
#: The fields of one of ``gpus``; the last three come from a server on a shared GPU or a MIG slice.
GPU_FIELDS = {"uuid", "utilization_avg", "memory_used_max_mib", "scope", "processes", "shared_by", "memory_known"}
#: ``scope`` of a GPU's utilization: "own" (this server's own processes'), "gpu" (the whole GPU's).
SCOPES = ("own", "gpu")
#: Bounds of ``processes`` (this server's own processes on the GPU) and ``shared_by`` (servers holding a share).
MAX_PROCESSES = 4096
MAX_SHARED_BY = 16


class SampleError(ValueError):
    """A sample body that cannot be used; the message says why."""


@dataclass(frozen=True)
class Sample:
    """A validated push of a server's samples (:func:`parse_sample`), as the ledger merges it into its minute."""

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
    #: per GPU ``(uuid, utilization, memory used max)``, and on a shared GPU or MIG slice
    #: ``(..., scope, processes, shared_by, memory_known)`` (each None where the server did not say)
    gpus: tuple[tuple, ...]


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


def _count(data: dict, name: str, maximum: int = 10**7, where: str = "") -> int:
    value = data.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        field = f"{where}.{name}" if where else name
        raise SampleError(f"{field} must be an integer from 0 to {maximum}, got {value!r:.80}")
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


def _gpu(g: dict, where: str) -> tuple:
    """One GPU of a sample: ``(uuid, utilization, memory, scope, processes, shared_by)``, the utilization the
    server's own (:func:`.idle.own_gpu_utilization`); the last three None where the server does not say."""
    scope = g.get("scope")
    if scope is not None and scope not in SCOPES:
        raise SampleError(f"{where}.scope must be one of {', '.join(SCOPES)}, got {scope!r:.80}")
    processes = _count(g, "processes", MAX_PROCESSES, where) if g.get("processes") is not None else None
    shared_by = g.get("shared_by")
    if shared_by is not None and (
        isinstance(shared_by, bool) or not isinstance(shared_by, int) or not 1 <= shared_by <= MAX_SHARED_BY
    ):
        raise SampleError(f"{where}.shared_by must be an integer from 1 to {MAX_SHARED_BY}, got {shared_by!r:.80}")
    memory_known = g.get("memory_known")
    if memory_known is not None and not isinstance(memory_known, bool):
        raise SampleError(f"{where}.memory_known must be true or false, got {memory_known!r:.80}")
    utilization = _percent(g.get("utilization_avg", 0), "utilization_avg")
    return (
        g["uuid"][:100],
        own_gpu_utilization(utilization, scope, processes),
        _count(g, "memory_used_max_mib"),
        scope,
        processes,
        shared_by,
        memory_known,
    )


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
    for position, g in enumerate(gpus):
        if not isinstance(g, dict) or not isinstance(g.get("uuid"), str) or set(g) - GPU_FIELDS:
            raise SampleError(
                "each of gpus must be {uuid, utilization_avg, memory_used_max_mib}"
                " (and on a shared GPU or MIG slice: scope, processes, shared_by, memory_known)."
            )
        parsed_gpus.append(_gpu(g, f"gpus[{position}]"))
    utilization = _percent(data.get("utilization_avg", 0), "utilization_avg")
    if any(own_gpu_utilization(100.0, g[3], g[4]) == 0 for g in parsed_gpus):
        # a GPU that this server has no process on did none of its work, whatever the GPU's neighbours did
        utilization = round(sum(g[1] for g in parsed_gpus) / len(parsed_gpus), 1)
    last = data.get("last_kernel_activity")
    activity = data.get("last_activity")
    _seconds(data.get("interval_seconds"), "interval_seconds")
    _count(data, "memory_used_avg_mib")  # not kept, but checked like the rest: no field is taken unseen
    return Sample(
        session_id=session_id,
        sampled_until=_moment(data.get("sampled_until"), "sampled_until"),
        samples=_count(data, "samples", 100_000),
        utilization_avg=utilization,
        memory_used_max_mib=_count(data, "memory_used_max_mib"),
        memory_total_mib=_count(data, "memory_total_mib"),
        kernels=_count(data, "kernels", 10_000),
        busy_kernels=_count(data, "busy_kernels", 10_000),
        last_kernel_activity=_moment(last, "last_kernel_activity") if last is not None else None,
        last_activity=_moment(activity, "last_activity") if activity is not None else None,
        gpus=tuple(parsed_gpus),
    )


def check_sample_times(sample: Sample, started: datetime, stopped: datetime | None, now: datetime) -> None:
    """Every time of the sample inside ``[session start, end + MAX_CLOCK_SKEW]``, or SampleError.

    ``started`` and ``stopped`` are the session's (naive UTC as the ledger keeps them, or aware). The end is
    now for a running session and its stop for a stopped one (its last push comes
    late). A time outside would make a minute row the session never ran, or an activity in
    the future that the ``inactive`` rule would wait for.
    """
    started = aware_utc(started)
    end = min(aware_utc(stopped) or now, now) + MAX_CLOCK_SKEW
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


def memory_unknown(minute) -> bool:
    """Whether a minute row's memory is no measurement: a server pushed that it could not measure its own
    (``memory_unknown`` of one of the row's ``gpus``, JSON: a share read in a container)."""
    gpus = minute.gpus or ""
    return '"memory_unknown"' in gpus and any(g.get("memory_unknown") for g in json.loads(gpus).values())
