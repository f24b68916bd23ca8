"""GPU usage samples: what each server's extension reports, kept as per-minute aggregates.

Every 30 s the server extension of a running session posts the averages of its
GPU samples since its last post (``POST /services/gpu/api/v1/samples``, with the
server's own token). They are merged into one row per session and minute:
utilization as a sum and a count (so that merging is exact), memory as a
maximum, and the kernels' activity. Culling and the reports read these rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from tornado import web

from .ledger import Ledger, UsageMinute, _naive

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
    if not isinstance(value, str):
        raise SampleError(f"{what} must be an ISO 8601 time, got {value!r}")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SampleError(f"{what} must be an ISO 8601 time, got {value!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _count(data: dict, name: str, maximum: int = 10**7) -> int:
    value = data.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise SampleError(f"{name} must be an integer from 0 to {maximum}, got {value!r}")
    return value


def _percent(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise SampleError(f"{name} must be a number from 0 to 100, got {value!r}")
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


def record_sample(ledger: Ledger, user: str, sample: Sample) -> UsageMinute:
    """Merge a sample into its session's row for that minute."""
    minute = _naive(sample.sampled_until).replace(second=0, microsecond=0)
    for _attempt in range(3):
        with ledger.Session() as db:
            row = db.get(UsageMinute, (sample.session_id, minute))
            if row is None:
                row = UsageMinute(session_id=sample.session_id, minute=minute, user=user, gpus="{}")
                row.pushes = row.samples = row.utilization_tenths_sum = 0
                row.memory_used_max_mib = row.kernels_max = row.busy_kernels_max = 0
                db.add(row)
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


def session_minutes(ledger: Ledger, session_id: str, since: datetime | None = None) -> list[UsageMinute]:
    query = select(UsageMinute).where(UsageMinute.session_id == session_id).order_by(UsageMinute.minute)
    if since is not None:
        query = query.where(UsageMinute.minute >= _naive(since))
    with ledger.Session() as db:
        return list(db.scalars(query))


def samples_handler():
    from .api import BaseHandler

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
            if record is None or record.user != user:
                raise web.HTTPError(403, "A server may only report the usage of its own session.")
            row = record_sample(self.ledger, user, sample)
            moments = [m for m in (sample.last_activity, sample.last_kernel_activity) if m is not None]
            if moments:
                self.ledger.note_activity(sample.session_id, max(moments))
            self.write_json({"session_id": sample.session_id, "minute": row.minute.isoformat() + "Z"}, status=201)

    return Samples
