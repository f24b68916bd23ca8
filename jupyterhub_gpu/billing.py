"""Billing: per-started-minute charges, budget periods and budget status, as pure functions.

The one per-minute core shared by the hub side (the spawners' budget refusal),
the gpu service (metering, budgets, reports) and the user's server (cost so
far). Imports nothing of ``jupyterhub``.

Money is kept as integer micro-units (millionths of the currency unit, see
:func:`jupyterhub_gpu.money.to_micros`): a rate per minute is exact to six
decimal places, so ``minutes × rate`` is an exact integer and nothing is ever
rounded except for display. GPU time is kept as integer GPU-minutes.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

from babel.dates import format_skeleton

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.money import babel_locale, from_micros

PERIODS = ("week", "month", "term")
UNITS = ("money", "gpu_hours")
_MINUTE_US = 60_000_000


def billed_minutes(started: datetime, ended: datetime) -> int:
    """Minutes charged for a session: every started minute, and at least the first one.

    A session that ran ``t`` seconds is charged ``ceil(t / 60)`` minutes (60 s -> 1,
    61 s -> 2); the first minute is charged at the start (0 s -> 1).
    """
    return max(1, ceil_minutes(ended - started))


def minutes_so_far(started: datetime, now: datetime) -> int:
    """The billed minutes of a session still running at ``now`` (its first minute even if a clock is behind)."""
    return billed_minutes(started, max(now, started))


def ceil_minutes(delta: timedelta) -> int:
    """Whole minutes in ``delta``, a started minute counting whole (exact, in microseconds; negative stays negative)."""
    return -(-(delta // timedelta(microseconds=1)) // _MINUTE_US)


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


def local_midnight(day: date, tz: ZoneInfo) -> datetime:
    """The start of ``day`` in the lab's time zone, in UTC."""
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
        return local_midnight(monday, tz), local_midnight(monday + timedelta(days=7), tz)
    if period == "month":
        first = local.replace(day=1)
        days = calendar.monthrange(first.year, first.month)[1]
        return local_midnight(first, tz), local_midnight(first + timedelta(days=days), tz)
    if period == "term":
        if term_start is None or term_end is None:
            raise ValueError("a term budget needs a start and an end date")
        return local_midnight(term_start, tz), local_midnight(term_end + timedelta(days=1), tz)
    raise ValueError(f"period must be one of {', '.join(PERIODS)}, got {period!r}")


def _day_in(day: date, lang: str) -> str:
    """A day in a message: ``23 November`` in English, ``11月23日`` in Chinese."""
    if lang == "en":
        return f"{day.day} {day.strftime('%B')}"
    return format_skeleton("MMMd", day, locale=babel_locale(lang))


def period_name(period: str, start: datetime, tz: ZoneInfo, lang: str = "en") -> str:
    """``November``, ``the week of 23 November``, ``this term`` (in ``lang``) — for messages."""
    local = start.astimezone(tz)
    if period == "month":
        return local.strftime("%B") if lang == "en" else format_skeleton("MMMM", local, locale=babel_locale(lang))
    if period == "week":
        return translator(lang)("the week of {day}", day=_day_in(local.date(), lang))
    return translator(lang)("this term")


def reset_text(period: str, end: datetime, tz: ZoneInfo, lang: str = "en") -> str:
    local = end.astimezone(tz)
    if period == "term":
        last = (local - timedelta(days=1)).date()
        return translator(lang)("the term ends on {day}", day=_day_in(last, lang))
    return translator(lang)("resets on {day}", day=_day_in(local.date(), lang))


# -- minutes and periods ---------------------------------------------------------------


def minutes_in_window(started: datetime, minutes: int, start: datetime | None, end: datetime | None) -> int:
    """How many of a session's ``minutes`` billed minutes fall in ``[start, end)``; a bound of None is open.

    Minute ``k`` of a session (``0 <= k < minutes``) is the one that starts at
    ``started + 60k`` seconds, and it belongs to the period in which it starts:
    a minute that straddles a period boundary counts in the period it began in.
    Over periods that tile the time line, the counts add up to ``minutes``
    exactly, so the charges add up to the session's charge to the micro-unit.
    Budgets, reports, savings and the usage pages all count with this.
    """
    if minutes <= 0:
        return 0

    def first_at_or_after(moment: datetime) -> int:
        return min(minutes, max(0, ceil_minutes(moment - started)))

    lo = 0 if start is None else first_at_or_after(start)
    hi = minutes if end is None else first_at_or_after(end)
    return max(0, hi - lo)


# -- budget status ---------------------------------------------------------------------


@dataclass(frozen=True)
class UsageRow:
    """What budgets need of one session: who, which pool pays, when, and its charge so far.

    With ``minutes``, ``rate_micros`` and ``gpu_count`` known, the row is split
    minute by minute over periods (:func:`minutes_in_window`); without them (a
    pre-summed row) it counts whole, in the period in which ``started`` falls.
    ``pool`` is the one group whose budget the session draws from; None means
    the documented default, the first of ``groups`` (none when it has no group).
    """

    session_id: str
    user: str
    groups: tuple[str, ...]
    started: datetime
    cost_micros: int
    gpu_minutes: int
    running: bool
    pool: str | None = None
    minutes: int | None = None
    rate_micros: int | None = None
    gpu_count: int | None = None

    @property
    def pool_name(self) -> str | None:
        if self.pool is not None:
            return self.pool
        return self.groups[0] if self.groups else None

    def in_window(self, start: datetime, end: datetime) -> tuple[int, int]:
        """Money (micro-units) and GPU-minutes of this session's minutes in ``[start, end)``."""
        if self.minutes is None or self.rate_micros is None or self.gpu_count is None:
            return (self.cost_micros, self.gpu_minutes) if start <= self.started < end else (0, 0)
        n = minutes_in_window(self.started, self.minutes, start, end)
        return n * self.rate_micros, n * self.gpu_count


def session_row(
    session_id: str,
    user: str,
    groups,
    pool: str | None,
    started: datetime,
    stopped: datetime | None,
    minutes: int | None,
    rate_micros: int,
    gpu_count: int,
    now: datetime,
) -> UsageRow:
    """The usage row of a ledger session: its stored minutes when stopped, its minutes up to ``now`` when running."""
    if stopped is None:
        minutes = minutes_so_far(started, now)
    minutes = minutes or 0
    return UsageRow(
        session_id=session_id,
        user=user,
        groups=tuple(groups),
        started=started,
        cost_micros=minutes * rate_micros,
        gpu_minutes=minutes * gpu_count,
        running=stopped is None,
        pool=pool,
        minutes=minutes,
        rate_micros=rate_micros,
        gpu_count=gpu_count,
    )


@dataclass(frozen=True)
class BudgetRule:
    scope: str  # "user" | "group"
    subject: str
    period: str
    unit: str  # "money" | "gpu_hours"
    limit: Decimal
    term_start: date | None = None
    term_end: date | None = None
    #: Changes with every edit of the budget: alerts are sent once per revision and period,
    #: so a budget raised and used up again gets a new notice and a full grace period.
    revision: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return f"{self.scope}:{self.subject}"


#: ``BudgetStatus.state``: the period contains now, or (term budgets only) it is over or yet to come.
CURRENT, ENDED, UPCOMING = "current", "ended", "upcoming"


@dataclass(frozen=True)
class BudgetStatus:
    rule: BudgetRule
    period_start: datetime
    period_end: datetime
    used: Decimal  # money, or GPU-hours
    limit: Decimal
    state: str = CURRENT

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

    @property
    def active(self) -> bool:
        """Whether the budget binds now: a term budget binds only inside its term."""
        return self.state == CURRENT

    def charges(self, rate_micros: int, gpu_count: int) -> bool:
        """Whether a session at this rate and GPU count draws anything from this budget."""
        return rate_micros > 0 if self.rule.unit == "money" else gpu_count > 0


def applies_to(rule: BudgetRule, user: str, groups) -> bool:
    if rule.scope == "user":
        return rule.subject == user
    return rule.subject in groups


def draws_from(rule: BudgetRule, user: str, pool: str | None) -> bool:
    """Whether a session of ``user`` paid by the group ``pool`` draws from ``rule``'s budget."""
    if rule.scope == "user":
        return rule.subject == user
    return pool is not None and rule.subject == pool


def binding_groups(rules, rate_micros: int, gpu_count: int, now: datetime, tz: ZoneInfo) -> set[str]:
    """The groups whose budget binds a session of this rate and GPU count now.

    That is a group budget whose period contains ``now`` (not a term that ended
    or has yet to begin) and that draws from the profile (a money budget from a
    priced one, a GPU-hour budget from one with GPUs). Only these count as
    budgeted when a student chooses the group that pays: a group whose budget
    binds nothing would be a way out of one that binds. A damaged rule (no
    period can be computed) binds nothing, as in :meth:`.ledger.Ledger.statuses_of`.
    """
    groups = set()
    for rule in rules:
        if rule.scope != "group":
            continue
        try:
            start, end = rule_window(rule, now, tz)
        except (ValueError, TypeError):
            continue
        charges = rate_micros > 0 if rule.unit == "money" else gpu_count > 0
        if charges and window_state(start, end, now) == CURRENT:
            groups.add(rule.subject)
    return groups


def window_state(start: datetime, end: datetime, now: datetime) -> str:
    if now < start:
        return UPCOMING
    if now >= end:
        return ENDED
    return CURRENT


def window_totals(rows, start: datetime, end: datetime) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Money and GPU-minutes of the minutes in ``[start, end)``, per user and per group pool."""
    per_user: dict[str, list[int]] = {}
    per_pool: dict[str, list[int]] = {}
    for row in rows:
        cost, gpu_minutes = row.in_window(start, end)
        if not cost and not gpu_minutes:
            continue
        targets = [per_user.setdefault(row.user, [0, 0])]
        if row.pool_name is not None:
            targets.append(per_pool.setdefault(row.pool_name, [0, 0]))
        for total in targets:
            total[0] += cost
            total[1] += gpu_minutes
    return per_user, per_pool


def rule_window(rule: BudgetRule, now: datetime, tz: ZoneInfo) -> tuple[datetime, datetime]:
    return period_window(rule.period, now, tz, rule.term_start, rule.term_end)


def status_from_totals(
    rule: BudgetRule, start: datetime, end: datetime, micros: int, gpu_minutes: int, now: datetime
) -> BudgetStatus:
    """A budget's status from the money and GPU-minutes its subject used in ``[start, end)``."""
    used = from_micros(micros) if rule.unit == "money" else Decimal(gpu_minutes) / 60
    return BudgetStatus(
        rule=rule, period_start=start, period_end=end, used=used, limit=rule.limit, state=window_state(start, end, now)
    )


def rule_statuses(
    rules: list[BudgetRule], rows: list[UsageRow], now: datetime, tz: ZoneInfo
) -> dict[str, BudgetStatus]:
    """Every rule's status by ``rule.key``, from usage rows: how much of each budget is used in its period.

    A session's minutes count in the period in which each minute starts
    (:func:`minutes_in_window`): a session running across a reset counts its
    new minutes against the new period at once. A user budget counts the
    user's sessions; a group budget counts the sessions whose pool is the group
    (a session draws from exactly one group pool). One pass over the rows per
    distinct period window. :meth:`.ledger.Ledger.budget_statuses` computes the
    same from SQL without loading every session; both end in
    :func:`status_from_totals`.
    """
    windows: dict[tuple[datetime, datetime], list[BudgetRule]] = {}
    for rule in rules:
        windows.setdefault(rule_window(rule, now, tz), []).append(rule)
    statuses = {}
    for (start, end), window_rules in windows.items():
        per_user, per_pool = window_totals(rows, start, end)
        for rule in window_rules:
            micros, gpu_minutes = (per_user if rule.scope == "user" else per_pool).get(rule.subject, (0, 0))
            statuses[rule.key] = status_from_totals(rule, start, end, micros, gpu_minutes, now)
    return statuses


def budget_status(rule: BudgetRule, rows: list[UsageRow], now: datetime, tz: ZoneInfo) -> BudgetStatus:
    """How much of one budget its user or group has used in its period (see :func:`rule_statuses`)."""
    return rule_statuses([rule], rows, now, tz)[rule.key]


def earliest_period_start(rules: list[BudgetRule], now: datetime, tz: ZoneInfo) -> datetime:
    """The start of the oldest current period among ``rules``: older minutes cannot count."""
    starts = [rule_window(r, now, tz)[0] for r in rules]
    return min(starts) if starts else now


def user_statuses(
    user: str, groups, rules: list[BudgetRule], rows: list[UsageRow], now: datetime, tz: ZoneInfo
) -> list[BudgetStatus]:
    """Every budget that applies to a user in these groups, most used first."""
    mine = [r for r in rules if applies_to(r, user, groups)]
    statuses = rule_statuses(mine, rows, now, tz)
    return sorted((statuses[r.key] for r in mine), key=lambda s: s.fraction, reverse=True)


def spawn_refusal(
    statuses: list[BudgetStatus],
    rate_micros: int,
    gpu_count: int,
    min_minutes: int,
    tz: ZoneInfo,
    format_money,
    lang: str = "en",
) -> str | None:
    """Why a user may not start a profile (cannot afford ``min_minutes`` of it), or None; worded in ``lang``.

    ``format_money(amount, locale=lang)`` writes an amount (:meth:`.money.Currency.format`).

    Only budgets that bind now count (a term budget outside its term does not),
    and only those the profile draws from: a profile at price 0 is never refused
    by a money budget, nor a CPU-only profile by a GPU-hour budget (and the tick
    never stops them for it). So the message names only a period that contains
    now, and a date that has not passed.
    """
    for s in statuses:
        if not s.active or not s.charges(rate_micros, gpu_count):
            continue
        if s.rule.unit == "money":
            need = from_micros(rate_micros * min_minutes)
        else:
            need = Decimal(gpu_count * min_minutes) / 60
        if s.exhausted or s.remaining < need:
            _ = translator(lang)
            values = {
                "used": budget_amount(s.rule.unit, s.used, format_money, lang),
                "limit": budget_amount(s.rule.unit, s.limit, format_money, lang),
                "whose": whose_budget(s.rule, lang),
                "period": period_name(s.rule.period, s.period_start, tz, lang),
                "reset": reset_text(s.rule.period, s.period_end, tz, lang),
            }
            if s.exhausted:
                return _("Budget used up: {used} of {limit} ({whose}) spent in {period}; {reset}.", **values)
            return _(
                "Budget too low for {minutes} minutes of this profile: {used} of {limit} ({whose}) spent in {period};"
                " {reset}.",
                minutes=min_minutes,
                **values,
            )
    return None


def budget_amount(unit: str, amount: Decimal, format_money, lang: str = "en") -> str:
    """An amount of a budget in a message: money in the locale's format, else ``1.50 GPU-hours``."""
    if unit == "money":
        return format_money(amount, locale=lang)
    return translator(lang)("{hours} GPU-hours", hours=f"{amount:.2f}")


def whose_budget(rule: BudgetRule, lang: str = "en") -> str:
    """``your budget`` or ``the cs231n group's budget``, for messages."""
    if rule.scope == "user":
        return translator(lang)("your budget")
    return translator(lang)("the {group} group's budget", group=rule.subject)


def crossed_thresholds(status: BudgetStatus, thresholds=(80, 95, 100)) -> list[int]:
    """The alert thresholds (percent) this status has reached, lowest first; none outside its period."""
    if not status.active:
        return []
    return [t for t in sorted(thresholds) if status.fraction * 100 >= t]
