"""Metering: per-started-minute charges, budget periods, budget status and spawn refusals."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.billing import (
    BudgetRule,
    UsageRow,
    billed_minutes,
    budget_status,
    charge,
    crossed_thresholds,
    period_window,
    spawn_refusal,
    user_statuses,
)
from jupyterhub_gpu.money import Currency, from_micros, to_micros

UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")
T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
CNY = Currency.from_config("CNY")


@pytest.mark.parametrize(
    ("seconds", "minutes"),
    [(0, 1), (0.000001, 1), (1, 1), (59.999999, 1), (60, 1), (60.000001, 2), (61, 2), (120, 2), (121, 3), (3600, 60)],
)
def test_every_started_minute_is_billed_and_the_first_at_start(seconds, minutes):
    assert billed_minutes(T0, T0 + timedelta(seconds=seconds)) == minutes


def test_charge_is_an_exact_integer_of_micro_units():
    c = charge(T0, T0 + timedelta(seconds=61), rate_micros=to_micros(Decimal("0.05")), gpu_count=2)
    assert (c.minutes, c.gpu_minutes, c.cost_micros) == (2, 4, 100_000)
    assert from_micros(c.cost_micros) == Decimal("0.1")
    with pytest.raises(ValueError, match="six decimal places"):
        to_micros(Decimal("0.0000001"))


def test_month_and_week_windows_start_at_local_midnight():
    # 30 November 23:30 in Shanghai is still November there, December in no way
    now = datetime(2026, 11, 30, 15, 30, tzinfo=UTC)
    start, end = period_window("month", now, SHANGHAI)
    assert start == datetime(2026, 10, 31, 16, 0, tzinfo=UTC)
    assert end == datetime(2026, 11, 30, 16, 0, tzinfo=UTC)
    # 16:30 UTC is already 1 December in Shanghai
    start, end = period_window("month", now + timedelta(hours=1), SHANGHAI)
    assert start == datetime(2026, 11, 30, 16, 0, tzinfo=UTC)
    week_start, week_end = period_window("week", T0, SHANGHAI)
    assert week_start.astimezone(SHANGHAI).weekday() == 0 and week_end - week_start == timedelta(days=7)
    assert week_start <= T0 < week_end


def test_term_window_includes_its_last_day_and_needs_dates():
    start, end = period_window("term", T0, UTC, date(2026, 9, 1), date(2027, 1, 15))
    assert start == datetime(2026, 9, 1, tzinfo=UTC) and end == datetime(2027, 1, 16, tzinfo=UTC)
    with pytest.raises(ValueError, match="start and an end"):
        period_window("term", T0, UTC)
    with pytest.raises(ValueError, match="period must be one of"):
        period_window("year", T0, UTC)


def row(user, started, cost, groups=(), gpu_minutes=0, sid=None):
    return UsageRow(
        sid or f"{user}-{started}", user, tuple(groups), started, to_micros(Decimal(cost)), gpu_minutes, False
    )


def test_group_budget_is_a_pool_and_sessions_count_in_the_period_they_started():
    rows = [
        row("a", T0, "30", ["cs231n"]),
        row("b", T0 + timedelta(hours=1), "50", ["cs231n"]),
        row("c", T0, "1000", ["other"]),
        row("a", datetime(2026, 10, 15, tzinfo=UTC), "999", ["cs231n"]),  # last month
    ]
    rule = BudgetRule("group", "cs231n", "month", "money", Decimal("100"))
    status = budget_status(rule, rows, T0 + timedelta(hours=2), SHANGHAI)
    assert status.used == Decimal("80") and status.remaining == Decimal("20")
    assert status.fraction == Decimal("0.8") and crossed_thresholds(status) == [80]


def test_gpu_hour_budgets_count_gpu_minutes():
    rows = [row("a", T0, "0", gpu_minutes=90), row("a", T0, "0", gpu_minutes=30, sid="x")]
    rule = BudgetRule("user", "a", "week", "gpu_hours", Decimal("2"))
    status = budget_status(rule, rows, T0, UTC)
    assert status.used == Decimal(2) and status.exhausted and crossed_thresholds(status) == [80, 95, 100]


def test_user_statuses_apply_only_their_budgets_most_used_first():
    rules = [
        BudgetRule("user", "a", "month", "money", Decimal("100")),
        BudgetRule("group", "cs231n", "month", "money", Decimal("50")),
        BudgetRule("group", "thesis", "month", "money", Decimal("10")),
        BudgetRule("user", "b", "month", "money", Decimal("1")),
    ]
    rows = [row("a", T0, "40", ["cs231n"])]
    statuses = user_statuses("a", ("cs231n",), rules, rows, T0, UTC)
    assert [s.rule.key for s in statuses] == ["group:cs231n", "user:a"]


def test_spawn_refusal_names_the_budget_and_when_it_resets():
    rules = [BudgetRule("group", "cs231n", "month", "money", Decimal("120"))]
    rows = [row("a", T0, "120", ["cs231n"])]
    statuses = user_statuses("a", ("cs231n",), rules, rows, T0, SHANGHAI)
    message = spawn_refusal(statuses, to_micros(Decimal("0.05")), 1, 10, SHANGHAI, CNY.format)
    assert message == (
        "Budget used up: CN¥120.00 of CN¥120.00 (the cs231n group's budget) spent in November; resets on 1 December."
    )


def test_spawn_refusal_in_chinese_with_the_locale_s_dates_and_money():
    rules = [BudgetRule("group", "cs231n", "month", "money", Decimal("120"))]
    statuses = user_statuses("a", ("cs231n",), rules, [row("a", T0, "120", ["cs231n"])], T0, SHANGHAI)
    message = spawn_refusal(statuses, to_micros(Decimal("0.05")), 1, 10, SHANGHAI, CNY.format, "zh-CN")
    assert message == "预算已用完：11月已花费 ¥120.00，额度 ¥120.00（cs231n 组的预算）；12月1日重置。"
    week = [BudgetRule("user", "a", "week", "gpu_hours", Decimal("1"))]
    statuses = user_statuses("a", (), week, [row("a", T0, "0", gpu_minutes=55)], T0, UTC)
    message = spawn_refusal(statuses, 50_000, 1, 10, UTC, CNY.format, "zh-CN")
    assert (
        message.startswith("预算不足以支付此配置的 10 分钟：")
        and "0.92 GPU 小时，额度 1.00 GPU 小时（您的预算）" in message
    )
    assert "那一周已花费" in message and message.endswith("重置。")


def test_spawn_needs_the_minimum_minutes_of_the_chosen_profile():
    rules = [BudgetRule("user", "a", "month", "money", Decimal("1.00"))]
    rows = [row("a", T0, "0.60")]
    statuses = user_statuses("a", (), rules, rows, T0, SHANGHAI)
    # ¥0.40 left: 8 minutes of a ¥0.05 T4 — too little for 10; 40 minutes of a ¥0.01 CPU profile — fine
    t4 = spawn_refusal(statuses, to_micros(Decimal("0.05")), 1, 10, SHANGHAI, CNY.format)
    assert t4.startswith("Budget too low for 10 minutes of this profile: CN¥0.60 of CN¥1.00 (your budget)")
    assert spawn_refusal(statuses, to_micros(Decimal("0.01")), 0, 10, SHANGHAI, CNY.format) is None


def test_gpu_hour_budget_does_not_limit_cpu_profiles_until_used_up():
    rules = [BudgetRule("user", "a", "week", "gpu_hours", Decimal("1"))]
    statuses = user_statuses("a", (), rules, [row("a", T0, "0", gpu_minutes=55)], T0, UTC)
    assert spawn_refusal(statuses, 10_000, 0, 10, UTC, CNY.format) is None
    message = spawn_refusal(statuses, 50_000, 1, 10, UTC, CNY.format)
    assert "0.92 GPU-hours of 1.00 GPU-hours" in message


def test_rule_statuses_equal_budget_status_for_every_rule():
    from jupyterhub_gpu.billing import rule_statuses

    rules = [
        BudgetRule("user", "a", "month", "money", Decimal("100")),
        BudgetRule("group", "cs231n", "week", "gpu_hours", Decimal("3")),
        BudgetRule("group", "thesis", "term", "money", Decimal("9"), date(2026, 9, 1), date(2027, 1, 15)),
        BudgetRule("user", "nobody", "month", "money", Decimal("1")),
    ]
    rows = [
        row("a", T0, "30", ["cs231n"], gpu_minutes=60),
        row("b", T0 - timedelta(days=3), "5", ["cs231n", "thesis"], gpu_minutes=120, sid="b1"),
        row("a", T0 - timedelta(days=40), "7", ["thesis"], gpu_minutes=10, sid="a-old"),
        row("c", T0 - timedelta(days=20), "2", ["thesis", "thesis"], sid="c1"),
    ]
    fast = rule_statuses(rules, rows, T0, SHANGHAI)
    for rule in rules:
        assert fast[rule.key] == budget_status(rule, rows, T0, SHANGHAI)
