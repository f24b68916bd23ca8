"""The lab's GPU scheduler: a snapshot of the pool in, decisions out (issue 16).

Pure: no database, no hub, no clock of its own. Each scheduling cycle, the caller (the hub's wait queue, the
service's tick, or the pool simulator :mod:`jupyterhub_gpu.sim.pool`) describes the pool in a :class:`Snapshot`
(free units per GPU model, the waiting requests, the running sessions with their start, tier, last GPU use and
known end, the groups' shares and decayed usage, the reservations, ``now``) and :func:`schedule` returns what
to do, as :class:`Decision` objects, each with its reason in words a student reads:

- ``grant``: start a waiting request now (``at``: the time it may run until, when a reservation follows);
- ``preempt``: stop a preemptible session at ``at`` (``now`` + the grace) to free its GPU for ``for_request``;
- ``end``: tell a running session it may run only until ``at`` (a reservation starts after it);
- ``stop``: a session told to stop at ``at`` has reached it;
- ``refuse``: a request no pool can serve (an unknown model, more GPUs than the pool has), or a reservation
  the pool cannot hold at that time;
- ``queue``: a request that waits, with its place (``position`` of ``length`` for its model), why it stands
  there, and an estimate of the wait (``wait``).

A :class:`Policy` is made of small named plugins over the snapshot, each tested on its own table of cases:

- the order (:class:`Fifo`: today's first come, first served; :class:`FairShare`: the groups' decayed use
  against their shares, first come within a group, ageing so that nothing starves);
- :class:`Preemption` (optional): the preemptible tier: a full-price request that finds no free GPU takes one
  from a preemptible session: an idle one first, then the most recently started, never one younger than
  ``min_runtime``; the victim is stopped after ``grace``;
- :class:`Reservations` (optional): a group's members get its reserved GPUs first during a window; a session of
  anyone else that would still hold one of them at the window's start is told when it must end.

Without the preemption plugin the tier is ignored (a preemptible request waits and runs like any other); without
the reservation plugin reservations are ignored (FIFO today). The same :func:`schedule` runs in the service
and in the simulator, so what the simulator measures is what the scheduler does.

Within a GPU model the queue is strict: a request that cannot be served blocks the ones behind it (so that a
two-GPU request is not starved by a stream of one-GPU requests), except that a reservation's members still
get the GPUs reserved for them. GPU usage is in GPU-hours (floats: a measure of time, never money). Texts are
English templates in :data:`TEXTS`: a decision keeps its key and values, so that another language can word it
(some values are worded in English too: durations, ``this week``, ``4 T4s``; they are not in the catalogue yet).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, tzinfo

#: The tiers of a request or session: full price, or cheaper and preemptible.
STANDARD = "standard"
PREEMPTIBLE = "preemptible"
TIERS = (STANDARD, PREEMPTIBLE)

#: Decision kinds.
GRANT = "grant"
PREEMPT = "preempt"
END = "end"
STOP = "stop"
REFUSE = "refuse"
QUEUE = "queue"
KINDS = (GRANT, PREEMPT, END, STOP, REFUSE, QUEUE)

WEEK = timedelta(days=7)
#: A group with a share of 0 ranks as if it had used this many times its share (ageing still lifts it).
NO_SHARE_RATIO = 10.0

#: Every text a student or an admin reads, as English templates; a decision keeps its key and values.
TEXTS: dict[str, str] = {
    # why a request stands where it does
    "fifo": "requests are served in the order they came",
    "share": "your group has used {percent}% of its share of {model} GPUs {period}",
    "share.aged": "your group has used {percent}% of its share of {model} GPUs {period};"
    " your {waited} of waiting moves you up",
    "share.none": "your group has no share of {model} GPUs: it is served when no group with a share waits,"
    " and your {waited} of waiting moves you up",
    "tier": "preemptible requests wait until no full-price request needs a {model}",
    "reserved": "{label} has {gpus} reserved until {end}",
    "reserved.soon": "the free {model} GPUs are reserved for {label} from {start}",
    # the headline of a waiting request
    "status": "Waiting for a free {model} — position {position} of {length} — {wait}",
    "wait.none": "no estimate yet",
    "wait.now": "any moment now",
    "wait.about": "about {duration}",
    "wait.day": "more than a day",
    # grants
    "grant": "{gpus} free",
    "grant.reserved": "{gpus} reserved for {label}",
    "grant.until": "may run until {until}: {label} has {gpus} reserved from {start}",
    "stopping": "a {model} frees as soon as the server told to stop has ended",
    # preemption
    "preempt": "this server will be stopped in {grace} to free its GPU for a full-price request;"
    " your training is being checkpointed",
    "preempt.save": "this server will be stopped in {grace} to free its GPU for a full-price request;"
    " save your work now",
    # reservations
    "end": "may run until {until}: {label} has {gpus} reserved from {start}",
    "stop": "this server was stopped at {at}, as it was told",
    "stop.preempted": "this server was stopped at {at} to free its GPU for a full-price request",
    "stop.reserved": "this server was stopped at {at}: its GPUs are reserved for a class from then",
    # refusals
    "refuse.model": "this pool has no {model} GPUs (it has {models})",
    "refuse.count": "{gpus} asked, but the pool has {total}",
    "refuse.bad_count": "a request needs at least one GPU, got {count}",
    "refuse.reservation": "{label} reserves {gpus} from {start} to {end},"
    " but the pool has {total} and other bookings hold {taken} then",
}


def _aware(moment: datetime, what: str) -> datetime:
    if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {moment!r}")
    return moment


def gpus_text(count: int, model: str) -> str:
    """``1 T4``, ``4 T4s``."""
    return f"{count} {model}" if count == 1 else f"{count} {model}s"


def duration_text(delta: timedelta) -> str:
    """``12 min``, ``1 h 20 min`` (whole minutes; over an hour, to 5 minutes), ``2 h``."""
    minutes = max(0, round(delta / timedelta(minutes=1)))
    if minutes < 60:
        return f"{max(minutes, 1)} min"
    minutes = 5 * round(minutes / 5)
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def wait_text(wait: timedelta | None) -> str:
    """The estimate as a student reads it: ``about 12 min``, ``any moment now``, ``no estimate yet``."""
    if wait is None:
        return TEXTS["wait.none"]
    if wait < timedelta(minutes=1):
        return TEXTS["wait.now"]
    if wait > timedelta(days=1):
        return TEXTS["wait.day"]
    return TEXTS["wait.about"].format(duration=duration_text(wait))


def clock_text(moment: datetime, tz: tzinfo, now: datetime) -> str:
    """``13:55`` on the day of ``now`` (in ``tz``), else ``Tue 8 Sep 13:55``."""
    local, today = moment.astimezone(tz), now.astimezone(tz)
    if local.date() == today.date():
        return f"{local:%H:%M}"
    return f"{local:%a} {local.day} {local:%b %H:%M}"


def period_text(half_life: timedelta) -> str:
    """How a student reads the window of decayed use: ``this week`` for a half-life of 7 days."""
    if half_life == WEEK:
        return "this week"
    if half_life == timedelta(days=1):
        return "today"
    days = half_life / timedelta(days=1)
    if days >= 1:
        return f"in the last {round(days)} days"
    return f"in the last {max(1, round(half_life / timedelta(hours=1)))} hours"


# -- the snapshot --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """A request waiting for GPUs.

    ``group`` is the group whose share it counts against (the pool that pays); ``groups`` the user's other
    groups, which count for reservations. ``tier`` is :data:`STANDARD` or :data:`PREEMPTIBLE`.
    """

    id: str
    user: str
    group: str
    model: str
    arrived: datetime
    count: int = 1
    profile: str = ""
    tier: str = STANDARD
    groups: tuple[str, ...] = ()

    def member_of(self, group: str) -> bool:
        return group == self.group or group in self.groups


@dataclass(frozen=True)
class Running:
    """A running session holding ``count`` units of ``model``.

    ``last_gpu_use``: the last time its GPU was busy (None: never). ``ends``: its earliest known end (its
    ``max_age``, its budget running out, a job's time limit), None when unknown. ``checkpoints``: it saves its
    work when told to stop (``CheckpointAndResume``). ``stop_at``: it was already told to stop then (a
    preemption's notice, a reservation's end), and ``stop_key`` why: ``"preempted"`` or ``"reserved"``.
    """

    id: str
    user: str
    group: str
    model: str
    started: datetime
    count: int = 1
    profile: str = ""
    tier: str = STANDARD
    last_gpu_use: datetime | None = None
    ends: datetime | None = None
    checkpoints: bool = False
    groups: tuple[str, ...] = ()
    stop_at: datetime | None = None
    stop_key: str | None = None

    def member_of(self, group: str) -> bool:
        return group == self.group or group in self.groups


@dataclass(frozen=True)
class Reservation:
    """``count`` units of ``model`` for ``group`` from ``start`` to ``end``, once or every week until ``weekly_until``.

    ``weekly_until`` is the last day (in the start's time zone) a weekly window may start on; None: once.
    ``label`` is the name students read ("CS231N"); the group's name when empty. Windows repeat at the same
    wall-clock time (the start's time zone), across a change of summer time too.
    """

    id: str
    group: str
    model: str
    count: int
    start: datetime
    end: datetime
    weekly_until: date | None = None
    label: str = ""

    @property
    def name(self) -> str:
        return self.label or self.group

    def windows(self, since: datetime, until: datetime) -> list[tuple[datetime, datetime]]:
        """The windows ``(start, end)`` that overlap ``[since, until)``, in order."""
        length = self.end - self.start
        if self.weekly_until is None:
            return [(self.start, self.end)] if self.start < until and self.end > since else []
        first = max(0, math.floor((since - self.end) / WEEK))
        found = []
        k = first
        while True:
            start = self.start + k * WEEK  # wall-clock arithmetic in the start's time zone
            if start.date() > self.weekly_until or start >= until:
                return found
            if start + length > since:
                found.append((start, start + length))
            k += 1

    def window_at(self, moment: datetime) -> tuple[datetime, datetime] | None:
        """The window in force at ``moment``, or None."""
        found = self.windows(moment, moment + timedelta(microseconds=1))
        return found[0] if found else None


class SessionLengths:
    """A profile's past session lengths in minutes (from the ledger, or the simulator's finished sessions)."""

    __slots__ = ("_median", "_sorted")

    def __init__(self, minutes: Iterable[float]):
        self._sorted = sorted(float(m) for m in minutes)
        self._median = _median(self._sorted)

    def __len__(self) -> int:
        return len(self._sorted)

    @property
    def lengths(self) -> tuple[float, ...]:
        """The lengths, shortest first."""
        return tuple(self._sorted)

    def median(self) -> float | None:
        """The median length, or None with no history."""
        return self._median

    def remaining(self, age: float) -> float | None:
        """The median time left of a session ``age`` minutes old: over the past sessions that lasted longer.

        None when no past session lasted longer (nothing is known of how long it will still run).
        """
        longer = self._sorted[bisect.bisect_right(self._sorted, age) :]
        median = _median(longer)
        return None if median is None else median - age


def _median(ordered: Sequence[float]) -> float | None:
    n = len(ordered)
    if not n:
        return None
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


@dataclass(frozen=True)
class Snapshot:
    """What one scheduling cycle knows.

    ``free``: free units per GPU model now. ``pool``: the units the pool has of each model (None: the free
    units plus those the running sessions hold). ``shares``: group -> model -> share (a weight; a group missing
    from a model has the fair-share plugin's default share). ``usage``: group -> model -> decayed GPU-hours
    (:func:`decayed_usage`). ``history``: profile -> :class:`SessionLengths`, for the wait estimate. ``tz``:
    the time zone times are written in for students (None: ``now``'s).
    """

    now: datetime
    free: Mapping[str, int]
    waiting: Sequence[Request] = ()
    running: Sequence[Running] = ()
    pool: Mapping[str, int] | None = None
    shares: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    usage: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    reservations: Sequence[Reservation] = ()
    history: Mapping[str, SessionLengths] = field(default_factory=dict)
    tz: tzinfo | None = None

    def units(self) -> dict[str, int]:
        """The units of each model the pool has."""
        if self.pool is not None:
            return dict(self.pool)
        total = dict(self.free)
        for session in self.running:
            total[session.model] = total.get(session.model, 0) + session.count
        return total

    @property
    def zone(self) -> tzinfo:
        return self.tz or self.now.tzinfo


def decayed_usage(
    sessions: Iterable[tuple[str, str, int, datetime, datetime | None]], now: datetime, half_life: timedelta
) -> dict[str, dict[str, float]]:
    """Decayed GPU-hours per group and model of ``(group, model, count, started, stopped or None)`` sessions.

    A GPU-hour used ``t`` ago counts ``2 ** (-t / half_life)``: the integral of that weight over each session's
    time up to ``now`` (a running session counts to ``now``), as Slurm's fair-share decays usage.
    """
    _aware(now, "now")
    h = half_life / timedelta(hours=1)
    out: dict[str, dict[str, float]] = {}
    for group, model, count, started, stopped in sessions:
        end = min(stopped, now) if stopped is not None else now
        if end <= started:
            continue
        age_end = (now - end) / timedelta(hours=1)
        age_start = (now - started) / timedelta(hours=1)
        hours = count * h / math.log(2) * (2 ** (-age_end / h) - 2 ** (-age_start / h))
        by_model = out.setdefault(group, {})
        by_model[model] = by_model.get(model, 0.0) + hours
    return out


# -- decisions -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """One thing to do, with its reason: ``TEXTS[key]`` worded with ``values`` (:attr:`reason`).

    ``at``: for ``grant``, the time the session may run until (None: no limit); for ``preempt``, ``end`` and
    ``stop``, when the session stops. ``queue`` decisions carry ``position`` of ``length`` (the requests
    waiting for the model), ``wait`` (the estimate, None when there is none) and :attr:`status`.
    """

    kind: str
    key: str
    values: Mapping[str, str] = field(default_factory=dict)
    request: str | None = None
    session: str | None = None
    reservation: str | None = None
    model: str | None = None
    at: datetime | None = None
    position: int | None = None
    length: int | None = None
    wait: timedelta | None = None
    for_request: str | None = None

    @property
    def reason(self) -> str:
        return TEXTS[self.key].format(**self.values)

    @property
    def status(self) -> str:
        """A waiting request's headline: ``Waiting for a free A100 — position 2 of 5 — about 12 min``."""
        if self.kind != QUEUE:
            return self.reason
        return TEXTS["status"].format(
            model=self.model, position=self.position, length=self.length, wait=wait_text(self.wait)
        )


# -- the plugins ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rank:
    """Where a request stands in its order (lower first) and why, as a key of :data:`TEXTS` and its values."""

    value: float
    key: str
    values: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Fifo:
    """First come, first served (the queue of today)."""

    name: str = "fifo"

    def ranks(self, snapshot: Snapshot, requests: Sequence[Request]) -> dict[str, Rank]:
        return {r.id: Rank(0.0, "fifo") for r in requests}


@dataclass(frozen=True)
class FairShare:
    """Serve the group that used least of its share first; first come within a group; waiting ages a request.

    A group's *ratio* for a model is its part of the model's decayed usage (``snapshot.usage``, half-life
    ``half_life``) over its part of the shares (groups without a configured share have ``default_share``).
    A request ranks by its group's ratio less one for each ``ageing`` it has waited, so a request of a group
    that used three times its share overtakes newcomers of an idle group after about three ``ageing`` periods:
    nothing waits for ever.
    """

    half_life: timedelta = timedelta(days=7)
    ageing: timedelta = timedelta(hours=1)
    default_share: float = 1.0
    name: str = "fair-share"

    def __post_init__(self):
        if self.half_life <= timedelta(0) or self.ageing <= timedelta(0):
            raise ValueError("half_life and ageing must be positive durations")
        if self.default_share < 0:
            raise ValueError(f"default_share must not be negative, got {self.default_share!r}")

    def ratios(self, snapshot: Snapshot, model: str, groups: Collection[str]) -> dict[str, float]:
        """Each group's ratio of use to share for ``model`` (0 with no use at all)."""
        known = set(groups) | {g for g, m in snapshot.shares.items() if model in m}
        known |= {g for g, m in snapshot.usage.items() if m.get(model)}
        share = {g: float(snapshot.shares.get(g, {}).get(model, self.default_share)) for g in known}
        used = {g: float(snapshot.usage.get(g, {}).get(model, 0.0)) for g in known}
        total_share, total_used = sum(share.values()), sum(used.values())
        ratios = {}
        for g in known:
            if total_used <= 0:
                ratios[g] = 0.0
            elif share[g] <= 0 or total_share <= 0:
                ratios[g] = NO_SHARE_RATIO
            else:
                ratios[g] = (used[g] / total_used) / (share[g] / total_share)
        return ratios

    def ranks(self, snapshot: Snapshot, requests: Sequence[Request]) -> dict[str, Rank]:
        out = {}
        by_model: dict[str, list[Request]] = {}
        for r in requests:
            by_model.setdefault(r.model, []).append(r)
        period = period_text(self.half_life)
        for model, mine in by_model.items():
            ratios = self.ratios(snapshot, model, {r.group for r in mine})
            for r in mine:
                waited = max(timedelta(0), snapshot.now - r.arrived)
                credit = waited / self.ageing
                ratio = ratios[r.group]
                values = {"model": model, "period": period, "waited": duration_text(waited)}
                no_share = float(snapshot.shares.get(r.group, {}).get(model, self.default_share)) <= 0
                if no_share and ratio > 0:
                    key = "share.none"
                else:
                    values["percent"] = str(round(ratio * 100))
                    key = "share.aged" if credit >= 1 else "share"
                out[r.id] = Rank(ratio - credit, key, values)
        return out


@dataclass(frozen=True)
class Preemption:
    """The preemptible tier: a full-price request that finds no free GPU takes one from a preemptible session.

    Victims, of the request's model: an idle GPU first (no GPU use for ``idle_after``), then the most recently
    started; never one that has run less than ``min_runtime`` (it would lose its start-up for nothing). The victim
    is told at once and stopped ``grace`` later (time to checkpoint). Preemptible requests wait behind every
    full-price request of their model.
    """

    min_runtime: timedelta = timedelta(minutes=10)
    grace: timedelta = timedelta(seconds=120)
    idle_after: timedelta = timedelta(minutes=10)
    name: str = "preemptible-tier"

    def __post_init__(self):
        if self.min_runtime < timedelta(0) or self.grace < timedelta(0) or self.idle_after <= timedelta(0):
            raise ValueError("min_runtime and grace must not be negative, idle_after must be positive")


@dataclass(frozen=True)
class Reservations:
    """Reservation windows: members first during a window; others told when to end before it.

    A session of a non-member that would still hold one of the reserved GPUs at a window's start is told
    (at its start when it is granted, else as soon as the window is within ``horizon``) that it may run until
    ``lead`` before the window; preemptible sessions are chosen first, then the most recently started. A
    non-member is not granted a GPU it could keep for less than ``min_run`` before a window.
    """

    lead: timedelta = timedelta(minutes=5)
    min_run: timedelta = timedelta(minutes=10)
    horizon: timedelta = timedelta(hours=24)
    name: str = "reservations"

    def __post_init__(self):
        if self.lead < timedelta(0) or self.min_run < timedelta(0) or self.horizon <= timedelta(0):
            raise ValueError("lead and min_run must not be negative, horizon must be positive")


@dataclass(frozen=True)
class Policy:
    """A named scheduling policy: an order plugin and the optional preemption and reservation plugins."""

    name: str
    order: Fifo | FairShare = field(default_factory=Fifo)
    preemption: Preemption | None = None
    reservations: Reservations | None = None


#: The policies the simulator compares: today's, fair share, and fair share with the tier and reservations.
POLICIES: dict[str, Policy] = {
    "fifo": Policy("fifo"),
    "fair-share": Policy("fair-share", FairShare()),
    "fair-share+tier+reservations": Policy("fair-share+tier+reservations", FairShare(), Preemption(), Reservations()),
}


def policy_named(name: str) -> Policy:
    """One of :data:`POLICIES`; ValueError naming the others."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown scheduling policy {name!r}: use one of {', '.join(POLICIES)}") from None


# -- reservations in a cycle -----------------------------------------------------------------------------------


@dataclass
class _Holder:
    """A session (running, or granted in this cycle) as the reservation check sees it."""

    id: str
    model: str
    count: int
    started: datetime
    order: int  # among sessions started at the same time: the later granted, the larger
    tier: str
    gone_by: datetime | None  # when it is known to have stopped
    member_of: Callable[[str], bool]


class _Windows:
    """The reservation windows that matter in this cycle, and who must end before each of them."""

    def __init__(self, snapshot: Snapshot, rule: Reservations, units: Mapping[str, int]):
        self.rule = rule
        self.now = snapshot.now
        self.units = units
        self.refused: list[Decision] = []
        # (start, end, reservation) of each window in force now or starting within the horizon, per model
        self.by_model: dict[str, list[tuple[datetime, datetime, Reservation]]] = {}
        for res in snapshot.reservations:
            for start, end in res.windows(self.now, self.now + rule.horizon):
                total = units.get(res.model, 0)
                others = sum(r.count for s, e, r in self.by_model.get(res.model, ()) if s < end and e > start)
                if others + res.count > total:  # the pool shrank under a booking: the later booking gives way
                    values = {
                        "label": res.name,
                        "count": str(res.count),
                        "gpus": gpus_text(res.count, res.model),
                        "model": res.model,
                        "start": clock_text(start, snapshot.zone, self.now),
                        "end": clock_text(end, snapshot.zone, self.now),
                        "total": str(total),
                        "taken": str(others),
                    }
                    self.refused.append(
                        Decision(REFUSE, "refuse.reservation", values, reservation=res.id, model=res.model, at=start)
                    )
                    continue
                self.by_model.setdefault(res.model, []).append((start, end, res))
        for windows in self.by_model.values():
            windows.sort(key=lambda w: (w[0], w[2].id))

    def active(self, model: str) -> list[tuple[datetime, datetime, Reservation]]:
        return [w for w in self.by_model.get(model, ()) if w[0] <= self.now < w[1]]

    def moments(self, model: str) -> list[datetime]:
        """The moments to check a model at: now when a window is in force, and each later window's start."""
        return sorted({max(s, self.now) for s, _, _ in self.by_model.get(model, ())})

    def in_force(self, model: str, moment: datetime) -> list[Reservation]:
        return [r for s, e, r in self.by_model.get(model, ()) if s <= moment < e]

    def to_end(self, model: str, moment: datetime, holders: Sequence[_Holder]) -> list[_Holder]:
        """The holders that must be gone by ``moment`` so that each reservation then has its GPUs, in order.

        A member's session counts towards its group's reservation while the reservation has room for it; the
        others are chosen, preemptible first, then the most recently started, until the reservations fit.
        """
        reservations = self.in_force(model, moment)
        if not reservations:
            return []
        room = {r.id: r.count for r in reservations}
        outside = []
        for h in sorted(holders, key=lambda h: (h.started, h.order)):
            if h.gone_by is not None and h.gone_by <= moment:
                continue
            home = next((r for r in reservations if h.member_of(r.group) and room[r.id] >= h.count), None)
            if home is not None:
                room[home.id] -= h.count
            else:
                outside.append(h)
        excess = sum(r.count for r in reservations) + sum(h.count for h in outside) - self.units.get(model, 0)
        if excess <= 0:
            return []
        outside.sort(key=lambda h: (h.tier != PREEMPTIBLE, -h.started.timestamp(), -h.order))
        chosen = []
        for h in outside:
            if excess <= 0:
                break
            chosen.append(h)
            excess -= h.count
        return chosen

    def reservation_for(self, model: str, moment: datetime, holder: _Holder) -> Reservation:
        """The reservation a holder gives way to at ``moment`` (one of a group it is not a member of, if any)."""
        found = self.in_force(model, moment)
        return next((r for r in found if not holder.member_of(r.group)), found[0])

    def limit(self, model: str, holder: _Holder, holders: Sequence[_Holder]) -> datetime | None:
        """The first window start before which ``holder`` would have to end; None: no limit."""
        for moment in self.moments(model):
            if any(h is holder for h in self.to_end(model, moment, holders)):
                return moment
        return None

    def stop_time(self, moment: datetime) -> datetime:
        """When a session stops for a window that starts at ``moment``: ``lead`` before it, and never sooner than
        ``lead`` from now (a late booking, or a window already in force)."""
        return max(moment - self.rule.lead, self.now + self.rule.lead)


# -- the cycle ---------------------------------------------------------------------------------------------------


def _refusal(request: Request, units: Mapping[str, int]) -> Decision | None:
    total = units.get(request.model, 0)
    values = {
        "model": request.model,
        "count": str(request.count),
        "gpus": gpus_text(request.count, request.model) if isinstance(request.count, int) else str(request.count),
        "total": str(total),
    }
    if isinstance(request.count, bool) or not isinstance(request.count, int) or request.count < 1:
        return Decision(REFUSE, "refuse.bad_count", values, request=request.id, model=request.model)
    if total <= 0:
        values["models"] = ", ".join(sorted(m for m, n in units.items() if n > 0)) or "none"
        return Decision(REFUSE, "refuse.model", values, request=request.id, model=request.model)
    if request.count > total:
        return Decision(REFUSE, "refuse.count", values, request=request.id, model=request.model)
    return None


def _holder(session: Running, order: int) -> _Holder:
    known = [t for t in (session.stop_at, session.ends) if t is not None]
    return _Holder(
        session.id,
        session.model,
        session.count,
        session.started,
        order,
        session.tier,
        min(known) if known else None,
        session.member_of,
    )


def _limit_values(until: datetime, moment: datetime, res: Reservation, zone: tzinfo, now: datetime) -> dict:
    return {
        "until": clock_text(until, zone, now),
        "count": str(res.count),
        "gpus": gpus_text(res.count, res.model),
        "model": res.model,
        "label": res.name,
        "start": clock_text(moment, zone, now),
    }


@dataclass
class _Cycle:
    """What one run of :func:`schedule` works on, model by model."""

    snapshot: Snapshot
    policy: Policy
    units: dict[str, int]
    running: list[Running]
    windows: _Windows | None
    order: list[Request] = field(default_factory=list)
    ranks: dict[str, Rank] = field(default_factory=dict)
    holders: dict[str, list[_Holder]] = field(default_factory=dict)
    general: dict[str, int] = field(default_factory=dict)  # free units anyone may take
    reserved_free: dict[str, dict[str, int]] = field(default_factory=dict)  # model -> reservation -> idle units
    granted: dict[str, Decision] = field(default_factory=dict)
    blocked_by: dict[str, Decision] = field(default_factory=dict)  # model -> why its head waits, if a reservation
    ends: dict[str, tuple[datetime, datetime, Reservation]] = field(default_factory=dict)


def schedule(snapshot: Snapshot, policy: Policy) -> list[Decision]:
    """One scheduling cycle: the decisions for ``snapshot`` under ``policy``.

    In this order: refusals, stops, grants, preemptions, end warnings, then the queue (per model, in order).
    A caller applies the stops before the grants: their GPUs are granted in the same cycle.
    """
    now = _aware(snapshot.now, "snapshot.now")
    zone = snapshot.zone
    units = snapshot.units()
    decisions: list[Decision] = []

    waiting = []
    for request in snapshot.waiting:
        refusal = _refusal(request, units)
        if refusal is not None:
            decisions.append(refusal)
        else:
            waiting.append(request)

    windows = _Windows(snapshot, policy.reservations, units) if policy.reservations is not None else None
    if windows is not None:
        decisions.extend(windows.refused)

    free = dict(snapshot.free)
    running = []
    for session in snapshot.running:
        if session.stop_at is not None and session.stop_at <= now:
            key = f"stop.{session.stop_key}" if f"stop.{session.stop_key}" in TEXTS else "stop"
            values = {"at": clock_text(session.stop_at, zone, now)}
            decisions.append(Decision(STOP, key, values, session=session.id, model=session.model, at=now))
            free[session.model] = free.get(session.model, 0) + session.count
        else:
            running.append(session)

    cycle = _Cycle(snapshot, policy, units, running, windows)
    cycle.ranks = policy.order.ranks(snapshot, waiting)
    tiered = policy.preemption is not None
    cycle.order = sorted(
        waiting, key=lambda r: (tiered and r.tier == PREEMPTIBLE, cycle.ranks[r.id].value, r.arrived, r.id)
    )
    cycle.holders = {m: [] for m in units}
    for i, session in enumerate(sorted(running, key=lambda s: (s.started, s.id))):
        cycle.holders.setdefault(session.model, []).append(_holder(session, i))
    _reserve(cycle, free)
    _grant(cycle)
    _limits(cycle)
    decisions.extend(cycle.granted.values())
    preempted = _preempt(cycle) if policy.preemption is not None else []
    decisions.extend(preempted)
    decisions.extend(_end_warnings(cycle, {d.session for d in preempted}))
    decisions.extend(_queue(cycle, decisions))
    return decisions


def _reserve(cycle: _Cycle, free: Mapping[str, int]) -> None:
    """Set the reserved units aside that no member uses now, and what is left for anyone."""
    windows = cycle.windows
    for model in cycle.units:
        active = windows.active(model) if windows is not None else []
        left = free.get(model, 0)
        if active:
            room = {r.id: r.count for _, _, r in active}
            for h in sorted(cycle.holders[model], key=lambda h: (h.started, h.order)):
                home = next((r for _, _, r in active if h.member_of(r.group) and room[r.id] >= h.count), None)
                if home is not None:
                    room[home.id] -= h.count
            mine = {}
            for _, _, r in active:
                mine[r.id] = min(room[r.id], left)
                left -= mine[r.id]
            cycle.reserved_free[model] = mine
        cycle.general[model] = left


def _grant(cycle: _Cycle) -> None:
    """Grant the waiting requests in order while their model has units; the queue of a model is strict."""
    now, zone, windows = cycle.snapshot.now, cycle.snapshot.zone, cycle.windows
    reservation_of = {r.id: r for r in cycle.snapshot.reservations}
    blocked = dict.fromkeys(cycle.units, False)
    later = len(cycle.running)
    for request in cycle.order:
        model = request.model
        mine = cycle.reserved_free.get(model, {})
        homes = [rid for rid, n in mine.items() if n > 0 and request.member_of(reservation_of[rid].group)]
        from_reserved = min(request.count, sum(mine[rid] for rid in homes))
        from_general = request.count - from_reserved
        if from_general and (blocked[model] or cycle.general[model] < from_general):
            if not blocked[model] and windows is not None:
                # the GPUs it would take are set aside for a reservation in force: say so
                held = [(end, r) for _, end, r in windows.active(model) if mine.get(r.id) and r.id not in homes]
                if held and cycle.general[model] + sum(mine[res.id] for _, res in held) >= from_general:
                    end, res = held[0]
                    values = {"gpus": gpus_text(res.count, model), "model": model, "label": res.name}
                    values["end"] = clock_text(end, zone, now)
                    cycle.blocked_by[model] = Decision(QUEUE, "reserved", values)
            blocked[model] = True
            continue
        candidate = _Holder(request.id, model, request.count, now, later, request.tier, None, request.member_of)
        if windows is not None and from_general:
            moment = windows.limit(model, candidate, [*cycle.holders[model], candidate])
            if moment is not None and windows.stop_time(moment) - now < cycle.policy.reservations.min_run:
                if not blocked[model]:
                    res = windows.reservation_for(model, moment, candidate)
                    values = {"model": model, "label": res.name, "start": clock_text(moment, zone, now)}
                    cycle.blocked_by[model] = Decision(QUEUE, "reserved.soon", values)
                blocked[model] = True
                continue
        later += 1
        cycle.holders[model].append(candidate)
        cycle.general[model] -= from_general
        take, label = from_reserved, None
        for rid in homes:
            used = min(take, mine[rid])
            mine[rid] -= used
            take -= used
            label = label or (reservation_of[rid].name if used else None)
        values = {"count": str(request.count), "gpus": gpus_text(request.count, model), "model": model}
        if label is not None and not from_general:
            values["label"] = label
            cycle.granted[request.id] = Decision(GRANT, "grant.reserved", values, request=request.id, model=model)
        else:
            cycle.granted[request.id] = Decision(GRANT, "grant", values, request=request.id, model=model)


def _limits(cycle: _Cycle) -> None:
    """Who must be gone before each window (running sessions and this cycle's grants); grants get their limit."""
    windows = cycle.windows
    if windows is None:
        return
    now, zone = cycle.snapshot.now, cycle.snapshot.zone
    for model in cycle.units:
        for moment in windows.moments(model):
            present = [h for h in cycle.holders[model] if h.id not in cycle.ends]
            for h in windows.to_end(model, moment, present):
                cycle.ends[h.id] = (windows.stop_time(moment), moment, windows.reservation_for(model, moment, h))
    for request_id, grant in list(cycle.granted.items()):
        if request_id in cycle.ends:
            until, moment, res = cycle.ends.pop(request_id)
            values = _limit_values(until, moment, res, zone, now)
            cycle.granted[request_id] = Decision(
                GRANT, "grant.until", values, request=request_id, model=grant.model, at=until
            )


def _end_warnings(cycle: _Cycle, preempted: Collection[str | None]) -> list[Decision]:
    now, zone = cycle.snapshot.now, cycle.snapshot.zone
    by_id = {s.id: s for s in cycle.running}
    out = []
    for session_id, (until, moment, res) in cycle.ends.items():
        session = by_id.get(session_id)
        if session is None or session_id in preempted:
            continue
        if session.stop_at is not None and session.stop_at <= until:
            continue  # told already, or told to stop sooner
        values = _limit_values(until, moment, res, zone, now)
        out.append(Decision(END, "end", values, session=session_id, reservation=res.id, model=session.model, at=until))
    return out


def _is_idle(session: Running, now: datetime, rule: Preemption) -> bool:
    return session.last_gpu_use is None or now - session.last_gpu_use >= rule.idle_after


def _preempt(cycle: _Cycle) -> list[Decision]:
    """Victims for the full-price requests left waiting, in order, model by model."""
    rule, now = cycle.policy.preemption, cycle.snapshot.now
    soon = now + rule.grace
    # GPUs that free within the grace anyway (sessions told to stop, known ends) serve the queue first
    supply = {m: max(0, n) for m, n in cycle.general.items()}
    for session in cycle.running:
        known = [t for t in (session.stop_at, session.ends) if t is not None]
        if known and min(known) <= soon:
            supply[session.model] = supply.get(session.model, 0) + session.count
    victims: dict[str, list[Running]] = {}
    for session in cycle.running:
        if session.tier != PREEMPTIBLE or session.stop_at is not None or session.id in cycle.ends:
            continue
        if session.ends is not None and session.ends <= soon:
            continue
        if now - session.started < rule.min_runtime:
            continue
        victims.setdefault(session.model, []).append(session)
    for candidates in victims.values():
        # an idle GPU first, then the most recently started
        candidates.sort(key=lambda s: (not _is_idle(s, now, rule), -s.started.timestamp(), s.id))
    grace = duration_text(rule.grace) if rule.grace >= timedelta(minutes=1) else f"{rule.grace.seconds} s"
    out = []
    done: set[str] = set()
    for request in cycle.order:
        model = request.model
        if request.id in cycle.granted or model in done:
            continue
        blocked = cycle.blocked_by.get(model)
        if request.tier == PREEMPTIBLE or (blocked is not None and blocked.key == "reserved.soon"):
            done.add(model)  # a GPU taken now would not serve it either; behind it nobody preempts
            continue
        need = request.count - supply.get(model, 0)
        if need <= 0:
            supply[model] -= request.count
            continue
        chosen, freed = [], 0
        for session in victims.get(model, []):
            if freed >= need:
                break
            chosen.append(session)
            freed += session.count
        if freed < need:
            done.add(model)  # not enough to take: it waits, and the queue behind it with it
            continue
        supply[model] = freed - need
        for session in chosen:
            victims[model].remove(session)
            key = "preempt" if session.checkpoints else "preempt.save"
            out.append(
                Decision(
                    PREEMPT,
                    key,
                    {"grace": grace},
                    session=session.id,
                    model=model,
                    at=soon,
                    for_request=request.id,
                )
            )
    return out


# -- the queue and the estimate ------------------------------------------------------------------------------------


def _minutes(delta: timedelta) -> float:
    return delta / timedelta(minutes=1)


class _History:
    """The snapshot's history, with every profile's lengths together for a profile that has none (made once)."""

    def __init__(self, history: Mapping[str, SessionLengths]):
        self.history = history
        self._pooled: SessionLengths | None = None

    def of(self, profile: str) -> SessionLengths:
        lengths = self.history.get(profile)
        if lengths is not None and len(lengths):
            return lengths
        if self._pooled is None:
            self._pooled = SessionLengths(m for lengths in self.history.values() for m in lengths.lengths)
        return self._pooled

    def median(self, profile: str) -> float:
        found = self.of(profile).median()
        return math.inf if found is None else found


def expected_end(session: Running, now: datetime, history: Mapping[str, SessionLengths] | _History) -> float:
    """Minutes from ``now`` until ``session`` is expected to end (``math.inf``: nothing is known).

    The earliest of its known ends (a stop it was told, its ``ends``) and, from the history of its profile
    (of every profile when its own has none), the median time left of past sessions that ran longer.
    """
    known_history = history if isinstance(history, _History) else _History(history)
    known = [t for t in (session.stop_at, session.ends) if t is not None]
    best = min((_minutes(t - now) for t in known), default=math.inf)
    remaining = known_history.of(session.profile).remaining(_minutes(now - session.started))
    if remaining is not None:
        best = min(best, remaining)
    return max(0.0, best)


def _queue(cycle: _Cycle, decided: Sequence[Decision]) -> list[Decision]:
    """The queue decisions: position, reason and estimate of each waiting request, model by model."""
    snapshot, rule = cycle.snapshot, cycle.policy.preemption
    now, history = snapshot.now, _History(snapshot.history)
    told = {d.session: d.at for d in decided if d.kind in (PREEMPT, END) and d.session}
    requests = {r.id: r for r in snapshot.waiting}
    by_model: dict[str, list[Request]] = {}
    for request in cycle.order:
        if request.id not in cycle.granted:
            by_model.setdefault(request.model, []).append(request)
    out = []
    for model, queue in by_model.items():
        # each unit of the model: (minutes until it is free for a full-price request, ... for a preemptible one)
        units: list[tuple[float, float]] = [(0.0, 0.0)] * max(0, cycle.general.get(model, 0))
        for session in cycle.running:
            if session.model != model:
                continue
            if session.id in told:
                session = replace(session, stop_at=told[session.id])
            natural = expected_end(session, now, history)
            standard = natural
            if rule is not None and session.tier == PREEMPTIBLE and session.stop_at is None:
                preempted = max(now, session.started + rule.min_runtime) + rule.grace
                standard = min(natural, _minutes(preempted - now))
            units.extend([(standard, natural)] * session.count)
        for request_id, grant in cycle.granted.items():
            request = requests[request_id]
            if request.model != model:
                continue
            length = history.median(request.profile)
            if grant.at is not None:
                length = min(length, _minutes(grant.at - now))
            units.extend([(length, length)] * request.count)
        if cycle.windows is not None:
            # idle reserved units: free for everyone when their window ends
            for _, end, res in cycle.windows.active(model):
                after = _minutes(end - now)
                units.extend([(after, after)] * cycle.reserved_free.get(model, {}).get(res.id, 0))
        waits = _estimate(queue, units, rule is not None, history)
        for position, request in enumerate(queue, start=1):
            rank = cycle.ranks[request.id]
            key, values = rank.key, dict(rank.values)
            blocked = cycle.blocked_by.get(model)
            if position == 1 and blocked is not None:
                key, values = blocked.key, dict(blocked.values)
            elif rule is not None and request.tier == PREEMPTIBLE:
                key, values = "tier", {"model": model}
            wait = waits[request.id]
            out.append(
                Decision(
                    QUEUE,
                    key,
                    values,
                    request=request.id,
                    model=model,
                    position=position,
                    length=len(queue),
                    wait=None if wait is None else timedelta(seconds=round(wait * 60)),
                )
            )
    return out


def _estimate(
    queue: Sequence[Request],
    units: list[tuple[float, float]],
    tiered: bool,
    history: _History,
) -> dict[str, float | None]:
    """Minutes each request of one model's queue is expected to wait (None: nothing is known).

    Each unit frees at its expected time; each request in turn takes the ``count`` units that free first (never
    starting before the request ahead of it: the queue is strict) and holds them for its profile's median
    session length. Full-price requests see a preemptible session free at its preemption; preemptible requests
    (behind every full-price one) at its natural end.
    """
    heap = list(units)
    heapq.heapify(heap)
    preemptible_phase = False
    last = 0.0
    out: dict[str, float | None] = {}
    for request in queue:
        if tiered and not preemptible_phase and request.tier == PREEMPTIBLE:
            preemptible_phase = True
            heap = [(natural, natural) for _, natural in heap]
            heapq.heapify(heap)
        if len(heap) < request.count:
            out[request.id] = None
            continue
        taken = [heapq.heappop(heap)[0] for _ in range(request.count)]
        start = max(*taken, last)
        last = start
        out[request.id] = None if math.isinf(start) else start
        end = start + history.median(request.profile)
        for _ in range(request.count):
            heapq.heappush(heap, (end, end))
    return out


# -- bookings ------------------------------------------------------------------------------------------------------


class ReservationError(ValueError):
    """A booking that cannot be made; the message says why, in words an instructor reads."""


def _window_text(start: datetime, end: datetime) -> str:
    return f"{start:%a} {start.day} {start:%b %H:%M}–{end:%H:%M}"


def reservation_problems(
    booking: Reservation,
    existing: Sequence[Reservation],
    pool: Mapping[str, int],
    groups: Collection[str],
) -> list[str]:
    """What is wrong with ``booking`` next to the ``existing`` reservations, the ``pool`` and the known ``groups``.

    An empty list: it can be made. Checked: aware times, the end after the start, a whole count of at least one,
    a model the pool has and no more GPUs than it has, a known group, a weekly repetition that ends after its
    first window and windows shorter than a week, no overlap with the same group's reservation of the model, and
    at no moment more GPUs reserved than the pool has.
    """
    problems = []
    times_ok = True
    for name in ("start", "end"):
        moment = getattr(booking, name)
        if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
            problems.append(f"the {name} must be a date and time with a time zone, got {moment!r}")
            times_ok = False
    if times_ok and booking.end <= booking.start:
        problems.append(
            f"the reservation ends ({booking.end:%Y-%m-%d %H:%M}) before it starts ({booking.start:%Y-%m-%d %H:%M})"
        )
        times_ok = False
    count_ok = isinstance(booking.count, int) and not isinstance(booking.count, bool) and booking.count >= 1
    if not count_ok:
        problems.append(f"the count must be a whole number of GPUs, at least 1, got {booking.count!r}")
    total = pool.get(booking.model, 0)
    if total <= 0:
        models = ", ".join(sorted(m for m, n in pool.items() if n > 0)) or "none"
        problems.append(f"the pool has no {booking.model} GPUs (it has: {models})")
    elif count_ok and booking.count > total:
        problems.append(f"{gpus_text(booking.count, booking.model)} asked, but the pool has {total}")
    if booking.group not in groups:
        problems.append(f"there is no group named {booking.group!r}")
    if times_ok and booking.weekly_until is not None:
        if booking.weekly_until < booking.start.date():
            problems.append(
                f"it repeats until {booking.weekly_until:%Y-%m-%d}, before its first window on {booking.start:%Y-%m-%d}"
            )
            times_ok = False
        elif booking.end - booking.start >= WEEK:
            problems.append("a weekly window must be shorter than a week")
            times_ok = False
    if problems or not times_ok:
        return problems
    # overlaps: the same group's reservation of the model, and the pool's size at each moment
    last = _last_end(booking)
    mine = booking.windows(booking.start, last)
    others = [r for r in existing if r.model == booking.model and r.id != booking.id]
    for start, end in mine:
        overlapping = [(s, e, r) for r in others for s, e in r.windows(start, end)]
        same = next(((s, e, r) for s, e, r in overlapping if r.group == booking.group), None)
        if same is not None:
            s, e, r = same
            problems.append(
                f"it overlaps {r.name}'s reservation of {gpus_text(r.count, r.model)} on {_window_text(s, e)}"
            )
            break
        peak, names = _peak(start, end, overlapping)
        if peak + booking.count > total:
            problems.append(
                f"on {_window_text(start, end)}, {gpus_text(peak + booking.count, booking.model)} would be reserved"
                f" but the pool has {total} ({peak} already reserved for {names})"
            )
            break
    return problems


def check_reservation(
    booking: Reservation, existing: Sequence[Reservation], pool: Mapping[str, int], groups: Collection[str]
) -> Reservation:
    """``booking`` if it can be made, else :class:`ReservationError` with every problem."""
    problems = reservation_problems(booking, existing, pool, groups)
    if problems:
        raise ReservationError("; ".join(problems))
    return booking


def _last_end(booking: Reservation) -> datetime:
    if booking.weekly_until is None:
        return booking.end
    weeks = max(0, (booking.weekly_until - booking.start.date()).days // 7)
    return booking.start + weeks * WEEK + (booking.end - booking.start)


def _peak(start: datetime, end: datetime, overlapping: Sequence[tuple[datetime, datetime, Reservation]]):
    """The most GPUs the ``overlapping`` windows reserve at one moment of ``[start, end)``, and their names."""
    events = []
    for s, e, r in overlapping:
        events.append((max(s, start), 1, r.count))
        events.append((min(e, end), 0, -r.count))
    events.sort(key=lambda x: (x[0], x[1]))
    level = peak = 0
    for _, _, delta in events:
        level += delta
        peak = max(peak, level)
    names = ", ".join(sorted({r.name for _, _, r in overlapping})) or "nobody"
    return peak, names


# -- the estimate on its own ------------------------------------------------------------------------------------


def estimate(snapshot: Snapshot, policy: Policy, request_id: str) -> Decision | None:
    """The queue decision of one waiting request (``status``: ``Waiting for a free A100 — position 2 of 5 — about
    12 min``), or None when it would be granted (or refused) now."""
    for decision in schedule(snapshot, policy):
        if decision.kind == QUEUE and decision.request == request_id:
            return decision
    return None
