"""The figures of a pool simulator run (:class:`.pool.Result`): the pool's hours, waits, the estimate's error,
requests served and given up, billed GPU-minutes that did work against an always-on baseline, work lost to
preemption, reservation windows, and spend per group against its share.

Definitions (docs/scheduling.md):

- a *wait* is the minutes from a request's arrival to its grant; a request never served counts with the time it
  waited (until its user gave up, or the horizon): a lower bound;
- *served* and *gave up* count each request of the workload once (its first request; a resumption after a
  preemption is not a new request);
- *billed GPU-minutes* are per started minute, times the session's GPUs; the *busy share* of them is the part
  in which the GPU did work (``TraceMinute.gpu_busy``). The *always-on* baseline bills the same requests (those
  served) from their start for their whole session, with no cull rule and no preemption;
- *work lost to preemption* is the GPU-minutes of work since the last checkpoint of preempted sessions
  (:func:`.checkpoint.resume_point`), over all the GPU work done on the preemptible tier;
- a group's *share* is its part of the shares of each model, weighted by the model's units in the pool (a group
  without a configured share has 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from jupyterhub_gpu.scheduler import PREEMPTIBLE, STANDARD
from jupyterhub_gpu.sim.pool import HORIZON, NATURAL, PREEMPTED, RESERVED, RequestRecord, Result


def percentile(values: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile (0-100) by the nearest-rank method; None of nothing."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def _waits(records: Iterable[RequestRecord]) -> dict:
    waits = [r.wait for r in records]
    return {
        "requests": len(waits),
        "p50": percentile(waits, 50),
        "p90": percentile(waits, 90),
        "p99": percentile(waits, 99),
    }


def _share(part: float, whole: float) -> float:
    return round(part / whole, 4) if whole else 0.0


def served(records: Iterable[RequestRecord]) -> dict:
    """Each request of the workload once (its first): served, given up, refused, still waiting at the horizon."""
    first = [r for r in records if r.resume == 0]
    counts = {k: sum(1 for r in first if r.outcome == outcome) for k, outcome in _OUTCOMES}
    return {"requests": len(first), **counts}


_OUTCOMES = (("served", "granted"), ("gave_up", "abandoned"), ("refused", "refused"), ("waiting", "waiting"))


def billed_busy(result: Result) -> dict:
    """Billed GPU-minutes and those in which the GPU did work, and the same for an always-on baseline."""
    billed = sum(r.billed_gpu_minutes for r in result.runs)
    busy = sum(r.busy_gpu_minutes for r in result.runs)
    granted = {r.job for r in result.requests if r.outcome == "granted" and r.resume == 0}
    always_billed = always_busy = 0
    for job in result.jobs:
        if job.id in granted:
            always_billed += len(job.minutes) * job.count
            always_busy += sum(1 for m in job.minutes if m.gpu_busy) * job.count
    return {
        "billed_gpu_minutes": billed,
        "busy_gpu_minutes": busy,
        "busy_share": _share(busy, billed),
        "always_on": {
            "requests": len(granted),
            "billed_gpu_minutes": always_billed,
            "busy_gpu_minutes": always_busy,
            "busy_share": _share(always_busy, always_billed),
        },
    }


def preemption_loss(result: Result) -> dict:
    """GPU-minutes of work lost by preempted sessions, against all the work done on the preemptible tier."""
    checkpoints = {j.id for j in result.jobs if j.checkpoints}
    lost = sum(r.lost_gpu_minutes for r in result.runs if r.end == PREEMPTED)
    work = sum(r.busy_gpu_minutes for r in result.runs if r.tier == PREEMPTIBLE)
    return {
        "lost_gpu_minutes": lost,
        "preemptible_work_gpu_minutes": work,
        "share": _share(lost, work),
        "lost_without_checkpoint": sum(
            r.lost_gpu_minutes for r in result.runs if r.end == PREEMPTED and r.job not in checkpoints
        ),
        "reservation_lost_gpu_minutes": sum(r.lost_gpu_minutes for r in result.runs if r.end == RESERVED),
    }


def group_shares(pool: Mapping[str, int], shares: Mapping[str, Mapping[str, float]], groups: Iterable[str]) -> dict:
    """Each group's part of the shares, model by model, weighted by the model's units (missing: a share of 1)."""
    groups = sorted(set(groups) | set(shares))
    units = sum(pool.values())
    out = dict.fromkeys(groups, 0.0)
    for model, n in pool.items():
        mine = {g: float(shares.get(g, {}).get(model, 1.0)) for g in groups}
        total = sum(mine.values())
        for g in groups:
            if total and units:
                out[g] += n / units * mine[g] / total
    return {g: round(v, 4) for g, v in out.items()}


def spend_against_shares(result: Result) -> dict:
    """Per group: its spend and GPU-minutes, each as a part of all of them, next to its share of the pool."""
    spend: dict[str, int] = {}
    used: dict[str, int] = {}
    for run in result.runs:
        spend[run.group] = spend.get(run.group, 0) + run.cost_micros
        used[run.group] = used.get(run.group, 0) + run.minutes * run.count
    groups = {j.group for j in result.jobs} | set(spend)
    share = group_shares(result.lab.pool, result.lab.shares, groups)
    total_spend, total_used = sum(spend.values()), sum(used.values())
    return {
        g: {
            "spend_micros": spend.get(g, 0),
            "spend_share": _share(spend.get(g, 0), total_spend),
            "gpu_minutes": used.get(g, 0),
            "use_share": _share(used.get(g, 0), total_used),
            "share": share[g],
        }
        for g in sorted(groups)
    }


def report(
    result: Result, weeks: Mapping[str, tuple[int, int]] | None = None, students: Mapping[str, int] | None = None
) -> dict:
    """The figures of one run (see the module's docstring).

    ``weeks``: name -> (first, last minute) of periods whose waits and requests are given apart (the deadline
    week). ``students``: group -> members, for the spend per student.
    """
    lab = result.lab
    available = sum(lab.pool.values()) * lab.minutes
    allocated = sum(r.minutes * r.count for r in result.runs)
    busy = sum(r.busy_gpu_minutes for r in result.runs)
    requests = [r for r in result.requests if r.outcome != "refused"]
    errors = [
        abs(r.estimate - r.wait) for r in requests if r.outcome == "granted" and r.estimated and r.estimate is not None
    ]
    spend_group: dict[str, int] = {}
    spend_user: dict[str, int] = {}
    group_of_user: dict[str, str] = {}
    for run in result.runs:
        spend_group[run.group] = spend_group.get(run.group, 0) + run.cost_micros
        spend_user[run.user] = spend_user.get(run.user, 0) + run.cost_micros
        group_of_user[run.user] = run.group
    per_student = {}
    for group in sorted(spend_group):
        members = (students or {}).get(group) or sum(1 for g in group_of_user.values() if g == group)
        spent = sorted([v for u, v in spend_user.items() if group_of_user[u] == group])
        spent += [0] * max(0, members - len(spent))
        spent.sort()
        per_student[group] = {
            "students": members,
            "mean_micros": spend_group[group] // members if members else 0,
            "p50_micros": percentile(spent, 50),
            "p90_micros": percentile(spent, 90),
            "max_micros": spent[-1] if spent else 0,
        }
    out = {
        "policy": result.policy,
        "pool_gpu_hours": {
            "available": round(available / 60, 1),
            "allocated": round(allocated / 60, 1),
            "busy": round(busy / 60, 1),
            "allocated_share": _share(allocated, available),
            "busy_share": _share(busy, available),
        },
        "requests": {
            outcome: sum(1 for r in result.requests if r.outcome == outcome)
            for outcome in ("granted", "abandoned", "refused", "waiting")
        },
        "served": {
            "all": served(result.requests),
            "by_kind": {
                k: served(r for r in result.requests if r.kind == k) for k in sorted({j.kind for j in result.jobs})
            },
        },
        "wait_minutes": {
            "all": _waits(requests),
            "by_group": {g: _waits(r for r in requests if r.group == g) for g in sorted({r.group for r in requests})},
            "by_tier": {t: _waits(r for r in requests if r.tier == t) for t in (STANDARD, PREEMPTIBLE)},
        },
        "estimate_error_minutes": {
            "estimated": len(errors),
            "waited": sum(1 for r in requests if r.outcome == "granted" and r.wait > 0),
            "p50": percentile(errors, 50),
            "p90": percentile(errors, 90),
        },
        "billed": billed_busy(result),
        "preemptions": result.preemptions,
        "preemption_loss": preemption_loss(result),
        "reservation_stops": sum(1 for r in result.runs if r.end == RESERVED),
        "lost_gpu_minutes": sum(r.lost_gpu_minutes for r in result.runs),
        "culled": sum(1 for r in result.runs if r.end not in (NATURAL, PREEMPTED, RESERVED, HORIZON)),
        "reservation_windows": {
            "windows": len(result.windows),
            "served_in_full": sum(1 for w in result.windows if w.served),
            "short": [
                {"reservation": w.reservation, "start": w.start, "booked": w.booked, "available": w.available}
                for w in result.windows
                if not w.served
            ],
        },
        "spend_micros": {"by_group": dict(sorted(spend_group.items())), "per_student": per_student},
        "groups": spend_against_shares(result),
        "cycles": result.cycles,
    }
    for name, (first, last) in (weeks or {}).items():
        mine = [r for r in requests if first <= r.arrival < last]
        out["wait_minutes"][name] = {
            "all": _waits(mine),
            "standard": _waits(r for r in mine if r.tier == STANDARD),
            "preemptible": _waits(r for r in mine if r.tier == PREEMPTIBLE),
        }
        out["served"][name] = served(r for r in result.requests if first <= r.arrival < last)
    return out
