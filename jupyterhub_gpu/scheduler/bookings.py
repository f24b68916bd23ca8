"""Bookings: whether a reservation can be made next to the others, the pool, the groups and the lab's limits.

Every check runs over every window of a booking until its last, measured in real time (compared in UTC): a
weekly window keeps its wall-clock times in the zone of its start (the lab's), so on the night the clocks change
it is an hour longer or shorter than on the others, and it is checked as it really is then. The limits
(:class:`BookingLimits`, docs/scheduling.md#booking-limits) bind a group over a window, not one request: the
group's bookings of a model that overlap, touch or lie less than :data:`HOLD_GAP` apart are one hold; its
GPU-hours add up over the lab's calendar week; its GPUs held at one moment add up over its bookings.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from fractions import Fraction

from jupyterhub_gpu.billing import period_window
from jupyterhub_gpu.i18n import run_together, translator
from jupyterhub_gpu.scheduler.snapshot import Reservation
from jupyterhub_gpu.scheduler.texts import WEEK, Gpus, Window
from jupyterhub_gpu.scheduler.words import reason_words

UTC = timezone.utc
#: Windows of one group and model closer than this are one hold, the gap included. Others are stopped the hub's
#: ``reservation_lead`` (5 minutes) before a window and not started for less than ``reservation_min_run`` (10
#: minutes), and a student needs more than a few minutes of a GPU: a shorter break serves nobody else, so
#: splitting a long hold by such breaks must not beat ``reservation_max_hours``.
HOLD_GAP = timedelta(hours=1)
_HOUR_US = 3_600_000_000

#: The limits a :class:`LimitProblem` names.
HOLD, WEEKLY, POOL_SHARE = "hold", "week", "pool"


#: A problem of a booking: a key of :data:`~.texts.TEXTS` and its typed values (:func:`problem_words` words it).
Problem = tuple[str, dict]
#: How the problems of one refusal run together (``msgctxt "clauses"``: ``；`` in Chinese).
CLAUSES_CONTEXT = "clauses"
CLAUSES_TEXT = "{clauses}; {clause}"


def problem_words(problem: Problem, lang: str = "en", zone=None) -> str:
    """One problem of a booking in ``lang``, its times in ``zone`` (None: the booking's own)."""
    key, values = problem
    return reason_words(key, values, lang, zone)


def clauses(parts: Sequence[str], lang: str = "en") -> str:
    """The clauses of one refusal one after the other, in ``lang``: ``a; b`` (``a；b``)."""
    return run_together(translator(lang).context(CLAUSES_CONTEXT, CLAUSES_TEXT), "clauses", "clause", parts)


class ReservationError(ValueError):
    """A booking that cannot be made: its problems, worded in the reader's language by :meth:`words`; as a
    ``str``, in English."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__(self.words("en"))

    def words(self, lang: str = "en") -> str:
        return clauses([problem_words(p, lang) for p in self.problems], lang)


@dataclass(frozen=True)
class BookingLimits:
    """What one group may book (docs/scheduling.md#booking-limits); None: no such limit.

    ``max_hold``: the longest time the group may hold GPUs of one model without a break (its windows of the
    model that overlap, touch or lie less than :data:`HOLD_GAP` apart are one hold, gaps included);
    ``max_gpu_hours_per_week``: the GPU-hours (GPUs × hours, every model) the group may have booked in one
    calendar week of the lab's zone (Monday 00:00 to Monday 00:00, as weekly budgets count); a window across
    Monday midnight counts in each week for its part; ``max_pool_fraction``: the part of a model's pool the
    group may hold at one moment (at most ``floor(fraction × pool)`` GPUs).
    """

    max_hold: timedelta | None = None
    max_gpu_hours_per_week: Fraction | None = None
    max_pool_fraction: Fraction | None = None

    @classmethod
    def from_settings(
        cls, max_hours: float | None, gpu_hours_per_week: float | None, pool_fraction: float | None
    ) -> BookingLimits:
        """From numbers as a configuration gives them (hours, GPU-hours, a fraction; None: no limit), exactly:
        ``0.1`` is one tenth, not the float nearest to it."""

        def exact(value):
            return None if value is None else Fraction(str(value))

        hold = exact(max_hours)
        return cls(
            max_hold=None if hold is None else timedelta(microseconds=math.floor(hold * _HOUR_US)),
            max_gpu_hours_per_week=exact(gpu_hours_per_week),
            max_pool_fraction=exact(pool_fraction),
        )


@dataclass(frozen=True)
class LimitProblem:
    """A booking past one of its group's limits: which, where, and the figures; the caller words it.

    ``limit``: :data:`HOLD` (``start``–``end`` is the hold, ``amount`` its hours, ``wall_hours`` its hours on the
    clock where the clocks change in it), :data:`WEEKLY` (the week; ``amount`` the GPU-hours booked in it, the
    booking's own ``mine``) or :data:`POOL_SHARE` (the booking's window; ``amount`` the GPUs the group would
    hold at once, of ``pool``; ``share`` the part of it allowed). ``allowed``: the limit in the same unit.
    ``alone``: the booking breaks it on its own; else ``others`` names the group's other bookings that count
    (their labels or ids). ``single_window``: the hold is one window of the booking. ``more``: how many later
    holds, weeks or windows break it too.
    """

    limit: str
    group: str
    model: str
    start: datetime
    end: datetime
    amount: Fraction
    allowed: Fraction
    alone: bool
    others: tuple[str, ...] = ()
    mine: Fraction = Fraction(0)
    pool: int = 0
    share: Fraction = Fraction(1)
    wall_hours: Fraction | None = None
    single_window: bool = False
    more: int = 0


def hours(delta: timedelta) -> Fraction:
    """A length in hours, exactly."""
    return Fraction(delta // timedelta(microseconds=1), _HOUR_US)


def occurrences(booking: Reservation) -> list[tuple[datetime, datetime]]:
    """Every window of ``booking`` until its last, as real instants (UTC), in order (:meth:`Reservation.occurrence`:
    a window in the hour the clocks skip that would end before it starts never happens, and is left out)."""
    weeks = 0 if booking.weekly_until is None else max(0, (booking.weekly_until - booking.start.date()).days // 7)
    return [w for k in range(weeks + 1) if (w := booking.occurrence(k)) is not None]


def booking_problems(
    booking: Reservation,
    existing: Sequence[Reservation],
    pool: Mapping[str, int],
    groups: Collection[str],
) -> list[Problem]:
    """What is wrong with ``booking`` next to the ``existing`` reservations, the ``pool`` and the known ``groups``,
    as keys and typed values (:func:`problem_words` words them).

    An empty list: it can be made. Checked: aware times, the end after the start, a whole count of at least one,
    a model the pool has and no more GPUs than it has, a known group, a weekly repetition that ends after its
    first window and windows shorter than a week, no overlap with the same group's reservation of the model, and
    at no moment of any window more GPUs reserved than the pool has. The group's limits are
    :func:`limit_problems`.
    """
    problems: list[Problem] = []
    times_ok = True
    for name in ("start", "end"):
        moment = getattr(booking, name)
        if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
            problems.append((f"booking.{name}", {"value": repr(moment)}))
            times_ok = False
    if times_ok and booking.end.astimezone(UTC) <= booking.start.astimezone(UTC):  # in real time
        stamps = {"end": f"{booking.end:%Y-%m-%d %H:%M}", "start": f"{booking.start:%Y-%m-%d %H:%M}"}
        problems.append(("booking.ends_first", stamps))
        times_ok = False
    count_ok = isinstance(booking.count, int) and not isinstance(booking.count, bool) and booking.count >= 1
    if not count_ok:
        problems.append(("booking.count", {"value": repr(booking.count)}))
    total = pool.get(booking.model, 0)
    if total <= 0:
        models = tuple(sorted(m for m, n in pool.items() if n > 0))
        key = "booking.model" if models else "booking.model.none"
        problems.append((key, {"model": booking.model, "models": models}))
    elif count_ok and booking.count > total:
        problems.append(("refuse.count", {"gpus": Gpus(booking.count, booking.model), "total": total}))
    if booking.group not in groups:
        problems.append(("booking.group", {"group": repr(booking.group)}))
    if times_ok and booking.weekly_until is not None:
        if booking.weekly_until < booking.start.date():
            problems.append(("booking.repeats", {"until": booking.weekly_until, "start": booking.start.date()}))
            times_ok = False
        elif booking.end - booking.start >= WEEK:
            problems.append(("booking.week", {}))
            times_ok = False
    if problems or not times_ok:
        return problems
    # overlaps, in real time: the same group's reservation of the model, and the pool's size at each moment
    zone = booking.start.tzinfo
    others = [(r, occurrences(r)) for r in existing if r.model == booking.model and r.id != booking.id]
    for start, end in occurrences(booking):
        overlapping = [(s, e, r) for r, windows in others for s, e in windows if s < end and e > start]
        same = next(((s, e, r) for s, e, r in overlapping if r.group == booking.group), None)
        if same is not None:
            s, e, r = same
            window = Window(s.astimezone(zone), e.astimezone(zone))
            problems.append(("booking.overlap", {"label": r.name, "gpus": Gpus(r.count, r.model), "window": window}))
            break
        peak, labels = _peak(start, end, overlapping)
        if peak + booking.count > total:
            values = {
                "window": Window(start.astimezone(zone), end.astimezone(zone)),
                "gpus": Gpus(peak + booking.count, booking.model),
                "total": total,
                "peak": peak,
                "labels": labels,
            }
            problems.append(("booking.full" if labels else "booking.full.nobody", values))
            break
    return problems


def reservation_problems(
    booking: Reservation,
    existing: Sequence[Reservation],
    pool: Mapping[str, int],
    groups: Collection[str],
) -> list[str]:
    """:func:`booking_problems` in English."""
    return [problem_words(p) for p in booking_problems(booking, existing, pool, groups)]


def check_reservation(
    booking: Reservation, existing: Sequence[Reservation], pool: Mapping[str, int], groups: Collection[str]
) -> Reservation:
    """``booking`` if it can be made, else :class:`ReservationError` with every problem."""
    problems = booking_problems(booking, existing, pool, groups)
    if problems:
        raise ReservationError(problems)
    return booking


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
    return peak, tuple(sorted({r.name for _, _, r in overlapping}))


# -- the group's limits ------------------------------------------------------------------------------------------


def limit_problems(
    booking: Reservation, existing: Sequence[Reservation], pool: Mapping[str, int], limits: BookingLimits
) -> list[LimitProblem]:
    """Where ``booking``, with its group's ``existing`` bookings, passes the group's ``limits``; empty: nowhere.

    ``booking`` is one :func:`reservation_problems` accepts. Only what the booking changes is checked (the holds
    it is part of, the weeks it falls in, the moments of its windows), so bookings accepted one by one keep every
    limit at every window. A booking with the id of an existing one replaces it (an edit).
    """
    mine = occurrences(booking)
    group = [r for r in existing if r.group == booking.group and r.id != booking.id]
    found = []
    if limits.max_hold is not None:
        found += _hold_problems(booking, mine, group, limits.max_hold)
    if limits.max_gpu_hours_per_week is not None:
        found += _week_problems(booking, mine, group, limits.max_gpu_hours_per_week)
    if limits.max_pool_fraction is not None:
        found += _pool_problems(booking, mine, group, pool, limits.max_pool_fraction)
    return found


def _label(r: Reservation) -> str:
    return r.label or r.id


def _first(problems: list[LimitProblem]) -> list[LimitProblem]:
    """The first problem of one limit, with how many more there are."""
    if not problems:
        return []
    return [replace(problems[0], more=len(problems) - 1)]


def _hold_problems(booking, mine, group, longest: timedelta) -> list[LimitProblem]:
    windows = [(s, e, booking) for s, e in mine]
    windows += [(s, e, r) for r in group if r.model == booking.model for s, e in occurrences(r)]
    windows.sort(key=lambda w: (w[0], w[1]))
    holds: list[list] = []  # [start, end, bookings in it, windows in it]
    for s, e, r in windows:
        if holds and s - holds[-1][1] < HOLD_GAP:
            hold = holds[-1]
            hold[1] = max(hold[1], e)
            hold[2].append(r)
            hold[3] += 1
        else:
            holds.append([s, e, [r], 1])
    zone = booking.start.tzinfo
    problems = []
    for start, end, members, parts in holds:
        if all(r is not booking for r in members) or end - start <= longest:
            continue
        others = tuple(dict.fromkeys(_label(r) for r in members if r is not booking))
        on_clock = _naive(end, zone) - _naive(start, zone)  # its length as the lab's clocks show it
        problems.append(
            LimitProblem(
                HOLD,
                booking.group,
                booking.model,
                start,
                end,
                hours(end - start),
                hours(longest),
                alone=not others,
                others=others,
                wall_hours=None if on_clock == end - start else hours(on_clock),
                single_window=parts == 1,
            )
        )
    return _first(problems)


def _naive(moment: datetime, zone) -> datetime:
    return moment.astimezone(zone).replace(tzinfo=None)


def _weeks(start: datetime, end: datetime, zone) -> list[tuple[datetime, datetime]]:
    """The lab's calendar weeks (Monday 00:00 in ``zone``, in UTC) that ``[start, end)`` falls in."""
    found = []
    week = period_window("week", start, zone)
    while week[0] < end:
        found.append(week)
        week = period_window("week", week[1], zone)
    return found


def _gpu_hours(r: Reservation, windows, since: datetime, until: datetime) -> Fraction:
    """The GPU-hours of ``windows`` of ``r`` within ``[since, until)``."""
    return sum(
        (r.count * hours(min(e, until) - max(s, since)) for s, e in windows if s < until and e > since), Fraction(0)
    )


def _week_problems(booking, mine, group, most: Fraction) -> list[LimitProblem]:
    zone = booking.start.tzinfo
    weeks = sorted({w for s, e in mine for w in _weeks(s, e, zone)})
    theirs = [(r, occurrences(r)) for r in group]
    problems = []
    for since, until in weeks:
        own = _gpu_hours(booking, mine, since, until)
        counted = [(r, _gpu_hours(r, windows, since, until)) for r, windows in theirs]
        counted = [(r, h) for r, h in counted if h > 0]
        total = own + sum((h for _, h in counted), Fraction(0))
        if total > most:
            others = tuple(dict.fromkeys(_label(r) for r, _ in counted))
            problems.append(
                LimitProblem(WEEKLY, booking.group, "", since, until, total, most, not others, others, mine=own)
            )
    return _first(problems)


def _pool_problems(booking, mine, group, pool, fraction: Fraction) -> list[LimitProblem]:
    total = pool.get(booking.model, 0)
    allowed = math.floor(fraction * total)
    same = [(r, occurrences(r)) for r in group if r.model == booking.model]
    problems = []
    for start, end in mine:
        overlapping = [(s, e, r) for r, windows in same for s, e in windows if s < end and e > start]
        peak, _ = _peak(start, end, overlapping)
        if peak + booking.count > allowed:
            others = tuple(dict.fromkeys(_label(r) for _, _, r in overlapping))
            problems.append(
                LimitProblem(
                    POOL_SHARE,
                    booking.group,
                    booking.model,
                    start,
                    end,
                    Fraction(peak + booking.count),
                    Fraction(allowed),
                    not others,
                    others,
                    pool=total,
                    share=fraction,
                )
            )
    return _first(problems)
