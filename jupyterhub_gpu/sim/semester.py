"""A seeded semester of a lab's GPU pool, played under each scheduling policy.

``python -m jupyterhub_gpu.sim semester [--load light|heavy] [--seed N] [--quick] [--weeks W] [--policy NAME ...]``
prints the pool simulator's report (:func:`.metrics.report`) of each policy as JSON; ``benchmarks/semester.py``
prints both loads as tables with their targets.

Two loads (:data:`LOADS`): ``light``, the semester below, whose deadline week asks for about as many GPU-hours
as the pool has (and the whole term for about a third of its hours), and ``heavy``, the same term with a
deadline week in which the courses' students ask :attr:`SemesterParams.deadline_factor` = 6 times as often
instead of 3: it asks for 1.5 to 2 times the pool's GPU-hours (:func:`demand`), so that what a policy does
when the pool cannot serve everyone shows.

The lab (:func:`lab_and_jobs`, every figure a field of :class:`SemesterParams`): 4× T4 and 4× A100; two courses
of 56 students with a weekly two-hour class each (CS231N: Tuesdays 14:00–16:00 with 4 T4s reserved; CS224N:
Thursdays 10:00–12:00 with 2 A100s reserved), a deadline week in which their students ask three times as often,
and a thesis group of 8 that trains on the A100s all term; equal shares per model. Each student's requests arrive
as a Poisson number per week, on a day (weekends half as likely; in the deadline week, more towards its Friday)
and an hour (normal around mid-afternoon, from 8:00 to 23:45). What a session does, minute by minute, comes from
the culling simulator's session bodies (:mod:`.trace`): ``interactive`` (cells between editing, steps away, an
idle tail), ``training`` (bursts, reviews, an idle tail), ``forgotten`` (left idle overnight: the cull rules stop
it), the thesis group's long runs (``always_busy``, 2–8 h) and notebook jobs (busy from start to end, stopped by
the job itself). A class window brings one request more than its reservation's GPUs, from its members, in its
first ten minutes.

Which tier a student picks (it matters only under a policy with the tier; elsewhere every request is full
price): jobs and trainings that checkpoint (``CheckpointAndResume``) mostly pick the preemptible tier, those
that do not rarely do, and a few interactive sessions do to save money. Jobs and trainings ask to be resumed
when preempted (from their checkpoint, or from the start). A waiting student gives up after a patience drawn per
kind (interactive: 20–60 min; trainings: 1–3 h; the thesis group's runs: 2–8 h; a class: 30 min; jobs never).

How a checkpointing session saves (:mod:`.checkpoint`), drawn from a random stream of its own (so the requests
are the same as without it): an epoch of ``epoch_minutes`` of GPU work (jobs 5–30, trainings 3–20, the thesis
group's runs 10–60 minutes), and the seconds it takes, when its server is stopped, to finish the running batch
and write the checkpoint (log-uniform, 0.5–12 s): over :data:`.checkpoint.STOP_SAVE_SECONDS` (8) the save is
cut off and the work since the last epoch's save is lost.

GPUs are whole: the pool simulator counts units per model, as the scheduler's snapshot did when it was written,
so a share of a GPU (1/4 T4) is not part of the semester.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from jupyterhub_gpu.money import to_micros
from jupyterhub_gpu.scheduler import (
    POLICIES,
    PREEMPTIBLE,
    STANDARD,
    Reservation,
    check_reservation,
    policy_named,
)
from jupyterhub_gpu.sim.checkpoint import STOP_SAVE_SECONDS
from jupyterhub_gpu.sim.metrics import report
from jupyterhub_gpu.sim.pool import Job, Lab, simulate
from jupyterhub_gpu.sim.replay import TraceMinute, cull_length

# the culling simulator's session bodies (its builders are private to the package: one source of what a session does)
from jupyterhub_gpu.sim.trace import TraceParams, _Session, _session

WEEK_MINUTES = 7 * 24 * 60
#: Day weights, Monday first: a normal week, and the deadline week (its deadline is Friday at midnight).
DAYS = (1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5)
DEADLINE_DAYS = (0.6, 0.8, 1.0, 1.4, 1.6, 0.3, 0.3)


@dataclass(frozen=True)
class Course:
    group: str
    label: str
    students: int
    t4_share: float  # of its sessions on a T4 (the rest on an A100)
    day: int  # of its weekly class, Monday 0
    hour: int
    hours: int
    model: str  # reserved for the class
    count: int


@dataclass(frozen=True)
class SemesterParams:
    """What the generated semester is made of (see the module docstring)."""

    weeks: int = 15
    deadline_week: int = 10  # 1-based
    origin: str = "2026-09-07"  # a Monday
    tz: str = "Asia/Shanghai"
    t4: int = 4
    a100: int = 4
    courses: tuple[Course, ...] = (
        Course("cs231n", "CS231N", 56, 0.7, 1, 14, 2, "T4", 4),
        Course("cs224n", "CS224N", 56, 0.6, 3, 10, 2, "A100", 2),
    )
    thesis_students: int = 8
    course_sessions_per_week: float = 1.6
    deadline_factor: float = 3.0
    thesis_sessions_per_week: float = 6.0
    # kinds of a course student's sessions, and of a thesis student's
    course_kinds: tuple[tuple[str, float], ...] = (
        ("interactive", 0.50),
        ("training", 0.27),
        ("job", 0.15),
        ("forgotten", 0.08),
    )
    thesis_kinds: tuple[tuple[str, float], ...] = (
        ("long", 0.45),
        ("job", 0.30),
        ("interactive", 0.15),
        ("training", 0.10),
    )
    thesis_a100_share: float = 0.85
    thesis_two_gpu_share: float = 0.15  # of its long runs, on 2 A100s
    # checkpoints, and the preemptible tier picked with and without them
    checkpoint_p: tuple[tuple[str, float], ...] = (("job", 0.9), ("training", 0.5), ("long", 0.8))
    preemptible_if_checkpoint: float = 0.75
    preemptible_otherwise: float = 0.1
    interactive_preemptible: float = 0.15
    # how a checkpointing session saves: GPU-minutes per epoch by kind, and seconds to save at a stop
    epoch_minutes: tuple[tuple[str, int, int], ...] = (("job", 5, 30), ("training", 3, 20), ("long", 10, 60))
    stop_save_seconds: tuple[float, float] = (0.5, 12.0)  # log-uniform
    # prices per GPU-minute (decimal strings, as configured), and the preemptible tier's factor
    t4_price: str = "0.05"
    a100_price: str = "0.20"
    preemptible_factor: str = "0.4"


def _poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method (small means)."""
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _minutes(raw: list[dict], seen: dict) -> tuple[TraceMinute, ...]:
    """The trace's minutes; equal minutes are one object (a term has a million minutes and a few thousand kinds)."""
    out = []
    for m in raw:
        key = (m["gpu_util"], m["gpu_mem_frac"], m["kernel_busy"], m["user_active"])
        minute = seen.get(key)
        if minute is None:
            minute = seen[key] = TraceMinute(*key)
        out.append(minute)
    return tuple(out)


def _pick(rng: random.Random, weighted) -> str:
    names, weights = zip(*weighted, strict=True)
    return rng.choices(names, weights=weights)[0]


class _Maker:
    """Builds the jobs of one semester from one random stream."""

    def __init__(self, params: SemesterParams, rng: random.Random, saves: random.Random):
        self.p, self.rng, self.saves = params, rng, saves
        self.trace = TraceParams()
        self.klass = TraceParams(interactive_min=75, interactive_max=105, interactive_tail_mean=3.0)
        factor = Decimal(params.preemptible_factor)
        self.rates = {}  # model -> (full, preemptible) micro-units per GPU-minute, exact
        for model, price in (("T4", params.t4_price), ("A100", params.a100_price)):
            self.rates[model] = (to_micros(Decimal(price)), to_micros(Decimal(price) * factor))
        self.jobs: list[Job] = []
        self.seen: dict = {}

    def body(self, kind: str, thesis: bool) -> tuple[TraceMinute, ...]:
        rng = self.rng
        if kind == "job":
            session = _Session(rng, self.trace)
            session.edit(rng.randint(1, 3))  # the job's start-up
            session.train(rng.randint(60, 480) if thesis else rng.randint(30, 240), user_p=0.0)
            raw = session.minutes
        elif kind == "long":
            raw, _ = _session(rng, self.trace, "always_busy")
        elif kind == "class":
            raw, _ = _session(rng, self.klass, "interactive")
        else:
            raw, _ = _session(rng, self.trace, kind)
        return _minutes(
            raw or [{"gpu_util": 0, "gpu_mem_frac": 0, "kernel_busy": False, "user_active": True}], self.seen
        )

    def add(self, user: str, group: str, kind: str, arrival: int, model: str, count: int, thesis: bool) -> None:
        rng, p = self.rng, self.p
        minutes = self.body(kind, thesis)
        checkpoints = rng.random() < dict(p.checkpoint_p).get(kind, 0.0)
        if kind == "interactive":
            tier = PREEMPTIBLE if rng.random() < p.interactive_preemptible else STANDARD
        elif kind in ("job", "training", "long"):
            chance = p.preemptible_if_checkpoint if checkpoints else p.preemptible_otherwise
            tier = PREEMPTIBLE if rng.random() < chance else STANDARD
        else:
            tier = STANDARD
        patience = {
            "interactive": rng.randint(20, 60),
            "forgotten": rng.randint(20, 60),
            "training": rng.randint(60, 180),
            "long": rng.randint(120, 480),
            "class": 30,
        }.get(kind)
        full, cheap = self.rates[model]
        profile = f"{model.lower()}x{count}" if count > 1 else model.lower()
        epoch, saves_on_stop = None, True
        if checkpoints:
            low, high = next((lo, hi) for k, lo, hi in p.epoch_minutes if k == kind)
            epoch = self.saves.randint(low, high)
            fast, slow = p.stop_save_seconds
            seconds = math.exp(self.saves.uniform(math.log(fast), math.log(slow)))
            saves_on_stop = seconds <= STOP_SAVE_SECONDS
        self.jobs.append(
            Job(
                id=f"j{len(self.jobs):05d}",
                user=user,
                group=group,
                profile=profile,
                preemptible_profile=f"{profile}-preemptible",
                model=model,
                arrival=arrival,
                minutes=minutes,
                count=count,
                tier=tier,
                kind=kind,
                checkpoints=checkpoints,
                requeue=kind in ("job", "training", "long"),
                patience=patience,
                time_limit=60 * (len(minutes) // 60 + 2) if kind == "job" else None,
                rate_micros=full,
                preemptible_rate_micros=cheap,
                epoch_minutes=epoch,
                saves_on_stop=saves_on_stop,
            )
        )

    def moment(self, week: int, deadline: bool) -> int:
        rng = self.rng
        day = rng.choices(range(7), weights=DEADLINE_DAYS if deadline else DAYS)[0]
        hour = min(23.75, max(8.0, rng.gauss(15.0, 3.5)))
        return week * WEEK_MINUTES + day * 24 * 60 + int(hour * 60)


def lab_and_jobs(seed: int, params: SemesterParams | None = None) -> tuple[Lab, list[Job], dict]:
    """The lab, its semester's jobs (in arrival order) and facts for the report, for ``seed``."""
    p = params or SemesterParams()
    rng = random.Random(seed)
    zone = ZoneInfo(p.tz)
    first = date.fromisoformat(p.origin)
    origin = datetime(first.year, first.month, first.day, tzinfo=zone)
    horizon = p.weeks * WEEK_MINUTES
    last_day = first + timedelta(days=7 * p.weeks - 1)
    pool = {"T4": p.t4, "A100": p.a100}
    maker = _Maker(p, rng, random.Random(f"{seed}:checkpoints"))
    groups = {c.group: c.students for c in p.courses} | {"thesis": p.thesis_students}

    reservations: list[Reservation] = []
    windows = []
    for course in p.courses:
        day = first + timedelta(days=course.day)
        start = datetime(day.year, day.month, day.day, course.hour, tzinfo=zone)
        booking = Reservation(
            id=f"{course.group}-class",
            group=course.group,
            model=course.model,
            count=course.count,
            start=start,
            end=start + timedelta(hours=course.hours),
            weekly_until=last_day,
            label=course.label,
        )
        reservations.append(check_reservation(booking, reservations, pool, groups))
        for s, e in booking.windows(origin, origin + timedelta(minutes=horizon)):
            windows.append(
                (booking.id, int((s - origin) / timedelta(minutes=1)), int((e - origin) / timedelta(minutes=1)))
            )

    deadline = p.deadline_week - 1
    for week in range(p.weeks):
        for course in p.courses:
            for n in range(course.students):
                user = f"{course.group}-{n:02d}"
                mean = p.course_sessions_per_week * (p.deadline_factor if week == deadline else 1.0)
                for _ in range(_poisson(rng, mean)):
                    kind = _pick(rng, p.course_kinds)
                    model = "T4" if rng.random() < course.t4_share else "A100"
                    maker.add(user, course.group, kind, maker.moment(week, week == deadline), model, 1, False)
        for n in range(p.thesis_students):
            user = f"thesis-{n:02d}"
            for _ in range(_poisson(rng, p.thesis_sessions_per_week)):
                kind = _pick(rng, p.thesis_kinds)
                model = "A100" if rng.random() < p.thesis_a100_share else "T4"
                count = 2 if kind == "long" and model == "A100" and rng.random() < p.thesis_two_gpu_share else 1
                maker.add(user, "thesis", kind, maker.moment(week, False), model, count, True)
    for reservation_id, start, _ in windows:
        course = next(c for c in p.courses if f"{c.group}-class" == reservation_id)
        for _ in range(course.count + 1):
            user = f"{course.group}-{rng.randrange(course.students):02d}"
            maker.add(user, course.group, "class", start + rng.randint(0, 10), course.model, 1, False)

    lab = Lab(
        pool=pool,
        origin=origin,
        minutes=horizon,
        shares={g: {"T4": 1.0, "A100": 1.0} for g in groups},
        reservations=tuple(reservations),
        tz=zone,
        class_windows=tuple(windows),
    )
    facts = {
        "seed": seed,
        "weeks": p.weeks,
        "deadline_week": p.deadline_week,
        "pool": pool,
        "students": groups,
        "jobs": len(maker.jobs),
        "deadline_minutes": (deadline * WEEK_MINUTES, (deadline + 1) * WEEK_MINUTES),
    }
    return lab, sorted(maker.jobs, key=lambda j: (j.arrival, j.id)), facts


def demand(lab: Lab, jobs, lengths: Mapping[str, tuple[int, str | None]], first: int, last: int) -> dict:
    """What the requests arriving in ``[first, last)`` ask for, against what the pool has in that time.

    ``held``: the GPU-minutes they would hold if each were served on arrival and never stopped early (its whole
    session, until its user, its job or a cull rule ends it); ``busy``: the GPU work in them. Each as GPU-minutes
    and as a part of the pool's GPU-minutes from ``first`` to ``last`` (``ratio``, ``busy_ratio``), also per model.
    """
    held: dict[str, int] = dict.fromkeys(lab.pool, 0)
    busy = 0
    for job in jobs:
        if first <= job.arrival < last:
            n = lengths[job.id][0]
            held[job.model] = held.get(job.model, 0) + n * job.count
            busy += sum(1 for m in job.minutes[:n] if m.gpu_busy) * job.count
    has = sum(lab.pool.values()) * (last - first)
    return {
        "held_gpu_minutes": sum(held.values()),
        "busy_gpu_minutes": busy,
        "ratio": round(sum(held.values()) / has, 4) if has else 0.0,
        "busy_ratio": round(busy / has, 4) if has else 0.0,
        "by_model": {m: round(v / (n * (last - first)), 4) for m, n in lab.pool.items() if n for v in (held[m],)},
    }


def full_price_only(jobs) -> list[Job]:
    """The requests whose students chose the full price: what the tier can at best make of their waits is what
    they get when no preemptible request exists at all."""
    return [job for job in jobs if job.tier != PREEMPTIBLE]


def run_semester(
    seed: int, params: SemesterParams | None = None, policies=tuple(POLICIES), bound: str | None = None
) -> dict:
    """Generate the semester for ``seed`` and play it under each policy: ``{"facts", "reports", "seconds"}``.

    ``bound``: a policy under which the full-price requests alone (:func:`full_price_only`) are played too, as
    ``"bound"``: the best any preemption could do for them.
    """
    began = time.perf_counter()
    lab, jobs, facts = lab_and_jobs(seed, params)
    lengths = {job.id: cull_length(job.minutes) for job in jobs}  # the cull rules' verdict does not depend on policy
    # the GPU work asked for: what every request would compute if it were served at once and never preempted
    whole = demand(lab, jobs, lengths, 0, lab.minutes)
    facts["offered_busy_gpu_hours"] = round(whole["busy_gpu_minutes"] / 60, 1)
    facts["offered_busy_share"] = whole["busy_ratio"]
    facts["offered_held_share"] = whole["ratio"]
    facts["deadline_demand"] = demand(lab, jobs, lengths, *facts["deadline_minutes"])
    facts["deadline_full_price"] = demand(lab, full_price_only(jobs), lengths, *facts["deadline_minutes"])
    prepared = time.perf_counter() - began
    reports = {}
    seconds = {}
    for name in policies:
        began_policy = time.perf_counter()
        result = simulate(lab, jobs, policy_named(name), lengths=lengths)
        reports[name] = report(result, {"deadline_week": facts["deadline_minutes"]}, facts["students"])
        seconds[name] = round(time.perf_counter() - began_policy, 2)
    out = {"facts": facts, "reports": reports, "seconds": {"generate": round(prepared, 2), **seconds}}
    if bound is not None:
        began_policy = time.perf_counter()
        result = simulate(lab, full_price_only(jobs), policy_named(bound), lengths=lengths)
        out["bound"] = report(result, {"deadline_week": facts["deadline_minutes"]}, facts["students"])
        out["seconds"]["bound"] = round(time.perf_counter() - began_policy, 2)
    return out


#: The two loads: the light semester, and the same term with a deadline week that asks for 1.5-2x the pool.
LOADS: dict[str, SemesterParams] = {
    "light": SemesterParams(),
    "heavy": SemesterParams(deadline_factor=6.0),
}


def load_params(load: str = "light", quick: bool = False, weeks: int | None = None) -> SemesterParams:
    """The parameters of a load; ``quick``: three weeks, the second the deadline week; ``weeks``: a shorter term."""
    if load not in LOADS:
        raise ValueError(f"unknown load {load!r}: use one of {', '.join(LOADS)}")
    params = LOADS[load]
    if quick:
        params = replace(params, weeks=3, deadline_week=2)
    if weeks is not None:
        if weeks < 1:
            raise ValueError("--weeks must be at least 1")
        params = replace(params, weeks=weeks, deadline_week=min(params.deadline_week, weeks))
    return params


def quick_params(load: str = "light") -> SemesterParams:
    """Three weeks, the second a deadline week: the same lab, for tests and ``--quick``."""
    return load_params(load, quick=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jupyterhub_gpu.sim semester",
        description="Play a seeded semester of a lab's GPU pool under scheduling policies; print the reports as JSON.",
    )
    p.add_argument("--load", choices=list(LOADS), default="light", help="the semester's load (default: %(default)s)")
    p.add_argument("--seed", type=int, default=2026, help="random seed (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="three weeks instead of a term")
    p.add_argument("--weeks", type=int, help="weeks of the term (default 15; --quick: 3)")
    p.add_argument(
        "--policy",
        action="append",
        choices=list(POLICIES),
        help="a policy to play (repeat; default: all of them)",
    )
    return p


def params_from(args) -> SemesterParams:
    return load_params(getattr(args, "load", "light"), args.quick, args.weeks)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        params = params_from(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = run_semester(args.seed, params, tuple(args.policy or POLICIES))
    out["facts"]["load"] = args.load
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
