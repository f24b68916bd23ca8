"""Stops are derived again every cycle, and a planned stop never shields a session (docs/scheduling.md#orders).

A stop told before and not yet due binds nothing: the cycle gives a ``preempt`` or ``end`` to every session that
must still stop (those told before first, at the time they were told while that still serves) and none to the
others (the caller withdraws their orders). A preemptible session with a planned end, however far, can be taken
now; the earlier of two stops wins.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.scheduler import (
    END,
    POLICIES,
    PREEMPT,
    PREEMPTIBLE,
    QUEUE,
    FairShare,
    Policy,
    Preemption,
    Request,
    Reservation,
    Reservations,
    Running,
    SessionLengths,
    Snapshot,
    schedule,
)

UTC = timezone.utc
NOW = datetime(2026, 9, 8, 13, 0, tzinfo=UTC)
TIER = POLICIES["fair-share+tier+reservations"]
TIER_ONLY = Policy("tier", FairShare(), Preemption())
RESERVE_ONLY = Policy("reservations", FairShare(), None, Reservations())
GRACE = timedelta(seconds=120)


def later(minutes: float) -> datetime:
    return NOW + timedelta(minutes=minutes)


def session(sid, group="other", age=60, tier="standard", count=1, **kw) -> Running:
    return Running(sid, f"u-{sid}", group, "T4", NOW - timedelta(minutes=age), count, "t4", tier, **kw)


def request(rid, group="A", count=1, tier="standard") -> Request:
    return Request(rid, f"u-{rid}", group, "T4", NOW - timedelta(minutes=1), count, "t4", tier)


def of(decisions, kind):
    return [d for d in decisions if d.kind == kind]


# -- a planned end never shields ----------------------------------------------------------------------------------

#: a class window tomorrow morning: 20 h from NOW
TOMORROW = Reservation("cs", "cs231n", "T4", 1, later(20 * 60 + 5), later(22 * 60), label="CS231N")


def test_a_preemptible_session_with_an_end_order_20_hours_away_is_preempted_now():
    """The issue's example: the end order made it skip preemption until then (preemptible price, full-price
    protection)."""
    ended = session("cheap", tier=PREEMPTIBLE, stop_at=later(20 * 60), stop_key="reserved")
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 1}, waiting=[request("full")], running=[ended],
                    reservations=[TOMORROW])  # fmt: skip
    decisions = schedule(snap, TIER)
    assert [(d.session, d.at, d.for_request) for d in of(decisions, PREEMPT)] == [("cheap", NOW + GRACE, "full")]
    assert of(decisions, END) == []  # the preemption comes first: the end is not given again
    # a budget running out in 10 h shields it no more; one ending within the grace frees its GPU anyway
    far = session("far", tier=PREEMPTIBLE, ends=later(600), stop_at=later(20 * 60), stop_key="reserved")
    near = session("near", tier=PREEMPTIBLE, ends=later(1))
    snap = Snapshot(now=NOW, free={"T4": 0}, waiting=[request("full")], running=[far], reservations=[TOMORROW])
    assert [d.session for d in of(schedule(snap, TIER), PREEMPT)] == ["far"]
    snap = Snapshot(now=NOW, free={"T4": 0}, waiting=[request("full")], running=[near, far])
    assert of(schedule(snap, TIER_ONLY), PREEMPT) == []


def test_an_end_this_cycle_gives_does_not_shield_and_the_earlier_stop_wins():
    """A stranger's preemptible session must end before a window in 3 hours and a full-price request waits: it is
    preempted now, and its end is not given (the preemption is earlier)."""
    window = Reservation("cs", "cs231n", "T4", 1, later(180), later(300), label="CS231N")
    cheap = session("cheap", tier=PREEMPTIBLE)
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 1}, waiting=[request("full")], running=[cheap],
                    reservations=[window])  # fmt: skip
    decisions = schedule(snap, TIER)
    assert [(d.session, d.at) for d in of(decisions, PREEMPT)] == [("cheap", NOW + GRACE)]
    assert of(decisions, END) == []
    # a told end earlier than the grace stays the stop: the session is not preempted, its GPU serves the request
    soon = session("cheap", tier=PREEMPTIBLE, stop_at=later(1), stop_key="reserved")
    window = Reservation("cs", "cs231n", "T4", 1, later(3), later(60), label="CS231N")
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 1}, waiting=[request("full")], running=[soon],
                    reservations=[window])  # fmt: skip
    decisions = schedule(snap, TIER)
    assert of(decisions, PREEMPT) == []
    assert [(d.session, d.at) for d in of(decisions, END)] == [("cheap", later(1))]


def test_the_estimate_counts_on_preempting_a_session_whatever_end_it_was_told():
    """A full-price request behind a preemptible session told its end for a window 20 h away: it waits for the
    preemption (minimum runtime 10 min, 4 min old: 6 + 2 min), not for the end."""
    young = session("cheap", tier=PREEMPTIBLE, age=4, stop_at=later(20 * 60), stop_key="reserved")
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 1}, waiting=[request("full")], running=[young],
                    reservations=[TOMORROW], history={"t4": SessionLengths([100])})  # fmt: skip
    (queued,) = of(schedule(snap, TIER), QUEUE)
    assert queued.wait == timedelta(minutes=8)


# -- orders derived again -----------------------------------------------------------------------------------------

CLASS = Reservation("cs", "cs231n", "T4", 1, later(60), later(180), label="CS231N")


def test_an_end_told_while_every_gpu_was_busy_is_not_given_again_once_a_gpu_is_free_for_the_class():
    """The issue's example: told while both T4s were busy; another student stopped and a T4 is free for the class."""
    told = session("late", age=10, stop_at=later(55), stop_key="reserved")
    busy = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 2}, running=[session("early", age=100), told],
                    reservations=[CLASS])  # fmt: skip
    assert [(d.session, d.at) for d in of(schedule(busy, RESERVE_ONLY), END)] == [("late", later(55))]
    freed = Snapshot(now=NOW, free={"T4": 1}, pool={"T4": 2}, running=[told], reservations=[CLASS])
    assert of(schedule(freed, RESERVE_ONLY), END) == []


def test_the_session_told_an_end_is_chosen_again_before_a_more_recent_one():
    """Both strangers would do; the one told keeps its end (no second student is warned, none is told it is off)."""
    told = session("told", age=100, stop_at=later(55), stop_key="reserved")
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 2}, running=[told, session("newer", age=5)],
                    reservations=[CLASS])  # fmt: skip
    assert [d.session for d in of(schedule(snap, RESERVE_ONLY), END)] == ["told"]


def test_an_end_told_too_early_for_the_window_is_given_at_the_time_now_needed():
    """The booking moved an hour later: the end told for the old window is given at the new one's time."""
    told = session("told", stop_at=later(25), stop_key="reserved")
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 1}, running=[told], reservations=[CLASS])
    assert [d.at for d in of(schedule(snap, RESERVE_ONLY), END)] == [later(55)]


def test_preemptions_no_longer_needed_are_not_given_again():
    """A two-GPU request had two victims; a third GPU freed: one victim is enough, the one told first stays."""
    a = session("a", tier=PREEMPTIBLE, age=50, stop_at=later(1), stop_key="preempted")
    b = session("b", tier=PREEMPTIBLE, age=40, stop_at=later(1), stop_key="preempted")
    both = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 3}, waiting=[request("r", count=2)],
                    running=[a, b, session("full", age=30)])  # fmt: skip
    assert sorted((d.session, d.at) for d in of(schedule(both, TIER_ONLY), PREEMPT)) == [
        ("a", later(1)),
        ("b", later(1)),
    ]
    freed = Snapshot(now=NOW, free={"T4": 1}, pool={"T4": 3}, waiting=[request("r", count=2)], running=[a, b])
    assert len(of(schedule(freed, TIER_ONLY), PREEMPT)) == 1
    # the request was served by a freed GPU: neither is given again
    served = Snapshot(now=NOW, free={"T4": 2}, pool={"T4": 4}, waiting=[request("r", count=2)], running=[a, b])
    assert of(schedule(served, TIER_ONLY), PREEMPT) == []


# -- a member's session that covers its group's booking serves it --------------------------------------------------


def test_a_members_two_gpu_session_serves_its_groups_one_gpu_booking_and_is_not_ended():
    """Three T4s: a cs231n member holds two, a stranger one; cs231n books one T4 from in an hour. The member's
    session already holds the booked T4: no one is told to end (the member was, when only a session that fits the
    booking's room whole counted towards it)."""
    booking = Reservation("cs", "cs231n", "T4", 1, later(60), later(120), label="CS231N")
    running = [session("cat", group="thesis", age=30), session("ann", group="cs231n", age=1, count=2)]
    decisions = schedule(Snapshot(NOW, {"T4": 0}, running=running, pool={"T4": 3}, reservations=[booking]), TIER)
    assert of(decisions, END) == []


def test_only_the_ends_a_booking_needs_are_given_when_a_two_gpu_session_frees_enough_alone():
    """A thesis student holds all three T4s, two in one session and one in a later one; cs231n's booking of two
    starts in an hour. Ending the two-GPU session serves it: the later one-GPU session keeps running (it was told
    to end too, being the most recent)."""
    booking = Reservation("cs", "cs231n", "T4", 2, later(60), later(120), label="CS231N")
    running = [session("pair", group="thesis", age=30, count=2), session("one", group="thesis", age=20)]
    decisions = schedule(Snapshot(NOW, {"T4": 0}, running=running, pool={"T4": 3}, reservations=[booking]), TIER)
    assert [d.session for d in of(decisions, END)] == ["pair"]


def test_a_members_session_serving_its_booking_is_ended_when_another_groups_booking_needs_its_other_gpu():
    """Three T4s, cs231n books one and thesis two for the same hour; a cs231n member holds two T4s. Her session
    serves cs231n's booking with one, but thesis needs the other: only ending her session serves both bookings."""
    cs = Reservation("cs", "cs231n", "T4", 1, later(60), later(120), label="CS231N")
    thesis = Reservation("th", "thesis", "T4", 2, later(60), later(120), label="THESIS")
    running = [session("ann", group="cs231n", age=1, count=2)]
    snap = Snapshot(NOW, {"T4": 1}, running=running, pool={"T4": 3}, reservations=[cs, thesis])
    ends = of(schedule(snap, TIER), END)
    assert [(d.session, d.reservation) for d in ends] == [("ann", "th")]
