"""Metering: per-started-minute charges, budget periods and budget status, as pure functions.

Money is kept as integer micro-units (millionths of the currency unit): a rate
per minute is exact to six decimal places (see :mod:`jupyterhub_gpu.money`), so
``minutes × rate`` is an exact integer and nothing is ever rounded except for
display. GPU time is kept as integer GPU-minutes.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

MICROS = 1_000_000
PERIODS = ("week", "month", "term")
UNITS = ("money", "gpu_hours")
_MINUTE_US = 60_000_000


def to_micros(amount: Decimal) -> int:
    """Exact micro-units of a Decimal; ValueError if it has more than six decimal places."""
    micros = amount * MICROS
    if micros != micros.to_integral_value():
        raise ValueError(f"{amount} has more than six decimal places")
    return int(micros)


def from_micros(micros: int) -> Decimal:
    return (Decimal(micros) / MICROS).normalize() if micros else Decimal(0)


def billed_minutes(started: datetime, ended: datetime) -> int:
    """Minutes charged for a session: every started minute, and at least the first one.

    A session that ran ``t`` seconds is charged ``ceil(t / 60)`` minutes (60 s -> 1,
    61 s -> 2); the first minute is charged at the start (0 s -> 1).
    """
    elapsed_us = (ended - started) // timedelta(microseconds=1)
    return max(1, -(-elapsed_us // _MINUTE_US))


@dataclass(frozen=True)
class Charge:
    minutes: int
    gpu_minutes: int
    cost_micros: int


def charge(started: datetime, ended: datetime, rate_micros: int, gpu_count: int) -> Charge:
    """The charge of a session from ``started`` to ``ended`` (or now, for a running one)."""
    minutes = billed_minutes(started, ended)
    return Charge(minutes=minutes, gpu_minutes=minutes * gpu_count, cost_micros=minutes * rate_micros)


# -- periods ---------------------------------------------------------------------------


def _local_midnight(day: date, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, time(0), tzinfo=tz).astimezone(timezone.utc)


def period_window(
    period: str, now: datetime, tz: ZoneInfo, term_start: date | None = None, term_end: date | None = None
) -> tuple[datetime, datetime]:
    """``[start, end)`` in UTC of the budget period containing ``now``, in the lab's time zone.

    Weeks start on Monday, months on the 1st; a term runs from ``term_start`` to the
    end of ``term_end`` (inclusive dates).
    """
    local = now.astimezone(tz).date()
    if period == "week":
        monday = local - timedelta(days=local.weekday())
        return _local_midnight(monday, tz), _local_midnight(monday + timedelta(days=7), tz)
    if period == "month":
        first = local.replace(day=1)
        days = calendar.monthrange(first.year, first.month)[1]
        return _local_midnight(first, tz), _local_midnight(first + timedelta(days=days), tz)
    if period == "term":
        if term_start is None or term_end is None:
            raise ValueError("a term budget needs a start and an end date")
        return _local_midnight(term_start, tz), _local_midnight(term_end + timedelta(days=1), tz)
    raise ValueError(f"period must be one of {', '.join(PERIODS)}, got {period!r}")


def period_name(period: str, start: datetime, tz: ZoneInfo) -> str:
    """``November``, ``the week of 23 November``, ``the term`` — for messages."""
    local = start.astimezone(tz)
    if period == "month":
        return local.strftime("%B")
    if period == "week":
        return f"the week of {local.day} {local.strftime('%B')}"
    return "this term"


def reset_text(period: str, end: datetime, tz: ZoneInfo) -> str:
    local = end.astimezone(tz)
    if period == "term":
        last = (local - timedelta(days=1)).date()
        return f"the term ends on {last.day} {last.strftime('%B')}"
    return f"resets on {local.day} {local.strftime('%B')}"


# -- budget status ---------------------------------------------------------------------


@dataclass(frozen=True)
class UsageRow:
    """What budgets need of one session: who, which groups, when, and its charge so far."""

    session_id: str
    user: str
    groups: tuple[str, ...]
    started: datetime
    cost_micros: int
    gpu_minutes: int
    running: bool


@dataclass(frozen=True)
class BudgetRule:
    scope: str  # "user" | "group"
    subject: str
    period: str
    unit: str  # "money" | "gpu_hours"
    limit: Decimal
    term_start: date | None = None
    term_end: date | None = None

    @property
    def key(self) -> str:
        return f"{self.scope}:{self.subject}"


@dataclass(frozen=True)
class BudgetStatus:
    rule: BudgetRule
    period_start: datetime
    period_end: datetime
    used: Decimal  # money, or GPU-hours
    limit: Decimal

    @property
    def remaining(self) -> Decimal:
        return max(Decimal(0), self.limit - self.used)

    @property
    def fraction(self) -> Decimal:
        if self.limit <= 0:
            return Decimal(1) if self.used > 0 or self.limit == 0 else Decimal(0)
        return self.used / self.limit

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit


def applies_to(rule: BudgetRule, user: str, groups) -> bool:
    if rule.scope == "user":
        return rule.subject == user
    return rule.subject in groups


def budget_status(rule: BudgetRule, rows: list[UsageRow], now: datetime, tz: ZoneInfo) -> BudgetStatus:
    """How much of one budget its user or group has used in the current period.

    A session counts in the period in which it started; a group budget is the
    group's pool, counting the sessions of users who were in the group when
    the session started.
    """
    start, end = period_window(rule.period, now, tz, rule.term_start, rule.term_end)
    used_micros = 0
    used_gpu_minutes = 0
    for row in rows:
        if not (start <= row.started < end):
            continue
        if rule.scope == "user" and row.user != rule.subject:
            continue
        if rule.scope == "group" and rule.subject not in row.groups:
            continue
        used_micros += row.cost_micros
        used_gpu_minutes += row.gpu_minutes
    used = from_micros(used_micros) if rule.unit == "money" else Decimal(used_gpu_minutes) / 60
    return BudgetStatus(rule=rule, period_start=start, period_end=end, used=used, limit=rule.limit)


def rule_statuses(
    rules: list[BudgetRule], rows: list[UsageRow], now: datetime, tz: ZoneInfo
) -> dict[str, BudgetStatus]:
    """Every rule's status by ``rule.key``: :func:`budget_status` for all rules at once.

    One pass over the rows per distinct period window, summing per user and per
    group, instead of one pass per rule and user (which grows with users²).
    """
    windows: dict[tuple[datetime, datetime], list[BudgetRule]] = {}
    for rule in rules:
        windows.setdefault(period_window(rule.period, now, tz, rule.term_start, rule.term_end), []).append(rule)
    statuses = {}
    for (start, end), window_rules in windows.items():
        per_user: dict[str, list[int]] = {}
        per_group: dict[str, list[int]] = {}
        for row in rows:
            if not (start <= row.started < end):
                continue
            for total in (
                per_user.setdefault(row.user, [0, 0]),
                *(per_group.setdefault(g, [0, 0]) for g in set(row.groups)),
            ):
                total[0] += row.cost_micros
                total[1] += row.gpu_minutes
        for rule in window_rules:
            micros, gpu_minutes = (per_user if rule.scope == "user" else per_group).get(rule.subject, (0, 0))
            used = from_micros(micros) if rule.unit == "money" else Decimal(gpu_minutes) / 60
            statuses[rule.key] = BudgetStatus(
                rule=rule, period_start=start, period_end=end, used=used, limit=rule.limit
            )
    return statuses


def earliest_period_start(rules: list[BudgetRule], now: datetime, tz: ZoneInfo) -> datetime:
    """The start of the oldest current period among ``rules``: older sessions cannot count."""
    starts = [period_window(r.period, now, tz, r.term_start, r.term_end)[0] for r in rules]
    return min(starts) if starts else now


def user_statuses(
    user: str, groups, rules: list[BudgetRule], rows: list[UsageRow], now: datetime, tz: ZoneInfo
) -> list[BudgetStatus]:
    """Every budget that applies to a user, most used first."""
    statuses = [budget_status(r, rows, now, tz) for r in rules if applies_to(r, user, groups)]
    return sorted(statuses, key=lambda s: s.fraction, reverse=True)


def spawn_refusal(
    statuses: list[BudgetStatus],
    rate_micros: int,
    gpu_count: int,
    min_minutes: int,
    tz: ZoneInfo,
    format_money,
) -> str | None:
    """Why a user may not start a profile (cannot afford ``min_minutes`` of it), or None."""
    for s in statuses:
        if s.rule.unit == "money":
            need = from_micros(rate_micros * min_minutes)
            shown_used, shown_limit = format_money(s.used), format_money(s.limit)
        else:
            need = Decimal(gpu_count * min_minutes) / 60
            shown_used, shown_limit = f"{s.used:.2f} GPU-hours", f"{s.limit:.2f} GPU-hours"
        if need == 0 and not s.exhausted:
            continue
        if s.remaining < need or (s.exhausted and need > 0):
            whose = "your" if s.rule.scope == "user" else f"the {s.rule.subject} group's"
            what = "used up" if s.exhausted else f"too low for {min_minutes} minutes of this profile"
            period = period_name(s.rule.period, s.period_start, tz)
            return (
                f"Budget {what}: {shown_used} of {shown_limit} ({whose} budget) spent in {period};"
                f" {reset_text(s.rule.period, s.period_end, tz)}."
            )
    return None


def crossed_thresholds(status: BudgetStatus, thresholds=(80, 95, 100)) -> list[int]:
    """The alert thresholds (percent) this status has reached."""
    return [t for t in thresholds if status.fraction * 100 >= t]
