"""Budgets in the tick: alerts as a budget crosses a threshold, and the stop of a server past 100% + grace.

Every warning goes out through the gateway before the stop it announces: a stop comes in a
later tick than its 100% notice, and only once the notice is recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from jupyterhub_gpu.billing import BudgetStatus, crossed_thresholds
from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.domain.alerts import BudgetAlert, budget_message, budget_once
from jupyterhub_gpu.service.domain.notices import CHANNELS, AlertSettings, Once
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.notify import Notifier, passed
from jupyterhub_gpu.service.tick.context import LoopSlice, TickContext, TickResult, open_session_pages
from jupyterhub_gpu.service.tick.stops import stop_session
from jupyterhub_gpu.session import StopReason

log = logging.getLogger("jupyterhub_gpu.service")

#: Called for each (user, status, threshold) newly reached; delivers the alert.
Notify = Callable[[str, tuple[str, ...], BudgetStatus, int], Awaitable[None]]


def budget_notify(ctx: TickContext) -> Notify:
    """The ``notify`` of :func:`enforce_budgets`: each alert on every channel, once per threshold and period."""
    notifier, currency, tz = ctx.notifier, ctx.currency, ctx.tz
    grace_seconds = int(ctx.budget_grace.total_seconds())

    async def notify(user: str, groups: tuple[str, ...], status: BudgetStatus, threshold: int) -> None:
        alert = BudgetAlert.from_status(
            user, groups, status, threshold, currency=currency, grace_seconds=grace_seconds, tz=tz
        )
        await notifier.send(budget_message(alert, notifier.settings), CHANNELS, once=budget_once(alert))

    return notify


async def deliver(alert: BudgetAlert, settings: AlertSettings, ledger: Ledger, now: datetime) -> dict[str, bool]:
    """Send a budget alert on every configured channel that has not sent it yet; which were sent now.

    Each channel claims its ``AlertSent`` row first and sends only if the claim is
    new, so concurrent or repeated calls send once. A failed send is logged, its
    claim released so that the next call retries it, and the other channels go on.
    """
    return await Notifier(ledger, settings).send(budget_message(alert, settings), CHANNELS, budget_once(alert), now)


async def enforce_budgets(ctx: TickContext, now: datetime, notify: Notify | None = None) -> TickResult:
    """Warn users whose budgets cross a threshold, and stop the servers of those past 100% + grace.

    Only users with a running session are checked: spend changes only while a
    session runs. Budget use comes from :meth:`Ledger.budget_statuses` (the one
    computation every reader shares), once per tick for all budgets, and the
    alerts already sent in the current periods are read once.

    A session answers to its user's budget and to the budget of the one group
    pool it draws from, and only to those that bind now (a term budget outside
    its term does not) and that it draws anything from (a CPU-only session is
    never stopped by a GPU-hour budget, nor a free one by a money budget).
    When several thresholds are crossed at once, only the highest is sent; the
    lower ones are recorded as passed so that they are never sent late. The
    100% notice is recorded once per budget revision and period (on the "lab"
    channel); the stop happens ``ctx.budget_grace`` after it, so a budget raised by an
    admin and used up again gets a new notice and a full grace period.
    ``ctx.alert_channels`` are the channels ``notify`` (by default
    :func:`budget_notify`) delivers on: a threshold already sent on all of them
    is skipped. A failure for one user (a damaged budget, a failing channel) is
    logged and the other users are checked all the same.
    """
    ledger, tz, grace = ctx.ledger, ctx.tz, ctx.budget_grace
    notify = notify if notify is not None else budget_notify(ctx)
    result = TickResult()
    rules = ledger.budget_rules()
    if not rules:
        return result
    pause = LoopSlice()
    open_sessions = [s async for page in open_session_pages(ledger, pause) for s in page]
    if not open_sessions:
        return result
    by_user: dict[str, list] = {}
    for s in open_sessions:
        by_user.setdefault(s.user, []).append(s)
    status_of = ledger.budget_statuses(rules, now, tz)
    user_rules = {r.subject: r for r in rules if r.scope == "user" and r.key in status_of}
    group_rules = {r.subject: r for r in rules if r.scope == "group" and r.key in status_of}
    # the alerts of the periods that bind now (an ended term's are never needed again)
    since = min((st.period_start for st in status_of.values() if st.active), default=now)
    sent = {
        (a.user, a.budget_key, aware_utc(a.period_start), a.threshold, a.channel, a.revision or ""): aware_utc(a.sent)
        for a in ledger.alerts_since(since)
    }
    # a stop announced shortly before a reset is still carried out after it (the notice promised it)
    promised: dict[tuple[str, str, str], datetime] = {}
    for a in ledger.final_notices_before(now, since - grace):
        st = status_of.get(a.budget_key)
        told = aware_utc(a.sent)
        if st is not None and aware_utc(a.period_start) < st.period_start and told + grace > st.period_start:
            k = (a.user, a.budget_key, a.revision or "")
            promised[k] = min(promised.get(k, told), told)
    budget_pass = _BudgetPass(
        ctx=ctx,
        now=now,
        notify=notify,
        user_rules=user_rules,
        group_rules=group_rules,
        status_of=status_of,
        sent=sent,
        result=result,
        promised=promised,
    )
    for user, sessions in by_user.items():
        await pause()
        result.users_checked += 1
        try:
            await _enforce_user(budget_pass, user, sessions)
        except Exception:
            log.exception("budget check of %s failed in this tick; the other users are checked all the same", user)
    return result


def _fraction(status: BudgetStatus):
    try:
        return status.fraction
    except ArithmeticError:  # a damaged limit (NaN): judged last, and its alert fails on its own
        return -1


def _session_statuses(session, user_rules, group_rules, status_of) -> list[BudgetStatus]:
    """The budgets a running session draws from now: its user's and its pool's, if they bind and charge it."""
    rules = [user_rules.get(session.user), group_rules.get(session.pool) if session.pool else None]
    statuses = [status_of[r.key] for r in rules if r is not None]
    return [st for st in statuses if st.active and st.charges(session.rate_micros, session.gpu_count)]


@dataclass
class _BudgetPass:
    """What one tick's budget check reads once and shares between the users it checks."""

    ctx: TickContext
    now: datetime
    notify: Notify
    user_rules: dict
    group_rules: dict
    status_of: dict[str, BudgetStatus]
    sent: dict
    result: TickResult
    promised: dict


async def _enforce_user(tick: _BudgetPass, user: str, sessions) -> None:
    """Alerts and stops for one user's running sessions (a failure here leaves the other users alone)."""
    ledger, now, sent = tick.ctx.ledger, tick.now, tick.sent
    grace, channels = tick.ctx.budget_grace, tick.ctx.alert_channels
    groups = tuple(sorted({g for s in sessions for g in s.group_list}))
    per_session = {s.id: _session_statuses(s, tick.user_rules, tick.group_rules, tick.status_of) for s in sessions}
    statuses = list({st.rule.key: st for sts in per_session.values() for st in sts}.values())
    statuses.sort(key=_fraction, reverse=True)
    for status in statuses:
        rule = status.rule
        try:
            crossed = crossed_thresholds(status, (*tick.ctx.alert_thresholds, 100))
            if not crossed:
                continue
            key = (user, rule.key, status.period_start)
            for lower in crossed[:-1]:
                for channel in CHANNELS:
                    if (*key, lower, channel, rule.revision) not in sent:
                        once = Once(user, rule.key, status.period_start, lower, rule.revision)
                        await tick.ctx.write(passed, once, channel, now)
            if channels is not None and all((*key, crossed[-1], ch, rule.revision) in sent for ch in channels):
                continue
            await tick.notify(user, groups, status, crossed[-1])
            tick.result.alerts.append((user, rule.key, crossed[-1]))
        except Exception:
            log.exception("budget alert %s of %s failed in this tick; its stops and the others go on", rule.key, user)

    def final_notice(status: BudgetStatus) -> datetime | None:
        rule = status.rule
        told = sent.get((user, rule.key, status.period_start, 100, "lab", rule.revision))
        if told is None:  # told in this very tick: read it back
            told = min(
                (
                    aware_utc(a.sent)
                    for a in ledger.alerts(user)
                    if a.threshold == 100
                    and a.channel == "lab"
                    and a.budget_key == rule.key
                    and (a.revision or "") == rule.revision
                    and aware_utc(a.period_start) == status.period_start
                ),
                default=None,
            )
            if told is not None:
                sent[(user, rule.key, status.period_start, 100, "lab", rule.revision)] = told
        return told

    for s in sessions:
        exhausted = []
        for st in per_session[s.id]:
            try:
                if st.exhausted:
                    exhausted.append(st)
            except ArithmeticError:
                log.error("budget %s cannot be judged (limit %r); it stops nothing", st.rule.key, st.limit)
        told = [t for t in map(final_notice, exhausted) if t is not None]
        for st in per_session[s.id]:  # told before the reset, while this session ran: the promised stop
            before = tick.promised.get((user, st.rule.key, st.rule.revision))
            if before is not None and aware_utc(s.started) <= before:
                told.append(before)
        if not told or now - min(told) < grace:
            continue
        try:
            kept = await stop_session(tick.ctx, s, StopReason.BUDGET)
        except HubAPIError as e:
            log.error("could not stop %s/%s for its budget: %s", s.user, s.server_name, e)
            continue
        if kept is None:
            continue
        log.info("stopped %s/%s: budget used up (the stop's reason: %s)", s.user, s.server_name, kept)
        tick.result.stopped.append((s.user, s.server_name))
