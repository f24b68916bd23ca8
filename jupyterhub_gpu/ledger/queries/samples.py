"""GPU usage samples in the ledger: one row per session and minute, merged from the pushes that fell in it.

Utilization is kept as a sum and a count (so that merging is exact), memory as a maximum, and the
kernels' activity; every sum is bounded (``MAX_SAMPLES_PER_MINUTE``, ``MAX_PUSHES_PER_MINUTE``, as
many distinct GPUs as the session holds), so that a 32-bit column never overflows whatever a server
sends. :func:`record_samples` writes many pushes in one transaction (the service's
:class:`~jupyterhub_gpu.ledger.writer.LedgerWriter`), with exactly the rows that pushing them one by
one with :func:`record_sample` gives: a push that a full minute refuses fails alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, select
from sqlalchemy.exc import IntegrityError

from jupyterhub_gpu.clock import naive_utc
from jupyterhub_gpu.gpus.device import parse_share_uuid
from jupyterhub_gpu.ledger.models import SessionRecord, UsageMinute
from jupyterhub_gpu.ledger.store import Ledger, activity_forward
from jupyterhub_gpu.rules import idle
from jupyterhub_gpu.rules.samples import Sample, SampleError

#: Caps on one session's minute row: a server samples every few seconds and pushes every 30 s.
MAX_SAMPLES_PER_MINUTE = 6000
MAX_PUSHES_PER_MINUTE = 600


@dataclass(frozen=True)
class Push:
    """One push to record: the session's user, its sample, how many GPUs the session holds, and the
    user's activity it reports (already capped at now), which moves the session's last activity forward."""

    user: str
    sample: Sample
    max_gpus: int = 64
    activity: datetime | None = None


def _merge(row: UsageMinute, sample: Sample, max_gpus: int, minute: datetime) -> None:
    """Merge ``sample`` into ``row``; SampleError, with ``row`` unchanged, when the minute is full."""
    # bounded sums: a 32-bit integer column must never overflow, whatever a server sends
    if row.pushes >= MAX_PUSHES_PER_MINUTE or row.samples + sample.samples > MAX_SAMPLES_PER_MINUTE:
        raise SampleError(
            f"The minute {minute.isoformat()}Z already has {row.pushes} pushes and {row.samples} samples;"
            f" a minute takes at most {MAX_PUSHES_PER_MINUTE} pushes and {MAX_SAMPLES_PER_MINUTE} samples."
        )
    gpus = json.loads(row.gpus or "{}")
    for uuid, util, mem, *shared in sample.gpus:
        if uuid not in gpus and len(gpus) >= max(max_gpus, 1):
            raise SampleError(f"The session holds {max_gpus} GPU(s); {uuid!r} would be one more.")
        g = gpus.setdefault(uuid, {"utilization_max": 0, "memory_used_max_mib": 0})
        g["utilization_max"] = max(g["utilization_max"], util)
        g["memory_used_max_mib"] = max(g["memory_used_max_mib"], mem)
        _merge_shared(g, *shared)
    row.pushes += 1
    row.samples += sample.samples
    row.utilization_tenths_sum += round(sample.utilization_avg * 10 * sample.samples)
    row.memory_used_max_mib = max(row.memory_used_max_mib, sample.memory_used_max_mib)
    row.memory_total_mib = max(row.memory_total_mib or 0, sample.memory_total_mib)
    row.kernels_max = max(row.kernels_max, sample.kernels)
    row.busy_kernels_max = max(row.busy_kernels_max, sample.busy_kernels)
    if sample.last_kernel_activity is not None:
        last = naive_utc(sample.last_kernel_activity)
        row.last_kernel_activity = max(row.last_kernel_activity or last, last)
    row.gpus = json.dumps(gpus, sort_keys=True)


def _merge_shared(
    g: dict,
    scope: str | None = None,
    processes: int | None = None,
    shared_by: int | None = None,
    memory_known: bool | None = None,
):
    """A shared GPU's figures of one push into its GPU's entry of the minute (docs/admin.md, "Shared GPUs").

    The whole GPU's scope wins over "own" (the minute is only as precise as its least precise push), the most
    own processes (0 only if no push saw one) and the most servers sharing, and ``memory_unknown`` once a push
    could not measure the server's own memory. A whole GPU's push (all None) adds nothing, so its rows stay
    as they were."""
    if scope is not None:
        g["scope"] = "gpu" if "gpu" in (scope, g.get("scope")) else scope
    if processes is not None:
        g["processes_max"] = max(g.get("processes_max", processes), processes)
    if shared_by is not None:
        g["shared_by_max"] = max(g.get("shared_by_max", shared_by), shared_by)
    if memory_known is False:  # the server could not measure its own memory (a share in a container): say so
        g["memory_unknown"] = True


def record_samples(ledger: Ledger, pushes: Sequence[Push]) -> list[UsageMinute | SampleError]:
    """Merge the pushes, in their order, into their minutes' rows in one transaction.

    Returns, per push, its minute's row or the SampleError that refused it (the minute was full):
    a refused push changes nothing and the others are stored, so the rows are exactly those of
    pushing them one by one. A push's activity moves its session's last activity forward (never
    back), as :meth:`.Ledger.note_activity` does, in the same transaction.
    """
    for _attempt in range(3):
        results: list[UsageMinute | SampleError] = []
        with ledger.Session() as db:
            rows: dict[tuple[str, datetime], UsageMinute] = {}
            activity: dict[str, datetime] = {}
            for push in pushes:
                sample = push.sample
                minute = naive_utc(sample.sampled_until).replace(second=0, microsecond=0)
                key = (sample.session_id, minute)
                row = rows.get(key)
                if row is None:
                    row = db.get(UsageMinute, key)
                    if row is None:
                        row = UsageMinute(session_id=sample.session_id, minute=minute, user=push.user, gpus="{}")
                        row.pushes = row.samples = row.utilization_tenths_sum = 0
                        row.memory_used_max_mib = row.kernels_max = row.busy_kernels_max = 0
                    rows[key] = row
                try:
                    _merge(row, sample, push.max_gpus, minute)
                except SampleError as e:
                    results.append(e)
                    continue
                db.add(row)  # a new row is added once a push is merged into it (a refused one adds nothing)
                results.append(row)
                if push.activity is not None:
                    moment = naive_utc(push.activity)
                    activity[sample.session_id] = max(activity.get(sample.session_id, moment), moment)
            for session_id, moment in activity.items():
                db.execute(activity_forward(session_id, moment))
            try:
                db.commit()
                return results
            except IntegrityError:  # another process created one of the rows first: merge again
                db.rollback()
    raise RuntimeError("could not record the samples")


def record_sample(ledger: Ledger, user: str, sample: Sample, max_gpus: int = 64) -> UsageMinute:
    """Merge a sample into its session's row for that minute; SampleError when the minute is full.

    ``max_gpus`` is how many GPUs the session holds: a minute's row names at most that many.
    """
    (result,) = record_samples(ledger, [Push(user, sample, max_gpus)])
    if isinstance(result, SampleError):
        raise result
    return result


def session_minutes(ledger: Ledger, session_id: str, since: datetime | None = None) -> list[UsageMinute]:
    """A session's minute rows (from ``since`` on, when given), oldest first."""
    return sessions_minutes(ledger, {session_id: since})[session_id]


def sessions_minutes(ledger: Ledger, since: Mapping[str, datetime | None]) -> dict[str, list[UsageMinute]]:
    """The minute rows of many sessions in one query: session id -> its rows from its own ``since`` on
    (all of them for None), oldest first; exactly what :func:`session_minutes` gives for each.

    The tick reads its sessions' samples this way, a chunk of sessions at a time (one query each instead of
    one per session), so that the ids stay well under a database's limit of bound parameters.
    """
    found: dict[str, list[UsageMinute]] = {sid: [] for sid in since}
    if not found:
        return found
    bounds = {sid: naive_utc(at) if at is not None else None for sid, at in since.items()}
    query = (
        select(UsageMinute)
        .where(UsageMinute.session_id.in_(list(found)))
        .order_by(UsageMinute.session_id, UsageMinute.minute)
    )
    if None not in bounds.values():
        query = query.where(UsageMinute.minute >= min(bounds.values()))
    with ledger.Session() as db:
        for row in db.scalars(query):
            bound = bounds[row.session_id]
            if bound is None or row.minute >= bound:
                found[row.session_id].append(row)
    return found


def gpu_busy_marks(
    ledger: Ledger, session_ids: Sequence[str], since: datetime
) -> dict[str, tuple[datetime | None, datetime | None]]:
    """session id -> (its last sampled minute, its last minute whose GPUs worked), from ``since`` on.

    A minute's GPUs worked as the idle definition says (:meth:`~jupyterhub_gpu.rules.idle.IdleRule.worked_in_tenths`:
    its mean utilization at the threshold or above), whatever its kernels did.

    One aggregate query for many sessions (the service's ``/metrics`` asks it at each scrape): one row per
    session whatever the sessions' lengths. Minutes are naive UTC, as stored; None: no such minute.
    """
    found: dict[str, tuple[datetime | None, datetime | None]] = dict.fromkeys(session_ids, (None, None))
    if not found:
        return found
    busy = idle.IDLE.worked_in_tenths(UsageMinute.utilization_tenths_sum, UsageMinute.samples)
    query = (
        select(
            UsageMinute.session_id,
            func.max(UsageMinute.minute),
            func.max(case((busy, UsageMinute.minute), else_=None)),
        )
        .where(UsageMinute.session_id.in_(list(found)), UsageMinute.samples > 0)
        .where(UsageMinute.minute >= naive_utc(since))
        .group_by(UsageMinute.session_id)
    )
    with ledger.Session() as db:
        for sid, last_sampled, last_busy in db.execute(query):
            found[sid] = (last_sampled, last_busy)
    return found


def share_holders(ledger: Ledger, parents: Sequence[str]) -> dict[str, int]:
    """physical GPU uuid -> how many open sessions of the ledger hold a share of it.

    A share's uuid names its GPU (``<parent>/share-<i>-of-<k>``, :func:`~jupyterhub_gpu.gpus.device.share_uuid`),
    and the ledger keeps each session's unit uuids as the spawner assigned them: this is the hub's
    assignment, never what a server reports. One query per GPU asked about (a ``LIKE`` on the open
    sessions' GPU lists), counted in Python from the parsed uuids.
    """
    found = dict.fromkeys(parents, 0)
    with ledger.Session() as db:
        for parent in found:
            pattern = "%" + parent.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "/share-%"
            query = select(SessionRecord.gpus).where(
                SessionRecord.stopped.is_(None), SessionRecord.gpus.like(pattern, escape="\\")
            )
            for gpus in db.scalars(query):
                uuids = json.loads(gpus or "[]")
                if any((parse_share_uuid(u) or ("",))[0] == parent for u in uuids if isinstance(u, str)):
                    found[parent] += 1
    return found
