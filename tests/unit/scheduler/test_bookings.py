"""A group's booking limits over its bookings together, at every window of a weekly booking, as the clocks run.

The limits (docs/scheduling.md, "Booking limits") bind a group over a window: its bookings of a model that
overlap, touch or lie less than an hour apart are one hold (``max_hold``); its GPU-hours add up over the
lab's calendar week (``max_gpu_hours_per_week``); its GPUs held at once add up (``max_pool_fraction``). Each
is checked at every window of a weekly booking, measured in real time in the lab's zone: in Europe/Berlin and
America/New_York the night the clocks go back is an hour longer. The property test at the end checks the pure
functions against a small reference computation of its own.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone
from fractions import Fraction
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.scheduler import Reservation
from jupyterhub_gpu.scheduler.bookings import (
    HOLD,
    POOL_SHARE,
    WEEKLY,
    BookingLimits,
    limit_problems,
    occurrences,
    reservation_problems,
)

UTC = timezone.utc
BERLIN, NEW_YORK, SHANGHAI = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York"), ZoneInfo("Asia/Shanghai")
POOL = {"T4": 4, "A100": 2}
GROUPS = {"cs231n", "ml101"}
FOUR_HOURS = BookingLimits(max_hold=timedelta(hours=4))


def at(day: date, hour: int, zone=SHANGHAI, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=zone)


def booking(rid, start, end, group="cs231n", model="T4", count=2, until=None) -> Reservation:
    return Reservation(rid, group, model, count, start, end, until)


def accepted(bookings, limits, pool=POOL):
    """Book one by one as the service does: each checked against those made before it; the ones refused."""
    made, refused = [], []
    for b in bookings:
        problems = reservation_problems(b, made, pool, GROUPS)
        assert problems == [], problems
        if limit_problems(b, made, pool, limits):
            refused.append(b.id)
        else:
            made.append(b)
    return [b.id for b in made], refused


# -- one hold: adjacent and overlapping bookings of one group count together ---------------------------------


def test_six_adjacent_four_hour_weekly_bookings_are_one_24_hour_hold():
    """Before, each 4-hour booking passed ``reservation_max_hours = 4`` on its own: together they held every T4
    for 24 hours each week. Now each one next to one already made is refused, naming the hold: what stands
    leaves 4-hour gaps in which others get the T4s."""
    tuesday = date(2026, 12, 8)
    six = [
        booking(f"b{i}", at(tuesday, 0) + timedelta(hours=4 * i), at(tuesday, 0) + timedelta(hours=4 * i + 4),
                count=4, until=date(2027, 1, 12))
        for i in range(6)
    ]  # fmt: skip
    assert accepted(six, FOUR_HOURS) == (["b0", "b2", "b4"], ["b1", "b3", "b5"])
    (problem,) = limit_problems(six[1], six[:1], POOL, FOUR_HOURS)
    assert (problem.limit, problem.amount, problem.allowed, problem.alone) == (HOLD, 8, 4, False)
    assert problem.others == ("b0",) and problem.more == 5  # every week of the term
    assert (problem.start, problem.end) == (at(tuesday, 0), at(tuesday, 8))
    # with room for a whole day, all six are one 24-hour hold and fit; a seventh minute does not
    day = BookingLimits(max_hold=timedelta(hours=24))
    assert accepted(six, day) == (["b0", "b1", "b2", "b3", "b4", "b5"], [])
    late = booking("b6", at(tuesday + timedelta(days=1), 0), at(tuesday + timedelta(days=1), 1), count=1)
    (problem,) = limit_problems(late, six, POOL, day)
    assert problem.amount == 25 and len(problem.others) == 6


def test_bookings_less_than_an_hour_apart_are_one_hold_and_a_longer_gap_frees_the_gpus():
    day = date(2026, 12, 8)
    first = booking("a", at(day, 10), at(day, 12))
    close = booking("b", at(day, 12, minute=59), at(day, 14, minute=59))
    apart = booking("c", at(day, 13), at(day, 15))
    (problem,) = limit_problems(close, [first], POOL, FOUR_HOURS)
    assert problem.amount == Fraction(4 * 60 + 59, 60)  # the gap counts: nobody else can use it
    assert limit_problems(apart, [first], POOL, FOUR_HOURS) == []
    # another group's booking, or another model, is not this group's hold
    assert limit_problems(close, [booking("a", at(day, 10), at(day, 12), group="ml101")], POOL, FOUR_HOURS) == []
    assert limit_problems(close, [booking("a", at(day, 10), at(day, 12), model="A100")], POOL, FOUR_HOURS) == []


def test_overlapping_bookings_of_one_group_count_together():
    """An admin's booking of the group counts too; overlapping windows are one hold and their GPUs add up."""
    day = date(2026, 12, 8)
    theirs = [booking("admin", at(day, 14), at(day, 16), count=2)]
    mine = booking("new", at(day, 15), at(day, 18), count=1)
    limits = BookingLimits(max_hold=timedelta(hours=3), max_pool_fraction=Fraction(1, 2))
    hold, share = limit_problems(mine, theirs, POOL, limits)
    assert (hold.limit, hold.amount, hold.others, hold.start, hold.end) == (
        HOLD,
        4,
        ("admin",),
        at(day, 14),
        at(day, 18),
    )
    assert (share.limit, share.amount, share.allowed, share.pool, share.others) == (POOL_SHARE, 3, 2, 4, ("admin",))
    # with a 4-hour hold allowed, only the GPUs at once are too many
    assert [
        p.limit for p in limit_problems(mine, theirs, POOL, BookingLimits(timedelta(hours=4), None, Fraction(1, 2)))
    ] == [POOL_SHARE]


def test_an_edited_booking_replaces_itself():
    day = date(2026, 12, 8)
    old = booking("7", at(day, 10), at(day, 14))
    longer = booking("7", at(day, 10), at(day, 15))
    assert limit_problems(booking("7", at(day, 11), at(day, 15)), [old], POOL, FOUR_HOURS) == []
    assert [p.amount for p in limit_problems(longer, [old], POOL, FOUR_HOURS)] == [5]


# -- every window of a weekly booking, as the clocks run ----------------------------------------------------


@pytest.mark.parametrize(
    "zone, first, autumn",
    [
        (BERLIN, date(2026, 10, 4), date(2026, 10, 25)),  # CEST -> CET at 03:00 on Sun 25 Oct
        (NEW_YORK, date(2026, 10, 4), date(2026, 11, 1)),  # EDT -> EST at 02:00 on Sun 1 Nov
    ],
)
def test_a_weekly_window_is_measured_at_every_window_of_the_term_across_summer_time(zone, first, autumn):
    """Sundays 00:00-04:00 from October to December: 4 hours each week, 5 on the night the clocks go back."""
    term = booking("term", at(first, 0, zone), at(first, 4, zone), count=1, until=date(2026, 12, 27))
    lengths = {s.astimezone(zone).date(): (e - s) / timedelta(hours=1) for s, e in occurrences(term)}
    assert len(lengths) == 13 and lengths[autumn] == 5 and set(lengths.values()) == {4, 5}
    (problem,) = limit_problems(term, [], POOL, FOUR_HOURS)
    assert (problem.limit, problem.alone, problem.single_window, problem.more) == (HOLD, True, True, 0)
    assert problem.start == at(autumn, 0, zone) and (problem.amount, problem.wall_hours) == (5, 4)
    # a term that stops before that night fits
    short = booking("short", at(first, 0, zone), at(first, 4, zone), count=1, until=autumn - timedelta(days=1))
    assert limit_problems(short, [], POOL, FOUR_HOURS) == []
    # in spring the same window is 3 hours long: its week has an hour fewer to count
    spring = date(2026, 3, 29) if zone is BERLIN else date(2026, 3, 8)
    weekly = BookingLimits(max_gpu_hours_per_week=Fraction(7))
    two = booking("two", at(spring - timedelta(weeks=1), 0, zone), at(spring - timedelta(weeks=1), 4, zone),
                  count=2, until=spring + timedelta(weeks=1))  # fmt: skip
    (week,) = limit_problems(two, [], POOL, weekly)
    assert (week.limit, week.amount, week.more) == (WEEKLY, 8, 1)  # the first and last weeks, 8 GPU-hours each
    assert week.start == at(spring - timedelta(weeks=1, days=6), 0, zone)  # the Monday of the first week


def test_in_a_zone_without_summer_time_the_same_term_fits_all_year():
    """Asia/Shanghai has no summer time: Sundays 00:00-04:00 are 4 hours on every one of 53 Sundays."""
    first = date(2026, 1, 4)
    year = booking("year", at(first, 0), at(first, 4), count=1, until=date(2027, 1, 3))
    assert len(occurrences(year)) == 53
    assert {e - s for s, e in occurrences(year)} == {timedelta(hours=4)}
    assert limit_problems(year, [], POOL, FOUR_HOURS) == []


def test_the_pool_is_counted_in_real_time_in_the_hour_the_clocks_repeat():
    """On 25 Oct in Berlin, 02:30 comes twice. ML101's 01:30-02:30 (the second 02:30) ends after CS231N's
    02:40 (the first) begins: they overlap for 50 minutes, though the wall clock says they do not."""
    night = date(2026, 10, 25)
    ml101 = booking("m", at(night, 1, BERLIN, 30), datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN, fold=1),
                    group="ml101", count=3)  # fmt: skip
    mine = booking("c", at(night, 2, BERLIN, 40), at(night, 3, BERLIN), count=2)
    problems = reservation_problems(mine, [ml101], POOL, GROUPS)
    assert any("5 T4s would be reserved but the pool has 4" in p for p in problems), problems
    assert reservation_problems(booking("c", at(night, 2, BERLIN, 40), at(night, 3, BERLIN), count=1), [ml101],
                                POOL, GROUPS) == []  # fmt: skip


# -- GPU-hours a week -----------------------------------------------------------------------------------------


def test_the_gpu_hours_of_a_week_add_up_over_the_group_s_bookings_and_models():
    monday = date(2026, 12, 7)
    limits = BookingLimits(max_gpu_hours_per_week=Fraction(30))
    made = [booking("t4", at(monday, 10), at(monday, 14), count=4)]  # 16 GPU-hours
    a100 = booking("a100", at(monday + timedelta(days=2), 10), at(monday + timedelta(days=2), 14), model="A100")
    assert limit_problems(a100, made, POOL, limits) == []  # 16 + 8 = 24
    more = booking("more", at(monday + timedelta(days=4), 10), at(monday + timedelta(days=4), 14), count=2)
    (problem,) = limit_problems(more, [*made, a100], POOL, limits)
    assert (problem.limit, problem.amount, problem.mine, problem.allowed) == (WEEKLY, 32, 8, 30)
    assert problem.others == ("t4", "a100") and not problem.alone
    assert (problem.start, problem.end) == (at(monday, 0), at(monday + timedelta(days=7), 0))
    # another group's hours, or the next week, do not count
    assert limit_problems(more, [booking("x", at(monday, 10), at(monday, 14), group="ml101", count=4)], POOL,
                          limits) == []  # fmt: skip
    later = booking("later", at(monday + timedelta(days=7), 10), at(monday + timedelta(days=7), 14), count=2)
    assert limit_problems(later, [*made, a100], POOL, limits) == []


def test_a_window_across_monday_midnight_counts_in_each_week_for_its_part():
    sunday = date(2026, 12, 13)
    limits = BookingLimits(max_gpu_hours_per_week=Fraction(20))
    made = [booking("before", at(sunday - timedelta(days=1), 8), at(sunday - timedelta(days=1), 12), count=4)]
    night = booking("night", at(sunday, 20), at(sunday + timedelta(days=1), 2), count=2)  # 4 + 2 hours x 2
    (problem,) = limit_problems(night, made, POOL, limits)
    assert (problem.amount, problem.mine) == (24, 8)  # 16 + 4 x 2 in the week of Mon 7 Dec
    assert limit_problems(night, [], POOL, limits) == []


# -- the part of a model's pool at once ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fraction, model, count, refused",
    [
        (Fraction(1, 2), "T4", 2, False),
        (Fraction(1, 2), "T4", 3, True),
        (Fraction(1, 2), "A100", 1, False),
        (Fraction(1, 2), "A100", 2, True),
        (Fraction(3, 10), "T4", 1, False),  # 1.2 T4s, rounded down
        (Fraction(3, 10), "T4", 2, True),
        (Fraction(1), "T4", 4, False),
    ],
)
def test_a_group_holds_at_most_its_part_of_a_model_s_pool_at_once(fraction, model, count, refused):
    day = date(2026, 12, 8)
    new = booking("n", at(day, 14), at(day, 16), model=model, count=count)
    problems = limit_problems(new, [], POOL, BookingLimits(max_pool_fraction=fraction))
    assert bool(problems) == refused
    if refused:
        assert (problems[0].limit, problems[0].amount, problems[0].pool) == (POOL_SHARE, count, POOL[model])


def test_limits_from_settings_are_exact():
    limits = BookingLimits.from_settings(1.5, 0.1, 0.3)
    assert limits.max_hold == timedelta(hours=1, minutes=30)
    assert (limits.max_gpu_hours_per_week, limits.max_pool_fraction) == (Fraction(1, 10), Fraction(3, 10))
    assert BookingLimits.from_settings(None, None, None) == BookingLimits()


# -- the property: whatever is accepted keeps every limit at every window --------------------------------------

GAP = timedelta(hours=1)
DST_NIGHTS = [date(2026, 3, 8), date(2026, 3, 29), date(2026, 10, 25), date(2026, 11, 1)]


def ref_windows(r: Reservation, zone) -> list[tuple[datetime, datetime]]:
    """The windows as the lab's wall clock places them: the first's local times, 7 days later each week."""
    s0, e0 = r.start.replace(tzinfo=None), r.end.replace(tzinfo=None)
    weeks = 0 if r.weekly_until is None else (r.weekly_until - s0.date()).days // 7
    found = []
    for k in range(weeks + 1):
        s = (s0 + timedelta(days=7 * k)).replace(tzinfo=zone).astimezone(UTC)
        e = (e0 + timedelta(days=7 * k)).replace(tzinfo=zone).astimezone(UTC)
        if e > s:
            found.append((s, e))
    return found


def ref_broken(bookings: list[Reservation], zone, limits: BookingLimits) -> list[str]:
    """Every limit broken by ``bookings`` taken together, measured from scratch."""
    broken = []
    windows = [(r, s, e) for r in bookings for s, e in ref_windows(r, zone)]
    for group in GROUPS:
        for model, total in POOL.items():
            mine = sorted((s, e, r.count) for r, s, e in windows if r.group == group and r.model == model)
            holds: list[list] = []
            for s, e, _ in mine:
                if holds and s - holds[-1][1] < GAP:
                    holds[-1][1] = max(holds[-1][1], e)
                else:
                    holds.append([s, e])
            if limits.max_hold is not None:
                broken += [f"hold {s}" for s, e in holds if e - s > limits.max_hold]
            if limits.max_pool_fraction is not None:
                most = int(limits.max_pool_fraction * total)
                for t, _, _ in mine:
                    if sum(c for s, e, c in mine if s <= t < e) > most:
                        broken.append(f"pool {model} {t}")
        if limits.max_gpu_hours_per_week is not None:
            days = sorted({s.astimezone(zone).date() for r, s, _ in windows if r.group == group})
            mondays = {d - timedelta(days=d.weekday() - 7 * k) for d in days for k in (0, 1)}
            for monday in mondays:
                since = datetime.combine(monday, time(0), tzinfo=zone).astimezone(UTC)
                until = datetime.combine(monday + timedelta(days=7), time(0), tzinfo=zone).astimezone(UTC)
                used = sum(
                    Fraction(r.count * ((min(e, until) - max(s, since)) // timedelta(microseconds=1)), 3_600_000_000)
                    for r, s, e in windows
                    if r.group == group and s < until and e > since
                )
                if used > limits.max_gpu_hours_per_week:
                    broken.append(f"week {monday}")
    return broken


@st.composite
def candidates(draw):
    zone = draw(st.sampled_from([BERLIN, NEW_YORK, SHANGHAI]))
    limits = BookingLimits(
        max_hold=draw(st.sampled_from([None, timedelta(hours=2), timedelta(hours=3), timedelta(hours=4)])),
        max_gpu_hours_per_week=draw(st.sampled_from([None, Fraction(6), Fraction(12)])),
        max_pool_fraction=draw(st.sampled_from([None, Fraction(1, 2), Fraction(3, 4)])),
    )
    made: list[Reservation] = []
    for i in range(draw(st.integers(1, 6))):
        group, model = draw(st.sampled_from(sorted(GROUPS))), draw(st.sampled_from(sorted(POOL)))
        weekly = draw(st.one_of(st.none(), st.integers(0, 6)))
        night = datetime.combine(draw(st.sampled_from(DST_NIGHTS)), time(0))  # a Sunday
        kind = draw(st.sampled_from(["after", "near", "clocks", "monday"] if made else ["near", "clocks", "monday"]))
        if kind == "after":  # right after an earlier one (or 5-20 minutes later), mostly of its group and model
            before = draw(st.sampled_from(made))
            start = before.end.replace(tzinfo=None) + timedelta(minutes=draw(st.sampled_from([0, 5, 10, 15, 20])))
            if draw(st.integers(0, 3)):
                group, model = before.group, before.model
        elif kind == "near":  # any time in the three weeks before a night the clocks change
            start = night - timedelta(days=draw(st.integers(0, 20)), minutes=5 * draw(st.integers(0, 287)))
        elif kind == "clocks":  # weekly at the night's small hours, repeating over it
            weeks = draw(st.integers(0, 3))
            start = night - timedelta(weeks=weeks) + timedelta(minutes=5 * draw(st.integers(0, 47)))
            weekly = weeks + draw(st.integers(0, 2))
        else:  # around the Monday midnight after it: a week's edge
            start = night + timedelta(hours=draw(st.integers(18, 26)), minutes=5 * draw(st.integers(0, 11)))
        end = start + timedelta(minutes=5 * draw(st.integers(1, 48)))
        until = None if weekly is None else start.date() + timedelta(weeks=weekly)
        count = draw(st.integers(1, 2))
        made.append(
            Reservation(str(i), group, model, count, start.replace(tzinfo=zone), end.replace(tzinfo=zone), until)
        )
    return zone, limits, made, draw(st.booleans())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(candidates())
def test_accepted_bookings_keep_every_limit_at_every_window_and_only_breaking_ones_are_refused(case):
    """Each booking is refused exactly when, with those accepted before it, some limit breaks at some window.
    ``strict``: as the service books (the pool's size and the same group twice at once refused first); else any
    booking of valid fields is offered, so that overlapping bookings of one group are counted together too."""
    zone, limits, wanted, strict = case
    made: list[Reservation] = []
    for b in wanted:
        if reservation_problems(b, made if strict else [], POOL, GROUPS):
            continue
        problems = limit_problems(b, made, POOL, limits)
        refused = bool(problems)
        for p in problems:
            event(f"refused: {p.limit}{'' if p.alone else ', with others'}")
        assert refused == bool(ref_broken([*made, b], zone, limits)), (b, made)
        if not refused:
            made.append(b)
        assert ref_broken(made, zone, limits) == []
