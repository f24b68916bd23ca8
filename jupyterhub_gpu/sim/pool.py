"""A lab's GPU pool in virtual time: arrivals, the wait queue, session ends, culling, preemption and reservations.

The pool simulator runs the scheduler's real code (:func:`~jupyterhub_gpu.scheduler.schedule`) as the culling
simulator (:mod:`.replay`) runs the real cull rules: at every minute where something happens (a request arrives,
a session ends or is stopped, a reservation window opens or closes, a preemptible session passes its minimum
runtime, a waiting student gives up) it builds the :class:`Snapshot` the service would build and applies the
decisions:

- a ``grant`` starts the session on its units; what the session then does comes from its :class:`Job`'s trace
  (one :class:`~.replay.TraceMinute` per minute, as the culling simulator's traces), and it ends when its user
  stops it or when the service's cull rules (:func:`~jupyterhub_gpu.rules.culling.evaluate`, the
  defaults unless told otherwise) stop it, whichever comes first;
- a ``preempt`` or an ``end`` stops it at the decision's time: the work since its last checkpoint is lost
  (:func:`.checkpoint.resume_point`; all its GPU work so far without ``CheckpointAndResume``), and a job that
  asked to be resumed goes back in the queue, from its checkpoint (or from the start);
- a ``queue`` decision's estimate is kept from the first time a request waits, and compared with its wait.

Sessions are billed per started minute (:func:`~jupyterhub_gpu.billing.charge`) at their profile's rate, or at
the preemptible rate under the tier. Time is whole minutes from ``Lab.origin``. Figures: :mod:`.metrics`.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo

from jupyterhub_gpu.billing import billed_minutes
from jupyterhub_gpu.rules.cullrules import CullRule, default_rules
from jupyterhub_gpu.scheduler import (
    END,
    GRANT,
    PREEMPT,
    PREEMPTIBLE,
    QUEUE,
    REFUSE,
    STANDARD,
    STOP,
    Policy,
    Request,
    Reservation,
    Running,
    SessionLengths,
    Snapshot,
    schedule,
)
from jupyterhub_gpu.session import StopReason
from jupyterhub_gpu.sim.checkpoint import resume_point
from jupyterhub_gpu.sim.replay import TraceMinute, cull_length

#: How many past sessions of a profile the wait estimate learns from (the most recent).
HISTORY = 400
#: A session's run ended: by its user or its job (natural), a cull rule, a preemption, a reservation, the horizon.
NATURAL, PREEMPTED, RESERVED, HORIZON = "natural", "preempted", "reserved", "horizon"


@dataclass(frozen=True)
class Job:
    """One request of the workload and what its session would do if nothing stopped it.

    ``minutes``: the trace of the session, one entry per minute; its user (or its notebook job) stops it after
    the last one, unless a cull rule stops it sooner. ``arrival`` is in minutes from the lab's origin.
    ``patience``: minutes its user waits in the queue before giving up (None: for ever). ``requeue``: when it
    is preempted (or stopped for a reservation) it asks to be put back in the queue, and resumes from its
    checkpoint (from the start without one). ``checkpoints``: it has ``CheckpointAndResume`` (:mod:`.checkpoint`:
    ``epoch_minutes``, ``saves_on_stop``). ``time_limit``: a notebook job's limit, a known end. Rates are per
    GPU-minute in micro-units (the full price, and the preemptible tier's).
    """

    id: str
    user: str
    group: str
    profile: str
    model: str
    arrival: int
    minutes: tuple[TraceMinute, ...]
    count: int = 1
    tier: str = STANDARD
    kind: str = "interactive"
    checkpoints: bool = False
    requeue: bool = False
    patience: int | None = None
    time_limit: int | None = None
    rate_micros: int = 0
    preemptible_rate_micros: int = 0
    groups: tuple[str, ...] = ()
    preemptible_profile: str = ""  # the profile of its tier, where the policy offers the tier
    epoch_minutes: int | None = None
    saves_on_stop: bool = True


@dataclass(frozen=True)
class Lab:
    """The pool and its rules: units per model, the groups' shares, reservations, the time frame."""

    pool: Mapping[str, int]
    origin: datetime
    minutes: int  # the horizon: the simulation stops there
    shares: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    reservations: Sequence[Reservation] = ()
    tz: tzinfo | None = None
    #: the windows whose start is measured (served in full or not): (reservation id, start minute, end minute)
    class_windows: Sequence[tuple[str, int, int]] = ()


# -- the simulator ----------------------------------------------------------------------------------------------


@dataclass
class Wait:
    """A request in the queue (a job's first request, or its resumption after a preemption)."""

    request: Request
    job: Job
    offset: int  # the trace minute it starts from (its checkpoint)
    arrival: int
    resume: int  # 0: the job's first request; n: its n-th resumption
    estimate: float | None = None  # minutes, from the first queue decision
    estimated: bool = False


@dataclass
class Run:
    """A session on the pool."""

    id: str
    job: Job
    start: int
    offset: int
    length: int  # minutes it runs if nothing stops it (its user, its job or a cull rule ends it then)
    cull: str | None
    tier: str
    rate_micros: int
    profile: str = ""
    stop_at: int | None = None
    stop_key: str | None = None


@dataclass(frozen=True)
class RequestRecord:
    """What happened to one request."""

    id: str
    job: str
    user: str
    group: str
    model: str
    tier: str  # the job's tier (what its user chose; under a policy without the tier it ran at full price)
    kind: str
    arrival: int
    wait: int  # minutes from arrival to grant (to giving up, or to the horizon, for those never served)
    outcome: str  # "granted" | "abandoned" | "refused" | "waiting"
    estimate: float | None = None  # minutes, when it waited and was given one
    estimated: bool = False
    resume: int = 0


@dataclass(frozen=True)
class RunRecord:
    """One session's time on the pool."""

    id: str
    job: str
    user: str
    group: str
    model: str
    tier: str
    count: int
    start: int
    minutes: int
    busy_gpu_minutes: int
    end: str  # NATURAL, a cull rule's kind, PREEMPTED, RESERVED or HORIZON
    lost_gpu_minutes: int
    cost_micros: int
    billed_gpu_minutes: int = 0  # per started minute, times its GPUs


@dataclass(frozen=True)
class WindowRecord:
    """A reservation window's start: how many of its GPUs its group had then."""

    reservation: str
    group: str
    model: str
    start: int
    booked: int
    available: int

    @property
    def served(self) -> bool:
        return self.available >= self.booked


@dataclass
class Result:
    policy: str
    lab: Lab
    requests: list[RequestRecord] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)
    windows: list[WindowRecord] = field(default_factory=list)
    preemptions: int = 0
    cycles: int = 0
    jobs: Sequence[Job] = ()  # the workload played, in arrival order


class PoolSim:
    """One policy, one workload, one pool: :meth:`run` plays it in virtual time and returns the :class:`Result`."""

    def __init__(
        self,
        lab: Lab,
        jobs: Iterable[Job],
        policy: Policy,
        rules: Sequence[CullRule] | None = None,
        lengths: Mapping[str, tuple[int, str | None]] | None = None,
    ):
        # None: the default rules, at the idle definition's threshold
        self.lab, self.policy = lab, policy
        self.rules = default_rules() if rules is None else tuple(rules)
        self.jobs = sorted(jobs, key=lambda j: (j.arrival, j.id))
        self.tiered = policy.preemption is not None
        self.half_life = getattr(policy.order, "half_life", None)
        max_age = [r.minutes for r in self.rules if r.kind == StopReason.MAX_AGE]
        self.max_age = min(max_age) if max_age else None
        self._lengths = dict(lengths or {})  # job id -> (minutes, cull rule) of its whole trace
        self.free = dict(lab.pool)
        self.waiting: dict[str, Wait] = {}
        self.running: dict[str, Run] = {}
        self.events: list[tuple[int, int, int, str, str]] = []
        self._seq = 0
        self.usage: dict[str, dict[str, float]] = {}
        self._metered = 0
        self.history: dict[str, deque] = {}
        self._history_view: dict[str, SessionLengths] = {}
        self._resumes: dict[str, int] = {}
        self.result = Result(policy.name, lab, jobs=tuple(self.jobs))

    # -- time and events --

    def at(self, minute: int) -> datetime:
        return self.lab.origin + timedelta(minutes=minute)

    def _push(self, minute: int, priority: int, kind: str, key: str) -> None:
        self._seq += 1
        heapq.heappush(self.events, (minute, priority, self._seq, kind, key))

    def length_of(self, job: Job, offset: int) -> tuple[int, str | None]:
        """Minutes the job's session runs from ``offset`` (and the cull rule that ends it, if one does)."""
        if offset == 0:
            if job.id not in self._lengths:
                self._lengths[job.id] = cull_length(job.minutes, self.rules)
            return self._lengths[job.id]
        return cull_length(job.minutes[offset:], self.rules)

    # -- fair-share usage, decayed as the scheduler's decayed_usage computes it --

    def _meter(self, minute: int) -> None:
        if self.half_life is None or minute <= self._metered:
            self._metered = max(self._metered, minute)
            return
        h = self.half_life / timedelta(hours=1)
        factor = 2 ** (-((minute - self._metered) / 60) / h)
        for by_model in self.usage.values():
            for model in by_model:
                by_model[model] *= factor
        gain = h / math.log(2) * (1 - factor)
        for run in self.running.values():
            by_model = self.usage.setdefault(run.job.group, {})
            by_model[run.job.model] = by_model.get(run.job.model, 0.0) + run.job.count * gain
        self._metered = minute

    # -- the snapshot --

    def _last_gpu_use(self, run: Run, minute: int) -> datetime | None:
        minutes = run.job.minutes
        i = run.offset + (minute - run.start) - 1
        stop = run.offset - 1
        while i > stop:
            if i < len(minutes) and minutes[i].gpu_busy:
                return self.at(run.start + (i - run.offset) + 1)
            i -= 1
        return None

    def _running(self, run: Run, minute: int) -> Running:
        job = run.job
        known = [run.start + self.max_age] if self.max_age is not None else []
        if job.time_limit is not None:
            known.append(run.start + job.time_limit)
        return Running(
            id=run.id,
            user=job.user,
            group=job.group,
            model=job.model,
            started=self.at(run.start),
            count=job.count,
            profile=run.profile,
            tier=run.tier,
            last_gpu_use=self._last_gpu_use(run, minute) if run.tier == PREEMPTIBLE else None,
            ends=self.at(min(known)) if known else None,
            checkpoints=job.checkpoints,
            groups=job.groups,
            stop_at=self.at(run.stop_at) if run.stop_at is not None else None,
            stop_key=run.stop_key,
        )

    def snapshot(self, minute: int) -> Snapshot:
        for profile, lengths in self.history.items():
            if profile not in self._history_view:
                self._history_view[profile] = SessionLengths(lengths)
        return Snapshot(
            now=self.at(minute),
            free=self.free,
            pool=self.lab.pool,
            waiting=[w.request for w in self.waiting.values()],
            running=[self._running(r, minute) for r in self.running.values()],
            shares=self.lab.shares,
            usage=self.usage,
            reservations=self.lab.reservations,
            history=self._history_view,
            tz=self.lab.tz,
        )

    # -- requests and runs --

    def _arrive(self, job: Job, minute: int, offset: int = 0, resume: int = 0) -> None:
        rid = job.id if not resume else f"{job.id}.r{resume}"
        tier = job.tier if self.tiered else STANDARD
        profile = job.preemptible_profile if tier == PREEMPTIBLE and job.preemptible_profile else job.profile
        request = Request(
            id=rid,
            user=job.user,
            group=job.group,
            model=job.model,
            arrived=self.at(minute),
            count=job.count,
            profile=profile,
            tier=tier,
            groups=job.groups,
        )
        self.waiting[rid] = Wait(request, job, offset, minute, resume)
        if job.patience is not None and not resume:
            self._push(minute + job.patience, 2, "give-up", rid)

    def _record(self, wait: Wait, minute: int, outcome: str) -> None:
        job = wait.job
        self.result.requests.append(
            RequestRecord(
                id=wait.request.id,
                job=job.id,
                user=job.user,
                group=job.group,
                model=job.model,
                tier=job.tier,
                kind=job.kind,
                arrival=wait.arrival,
                wait=minute - wait.arrival,
                outcome=outcome,
                estimate=wait.estimate,
                estimated=wait.estimated,
                resume=wait.resume,
            )
        )

    def _start(self, wait: Wait, minute: int, until: datetime | None) -> None:
        job = wait.job
        length, cull = self.length_of(job, wait.offset)
        tier = wait.request.tier
        rate = job.preemptible_rate_micros if tier == PREEMPTIBLE else job.rate_micros
        run = Run(wait.request.id, job, minute, wait.offset, max(1, length), cull, tier, rate, wait.request.profile)
        self.running[run.id] = run
        self.free[job.model] -= job.count
        if self.free[job.model] < 0:
            raise AssertionError(f"{run.id}: the scheduler granted more {job.model} units than are free")
        self._push(minute + run.length, 0, "end", run.id)
        if until is not None:
            self._tell(run, _minute_of(until, self.lab.origin), "reserved")
        if tier == PREEMPTIBLE and self.policy.preemption is not None:
            # past its minimum runtime it may be taken: the queue looks again then
            self._push(minute + _whole_minutes(self.policy.preemption.min_runtime), 3, "tick", "")
        self._record(wait, minute, "granted")

    def _tell(self, run: Run, minute: int, key: str) -> None:
        if run.stop_at is not None and run.stop_at <= minute:
            return
        run.stop_at, run.stop_key = minute, key
        self._push(minute, 0, "stop", run.id)

    def _finish(self, run: Run, minute: int, end: str) -> None:
        """Take a run off the pool: its account, and (preempted or stopped for a reservation) its resumption."""
        del self.running[run.id]
        job = run.job
        self.free[job.model] += job.count
        ran = minute - run.start
        done = job.minutes[run.offset : run.offset + ran]
        busy = sum(1 for m in done if m.gpu_busy)
        lost = 0
        if end in (PREEMPTED, RESERVED):
            stopped = run.offset + ran
            offset = resume_point(job, run.offset, stopped)
            # the GPU work between its checkpoint and the stop is lost (without one: all of the job's so far)
            lost = sum(1 for m in job.minutes[offset:stopped] if m.gpu_busy) * job.count
            if job.requeue and stopped < len(job.minutes):
                n = self._resumes.get(job.id, 0) + 1
                self._resumes[job.id] = n
                self._arrive(job, minute, offset, n)
        elif end != HORIZON and run.offset == 0:
            lengths = self.history.setdefault(run.profile, deque(maxlen=HISTORY))
            lengths.append(ran)
            self._history_view.pop(run.profile, None)
        billed = billed_minutes(self.at(run.start), self.at(minute)) if ran > 0 else 0
        self.result.runs.append(
            RunRecord(
                id=run.id,
                job=job.id,
                user=job.user,
                group=job.group,
                model=job.model,
                tier=run.tier,
                count=job.count,
                start=run.start,
                minutes=ran,
                busy_gpu_minutes=busy * job.count,
                end=end,
                lost_gpu_minutes=lost,
                cost_micros=billed * run.rate_micros * job.count,
                billed_gpu_minutes=billed * job.count,
            )
        )

    # -- one cycle --

    def _cycle(self, minute: int) -> None:
        for _ in range(3):  # again only when a decision stopped a session at once (a grace of 0)
            self.result.cycles += 1
            stopped_now = False
            given = set()  # the runs this cycle gives a stop, or starts with a limit
            for decision in schedule(self.snapshot(minute), self.policy):
                kind = decision.kind
                if kind in (GRANT, PREEMPT, END):
                    given.add(decision.request if kind == GRANT else decision.session)
                if kind == GRANT:
                    self._start(self.waiting.pop(decision.request), minute, decision.at)
                elif kind == QUEUE:
                    wait = self.waiting[decision.request]
                    if not wait.estimated:
                        wait.estimated = True
                        wait.estimate = None if decision.wait is None else decision.wait / timedelta(minutes=1)
                elif kind in (PREEMPT, END):
                    run = self.running[decision.session]
                    stop = _minute_of(decision.at, self.lab.origin)
                    if kind == PREEMPT and (run.stop_at is None or run.stop_at > stop):
                        self.result.preemptions += 1
                    self._tell(run, stop, "preempted" if kind == PREEMPT else "reserved")
                    stopped_now = stopped_now or stop <= minute
                elif kind == STOP:
                    run = self.running.get(decision.session)
                    if run is not None:
                        self._finish(run, minute, PREEMPTED if run.stop_key == "preempted" else RESERVED)
                        stopped_now = True
                elif kind == REFUSE and decision.request is not None:
                    self._record(self.waiting.pop(decision.request), minute, "refused")
            for run in self.running.values():
                # a stop told before that this cycle no longer gives is withdrawn, as the hub withdraws it
                if run.stop_at is not None and run.stop_at > minute and run.id not in given:
                    run.stop_at, run.stop_key = None, None
            if not stopped_now:
                return

    def _window_start(self, key: str, minute: int) -> None:
        reservation_id, _, _ = key.partition("@")
        res = next(r for r in self.lab.reservations if r.id == reservation_id)
        members = sum(
            run.job.count
            for run in self.running.values()
            if run.job.model == res.model and (run.job.group == res.group or res.group in run.job.groups)
        )
        self.result.windows.append(
            WindowRecord(res.id, res.group, res.model, minute, res.count, self.free[res.model] + members)
        )

    def run(self) -> Result:
        horizon = self.lab.minutes
        for job in self.jobs:
            if job.arrival < horizon:
                self._push(job.arrival, 1, "arrive", job.id)
        jobs = {j.id: j for j in self.jobs}
        lead = self.policy.reservations.lead if self.policy.reservations is not None else timedelta(0)
        reach = self.policy.reservations.horizon if self.policy.reservations is not None else timedelta(0)
        for reservation_id, start, end in self.lab.class_windows:
            self._push(start, 1, "window", f"{reservation_id}@{start}")  # after the minute's stops, before its grants
            # the scheduler looks when the window comes within its horizon, at its stop time, start and end
            for minute in (start - _whole_minutes(reach), start - _whole_minutes(lead), start, end):
                if 0 <= minute < horizon:
                    self._push(minute, 3, "tick", "")
        while self.events and self.events[0][0] < horizon:
            minute = self.events[0][0]
            self._meter(minute)
            while self.events and self.events[0][0] == minute:
                _, _, _, kind, key = heapq.heappop(self.events)
                if kind == "end":
                    run = self.running.get(key)
                    if run is not None and run.start + run.length == minute:
                        self._finish(run, minute, run.cull or NATURAL)
                elif kind == "stop":
                    run = self.running.get(key)
                    if run is not None and run.stop_at == minute:
                        self._finish(run, minute, PREEMPTED if run.stop_key == "preempted" else RESERVED)
                elif kind == "arrive":
                    self._arrive(jobs[key], minute)
                elif kind == "give-up":
                    wait = self.waiting.pop(key, None)
                    if wait is not None:
                        self._record(wait, minute, "abandoned")
                elif kind == "window":
                    self._window_start(key, minute)
            self._cycle(minute)
        self._meter(horizon)
        for run in list(self.running.values()):
            self._finish(run, horizon, HORIZON)
        for wait in list(self.waiting.values()):
            self._record(wait, horizon, "waiting")
        self.waiting.clear()
        return self.result


def _whole_minutes(delta: timedelta) -> int:
    return math.ceil(delta / timedelta(minutes=1))


def _minute_of(moment: datetime, origin: datetime) -> int:
    """The minute (from ``origin``) a time falls in, rounded up: a stop at 13:55:30 happens in minute 13:56."""
    return math.ceil((moment - origin) / timedelta(minutes=1))


def simulate(
    lab: Lab,
    jobs: Iterable[Job],
    policy: Policy,
    rules: Sequence[CullRule] | None = None,
    lengths: Mapping[str, tuple[int, str | None]] | None = None,
) -> Result:
    """Play ``jobs`` on ``lab`` under ``policy``; ``lengths`` (job id -> :func:`cull_length`) saves recomputing."""
    return PoolSim(lab, jobs, policy, rules, lengths).run()
