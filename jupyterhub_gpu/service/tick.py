"""The metering tick: budget alerts and stops, and the rare reconciliation with the hub.

Plain coroutines over the ledger and the hub client, so that tests can drive a
tick with any clock. The service's Application only schedules them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from jupyterhub_gpu.ledger.store import Ledger, SessionStart, _aware
from jupyterhub_gpu.service.domain.alerts import CHANNELS
from jupyterhub_gpu.service.domain.metering import BudgetStatus, crossed_thresholds
from jupyterhub_gpu.service.hubapi import HubAPIError, HubClient

log = logging.getLogger("jupyterhub_gpu.service")

#: Called for each (user, status, threshold) newly reached; delivers the alert.
Notify = Callable[[str, tuple[str, ...], BudgetStatus, int], Awaitable[None]]


@dataclass
class TickResult:
    users_checked: int = 0
    alerts: list[tuple[str, str, int]] = field(default_factory=list)
    stopped: list[tuple[str, str]] = field(default_factory=list)


async def enforce_budgets(
    ledger: Ledger,
    hub: HubClient,
    now: datetime,
    tz: ZoneInfo,
    notify: Notify,
    thresholds: tuple[int, ...] = (80, 95),
    grace: timedelta = timedelta(minutes=5),
    channels: tuple[str, ...] | None = ("lab",),
) -> TickResult:
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
    channel); the stop happens ``grace`` after it, so a budget raised by an
    admin and used up again gets a new notice and a full grace period.
    ``channels`` are the channels ``notify`` delivers on: a threshold already
    sent on all of them is skipped. A failure for one user (a damaged budget, a
    failing channel) is logged and the other users are checked all the same.
    """
    result = TickResult()
    rules = ledger.budget_rules()
    open_sessions = ledger.open_sessions()
    if not rules or not open_sessions:
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
        (a.user, a.budget_key, _aware(a.period_start), a.threshold, a.channel, a.revision or ""): _aware(a.sent)
        for a in ledger.alerts_since(since)
    }
    # a stop announced shortly before a reset is still carried out after it (the notice promised it)
    promised: dict[tuple[str, str, str], datetime] = {}
    for a in ledger.final_notices_before(now, since - grace):
        st = status_of.get(a.budget_key)
        if st is not None and _aware(a.period_start) < st.period_start and _aware(a.sent) + grace > st.period_start:
            k = (a.user, a.budget_key, a.revision or "")
            promised[k] = min(promised.get(k, _aware(a.sent)), _aware(a.sent))
    budget_pass = _BudgetPass(
        ledger=ledger,
        hub=hub,
        now=now,
        notify=notify,
        user_rules=user_rules,
        group_rules=group_rules,
        status_of=status_of,
        sent=sent,
        thresholds=thresholds,
        grace=grace,
        channels=channels,
        result=result,
        promised=promised,
    )
    for user, sessions in by_user.items():
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

    ledger: Ledger
    hub: HubClient
    now: datetime
    notify: Notify
    user_rules: dict
    group_rules: dict
    status_of: dict[str, BudgetStatus]
    sent: dict
    thresholds: tuple[int, ...]
    grace: timedelta
    channels: tuple[str, ...] | None
    result: TickResult
    promised: dict


async def _enforce_user(tick: _BudgetPass, user: str, sessions) -> None:
    """Alerts and stops for one user's running sessions (a failure here leaves the other users alone)."""
    ledger, hub, now, sent, grace, channels = tick.ledger, tick.hub, tick.now, tick.sent, tick.grace, tick.channels
    groups = tuple(sorted({g for s in sessions for g in s.group_list}))
    per_session = {s.id: _session_statuses(s, tick.user_rules, tick.group_rules, tick.status_of) for s in sessions}
    statuses = list({st.rule.key: st for sts in per_session.values() for st in sts}.values())
    statuses.sort(key=_fraction, reverse=True)
    for status in statuses:
        rule = status.rule
        try:
            crossed = crossed_thresholds(status, (*tick.thresholds, 100))
            if not crossed:
                continue
            key = (user, rule.key, status.period_start)
            for lower in crossed[:-1]:
                for channel in CHANNELS:
                    if (*key, lower, channel, rule.revision) not in sent:
                        ledger.claim_alert(user, rule.key, status.period_start, lower, channel, now, rule.revision)
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
                    _aware(a.sent)
                    for a in ledger.alerts(user)
                    if a.threshold == 100
                    and a.channel == "lab"
                    and a.budget_key == rule.key
                    and (a.revision or "") == rule.revision
                    and _aware(a.period_start) == status.period_start
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
            if before is not None and _aware(s.started) <= before:
                told.append(before)
        if not told or now - min(told) < grace:
            continue
        ledger.set_pending_stop_reason(s.id, "budget")
        try:
            await hub.stop_server(s.user, s.server_name)
        except HubAPIError as e:
            log.error("could not stop %s/%s for its budget: %s", s.user, s.server_name, e)
            continue
        log.info("stopped %s/%s: budget used up", s.user, s.server_name)
        tick.result.stopped.append((s.user, s.server_name))


@dataclass
class Reconciler:
    """Closes ledger sessions whose servers the hub no longer runs, and records missed starts.

    The spawners record starts and stops themselves; this catches what they
    could not (a hub killed at the wrong moment). It lists the hub's active
    servers, so it runs rarely (see ``GPUService.reconcile_interval``). A
    session is closed only after it has been missing from two listings in a
    row, at the last moment it was seen running.
    """

    ledger: Ledger
    hub: HubClient
    missing: dict[str, datetime] = field(default_factory=dict)

    async def run(self, now: datetime) -> dict:
        servers = await self.hub.active_servers()
        active = {(s["user"], s["name"]): s for s in servers}
        open_sessions = self.ledger.open_sessions()
        alive, closed, recorded = [], [], []
        newest: dict[tuple[str, str], str] = {}
        for s in sorted(open_sessions, key=lambda s: s.started):
            newest[(s.user, s.server_name)] = s.id
        for s in open_sessions:
            key = (s.user, s.server_name)
            if key in active and newest[key] == s.id:
                alive.append(s.id)
                self.missing.pop(s.id, None)
                continue
            if s.id not in self.missing:
                self.missing[s.id] = now
                continue
            stop_at = _aware(s.last_seen) or _aware(s.started)
            if self.ledger.record_stop(s.id, stop_at, "reconciled"):
                closed.append(s.id)
            self.missing.pop(s.id, None)
        # starts the spawner could not record: taken from the hub's server state where readable
        known = {s.id for s in open_sessions}
        for (user, name), entry in active.items():
            gpu = ((entry["server"] or {}).get("state") or {}).get("gpu") or {}
            sid = gpu.get("session_id")
            if not sid or sid in known or self.ledger.get_session(sid) is not None:
                continue
            self.ledger.record_start(session_start_from_state(user, name, entry.get("groups", []), gpu))
            recorded.append(sid)
            alive.append(sid)
        self.ledger.mark_seen(alive, now)
        return {"alive": len(alive), "closed": closed, "recorded": recorded}


def session_start_from_state(user: str, server_name: str, groups, gpu: dict) -> SessionStart:
    """A SessionStart from the ``gpu`` part of a spawner's state."""
    from decimal import Decimal

    from jupyterhub_gpu.service.domain.metering import to_micros

    started = datetime.fromisoformat(gpu["started"].replace("Z", "+00:00"))
    return SessionStart(
        id=gpu["session_id"],
        user=user,
        server_name=server_name,
        groups=tuple(gpu.get("groups", groups)),
        pool=gpu.get("pool"),
        profile=gpu["profile"],
        gpus=tuple(gpu.get("devices", [])),
        rate_micros=to_micros(Decimal(gpu["rate_per_minute"])),
        currency=gpu["currency"],
        started=started,
        simulated=bool(gpu.get("simulated", False)),
    )


# -- culling ---------------------------------------------------------------------------------

#: Called for an idle warning or its cancellation: (session record, decision) -> delivered.
NotifyCull = Callable[[object, object], Awaitable[None]]


def session_signals(ledger: Ledger, session, now: datetime) -> list:
    """The minute signals of a session, from the samples its server pushed, oldest first."""
    from jupyterhub_gpu.service.domain.culling import MAX_MINUTES, MinuteSignal
    from jupyterhub_gpu.service.web.usage import session_minutes

    since = max(_aware(session.started), now - timedelta(minutes=MAX_MINUTES))
    signals = []
    for m in session_minutes(ledger, session.id, since=since.replace(second=0, microsecond=0)):
        total = m.memory_total_mib or 0
        signals.append(
            MinuteSignal(
                at=_aware(m.minute),
                gpu_util=m.utilization_avg if m.samples else None,
                gpu_mem_frac=(m.memory_used_max_mib / total) if total else None,
                kernel_busy=m.busy_kernels_max > 0,
                user_active=False,  # user actions come as last_activity, not per minute
            )
        )
    return signals


async def enforce_culling(
    ledger: Ledger,
    hub: HubClient,
    now: datetime,
    config: dict,
    notify: NotifyCull,
    tz: ZoneInfo,
    memory_threshold: float = 0.9,
    memory_minutes: int = 10,
) -> TickResult:
    """Warn, then stop, the servers the cull rules judge idle; cancel warnings that activity answered.

    The signals are the per-minute samples the servers pushed and the last
    activity they reported (kernel and terminal use, never the Lab's polling).
    The warning time is kept in the ledger, so a restarted service neither
    forgets a warning nor stops a server it has not warned. The stop reason is
    the rule (``gpu_idle``, ``inactive``, ``max_age``).
    """
    from jupyterhub_gpu.service.domain.culling import evaluate, gpu_memory_high, memory_notice, rules_for

    result = TickResult()
    for s in ledger.open_sessions():
        result.users_checked += 1
        signals = session_signals(ledger, s, now)
        rules = rules_for(s.profile, s.group_list, config)
        decision = evaluate(
            rules,
            _aware(s.started),
            now,
            signals,
            last_user_activity=_aware(s.last_activity),
            has_gpu=s.gpu_count > 0,
            warned=_aware(s.cull_warned_at),
            tz=tz,
        )
        if decision.action == "warn":
            ledger.set_cull_warning(s.id, now, decision.rule.kind)
            await notify(s, decision)
            result.alerts.append((s.user, s.id, 0))
        elif decision.action == "cancel":
            ledger.set_cull_warning(s.id, None, None)
            await notify(s, decision)
        elif decision.action == "stop":
            ledger.set_pending_stop_reason(s.id, decision.rule.kind)
            try:
                await hub.stop_server(s.user, s.server_name)
            except HubAPIError as e:
                log.error("could not stop idle %s/%s: %s", s.user, s.server_name, e)
                continue
            log.info("stopped %s/%s: %s", s.user, s.server_name, decision.rule.kind)
            result.stopped.append((s.user, s.server_name))
            continue
        if s.gpu_count and gpu_memory_high(signals, memory_threshold, memory_minutes):
            # once per session: a notice, never a stop
            if ledger.claim_alert(s.user, f"session:{s.id}", s.started, 90, "lab", now):
                ledger.add_notice(
                    s.user, "advice", memory_notice(memory_threshold, memory_minutes), now, "info", session_id=s.id
                )
    return result
