"""Budgets across period boundaries and budget rules that behave the same everywhere (docs/service.md, "Budgets").

Real ledger (sqlite), real tick (:func:`enforce_budgets`), real alerts
(:func:`alerts.deliver`, Lab notices) and the real hub client against a small
HTTP server on 127.0.0.1 that answers the hub's stop call; the clock is moved,
never slept on.
"""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jupyterhub.spawner import SpawnException

from jupyterhub_gpu.billing import (
    BudgetRule,
    billed_minutes,
    minutes_in_window,
    period_window,
    rule_statuses,
    spawn_refusal,
)
from jupyterhub_gpu.ledger.models import Budget
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.domain.alerts import BudgetAlert, parse_thresholds
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.tick import TickContext, deliver, enforce_budgets
from jupyterhub_gpu.service.web import params, views
from jupyterhub_gpu.session import SessionStart

UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")
CNY = Currency.from_config("CNY")
T4 = 50_000  # ¥0.05 a minute (¥3.00 a GPU-hour)
#: 23:58 on 30 November in Shanghai
LATE = datetime(2026, 11, 30, 23, 58, tzinfo=SHANGHAI).astimezone(UTC)
DEC = datetime(2026, 12, 1, tzinfo=SHANGHAI).astimezone(UTC)
GRACE = timedelta(minutes=5)


def start(ledger, sid, user, started, groups=("cs231n",), rate=T4, gpus=1, pool=None, server=""):
    ledger.record_start(
        SessionStart(
            id=sid,
            user=user,
            server_name=server,
            groups=tuple(groups),
            profile="t4" if gpus else "cpu",
            gpus=tuple(f"GPU-{sid}-{i}" for i in range(gpus)),
            rate_micros=rate,
            currency="CNY",
            started=started,
            pool=pool,
        )
    )


def tick(ledger, hub, now, thresholds=(80, 95)):
    async def notify(user, groups, status, threshold):
        alert = BudgetAlert.from_status(user, groups, status, threshold, CNY, int(GRACE.total_seconds()), SHANGHAI)
        await deliver(alert, AlertSettings(), ledger, now)

    ctx = TickContext(ledger=ledger, hub=hub.client, tz=SHANGHAI, alert_thresholds=thresholds, budget_grace=GRACE)
    return asyncio.run(enforce_budgets(ctx, now, notify))


def used(ledger, key, now):
    return ledger.budget_statuses(ledger.budget_rules(), now, SHANGHAI)[key].used


# -- 1. a minute counts in the period it falls in ------------------------------------------------------------


def test_a_session_started_at_2358_counts_its_new_month_minutes_and_is_stopped(ledger, hub):
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("10")), LATE - timedelta(days=3))
    start(ledger, "late", "ann", LATE)
    # 00:05 on 1 December: 7 minutes billed, 2 in November and 5 in December
    now = DEC + timedelta(minutes=5)
    assert used(ledger, "user:ann", now) == Decimal("0.25")
    assert tick(ledger, hub, now).alerts == []
    # 200 minutes of December later, ¥10 is used: the 100% notice, then the stop after the grace period
    now = DEC + timedelta(minutes=200)
    assert used(ledger, "user:ann", now) == Decimal("10")
    first = tick(ledger, hub, now)
    assert ("ann", "user:ann", 100) in first.alerts and first.stopped == []
    notices = [n.message for n in ledger.notices("ann")]
    assert any("Budget used up" in m and "2026-12-01 to 2026-12-31" in m for m in notices), notices
    assert tick(ledger, hub, now + GRACE).stopped == [("ann", "")]
    assert hub.stops == ["/hub/api/users/ann/server"]
    assert ledger.get_session("late").pending_stop_reason == "budget"


def test_a_stop_announced_at_2357_is_carried_out_after_midnight(ledger, hub):
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("10")), LATE - timedelta(days=3))
    # ¥10 used by 23:57 on 30 November: the 100% notice goes out in November
    start(ledger, "long", "ann", LATE - timedelta(minutes=201))
    nov_end = DEC - timedelta(minutes=3)
    assert tick(ledger, hub, nov_end).alerts[-1] == ("ann", "user:ann", 100)
    # 00:01 on 1 December: December has room, but the stop promised at 23:57 is carried out at 00:02
    assert tick(ledger, hub, DEC + timedelta(minutes=1)).stopped == []
    assert tick(ledger, hub, DEC + timedelta(minutes=2)).stopped == [("ann", "")]
    # a session started after the notice is not stopped by it
    ledger.record_stop("long", DEC + timedelta(minutes=2), "stopped")
    start(ledger, "fresh", "ann", DEC + timedelta(minutes=3))
    assert tick(ledger, hub, DEC + timedelta(minutes=4)).stopped == []


def test_weekly_and_term_budgets_split_at_their_boundaries_too(ledger):
    monday = datetime(2026, 11, 30, tzinfo=SHANGHAI).astimezone(UTC)  # a Monday
    ledger.set_budget(BudgetRule("user", "ann", "week", "gpu_hours", Decimal("1")), monday - timedelta(days=9))
    ledger.set_budget(
        BudgetRule("user", "bob", "term", "money", Decimal("5"), date(2026, 9, 1), date(2026, 11, 29)),
        monday - timedelta(days=9),
    )
    start(ledger, "w", "ann", monday - timedelta(seconds=90), gpus=2)  # 2 GPUs from Sunday 23:58:30
    start(ledger, "t", "bob", monday - timedelta(seconds=90), groups=())
    now = monday + timedelta(minutes=29, seconds=30)
    # 31 minutes billed: minutes 0 and 1 start on Sunday (23:58:30, 23:59:30), 29 start this week
    assert billed_minutes(monday - timedelta(seconds=90), now) == 31
    assert used(ledger, "user:ann", now) == Decimal(29 * 2) / 60
    # the term ended on Sunday: its two last minutes are in it, the rest is not, and it binds nothing now
    term = ledger.budget_statuses(ledger.budget_rules(), now, SHANGHAI)["user:bob"]
    assert term.used == Decimal("0.1") and term.state == "ended" and not term.active


@settings(max_examples=200, deadline=None)
@given(
    offset=st.integers(min_value=-(10**8), max_value=10**8),
    seconds=st.integers(min_value=0, max_value=40 * 24 * 3600 * 10**6),
    running=st.booleans(),
)
def test_the_periods_of_a_session_add_up_to_its_charge_to_the_micro_unit(offset, seconds, running):
    started = DEC + timedelta(microseconds=offset * 1000)
    ended = started + timedelta(microseconds=seconds)
    n = billed_minutes(started, ended)
    # every month from October to February tiles the session's minutes
    months = [period_window("month", datetime(2026, m, 15, tzinfo=UTC), SHANGHAI) for m in (10, 11, 12)]
    months += [period_window("month", datetime(2027, m, 15, tzinfo=UTC), SHANGHAI) for m in (1, 2, 3)]
    assert months[0][0] <= started and ended <= months[-1][1]
    counts = [minutes_in_window(started, n, a, b) for a, b in months]
    assert sum(counts) == n and all(c >= 0 for c in counts)
    rate = 3_000_000_001
    assert sum(c * rate for c in counts) == n * rate
    # a minute belongs to the month in which it starts
    for k in (0, n - 1):
        minute_start = started + timedelta(seconds=60 * k)
        (i,) = [i for i, (a, b) in enumerate(months) if a <= minute_start < b]
        assert minutes_in_window(started, n, *months[i]) >= 1


def test_monthly_reports_add_up_to_the_session_charges(ledger):
    start(ledger, "a", "ann", LATE)
    ledger.record_stop("a", LATE + timedelta(days=31, seconds=7), "stopped")
    start(ledger, "b", "bob", LATE + timedelta(days=2), groups=("thesis",))
    ledger.record_stop("b", LATE + timedelta(days=2, minutes=3), "stopped")
    rules = [BudgetRule("user", u, "month", "money", Decimal(1000)) for u in ("ann", "bob")]
    total = sum(r.cost_micros for r in ledger.sessions())
    spent = Decimal(0)
    for month in (
        datetime(2026, 11, 15, tzinfo=UTC),
        datetime(2026, 12, 15, tzinfo=UTC),
        datetime(2027, 1, 15, tzinfo=UTC),
    ):
        statuses = ledger.statuses_of(rules, month, SHANGHAI)
        spent += sum(s.used for s in statuses)
    assert spent * 1_000_000 == total


def test_the_tick_reads_only_sessions_that_overlap_the_periods(ledger, hub):
    from sqlalchemy import event

    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("10")), LATE)
    for i in range(30):  # old history: none of it can count in December
        started = LATE - timedelta(days=40 + i)
        start(ledger, f"old{i}", "ann", started)
        ledger.record_stop(f"old{i}", started + timedelta(minutes=30), "stopped")
    start(ledger, "late", "ann", LATE)
    statements = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if "FROM gpu_sessions" in statement:
            statements.append(statement)

    event.listen(ledger.engine, "before_cursor_execute", record)
    try:
        tick(ledger, hub, DEC + timedelta(minutes=3))
    finally:
        event.remove(ledger.engine, "before_cursor_execute", record)
    per_user, _ = ledger.window_totals(*period_window("month", DEC, SHANGHAI), DEC + timedelta(minutes=3))
    assert per_user == {"ann": [3 * T4, 3]}
    assert statements
    for statement in statements:  # the open sessions, or the sessions overlapping the window: never all of them
        where = statement.split("WHERE", 1)[-1] if "WHERE" in statement else ""
        bounded = "gpu_sessions.started <" in where or "gpu_sessions.started >=" in where
        assert bounded or where.strip().startswith("gpu_sessions.stopped IS NULL"), statement


# -- one computation for every reader --------------------------------------------------------------------------


def test_spawn_check_tick_and_api_compute_the_same_use_across_a_reset(ledger, hub):
    """The same cross-reset scenario through the pure rules, the ledger, the API's helper and the tick."""
    for rule in (
        BudgetRule("user", "ann", "month", "money", Decimal("10")),
        BudgetRule("group", "cs231n", "month", "money", Decimal("12")),
        BudgetRule("group", "thesis", "week", "gpu_hours", Decimal("2")),
    ):
        ledger.set_budget(rule, LATE - timedelta(days=3))
    start(ledger, "late", "ann", LATE, groups=("cs231n", "thesis"), pool="cs231n")
    start(ledger, "b", "bob", LATE - timedelta(hours=1), groups=("cs231n",))
    ledger.record_stop("b", DEC + timedelta(minutes=30, seconds=1), "stopped")
    start(ledger, "t", "tea", LATE, groups=("thesis", "cs231n"), pool="thesis", gpus=2)
    now = DEC + timedelta(hours=3, minutes=10)
    rules = ledger.budget_rules()
    pure = rule_statuses(rules, Ledger.usage_rows(ledger.sessions(), now), now, SHANGHAI)
    from_ledger = ledger.budget_statuses(rules, now, SHANGHAI)
    from_api = {s.rule.key: s for s in ledger.statuses_of(rules, now, SHANGHAI)}
    assert pure == from_ledger == from_api
    # ann: 190 of her 192 minutes are in December, at ¥0.05; the cs231n pool: ann's 190 and bob's last 31;
    # tea's session pays from thesis, whose week began on Monday 30 November: all of its 192 minutes, 2 GPUs
    assert from_ledger["user:ann"].used == Decimal("9.5")
    assert from_ledger["group:cs231n"].used == Decimal("11.05")
    assert from_ledger["group:thesis"].used == Decimal(192 * 2) / 60
    seen = {}

    async def notify(user, groups, status, threshold):
        seen[(user, status.rule.key)] = status

    asyncio.run(
        enforce_budgets(TickContext(ledger=ledger, hub=hub.client, tz=SHANGHAI, budget_grace=GRACE), now, notify)
    )
    assert seen[("ann", "user:ann")] == from_ledger["user:ann"]
    assert seen[("ann", "group:cs231n")] == from_ledger["group:cs231n"]
    assert seen[("tea", "group:thesis")] == from_ledger["group:thesis"]
    assert ("tea", "group:cs231n") not in seen  # tea's session draws from thesis only
    # the spawn check (the real spawner's pre-spawn hook) reads the same numbers
    for pool, expected in (
        ("cs231n", "CN¥9.50 of CN¥10.00 (your budget) spent in December; resets on 1 January."),
        ("thesis", "6.40 GPU-hours of 2.00 GPU-hours (the thesis group's budget) spent in the week of 30 November"),
    ):
        spawner = make_spawner(ledger, "ann", ("cs231n", "thesis"))
        spawner.user_options = {"profile": "t4", "pool": pool}
        with pytest.raises(SpawnException) as refused:
            asyncio.run(at(now, spawner.run_pre_spawn_hook()))
        assert expected in str(refused.value), str(refused.value)


PROFILES = [
    {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00", "default": True},
    {"slug": "cpu", "gpu_count": 0, "price_per_hour": "0.60"},
    {
        "slug": "thesis-t4",
        "gpu_model": "T4",
        "gpu_count": 1,
        "price_per_gpu_hour": "3.00",
        "allowed_groups": ["thesis"],
    },
]


def make_spawner(ledger, name, groups):
    """The GPULocalSpawner of a real JupyterHub User (JupyterHub's ORM in memory), billing to ``ledger``."""
    from jupyterhub import orm
    from jupyterhub.objects import Hub
    from jupyterhub.user import User
    from traitlets.config import Config

    from jupyterhub_gpu.spawners.local import GPULocalSpawner

    c = Config()
    c.GPULocalSpawner.profiles = PROFILES
    c.GPULocalSpawner.currency = "CNY"
    c.GPULocalSpawner.gpu_backend = "simulated"
    c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 2, "memory_gb": 16}]
    c.GPULocalSpawner.ledger_db_url = ledger.db_url
    c.GPULocalSpawner.budget_timezone = "Asia/Shanghai"
    c.GPULocalSpawner.budget_min_minutes = 20
    c.GPULocalSpawner.queue_timeout = 10  # no test here waits for a GPU: a held one fails in seconds
    db = orm.new_session_factory("sqlite://")()
    user = orm.User(name=name)
    db.add(user)
    for g in groups:
        group = orm.Group(name=g)
        db.add(group)
        user.groups.append(group)
    db.commit()
    hub = Hub(ip="127.0.0.1", port=8081, base_url="/hub/")
    settings = {"spawner_class": GPULocalSpawner, "config": c, "db": db, "hub": hub, "domain": "", "statsd": None}
    return User(user, settings).spawners[""]


async def at(now, coro):
    """Run ``coro`` with the spawner's clock at ``now``."""
    from unittest import mock

    clock = lambda: now  # noqa: E731
    with (
        mock.patch("jupyterhub_gpu.spawners.budget.utcnow", clock),
        mock.patch("jupyterhub_gpu.spawners.queueing.utcnow", clock),
        mock.patch("jupyterhub_gpu.spawners.launch.utcnow", clock),
    ):
        return await coro


# -- term budgets outside their dates -------------------------------------------------------------------------------


def test_an_ended_term_budget_refuses_and_stops_nothing_and_names_no_past_date(ledger, hub):
    term = BudgetRule("user", "ann", "term", "money", Decimal("1"), date(2026, 9, 1), date(2026, 11, 30))
    ledger.set_budget(term, datetime(2026, 9, 1, tzinfo=UTC))
    start(ledger, "s", "ann", datetime(2026, 11, 1, tzinfo=UTC))
    ledger.record_stop("s", datetime(2026, 11, 1, 1, tzinfo=UTC), "stopped")  # ¥3: the term's budget is used up
    inside = datetime(2026, 11, 29, tzinfo=UTC)
    (during,) = ledger.statuses_of([term], inside, SHANGHAI)
    message = spawn_refusal([during], T4, 1, 10, SHANGHAI, CNY.format)
    assert message.startswith("Budget used up") and "the term ends on 30 November" in message
    after = DEC + timedelta(days=1)
    (ended,) = ledger.statuses_of([term], after, SHANGHAI)
    assert ended.state == "ended" and ended.used == Decimal(3)
    assert spawn_refusal([ended], T4, 1, 10, SHANGHAI, CNY.format) is None
    assert views.status_json(ended)["state"] == "ended"
    start(ledger, "later", "ann", after)
    assert tick(ledger, hub, after + timedelta(hours=1)).alerts == []
    assert tick(ledger, hub, after + timedelta(hours=2)).stopped == []
    # before its term a budget binds nothing either, and it counts only minutes inside the term
    spring = BudgetRule("user", "ann", "term", "money", Decimal("1"), date(2027, 2, 1), date(2027, 6, 30))
    (upcoming,) = ledger.statuses_of([spring], after + timedelta(hours=2), SHANGHAI)
    assert upcoming.state == "upcoming" and upcoming.used == 0
    assert spawn_refusal([upcoming], T4, 1, 10, SHANGHAI, CNY.format) is None


# -- 2. alert thresholds, poisoned budgets, free profiles, raised budgets --------------------------------------------


@pytest.mark.parametrize("bad", [[0], [101], [-5], [80.5], ["80"], [True], "80", [None]])
def test_alert_thresholds_refuse_what_alerts_cannot_deliver(bad):
    with pytest.raises(ValueError, match=r"GPUService\.alert_thresholds"):
        parse_thresholds(bad, "GPUService.alert_thresholds")


def test_any_accepted_threshold_is_delivered(ledger, hub):
    assert parse_thresholds([50, 80, 50, 100]) == (50, 80)
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("10")), LATE - timedelta(days=3))
    start(ledger, "s", "ann", DEC)
    now = DEC + timedelta(minutes=110)  # ¥5.50: past 50%
    assert tick(ledger, hub, now, thresholds=(50, 80)).alerts == [("ann", "user:ann", 50)]
    (notice,) = ledger.notices("ann")
    assert "(50%)" in notice.message and notice.level == "info"


@pytest.mark.parametrize("threshold", [[0], [150], ["x"], [80.5]])
def test_the_service_does_not_start_with_bad_thresholds(tmp_path, monkeypatch, capsys, threshold):
    from jupyterhub_gpu.service.app import GPUService
    from jupyterhub_gpu.service.settings import Budgets

    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.py"
    config.write_text(f"c.GPUService.alert_thresholds = {threshold!r}\n")
    db = f"--GPUService.db_url=sqlite:///{tmp_path / 'ledger.sqlite'}"
    with pytest.raises(SystemExit) as exit_info:  # one line naming the setting, not a traceback
        GPUService().initialize([db, f"--config={config}"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "configuration error: GPUService.alert_thresholds must be whole percentages from 1 to 99" in err
    assert not (tmp_path / "ledger.sqlite").exists()  # nothing was started
    assert Budgets().alert_thresholds == [80, 95]  # the setting moved to c.Budgets; nothing changed it


def test_one_poisoned_budget_does_not_stop_the_tick_for_the_others(ledger, hub):
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("1")), LATE)
    for user in ("eve", "nan", "term", "unit"):
        ledger.set_budget(BudgetRule("user", user, "month", "money", Decimal("1")), LATE)
    with ledger.Session() as db:  # budgets damaged behind the API's back
        for subject, column, value in (
            ("eve", "limit", "-1"),
            ("nan", "limit", "NaN"),
            ("term", "period", "term"),
            ("unit", "limit", "abc"),
        ):
            budget = db.query(Budget).filter_by(subject=subject).one()
            setattr(budget, column, value)
        db.commit()
    for user in ("eve", "nan", "term", "unit", "ann"):
        start(ledger, f"s-{user}", user, DEC, groups=())
    now = DEC + timedelta(minutes=30)  # ¥1.50 each: every budget is used up
    first = tick(ledger, hub, now)
    assert ("ann", "user:ann", 100) in first.alerts
    assert tick(ledger, hub, now + GRACE).stopped == [("ann", "")]
    # the damaged ones are left out of the API's lists, not a 500 for everyone
    assert [s.rule.key for s in ledger.statuses_of(ledger.budget_rules(), now, SHANGHAI)] == [
        "user:ann",
        "user:eve",
        "user:nan",
    ]


def test_a_free_profile_is_allowed_and_never_stopped_by_a_budget_it_does_not_draw_from(ledger, hub):
    ledger.set_budget(BudgetRule("user", "ann", "month", "gpu_hours", Decimal("1")), LATE)
    ledger.set_budget(BudgetRule("user", "bob", "month", "money", Decimal("1")), LATE)
    start(ledger, "gpu", "ann", DEC, gpus=1)
    ledger.record_stop("gpu", DEC + timedelta(hours=1), "stopped")  # the GPU-hour budget is used up
    start(ledger, "paid", "bob", DEC, groups=(), rate=T4, gpus=0)
    ledger.record_stop("paid", DEC + timedelta(minutes=20), "stopped")  # ¥1: used up
    now = DEC + timedelta(hours=2)
    (ann,) = ledger.statuses_of([r for r in ledger.budget_rules() if r.subject == "ann"], now, SHANGHAI)
    (bob,) = ledger.statuses_of([r for r in ledger.budget_rules() if r.subject == "bob"], now, SHANGHAI)
    assert ann.exhausted and bob.exhausted
    assert spawn_refusal([ann], 10_000, 0, 10, SHANGHAI, CNY.format) is None  # CPU-only under GPU-hours
    assert spawn_refusal([bob], 0, 1, 10, SHANGHAI, CNY.format) is None  # a free GPU under money
    assert spawn_refusal([ann], T4, 1, 0, SHANGHAI, CNY.format).startswith("Budget used up")
    start(ledger, "cpu", "ann", now, rate=10_000, gpus=0)
    start(ledger, "free", "bob", now, groups=(), rate=0, gpus=1)
    assert tick(ledger, hub, now + timedelta(minutes=1)).alerts == []
    assert tick(ledger, hub, now + timedelta(hours=1)).stopped == []
    assert hub.stops == []


def test_a_raised_budget_used_up_again_gets_its_own_notice_and_full_grace(ledger, hub):
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("1")), DEC)
    start(ledger, "s", "ann", DEC)
    t = DEC + timedelta(minutes=20)  # ¥1: used up
    assert ("ann", "user:ann", 100) in tick(ledger, hub, t).alerts
    # the admin raises it to ¥2 before the stop
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("2")), t + timedelta(minutes=1))
    assert tick(ledger, hub, t + GRACE).stopped == []
    # used up again at 40 minutes: a new 100% notice, and the stop only a full grace period after it
    again = DEC + timedelta(minutes=40)
    assert ("ann", "user:ann", 100) in tick(ledger, hub, again).alerts
    assert [n.message.startswith("Budget used up") for n in ledger.notices("ann")].count(True) == 2
    assert tick(ledger, hub, again + GRACE - timedelta(seconds=1)).stopped == []
    assert tick(ledger, hub, again + GRACE).stopped == [("ann", "")]


# -- one pool per session ---------------------------------------------------------------------------------------------


def test_a_session_draws_from_exactly_one_group_pool(ledger, hub):
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("100")), LATE)
    ledger.set_budget(BudgetRule("group", "thesis", "month", "money", Decimal("100")), LATE)
    start(ledger, "s1", "ann", DEC, groups=("thesis", "cs231n"), pool="thesis")
    start(ledger, "s2", "ann", DEC, groups=("thesis", "cs231n"), server="b")  # default: the first, cs231n
    for sid in ("s1", "s2"):
        ledger.record_stop(sid, DEC + timedelta(minutes=60), "stopped")
    now = DEC + timedelta(hours=2)
    statuses = ledger.budget_statuses(ledger.budget_rules(), now, SHANGHAI)
    assert statuses["group:thesis"].used == Decimal(3) and statuses["group:cs231n"].used == Decimal(3)
    totals = ledger.closed_session_totals()
    assert sum(r["cost_micros"] for r in totals) == 120 * T4  # 60 billed minutes each, taken once
    assert sorted((r["pool"], r["cost_micros"]) for r in totals) == [("cs231n", 60 * T4), ("thesis", 60 * T4)]
    with pytest.raises(ValueError, match="not one of the groups"):
        start(ledger, "forged", "ann", DEC, groups=("cs231n",), pool="thesis")
    assert ledger.get_session("forged") is None


def test_the_migration_gives_old_sessions_the_first_group_of_their_list(tmp_path):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    from jupyterhub_gpu.ledger.store import MIGRATIONS, make_engine

    engine = make_engine(f"sqlite:///{tmp_path / 'old.sqlite'}")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0007")
        for sid, groups in (("two", ["thesis", "cs231n"]), ("none", []), ("one", ["cs231n"])):
            connection.execute(
                text(
                    "INSERT INTO gpu_sessions (id, user, server_name, groups, profile, gpus, gpu_count, simulated,"
                    " rate_micros, currency, started) VALUES (:id, 'ann', '', :groups, 't4', '[]', 1, 0, 50000,"
                    " 'CNY', '2026-11-01 00:00:00')"
                ),
                {"id": sid, "groups": json.dumps(groups)},
            )
        connection.execute(
            text(
                'INSERT INTO gpu_budgets (scope, subject, period, unit, "limit", updated)'
                " VALUES ('user', 'ann', 'month', 'money', '5', '2026-11-02 03:04:05.000006')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO gpu_alerts (user, budget_key, period_start, threshold, channel, sent)"
                " VALUES ('ann', 'user:ann', '2026-10-31 16:00:00', 100, 'lab', '2026-11-03 00:00:00')"
            )
        )
    engine.dispose()
    ledger = Ledger(f"sqlite:///{tmp_path / 'old.sqlite'}")  # upgrades to the head
    assert {r.id: r.pool for r in ledger.sessions()} == {"two": "cs231n", "none": None, "one": "cs231n"}
    (alert,) = ledger.alerts("ann")
    # an alert sent before keeps counting as sent for the budget as it is now
    assert alert.revision == ledger.budget_rules()[0].revision == "2026-11-02T03:04:05.000006"
    ledger.close()


def test_the_spawner_lets_a_user_choose_the_pool_and_refuses_a_forged_one(ledger):
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("100")), LATE)
    ledger.set_budget(BudgetRule("group", "thesis", "month", "money", Decimal("100")), LATE)
    spawner = make_spawner(ledger, "ann", ("thesis", "cs231n", "students"))
    form = asyncio.run(spawner._render_gpu_options_form())
    assert 'name="pool"' in form and '<option value="thesis">thesis</option>' in form
    assert '<option value="students">' not in form  # a group without a budget cannot be chosen to escape one
    assert asyncio.run(spawner._gpu_options_from_form({"profile": ["t4"], "pool": ["thesis"]})) == {
        "profile": "t4",
        "pool": "thesis",
    }
    cases = [
        ({"profile": "t4"}, "cs231n"),  # the default: the first budgeted group the profile is allowed for
        ({"profile": "t4", "pool": "thesis"}, "thesis"),
        ({"profile": "thesis-t4"}, "thesis"),
    ]
    for options, pool in cases:
        spawner.user_options = options
        asyncio.run(at(DEC, spawner.run_pre_spawn_hook()))
        assert spawner._gpu_pool == pool
        session = {
            "session_id": "x",
            "started": "2026-12-01T00:00:00Z",
            "profile": options["profile"],
            "rate_per_minute": "0.05",
            "currency": "CNY",
            "groups": ["cs231n", "students", "thesis"],
            "pool": spawner._gpu_pool,
        }
        # what the ledger's start event carries, read from the spawner's state
        assert SessionStart.from_spawner_state(spawner.user.name, spawner.name, (), session).pool == pool
        spawner.allocator.release(spawner._gpu_key)  # the start is not recorded here: free its GPU
    for options, message in (
        ({"profile": "t4", "pool": "physics"}, "The group 'physics' cannot pay for t4: choose one of cs231n, thesis"),
        ({"profile": "t4", "pool": "students"}, "The group 'students' cannot pay"),
        (
            {"profile": "thesis-t4", "pool": "cs231n"},
            "The group 'cs231n' cannot pay for thesis-t4: choose one of thesis",
        ),
        ({"profile": "t4", "pool": ["thesis"]}, "'pool' must be the name of one of your groups"),
    ):
        spawner.user_options = options
        with pytest.raises(SpawnException, match=message):
            asyncio.run(at(DEC, spawner.run_pre_spawn_hook()))
    assert ledger.sessions() == []


def test_usage_reports_of_consecutive_windows_add_up_and_agree_with_the_budget(ledger):
    from jupyterhub_gpu.service.web.pages.series import daily_series, totals_by

    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("100")), LATE)
    start(ledger, "late", "ann", LATE)
    ledger.record_stop("late", DEC + timedelta(minutes=30), "stopped")  # 32 minutes: 2 in November, 30 after
    nov = period_window("month", LATE, SHANGHAI)
    dec = period_window("month", DEC, SHANGHAI)
    now = DEC + timedelta(days=3)
    reports = []
    for since, until in (nov, dec):
        records = ledger.sessions(user="ann", since=since, until=until, overlapping=True)
        sessions = views.sessions_json(ledger, records, now, CNY, (since, until))
        reports.append((views.usage_totals(sessions, "CNY"), sessions, since, until))
    (nov_totals, nov_sessions, *_), (dec_totals, dec_sessions, dec_since, dec_until) = reports
    assert nov_totals["cost"] == {"CNY": "0.1"} and nov_totals["minutes_billed"] == 2
    assert dec_totals["cost"] == {"CNY": "1.5"} and dec_totals["minutes_billed"] == 30
    assert nov_sessions[0]["cost"] == dec_sessions[0]["cost"] == "1.6"  # the session's own charge, whole
    # December's report says what December's budget says
    (status,) = ledger.statuses_of(ledger.budget_rules(), now, SHANGHAI)
    assert Decimal(dec_totals["cost"]["CNY"]) == status.used
    # the pages' daily chart and totals count the same minutes
    series = daily_series(dec_sessions, SHANGHAI, dec_since, dec_until, now)
    assert series[0] == {"day": "2026-12-01", "spend": "1.5", "gpu_hours": "0.50"}
    assert totals_by(dec_sessions, lambda s: [s["user"]])[0]["spend"] == "1.5"


def test_the_service_tick_goes_on_past_a_poisoned_budget(tmp_path, monkeypatch, hub):
    """The real GPUService.tick: a damaged budget neither stops other users' budget stops nor culling."""
    import time

    from jupyterhub_gpu.clock import utcnow
    from jupyterhub_gpu.rules.cullrules import parse_config
    from jupyterhub_gpu.service.app import GPUService

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "service-token")  # the service's own (no hub behind it here)
    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    service = GPUService()
    service.initialize(
        [
            f"--GPUService.db_url={db}",
            "--GPUService.budget_grace_seconds=0.05",
            "--GPUService.timezone=Asia/Shanghai",
            "--GPUService.currency=CNY",
        ]
    )
    rules = parse_config({"default": [{"kind": "max_age", "minutes": 60, "warn_minutes": 5}]}, "rules")
    service.tick_context = replace(service.tick_context, hub=hub.client, cull_rules=rules)
    now = utcnow()
    service.tick_state.last_reconcile = now  # no listing of the hub's servers in this test
    ledger = service.ledger
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("1")), now)
    ledger.set_budget(BudgetRule("user", "eve", "month", "money", Decimal("1")), now)
    with ledger.Session() as session:
        session.query(Budget).filter_by(subject="eve").one().limit = "-1"  # damaged behind the API's back
        session.commit()
    start(ledger, "eve", "eve", now - timedelta(minutes=30), groups=())
    start(ledger, "ann", "ann", now - timedelta(minutes=30), groups=())
    start(ledger, "old", "cul", now - timedelta(hours=2), groups=())
    ledger.set_cull_warning("old", now - timedelta(minutes=10), "max_age")
    asyncio.run(service.tick())
    assert "/hub/api/users/cul/server" in hub.stops  # culling ran
    time.sleep(0.1)  # past the grace period
    asyncio.run(service.tick())
    assert "/hub/api/users/ann/server" in hub.stops  # and the healthy budget's stop
    assert [n.kind for n in ledger.notices("ann")] == ["budget"]
    ledger.close()
    GPUService.clear_instance()


def test_the_lab_shows_only_the_budgets_its_session_draws_from():
    from jupyterhub_gpu.serverext.extension import budget_summary

    session = {"id": "s1", "started": "2026-12-01T00:00:00Z", "rate_per_minute": "0.05"}
    me = {
        "active_sessions": [{"id": "s1", "pool": "thesis"}],
        "budgets": [
            {"scope": "group", "subject": "cs231n", "unit": "money", "remaining": "0", "state": "current"},
            {"scope": "user", "subject": "ann", "unit": "money", "remaining": "0", "state": "ended"},
            {"scope": "group", "subject": "thesis", "unit": "money", "remaining": "3", "state": "current"},
            {"scope": "user", "subject": "ann", "unit": "money", "remaining": "9", "state": "current"},
        ],
    }
    assert budget_summary(me, session) == {"budget_remaining": "3", "budget_unit": "money", "budget_minutes_left": 60}
    me["budgets"] = me["budgets"][:2]
    assert budget_summary(me, session)["budget_remaining"] is None


def test_setting_the_same_budget_again_sends_nothing_again(ledger, hub):
    rule = BudgetRule("user", "ann", "month", "money", Decimal("1"))
    ledger.set_budget(rule, DEC)
    start(ledger, "s", "ann", DEC)
    t = DEC + timedelta(minutes=20)
    assert ("ann", "user:ann", 100) in tick(ledger, hub, t).alerts
    ledger.set_budget(rule, t + timedelta(minutes=1))  # an idempotent PUT of the same budget
    assert tick(ledger, hub, t + timedelta(minutes=2)).alerts == []
    assert tick(ledger, hub, t + GRACE).stopped == [("ann", "")]


def test_usage_by_paying_group_adds_up_to_the_total_spend(ledger):
    start(ledger, "s1", "ann", DEC, groups=("thesis", "cs231n"), pool="thesis")
    start(ledger, "s2", "ann", DEC, groups=("thesis", "cs231n"), server="b")  # pays: cs231n
    start(ledger, "s3", "bob", DEC, groups=("cs231n",))
    for sid in ("s1", "s2", "s3"):
        ledger.record_stop(sid, DEC + timedelta(minutes=10), "stopped")
    now = DEC + timedelta(hours=1)

    def total(**where):
        sessions = views.sessions_json(ledger, ledger.sessions(overlapping=True, **where), now, CNY)
        return Decimal(views.usage_totals(sessions, "CNY")["cost"]["CNY"])

    assert total(pool="thesis") + total(pool="cs231n") == total() == Decimal("1.5")
    assert total(group="thesis") + total(group="cs231n") == Decimal("2.5")  # members: ann counts in both
    query = params.parse_usage_query({"group": [b"thesis"], "paid": [b"true"]}, SHANGHAI)
    assert (query.group, query.paid) == ("thesis", True)
    for bad, message in (({"paid": [b"true"]}, "give group= too"), ({"group": [b"x"], "paid": [b"yes"]}, "paid must")):
        with pytest.raises(params.BadRequest, match=message):
            params.parse_usage_query(bad, SHANGHAI)


def test_the_cli_asks_for_what_a_group_paid_for(monkeypatch, capsys):
    from jupyterhub_gpu import cli
    from tests.unit.test_cli import FakeService

    server = FakeService()
    monkeypatch.setenv("JUPYTERHUB_GPU_URL", server.url)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "t")
    try:
        server.answers.append((200, b"id\r\n"))
        assert cli.main(["usage", "--group", "thesis", "--paid", "--csv"], out=io.StringIO()) == 0
        assert server.requests[0]["path"] == "/services/gpu/api/v1/usage?group=thesis&paid=true&format=csv"
        with pytest.raises(SystemExit) as e:
            cli.main(["usage", "--paid"], out=io.StringIO())
        assert e.value.code == 2 and "give --group too" in capsys.readouterr().err
        assert len(server.requests) == 1
    finally:
        server.close()
