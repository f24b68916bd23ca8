"""The scheduler: a snapshot in, decisions out; each plugin on its own table of cases (docs/scheduling.md)."""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.scheduler import (
    END,
    GRANT,
    POLICIES,
    PREEMPT,
    PREEMPTIBLE,
    QUEUE,
    REFUSE,
    STOP,
    TEXTS,
    FairShare,
    Fifo,
    Policy,
    Preemption,
    Request,
    Reservation,
    ReservationError,
    Reservations,
    Running,
    SessionLengths,
    Snapshot,
    check_reservation,
    decayed_usage,
    estimate,
    expected_end,
    policy_named,
    reservation_problems,
    schedule,
)
from jupyterhub_gpu.scheduler.words import duration_words, wait_words

UTC = timezone.utc
NOW = datetime(2026, 9, 8, 13, 0, tzinfo=UTC)  # a Tuesday
FIFO = POLICIES["fifo"]
FAIR = POLICIES["fair-share"]
TIER = POLICIES["fair-share+tier+reservations"]
TIER_ONLY = Policy("tier", FairShare(), Preemption())
RESERVE_ONLY = Policy("reservations", Fifo(), None, Reservations())


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def later(minutes: float) -> datetime:
    return NOW + timedelta(minutes=minutes)


def request(rid, group="A", model="T4", waited=1, count=1, tier="standard", user=None, profile="t4", groups=()):
    return Request(rid, user or f"u-{rid}", group, model, ago(waited), count, profile, tier, groups)


def session(sid, group="B", model="T4", age=60, count=1, tier="standard", idle=None, **kw):
    last_use = None if idle is None else ago(idle)
    return Running(sid, f"u-{sid}", group, model, ago(age), count, "t4", tier, last_use, **kw)


def of(decisions, kind):
    return [d for d in decisions if d.kind == kind]


def queue(decisions):
    return {d.request: d for d in of(decisions, QUEUE)}


# -- fair share --------------------------------------------------------------------------------------------------

EQUAL = {"A": {"T4": 1}, "B": {"T4": 1}}


@pytest.mark.parametrize("waited_a, waited_b", [(30, 5), (5, 30)])
def test_a_group_that_used_three_times_more_waits_behind_the_other_and_is_told_why(waited_a, waited_b):
    snap = Snapshot(
        now=NOW,
        free={"T4": 0},
        waiting=[request("a", "A", waited=waited_a), request("b", "B", waited=waited_b)],
        running=[session("s1", "A"), session("s2", "B")],
        shares=EQUAL,
        usage={"A": {"T4": 30.0}, "B": {"T4": 10.0}},
    )
    fair = queue(schedule(snap, FAIR))
    assert (fair["b"].position, fair["a"].position) == (1, 2)
    assert fair["a"].length == fair["b"].length == 2
    # A has 75% of the use and 50% of the shares: 150%; B 50%
    assert fair["a"].reason == "your group has used 150% of its share of T4 GPUs this week"
    assert fair["b"].reason == "your group has used 50% of its share of T4 GPUs this week"
    # FIFO (today): first come, first served
    fifo = queue(schedule(snap, FIFO))
    assert (fifo["a"].position, fifo["b"].position) == ((1, 2) if waited_a > waited_b else (2, 1))
    assert fifo["a"].reason == TEXTS["fifo"]


@pytest.mark.parametrize(
    "waited_a, first, key_a",
    [
        (30, "b", "share"),  # 150% - 0.5 = 1.0 against 50% - 0.08: B first
        (60, "b", "share.aged"),  # 1.5 - 1.0 = 0.5 against 0.5 - 0.08 = 0.42: still B
        (90, "a", "share.aged"),  # 1.5 - 1.5 = 0 against 0.42: the wait has lifted A's request
        (600, "a", "share.aged"),
    ],
)
def test_waiting_ages_a_request_so_that_nothing_starves(waited_a, first, key_a):
    snap = Snapshot(
        now=NOW,
        free={"T4": 0},
        waiting=[request("a", "A", waited=waited_a), request("b", "B", waited=5)],
        running=[session("s1")],
        shares=EQUAL,
        usage={"A": {"T4": 30.0}, "B": {"T4": 10.0}},
    )
    found = queue(schedule(snap, FAIR))
    assert found[first].position == 1
    assert found["a"].key == key_a
    if key_a == "share.aged":
        assert "of waiting moves you up" in found["a"].reason


def test_a_heavy_group_is_served_within_its_ageing_bound_against_a_stream_of_newcomers():
    """Every minute a newcomer of the idle group arrives; the heavy group's request still reaches the head."""
    policy = Policy("fair", FairShare(ageing=timedelta(minutes=30)))
    for t in range(0, 24 * 60):
        now = NOW + timedelta(minutes=t)
        newcomer = Request(f"b{t}", "u-b", "B", "T4", now, profile="t4")
        snap = Snapshot(
            now=now,
            free={"T4": 0},
            waiting=[request("a", "A", waited=0), newcomer],
            running=[session("s1")],
            shares=EQUAL,
            usage={"A": {"T4": 40.0}, "B": {"T4": 0.0}},
        )
        if queue(schedule(snap, policy))["a"].position == 1:
            break
    else:
        pytest.fail("the heavy group's request never reached the head")
    assert t <= 61  # a ratio of 2 (100% of the use, 50% of the shares) is worth two ageing periods


def test_first_come_within_a_group_and_the_grants_follow_the_order():
    snap = Snapshot(
        now=NOW,
        free={"T4": 1},
        waiting=[request("late", "A", waited=1), request("early", "A", waited=9), request("b", "B", waited=20)],
        shares=EQUAL,
        usage={"A": {"T4": 1.0}, "B": {"T4": 3.0}},
    )
    decisions = schedule(snap, FAIR)
    assert [d.request for d in of(decisions, GRANT)] == ["early"]
    assert of(decisions, GRANT)[0].reason == "1 T4 free"
    assert [(d.request, d.position) for d in of(decisions, QUEUE)] == [("late", 1), ("b", 2)]


@pytest.mark.parametrize(
    "shares, usage, expected",
    [
        ({}, {}, {"A": 0.0, "B": 0.0}),  # nobody used anything
        ({}, {"A": {"T4": 2.0}, "B": {"T4": 2.0}}, {"A": 1.0, "B": 1.0}),  # default shares, equal use
        ({"A": {"T4": 3}, "B": {"T4": 1}}, {"A": {"T4": 3.0}, "B": {"T4": 1.0}}, {"A": 1.0, "B": 1.0}),
        ({"A": {"T4": 3}, "B": {"T4": 1}}, {"A": {"T4": 1.0}, "B": {"T4": 1.0}}, {"A": 2 / 3, "B": 2.0}),
        ({"A": {"T4": 0}, "B": {"T4": 1}}, {"A": {"T4": 1.0}, "B": {"T4": 1.0}}, {"A": 10.0, "B": 0.5}),
        ({}, {"A": {"A100": 5.0}, "B": {"T4": 1.0}}, {"A": 0.0, "B": 2.0}),  # usage is per model
    ],
)
def test_fair_share_ratios(shares, usage, expected):
    snap = Snapshot(now=NOW, free={"T4": 1}, shares=shares, usage=usage)
    ratios = FairShare().ratios(snap, "T4", {"A", "B"})
    assert ratios == pytest.approx(expected)


def test_a_group_without_a_share_is_told_so():
    snap = Snapshot(
        now=NOW,
        free={"T4": 0},
        waiting=[request("a", "A")],
        running=[session("s1")],
        shares={"A": {"T4": 0}, "B": {"T4": 1}},
        usage={"A": {"T4": 1.0}, "B": {"T4": 1.0}},
    )
    assert queue(schedule(snap, FAIR))["a"].key == "share.none"


def test_decayed_usage_halves_with_each_half_life():
    week = timedelta(days=7)
    now = NOW
    fresh = decayed_usage([("A", "T4", 1, now - timedelta(hours=1), now)], now, week)
    old = decayed_usage([("A", "T4", 1, now - week - timedelta(hours=1), now - week)], now, week)
    assert fresh["A"]["T4"] == pytest.approx(1.0, rel=3e-3)  # an hour ago at most: barely decayed
    assert old["A"]["T4"] == pytest.approx(fresh["A"]["T4"] / 2, rel=1e-9)
    running = decayed_usage([("B", "A100", 2, now - timedelta(hours=1), None)], now, week)
    assert running["B"]["A100"] == pytest.approx(2.0, rel=3e-3)
    assert decayed_usage([("A", "T4", 1, now, now + timedelta(hours=1))], now, week) == {}  # nothing before now


# -- the preemptible tier ----------------------------------------------------------------------------------------


def preemption_case(running, waiting=None, policy=TIER_ONLY):
    snap = Snapshot(now=NOW, free={"T4": 0}, waiting=waiting or [request("r", "A")], running=running)
    return schedule(snap, policy)


@pytest.mark.parametrize(
    "running, victims",
    [
        # an idle GPU first, even if it started long ago
        (
            [
                session("busy-new", tier=PREEMPTIBLE, age=20, idle=0),
                session("idle-old", tier=PREEMPTIBLE, age=300, idle=30),
            ],
            ["idle-old"],
        ),
        # then the most recently started
        (
            [
                session("old", tier=PREEMPTIBLE, age=300, idle=1),
                session("newer", tier=PREEMPTIBLE, age=40, idle=1),
                session("newest", tier=PREEMPTIBLE, age=15, idle=1),
            ],
            ["newest"],
        ),
        # never one younger than preempt_min_runtime (10 min), even idle
        (
            [session("young-idle", tier=PREEMPTIBLE, age=9), session("older", tier=PREEMPTIBLE, age=11, idle=0)],
            ["older"],
        ),
        ([session("young", tier=PREEMPTIBLE, age=9.9)], []),
        # never a full-price session
        ([session("full", age=300), session("full-idle", age=300, idle=100)], []),
        # one already told a preemption is chosen again first (its order stays the one needed), and no other
        (
            [
                session("other", tier=PREEMPTIBLE, idle=30),
                session("told", tier=PREEMPTIBLE, age=60, stop_at=later(1), stop_key="preempted"),
            ],
            ["told"],
        ),
        # a session that ends by itself within the grace frees its GPU anyway
        ([session("ending", age=60, ends=later(1)), session("other", tier=PREEMPTIBLE)], []),
    ],
)
def test_the_victim_of_a_full_price_request(running, victims):
    decisions = preemption_case(running)
    preempts = of(decisions, PREEMPT)
    assert [d.session for d in preempts] == victims
    for d in preempts:
        # a preemption told before keeps its time; a new one gives the grace
        assert d.at == (later(1) if d.session == "told" else NOW + timedelta(seconds=120))
        assert d.for_request == "r"


def test_a_victim_younger_than_the_minimum_runtime_is_never_chosen_at_any_setting():
    for minimum in (0, 5, 10, 30):
        rule = Preemption(min_runtime=timedelta(minutes=minimum))
        policy = Policy("tier", Fifo(), rule)
        for age in range(0, 40):
            running = [session("s", tier=PREEMPTIBLE, age=age, idle=60)]
            chosen = [d.session for d in of(preemption_case(running, policy=policy), PREEMPT)]
            assert chosen == (["s"] if age >= minimum else []), (minimum, age)


def test_the_notice_says_what_happens_to_the_work():
    decisions = preemption_case([session("ckpt", tier=PREEMPTIBLE, checkpoints=True)])
    assert of(decisions, PREEMPT)[0].reason == (
        "this server will be stopped in 2 min to free its GPU for a full-price request;"
        " your training is being checkpointed"
    )
    decisions = preemption_case([session("plain", tier=PREEMPTIBLE)])
    assert of(decisions, PREEMPT)[0].reason.endswith("save your work now")


def test_a_two_gpu_request_takes_two_victims_or_none():
    two = [request("r", "A", count=2)]
    running = [session("p1", tier=PREEMPTIBLE, age=50), session("p2", tier=PREEMPTIBLE, age=40)]
    assert sorted(d.session for d in of(preemption_case(running, two), PREEMPT)) == ["p1", "p2"]
    running = [session("p1", tier=PREEMPTIBLE, age=50), session("full", age=40)]
    assert of(preemption_case(running, two), PREEMPT) == []


def test_preemptible_requests_wait_behind_full_price_ones_and_never_preempt():
    waiting = [request("cheap", "A", tier=PREEMPTIBLE, waited=60), request("full", "B", waited=1)]
    running = [session("p", tier=PREEMPTIBLE, age=60)]
    decisions = preemption_case(running, waiting)
    assert [d.for_request for d in of(decisions, PREEMPT)] == ["full"]
    found = queue(decisions)
    assert (found["full"].position, found["cheap"].position) == (1, 2)
    assert found["cheap"].reason == "preemptible requests wait until no full-price request needs a T4"
    # alone, a preemptible request preempts nobody
    assert of(preemption_case(running, [request("cheap", tier=PREEMPTIBLE)]), PREEMPT) == []


def test_without_the_tier_plugin_a_preemptible_session_is_never_preempted():
    decisions = preemption_case([session("p", tier=PREEMPTIBLE, age=60)], policy=FAIR)
    assert of(decisions, PREEMPT) == []


def test_the_queue_is_strict_a_blocked_head_holds_the_requests_behind_it():
    snap = Snapshot(
        now=NOW,
        free={"T4": 1},
        waiting=[request("two", count=2, waited=10), request("one", waited=1)],
        running=[session("s")],
    )
    decisions = schedule(snap, FIFO)
    assert of(decisions, GRANT) == []
    assert [(d.request, d.position) for d in of(decisions, QUEUE)] == [("two", 1), ("one", 2)]


def test_a_stop_that_is_due_is_decided_and_its_gpu_granted_in_the_same_cycle():
    snap = Snapshot(
        now=NOW,
        free={"T4": 0},
        waiting=[request("r")],
        running=[session("p", tier=PREEMPTIBLE, stop_at=NOW, stop_key="preempted")],
    )
    decisions = schedule(snap, TIER)
    assert [d.kind for d in decisions] == [STOP, GRANT]
    assert decisions[0].reason == "this server was stopped at 13:00 to free its GPU for a full-price request"


# -- refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "req, reason",
    [
        (request("r", model="H100"), "this pool has no H100 GPUs (it has A100, T4)"),
        (request("r", model="T4", count=5), "5 T4s asked, but the pool has 4"),
        (request("r", count=0), "a request needs at least one GPU, got 0"),
    ],
)
def test_requests_no_pool_can_serve_are_refused(req, reason):
    snap = Snapshot(now=NOW, free={"T4": 4, "A100": 2}, waiting=[req])
    decisions = schedule(snap, FIFO)
    assert [(d.kind, d.request, d.reason) for d in decisions] == [(REFUSE, "r", reason)]


def test_a_naive_now_is_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        schedule(Snapshot(now=datetime(2026, 9, 8, 13, 0), free={"T4": 1}), FIFO)


def test_policies_by_name():
    assert policy_named("fifo") is FIFO
    with pytest.raises(ValueError, match="fair-share"):
        policy_named("lottery")


# -- reservations ------------------------------------------------------------------------------------------------

CLASS = Reservation(
    "cs231n-lab",
    "cs231n",
    "T4",
    4,
    datetime(2026, 9, 8, 14, 0, tzinfo=UTC),
    datetime(2026, 9, 8, 16, 0, tzinfo=UTC),
    weekly_until=date(2027, 1, 15),
    label="CS231N",
)


def reserved(now, free, waiting=(), running=(), reservations=(CLASS,), policy=RESERVE_ONLY, units=4):
    snap = Snapshot(
        now=now,
        free={"T4": free},
        pool={"T4": units},
        waiting=list(waiting),
        running=list(running),
        reservations=list(reservations),
    )
    return schedule(snap, policy)


def test_a_session_granted_before_a_window_is_told_at_its_start_how_long_it_may_run():
    decisions = reserved(NOW, free=4, waiting=[request("r", "other")])
    grant = of(decisions, GRANT)[0]
    assert grant.at == datetime(2026, 9, 8, 13, 55, tzinfo=UTC)
    assert grant.reason == "may run until 13:55: CS231N has 4 T4s reserved from 14:00"


def test_one_reserved_gpu_is_worded_in_the_singular_in_english_and_chinese():
    from dataclasses import replace

    one = replace(CLASS, count=1)
    grant = of(reserved(NOW, free=1, units=1, waiting=[request("r", "other")], reservations=(one,)), GRANT)[0]
    assert grant.reason == "may run until 13:55: CS231N has 1 T4 reserved from 14:00"
    assert grant.reason_in("zh-CN") == "最多可运行到 13:55：从 14:00 起 1 块 T4 已为 CS231N 预留"


def test_running_strangers_are_told_their_end_and_members_are_not():
    running = [
        session("stranger", "other", age=30),
        session("member", "cs231n", age=30),
        session("told", "other", age=30, stop_at=later(55), stop_key="reserved"),
    ]
    decisions = reserved(NOW, free=1, running=running)
    ends = of(decisions, END)
    # the one told before is given its end again (the end is still needed: its order stays)
    assert sorted((d.session, d.at) for d in ends) == [("stranger", later(55)), ("told", later(55))]
    assert ends[0].reason == "may run until 13:55: CS231N has 4 T4s reserved from 14:00"


def test_a_session_that_ends_before_the_window_is_not_told():
    running = [session("short", "other", age=30, ends=later(50))]
    assert of(reserved(NOW, free=3, running=running), END) == []


def test_preemptible_strangers_give_way_before_full_price_ones_then_the_most_recent():
    small = Reservation("lab", "cs231n", "T4", 2, CLASS.start, CLASS.end, label="CS231N")
    running = [
        session("full-old", "other", age=300),
        session("full-new", "other", age=20),
        session("cheap-old", "other", age=400, tier=PREEMPTIBLE),
    ]
    decisions = reserved(NOW, free=1, running=running, reservations=[small], policy=TIER)
    assert sorted(d.session for d in of(decisions, END)) == ["cheap-old"]  # 3 held + 2 reserved - 4 = 1
    running.append(session("full-newest", "other", age=5))
    decisions = reserved(NOW, free=0, running=running, reservations=[small], policy=TIER)
    assert sorted(d.session for d in of(decisions, END)) == ["cheap-old", "full-newest"]


def test_a_stranger_is_not_granted_a_gpu_it_could_keep_less_than_min_run_and_is_told_why():
    now = datetime(2026, 9, 8, 13, 48, tzinfo=UTC)  # it could run until 13:55: 7 minutes
    decisions = reserved(now, free=4, waiting=[request("r", "other")])
    assert of(decisions, GRANT) == []
    d = queue(decisions)["r"]
    assert d.reason == "the free T4 GPUs are reserved for CS231N from 14:00"
    # a member is served
    decisions = reserved(now, free=4, waiting=[request("m", "cs231n")])
    assert [(d.request, d.at) for d in of(decisions, GRANT)] == [("m", None)]


def test_during_the_window_members_get_the_reserved_gpus_first():
    during = datetime(2026, 9, 8, 14, 10, tzinfo=UTC)
    waiting = [request("stranger", "other", waited=30), request("member", "cs231n", waited=1)]
    running = [session("class-1", "cs231n", age=5)]
    decisions = reserved(during, free=3, waiting=waiting, running=running)
    assert [(d.request, d.key) for d in of(decisions, GRANT)] == [("member", "grant.reserved")]
    assert of(decisions, GRANT)[0].reason == "1 T4 reserved for CS231N"
    stranger = queue(decisions)["stranger"]
    assert stranger.reason == "CS231N has 4 T4s reserved until 16:00"
    # when the window ends (units free for anyone): the estimate points there
    assert stranger.wait == timedelta(minutes=110)


def test_members_of_a_group_through_their_other_groups_count_as_members():
    during = datetime(2026, 9, 8, 14, 10, tzinfo=UTC)
    waiting = [request("ta", "staff", groups=("cs231n",))]
    assert [d.request for d in of(reserved(during, free=4, waiting=waiting), GRANT)] == ["ta"]


def test_after_the_window_the_gpus_return_to_the_pool():
    after = datetime(2026, 9, 8, 16, 0, tzinfo=UTC)
    decisions = reserved(after, free=4, waiting=[request("r", "other")])
    grant = of(decisions, GRANT)[0]
    assert (grant.key, grant.at) == ("grant", None)  # the next window is a week away, beyond the 24 h horizon
    # a day before the next window, a session is told its end at its start
    decisions = reserved(datetime(2026, 9, 14, 16, 0, tzinfo=UTC), free=4, waiting=[request("r", "other")])
    assert of(decisions, GRANT)[0].at == datetime(2026, 9, 15, 13, 55, tzinfo=UTC)
    assert (
        of(decisions, GRANT)[0].reason
        == "may run until Tue 15 Sep 13:55: CS231N has 4 T4s reserved from Tue 15 Sep 14:00"
    )


def test_a_booking_the_pool_cannot_hold_at_that_time_is_refused_in_the_cycle():
    other = Reservation("ml", "ml101", "T4", 2, CLASS.start, CLASS.end, label="ML101")
    decisions = reserved(NOW, free=4, reservations=[CLASS, other])
    refused = of(decisions, REFUSE)
    assert [d.reservation for d in refused] == ["ml"]
    assert refused[0].reason == (
        "ML101 reserves 2 T4s from 14:00 to 16:00, but the pool has 4 and other bookings hold 4 then"
    )


def test_a_booking_made_during_its_window_stops_strangers_after_the_lead_not_at_once():
    during = datetime(2026, 9, 8, 14, 30, tzinfo=UTC)
    running = [session(f"s{i}", "other", age=60 - i) for i in range(4)]
    decisions = reserved(during, free=0, running=running)
    ends = of(decisions, END)
    assert len(ends) == 4
    assert {d.at for d in ends} == {during + timedelta(minutes=5)}


# -- bookings ------------------------------------------------------------------------------------------------------

POOL = {"T4": 4, "A100": 2}
GROUPS = {"cs231n", "ml101"}
T = datetime(2026, 9, 8, 14, 0, tzinfo=UTC)


def booking(rid="b", group="ml101", model="T4", count=2, start=T, end=T + timedelta(hours=2), until=None):
    return Reservation(rid, group, model, count, start, end, until, label=group.upper())


@pytest.mark.parametrize(
    "new, existing, problem",
    [
        (booking(), [], None),
        (booking(end=T - timedelta(hours=1)), [], "the reservation ends (2026-09-08 13:00) before it starts"),
        (booking(end=T), [], "before it starts"),
        (booking(count=5), [], "5 T4s asked, but the pool has 4"),
        (booking(count=0), [], "the count must be a whole number of GPUs, at least 1, got 0"),
        (booking(model="H100"), [], "the pool has no H100 GPUs (it has: A100, T4)"),
        (booking(group="nobody"), [], "there is no group named 'nobody'"),
        (booking(start=datetime(2026, 9, 8, 14, 0)), [], "the start must be a date and time with a time zone"),
        # the same group twice at once
        (
            booking(rid="c", start=T + timedelta(hours=1), end=T + timedelta(hours=3)),
            [booking()],
            "it overlaps ML101's reservation of 2 T4s on Tue 8 Sep 14:00–16:00",
        ),
        # more than the pool at that time
        (
            booking(rid="c", group="cs231n", count=3),
            [booking()],
            "on Tue 8 Sep 14:00–16:00, 5 T4s would be reserved but the pool has 4 (2 already reserved for ML101)",
        ),
        # next to it, or another model: fine
        (booking(rid="c", group="cs231n", start=T + timedelta(hours=2), end=T + timedelta(hours=4)), [booking()], None),
        (booking(rid="c", group="cs231n", model="A100"), [booking()], None),
        # a weekly booking that meets another one in its fifth week
        (
            booking(rid="c", group="cs231n", count=3, until=date(2026, 12, 1)),
            [booking(start=T + timedelta(weeks=4), end=T + timedelta(weeks=4, hours=1))],
            "on Tue 6 Oct 14:00–16:00, 5 T4s would be reserved",
        ),
        (booking(until=date(2026, 9, 1)), [], "it repeats until 2026-09-01, before its first window on 2026-09-08"),
        (
            booking(end=T + timedelta(days=8), until=date(2026, 12, 1)),
            [],
            "a weekly window must be shorter than a week",
        ),
    ],
)
def test_bookings_are_checked(new, existing, problem):
    problems = reservation_problems(new, existing, POOL, GROUPS)
    if problem is None:
        assert problems == []
        assert check_reservation(new, existing, POOL, GROUPS) is new
    else:
        assert any(problem in p for p in problems), problems
        with pytest.raises(ReservationError, match=problem.split("(")[0][:30]):
            check_reservation(new, existing, POOL, GROUPS)


def test_windows_are_placed_in_real_time_in_the_hour_the_clocks_repeat():
    """On 25 Oct in Berlin 02:30 comes twice. A booking from 01:30 to the second 02:30 lasts two real hours (until
    01:30 UTC): at 00:45 UTC (the first 02:45) and at 01:00 UTC (the second 02:00) it is in force, and a stranger
    waits. Compared on the wall clock (one zone) the window ended at the first 02:30."""
    berlin = ZoneInfo("Europe/Berlin")
    night = Reservation(
        "n", "cs231n", "T4", 1, datetime(2026, 10, 25, 1, 30, tzinfo=berlin),
        datetime(2026, 10, 25, 2, 30, tzinfo=berlin, fold=1), label="CS231N",
    )  # fmt: skip
    first_245 = datetime(2026, 10, 25, 2, 45, tzinfo=berlin)  # 00:45 UTC
    assert night.window_at(first_245) == (
        datetime(2026, 10, 24, 23, 30, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
    )
    assert night.windows(first_245, first_245 + timedelta(hours=1)) == [night.window_at(first_245)]
    for now in (datetime(2026, 10, 25, 0, 45, tzinfo=UTC), datetime(2026, 10, 25, 1, 0, tzinfo=UTC)):
        decisions = reserved(now, free=1, units=1, waiting=[request("r", "other")], reservations=(night,))
        assert of(decisions, GRANT) == [], now
    after = reserved(datetime(2026, 10, 25, 1, 30, tzinfo=UTC), free=1, units=1, waiting=[request("r", "other")],
                     reservations=(night,))  # fmt: skip
    assert [d.request for d in of(after, GRANT)] == ["r"]


def test_weekly_windows_keep_their_wall_clock_time_across_summer_time():
    berlin = ZoneInfo("Europe/Berlin")
    start = datetime(2026, 10, 20, 14, 0, tzinfo=berlin)  # summer time; winter time from 25 October
    res = Reservation("r", "g", "T4", 1, start, start + timedelta(hours=2), weekly_until=date(2026, 11, 10))
    windows = res.windows(start - timedelta(days=1), start + timedelta(days=60))
    on_the_clock = [(s.astimezone(berlin), e.astimezone(berlin)) for s, e in windows]  # windows are instants (UTC)
    assert [(s.day, s.hour, e.hour) for s, e in on_the_clock] == [(20, 14, 16), (27, 14, 16), (3, 14, 16), (10, 14, 16)]
    assert on_the_clock[0][0].utcoffset() != on_the_clock[1][0].utcoffset()
    assert res.window_at(datetime(2026, 10, 27, 15, 0, tzinfo=berlin)) == windows[1]
    assert res.window_at(datetime(2026, 10, 27, 16, 0, tzinfo=berlin)) is None


# -- the wait estimate -------------------------------------------------------------------------------------------


def test_the_estimate_from_known_ends():
    """Two requests for one of two T4s: the first gets the unit that frees in 12 minutes, the second the next."""
    snap = Snapshot(
        now=NOW,
        free={"T4": 0},
        waiting=[request("first", waited=10), request("second", waited=2)],
        running=[session("a", age=60, ends=later(12)), session("b", age=60, ends=later(40))],
    )
    found = queue(schedule(snap, FIFO))
    assert found["first"].wait == timedelta(minutes=12)
    assert found["second"].wait == timedelta(minutes=40)
    assert found["second"].status == "Waiting for a free T4 — position 2 of 2 — about 40 min"


def test_the_estimate_from_the_profiles_history_when_no_end_is_known():
    """Past sessions of 30, 60 and 90 minutes: one 60 minutes old has a median of 30 left; the next request
    holds the unit for the median, 60."""
    history = {"t4": SessionLengths([30, 60, 90])}
    snap = Snapshot(
        now=NOW,
        free={"T4": 0},
        waiting=[request("first"), request("second")],
        running=[session("a", age=60)],
        history=history,
    )
    found = queue(schedule(snap, FIFO))
    assert found["first"].wait == timedelta(minutes=30)
    assert found["second"].wait == timedelta(minutes=90)
    assert estimate(snap, FIFO, "second").status == "Waiting for a free T4 — position 2 of 2 — about 1 h 30 min"
    assert estimate(snap, FIFO, "nobody") is None


def test_no_estimate_without_anything_known():
    snap = Snapshot(now=NOW, free={"T4": 0}, waiting=[request("r")], running=[session("a")])
    found = queue(schedule(snap, FIFO))["r"]
    assert found.wait is None
    assert found.status == "Waiting for a free T4 — position 1 of 1 — no estimate yet"


def test_a_full_price_request_counts_on_the_preemption_of_a_young_preemptible_session():
    """A preemptible session 4 minutes old may be taken at 10 minutes, and is stopped 2 minutes later."""
    snap = Snapshot(
        now=NOW,
        free={"T4": 0},
        waiting=[request("full", waited=2), request("cheap", tier=PREEMPTIBLE, waited=1)],
        running=[session("p", tier=PREEMPTIBLE, age=4, ends=later(300))],
        history={"t4": SessionLengths([100])},
    )
    found = queue(schedule(snap, TIER_ONLY))
    assert found["full"].wait == timedelta(minutes=8)
    assert found["cheap"].wait == timedelta(minutes=108)  # behind the full-price request's session
    # without the tier the same session ends at its natural end (the history: 100 min, 96 left)
    found = queue(schedule(snap, FAIR))
    assert found["full"].wait == timedelta(minutes=96)


def test_expected_end_takes_the_earliest_of_known_ends_and_history():
    history = {"t4": SessionLengths([30, 60, 90])}
    assert expected_end(session("a", age=60), NOW, history) == 30
    assert expected_end(session("a", age=60, ends=later(10)), NOW, history) == 10
    assert expected_end(session("a", age=60, stop_at=later(2)), NOW, history) == 2
    assert expected_end(session("a", age=100), NOW, history) == math.inf  # outlived every past session
    assert expected_end(session("a", age=10), NOW, {"a100": SessionLengths([40])}) == 30  # other profiles


@pytest.mark.parametrize(
    "minutes, text",
    [
        (None, "no estimate yet"),
        (0.5, "any moment now"),
        (1, "about 1 min"),
        (12.4, "about 12 min"),
        (59, "about 59 min"),
        (80, "about 1 h 20 min"),
        (122, "about 2 h"),
        (60 * 25, "more than a day"),
    ],
)
def test_wait_texts(minutes, text):
    assert wait_words(None if minutes is None else timedelta(minutes=minutes)) == text


def test_duration_text_rounds_long_waits_to_five_minutes():
    assert duration_words(timedelta(minutes=83)) == "1 h 25 min"
    assert duration_words(timedelta(seconds=10)) == "1 min"
