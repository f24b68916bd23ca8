"""What one scheduling cycle knows (:class:`Snapshot`) and what it decides (:class:`Decision`)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone, tzinfo

from jupyterhub_gpu.scheduler.texts import WEEK
from jupyterhub_gpu.scheduler.words import reason_words, status_words

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
#: A share's grant on a whole free GPU it splits (``Decision.device``).
FREE_GPU = "free"
UTC = timezone.utc


def aware(moment: datetime, what: str) -> datetime:
    if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {moment!r}")
    return moment


@dataclass(frozen=True)
class Request:
    """A request waiting for GPUs.

    ``group`` is the group whose share it counts against (the pool that pays); ``groups`` the user's other
    groups, which count for reservations. ``tier`` is :data:`STANDARD` or :data:`PREEMPTIBLE`. ``share``: a
    time-sliced share of one GPU of ``model`` (``share`` k: one of k shares; ``count`` is then 1), 1 for whole GPUs.
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
    share: int = 1

    def member_of(self, group: str) -> bool:
        return group == self.group or group in self.groups


@dataclass(frozen=True)
class Running:
    """A running session holding ``count`` units of ``model``.

    ``last_gpu_use``: the last time its GPU was busy (None: never). ``ends``: its earliest known end (its
    ``max_age``, its budget running out, a job's time limit), None when unknown. ``checkpoints``: it saves its
    work when told to stop (``CheckpointAndResume``). ``stop_at``: it was already told to stop then (a
    preemption's notice, a reservation's end), and ``stop_key`` why: ``"preempted"`` or ``"reserved"``. A stop told
    and not yet due binds nothing: each cycle derives again who must stop, prefers those already told, and gives a
    ``preempt`` or ``end`` decision to every session that must still stop (the caller withdraws the others); a stop
    that can no longer be withdrawn belongs in ``ends``.

    ``share``: a time-sliced share (one of ``share`` shares of the GPU ``device``; ``count`` is then 1), 1 for whole
    GPUs. Shares on one GPU free it only together: the scheduler counts GPUs, never shares as GPUs.
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
    share: int = 1
    device: str | None = None

    def member_of(self, group: str) -> bool:
        return group == self.group or group in self.groups


@dataclass(frozen=True)
class SharedGPU:
    """A physical GPU of ``model`` split into ``split`` time-sliced shares, ``taken`` of them held now.

    The running sessions on it name it (``Running.device``); shares held by servers the snapshot does not list (a
    grant whose session is not recorded yet) count as taken by someone no stop can move.
    """

    id: str
    model: str
    split: int
    taken: int


@dataclass(frozen=True)
class Reservation:
    """``count`` units of ``model`` for ``group`` from ``start`` to ``end``, once or every week until ``weekly_until``.

    ``weekly_until`` is the last day (in the start's time zone) a weekly window may start on; None: once.
    ``label`` is the name students read ("CS231N"); the group's name when empty. Windows repeat at the same
    wall-clock time (the start's time zone), across a change of summer time too (:meth:`occurrence`).
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

    def occurrence(self, k: int) -> tuple[datetime, datetime] | None:
        """Its ``k``-th window (from 0) as real instants (UTC); None when it never happens (past ``weekly_until``,
        or its wall-clock times fall in the hour the clocks skip so that it ends before it starts).

        A weekly window starts at the first one's wall-clock time in its zone each week and ends at the first one's
        wall-clock end, so its length follows the clocks."""
        start, end = self.start, self.end  # as booked (adding a timedelta would drop a fold)
        if k:  # wall-clock arithmetic in the start's time zone
            start, end = start + k * WEEK, end + k * WEEK
        if k and (self.weekly_until is None or start.date() > self.weekly_until):
            return None
        begins, ends = start.astimezone(UTC), end.astimezone(UTC)
        return (begins, ends) if ends > begins else None

    def windows(self, since: datetime, until: datetime) -> list[tuple[datetime, datetime]]:
        """The windows ``(start, end)`` that overlap ``[since, until)``, in order, as real instants (UTC).

        Compared as instants: two times of one zone compare by their wall clocks in Python, which in the hour the
        clocks repeat puts a window where real time does not."""
        since, until = since.astimezone(UTC), until.astimezone(UTC)
        weeks = 0 if self.weekly_until is None else (self.weekly_until - self.start.date()).days // 7
        # a week earlier than the arithmetic says: a change of the clocks moves a window by an hour
        first = min(weeks, max(0, math.floor((since - self.end.astimezone(UTC)) / WEEK) - 1))
        found = []
        for k in range(first, weeks + 1):
            window = self.occurrence(k)
            if window is None:
                continue
            if window[0] >= until:
                break
            if window[1] > since:
                found.append(window)
        return found

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

    ``free``: free GPUs per model now (a GPU split into shares is not free). ``pool``: the GPUs the pool has of
    each model (None: the free GPUs plus those the running sessions hold). ``shared``: the GPUs split into shares
    now (:class:`SharedGPU`; a share session whose GPU is not listed is put on a GPU of its own kind with room).
    A whole GPU of a model is one unit; a share is a part of one unit, and shares and whole GPUs of a model are one
    pool. A MIG slice is a model of its own (``"A100/mig-1g.10gb"``: the caller's name): it is a GPU of its own
    that nothing else of its parent can take. ``shares``: group -> model -> share (a weight; a group missing
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
    shared: Sequence[SharedGPU] = ()

    def units(self) -> dict[str, int]:
        """The GPUs of each model the pool has."""
        if self.pool is not None:
            return dict(self.pool)
        total = dict(self.free)
        for session in self.running:
            if session.share <= 1:
                total[session.model] = total.get(session.model, 0) + session.count
        for gpu in self.split_gpus():
            total[gpu.model] = total.get(gpu.model, 0) + 1
        return total

    def split_gpus(self) -> list[SharedGPU]:
        """The GPUs split into shares (see :meth:`placed`)."""
        return self.placed()[0]

    def placed(self) -> tuple[list[SharedGPU], dict[str, str]]:
        """The GPUs split into shares, and the GPU each share session is on (session id -> GPU id).

        :attr:`shared` and, for a share session on a GPU it does not list, that GPU; share sessions that name no GPU
        fill GPUs of their own, k shares to a GPU, in the order of :attr:`running`.
        """
        listed = {g.id: g for g in self.shared}
        on: dict[str, str] = {}
        unplaced: dict[tuple[str, int], list[str]] = {}
        for s in self.running:
            if s.share <= 1:
                continue
            if s.device is None:
                unplaced.setdefault((s.model, s.share), []).append(s.id)
                continue
            listed.setdefault(s.device, SharedGPU(s.device, s.model, s.share, 0))
            on[s.id] = s.device
        gpus = list(listed.values())
        for (model, k), ids in unplaced.items():
            for i in range(0, len(ids), k):
                gpu = SharedGPU(f"{model}/share-{k}#{i // k}", model, k, 0)
                gpus.append(gpu)
                on.update(dict.fromkeys(ids[i : i + k], gpu.id))
        return gpus, on

    @property
    def zone(self) -> tzinfo:
        return self.tz or self.now.tzinfo


def decayed_usage(
    sessions: Iterable[tuple[str, str, float, datetime, datetime | None]], now: datetime, half_life: timedelta
) -> dict[str, dict[str, float]]:
    """Decayed GPU-hours per group and model of ``(group, model, gpus, started, stopped or None)`` sessions.

    ``gpus`` is in GPUs of the model: a share of one of k is ``1 / k`` (an hour of it is 1/k GPU-hour). A GPU-hour
    used ``t`` ago counts ``2 ** (-t / half_life)``: the integral of that weight over each session's
    time up to ``now`` (a running session counts to ``now``), as Slurm's fair-share decays usage.
    """
    aware(now, "now")
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
    """One thing to do, with its reason: a key of :data:`~.texts.TEXTS` and its typed ``values`` (:attr:`reason`
    words them in English; :mod:`.words` in any language).

    ``at``: for ``grant``, the time the session may run until (None: no limit); for ``preempt``, ``end`` and
    ``stop``, when the session stops. ``queue`` decisions carry ``position`` of ``length`` (the requests
    waiting for the model), ``wait`` (the estimate, None when there is none) and :attr:`status`. ``device``: for
    a ``grant`` of a share, the GPU split into shares it joins (a :class:`SharedGPU` id), or :data:`FREE_GPU` for
    a whole free GPU it splits: the allocator places the share there. ``now`` and ``zone``: the cycle's, in which its
    times are said (``13:55`` on the day of ``now``, with the day on another).
    """

    kind: str
    key: str
    values: Mapping[str, object] = field(default_factory=dict)
    request: str | None = None
    session: str | None = None
    reservation: str | None = None
    model: str | None = None
    at: datetime | None = None
    position: int | None = None
    length: int | None = None
    wait: timedelta | None = None
    for_request: str | None = None
    device: str | None = None
    now: datetime | None = None
    zone: tzinfo | None = None

    def reason_in(self, lang: str) -> str:
        """Its reason in ``lang``."""
        return reason_words(self.key, self.values, lang, self.zone, self.now)

    @property
    def reason(self) -> str:
        """Its reason in English (the hub's log)."""
        return self.reason_in("en")

    @property
    def status(self) -> str:
        """A waiting request's headline: ``Waiting for a free A100 — position 2 of 5 — about 12 min``."""
        if self.kind != QUEUE:
            return self.reason
        return status_words(self.model, 1, self.position, self.length, self.wait)
