"""The ledger's budgets: the rules stored per user and group, and their use in a period, summed in SQL.

:class:`BudgetBook` is a part of :class:`~jupyterhub_gpu.ledger.store.Ledger` (its engine and ``Session``);
every reader of a budget's use (the spawn check, the tick, the API, the pages, the metrics) asks
:meth:`BudgetBook.statuses_of`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select

from jupyterhub_gpu.billing import (
    BudgetRule,
    BudgetStatus,
    UsageRow,
    rule_window,
    session_row,
    status_from_totals,
    window_totals,
)
from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.ledger.models import Budget, SessionRecord
from jupyterhub_gpu.ledger.queries.filters import sessions_overlapping

log = logging.getLogger("jupyterhub_gpu.ledger")


def stored_usage_row(sid, user, groups, pool, started, stopped, minutes, rate, gpu_count, naive_now) -> UsageRow:
    """A :class:`UsageRow` from a session's stored columns (naive UTC times)."""
    row = session_row(sid, user, groups, pool, started, stopped, minutes, rate, gpu_count, naive_now)
    return dataclasses.replace(row, started=aware_utc(started))


class BudgetBook:
    """Budgets of users and groups, and what each has used of its period (a part of the ``Ledger``)."""

    def budgets(self) -> list[Budget]:
        with self.Session() as db:
            return list(db.scalars(select(Budget).order_by(Budget.scope, Budget.subject)))

    def budget_rules(self) -> list[BudgetRule]:
        """Every budget as a rule; a damaged row (a limit that is no number) is logged and left out."""
        rules = []
        for b in self.budgets():
            try:
                rules.append(b.rule())
            except (ArithmeticError, ValueError, TypeError) as e:
                log.error("budget %s:%s has an unusable limit %r and is ignored: %s", b.scope, b.subject, b.limit, e)
        return rules

    def get_budget(self, scope: str, subject: str) -> Budget | None:
        with self.Session() as db:
            return db.scalar(select(Budget).where(Budget.scope == scope, Budget.subject == subject))

    def set_budget(self, rule: BudgetRule, now: datetime) -> Budget:
        """Create or replace the budget of a user or group."""
        with self.Session() as db:
            budget = db.scalar(select(Budget).where(Budget.scope == rule.scope, Budget.subject == rule.subject))
            if budget is None:
                budget = Budget(scope=rule.scope, subject=rule.subject)
                db.add(budget)
            elif (budget.period, budget.unit, budget.limit, budget.term_start, budget.term_end) == (
                rule.period,
                rule.unit,
                str(rule.limit),
                rule.term_start,
                rule.term_end,
            ):
                return budget  # the same budget again (an idempotent PUT): its alerts are not sent again
            budget.period = rule.period
            budget.unit = rule.unit
            budget.limit = str(rule.limit)
            budget.term_start = rule.term_start
            budget.term_end = rule.term_end
            # the revision of the budget's alerts: a new one with every edit, even within one clock tick
            previous = budget.updated
            budget.updated = (
                naive_utc(now) if previous is None else max(naive_utc(now), previous + timedelta(microseconds=1))
            )
            db.commit()
            return budget

    def delete_budget(self, scope: str, subject: str) -> bool:
        with self.Session() as db:
            budget = db.scalar(select(Budget).where(Budget.scope == scope, Budget.subject == subject))
            if budget is None:
                return False
            db.delete(budget)
            db.commit()
            return True

    def window_totals(
        self,
        start: datetime,
        end: datetime,
        now: datetime,
        users: Iterable[str] | None = None,
        pools: Iterable[str] | None = None,
    ) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """Money (micro-units) and GPU-minutes of the minutes in ``[start, end)``, per user and per pool.

        Never loads every session: the stopped sessions wholly inside the window
        are summed in SQL (one row per user and pool), and only the sessions that
        run across a boundary of the window or are still running are loaded and
        split minute by minute (:func:`jupyterhub_gpu.billing.window_totals`, the same rule as
        everywhere). ``users`` and ``pools`` narrow the query to the subjects
        asked about (None: everyone).
        """
        s = SessionRecord
        a, b = naive_utc(start), naive_utc(end)
        inside = (s.stopped.is_not(None), s.started >= a, s.started < b, s.stopped <= b)
        narrow = []
        users = None if users is None else sorted(set(users))
        pools = None if pools is None else sorted(set(pools))
        if users is not None or pools is not None:
            if len(users or ()) + len(pools or ()) <= 500:  # else one unfiltered pass is cheaper than many
                narrow = [or_(s.user.in_(users or []), s.pool.in_(pools or []))]
        closed = (
            select(
                s.user,
                s.pool,
                func.coalesce(func.sum(s.cost_micros), 0),
                func.coalesce(func.sum(s.minutes * s.gpu_count), 0),
            )
            .where(*inside, *narrow)
            .group_by(s.user, s.pool)
        )
        crossing = sessions_overlapping(
            select(s.id, s.user, s.pool, s.started, s.stopped, s.minutes, s.rate_micros, s.gpu_count), start, end
        ).where(~(s.stopped.is_not(None) & (s.started >= a) & (s.stopped <= b)), *narrow)
        naive_now = naive_utc(now)
        with self.engine.connect() as db:
            summed = list(db.execute(closed))
            rows = [
                stored_usage_row(sid, user, (), pool, started, stopped, minutes, rate, gpus, naive_now)
                for sid, user, pool, started, stopped, minutes, rate, gpus in db.execute(crossing)
            ]
        per_user, per_pool = window_totals(rows, start, end)
        for user, pool, cost, gpu_minutes in summed:
            for total in (per_user.setdefault(user, [0, 0]), *([per_pool.setdefault(pool, [0, 0])] if pool else [])):
                total[0] += int(cost)
                total[1] += int(gpu_minutes)
        return per_user, per_pool

    def budget_statuses(self, rules: Iterable[BudgetRule], now: datetime, tz) -> dict[str, BudgetStatus]:
        """:meth:`statuses_of` by ``rule.key`` (the ledger holds one budget per user or group)."""
        return {status.rule.key: status for status in self.statuses_of(rules, now, tz)}

    def statuses_of(self, rules: Iterable[BudgetRule], now: datetime, tz) -> list[BudgetStatus]:
        """THE budget use: each rule's status, in the order of ``rules``, as every reader shows and enforces it.

        The spawn check, the tick, ``GET me``, ``GET budgets``, the pages, the
        CLI (through the API) and the metrics all read budgets here. A minute
        counts in the period in which it starts (a session across a reset counts
        its new minutes in the new period at once); a group budget counts the
        sessions its group pays for. The result equals
        :func:`jupyterhub_gpu.billing.rule_statuses` over every session. A rule whose period
        cannot be computed (a damaged row) is logged and left out, so that one
        bad budget does not hide the others.
        """
        rules = list(rules)
        windows: dict[tuple[datetime, datetime], list[int]] = {}
        for i, rule in enumerate(rules):
            try:
                window = rule_window(rule, now, tz)
            except (ValueError, TypeError) as e:
                log.error("budget %s cannot be computed and is ignored: %s", rule.key, e)
                continue
            windows.setdefault(window, []).append(i)
        statuses: dict[int, BudgetStatus] = {}
        for (start, end), indexes in windows.items():
            users = [rules[i].subject for i in indexes if rules[i].scope == "user"]
            pools = [rules[i].subject for i in indexes if rules[i].scope == "group"]
            per_user, per_pool = self.window_totals(start, end, now, users, pools)
            for i in indexes:
                rule = rules[i]
                micros, gpu_minutes = (per_user if rule.scope == "user" else per_pool).get(rule.subject, (0, 0))
                statuses[i] = status_from_totals(rule, start, end, micros, gpu_minutes, now)
        return [statuses[i] for i in sorted(statuses)]
