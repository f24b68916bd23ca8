"""The metering tick: budget alerts and stops, culling, jobs, run notices, advice, and the rare reconciliation.

Plain coroutines over the ledger (:mod:`jupyterhub_gpu.ledger`), the rules
(:mod:`.domain`), the one gateway for notices (:mod:`.notify`) and the one hub
client (:mod:`.hubapi`), so that tests can drive a tick with any clock. The
service's Application only schedules them. Every warning goes out through the
gateway before the stop it announces (invariant 6): a stop comes in a later
tick than its warning, and only once the warning is recorded.

The tick runs on the service's event loop, beside the requests (samples every
30 s from each server). A pass over a thousand sessions takes a second of CPU,
so each pass lets the loop run the requests that wait at least every
:data:`LOOP_SLICE` (:class:`LoopSlice`), and reads the sessions' samples a
chunk at a time (:data:`CHUNK`, one query each) instead of once per session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from jupyterhub_gpu.billing import BudgetStatus, crossed_thresholds
from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.ledger.models import JobRecord, SessionRecord
from jupyterhub_gpu.ledger.queries.channels import channel_owners
from jupyterhub_gpu.ledger.queries.jobs import (
    ACTIVE_STATES,
    SERVER_PREFIX,
    active_jobs,
    ended_jobs_still_running,
    finished_runs,
    get_job,
    job_session,
    update_job,
)
from jupyterhub_gpu.ledger.queries.overrides import load_overrides
from jupyterhub_gpu.ledger.queries.samples import memory_unknown, session_minutes, sessions_minutes
from jupyterhub_gpu.ledger.queries.schedule import StopOrder, get_reservation, mark_order, preemptions, stop_orders
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.domain.advice import (
    NOTICE_WITHIN,
    Advice,
    AdviceSettings,
    advice_message,
    advise,
    catalogue,
    digest_message,
    digest_window,
    facts_of,
    sessions_to_judge,
    store,
    summarize,
    summary,
)
from jupyterhub_gpu.service.domain.alerts import BudgetAlert, budget_message, budget_once
from jupyterhub_gpu.service.domain.culling import (
    MAX_MINUTES,
    MinuteSignal,
    cap_message,
    cap_reached,
    cull_message,
    evaluate,
    gpu_memory_high,
    memory_message,
    rules_for,
)
from jupyterhub_gpu.service.domain.jobs import (
    START_TIMEOUT,
    TIME_LIMIT_MARGIN,
    run_job,
    run_notice,
    run_once,
)
from jupyterhub_gpu.service.domain.moves import affordable_for, restart_options
from jupyterhub_gpu.service.domain.notices import CHANNELS, AlertSettings, Once
from jupyterhub_gpu.service.domain.overrides import apply_to_pricing
from jupyterhub_gpu.service.domain.schedule import (
    PREEMPTED,
    RESUME_CLAIM,
    booking_cancelled,
    order_message,
    order_once,
    resume_once,
    resume_options,
    resume_refused_message,
    withdrawn_message,
    withdrawn_once,
)
from jupyterhub_gpu.service.hubapi import HubAPIError, HubClient
from jupyterhub_gpu.service.notify import Notifier, lab_notice, passed, send_once
from jupyterhub_gpu.session import SessionStart, StopReason, kept_stop_reason

log = logging.getLogger("jupyterhub_gpu.service")
job_log = logging.getLogger("jupyterhub_gpu.jobs")

#: The longest stretch a pass of the tick holds the event loop before the requests that wait get their turn
#: (about the SampleBatcher's window: a push that lands in the tick waits at most this long more).
LOOP_SLICE = 0.02
#: Sessions whose samples one query reads (culling, advice): a few hundred bound ids at most.
CHUNK = 100


class LoopSlice:
    """Awaited between the steps of a pass: gives the event loop a turn once the pass has held it ``seconds``.

    The pass goes on with what it read (a session's state read before the turn is
    judged as read, as it was across the awaits of notices and stops before).
    """

    def __init__(self, seconds: float | None = None):
        self.seconds = LOOP_SLICE if seconds is None else seconds
        self.since = time.perf_counter()

    async def __call__(self) -> None:
        if time.perf_counter() - self.since >= self.seconds:
            await asyncio.sleep(0)
            self.since = time.perf_counter()


def chunks(items: list, size: int = CHUNK) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


async def open_session_pages(ledger: Ledger, pause: LoopSlice) -> AsyncIterator[list[SessionRecord]]:
    """The open sessions, a page of :data:`CHUNK` at a time (in id order), the loop's turn before each page.

    Each page is read when it is reached: a session that opens or closes during the pass is judged as the
    page that holds it finds it (as by a pass that began a moment earlier or later).
    """
    after = None
    while True:
        await pause()
        page = ledger.open_sessions(after=after, limit=CHUNK)
        if not page:
            return
        yield page
        if len(page) < CHUNK:
            return
        after = page[-1].id


#: Called for each (user, status, threshold) newly reached; delivers the alert.
Notify = Callable[[str, tuple[str, ...], BudgetStatus, int], Awaitable[None]]


@dataclass
class TickHealth:
    """How the service's ticks went since it started, for ``/metrics``: counts by outcome and the last good one.

    A tick is ``ok`` when every part of it (reconciliation, budgets, culling, schedule, jobs, run notices, advice) ran
    without an error, else ``failed``; ``last_ok`` is the Unix time of the last ``ok`` one, ``started`` the
    service's start.
    """

    interval: float = 0.0
    started: float = field(default_factory=time.time)
    ok: int = 0
    failed: int = 0
    last_ok: float | None = None

    def record(self, ok: bool, at: float) -> None:
        if ok:
            self.ok += 1
            self.last_ok = at
        else:
            self.failed += 1


@dataclass
class TickResult:
    users_checked: int = 0
    alerts: list[tuple[str, str, int]] = field(default_factory=list)
    stopped: list[tuple[str, str]] = field(default_factory=list)


def budget_notify(notifier: Notifier, currency: Currency, grace_seconds: int, tz: ZoneInfo) -> Notify:
    """The ``notify`` of :func:`enforce_budgets`: each alert on every channel, once per threshold and period."""

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
                        passed(ledger, Once(user, rule.key, status.period_start, lower, rule.revision), channel, now)
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
            kept = await stop_session(ledger, hub, s, StopReason.BUDGET)
        except HubAPIError as e:
            log.error("could not stop %s/%s for its budget: %s", s.user, s.server_name, e)
            continue
        if kept is None:
            continue
        log.info("stopped %s/%s: budget used up (the stop's reason: %s)", s.user, s.server_name, kept)
        tick.result.stopped.append((s.user, s.server_name))


async def stop_session(ledger: Ledger, hub: HubClient, session: SessionRecord, reason: str) -> str | None:
    """Ask the hub to stop the server of ``session``, for ``reason``: the reason its stop keeps, or None
    (nothing asked) once it has closed.

    The reason goes through the one precedence rule (:meth:`Ledger.claim_stop_reason`): where a stop is
    already under way for a reason that stays (a budget stop when a preemption comes due, the student's own
    stop), the hub is asked all the same (a stop it has under way is not started twice) and the caller gets
    that reason, to act on what really stops the server. A pass judges the sessions it read before its awaits
    (notices, other stops: seconds, on a slow channel more). Meanwhile the user may have stopped that session
    and started a new one on the same server name: the hub's stop names a server, not a session, so without
    this check the new server would be stopped for the old session's idleness or order. The spawner records a
    stop before the server can start again.
    """
    kept = ledger.claim_stop_reason(session.id, reason)
    if kept is None:
        log.info(
            "%s/%s: its session %s closed before the %s stop", session.user, session.server_name, session.id, reason
        )
        return None
    if kept != reason:
        log.info(
            "%s/%s: stopping already for %s, which stays (not %s)", session.user, session.server_name, kept, reason
        )
    await hub.stop_server(session.user, session.server_name)
    return kept


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
            stop_at = aware_utc(s.last_seen) or aware_utc(s.started)
            if self.ledger.record_stop(s.id, stop_at, StopReason.RECONCILED):
                closed.append(s.id)
            self.missing.pop(s.id, None)
        # starts the spawner could not record: taken from the hub's server state where readable
        known = {s.id for s in open_sessions}
        for (user, name), entry in active.items():
            gpu = ((entry["server"] or {}).get("state") or {}).get("gpu") or {}
            sid = gpu.get("session_id")
            if not sid or sid in known or self.ledger.get_session(sid) is not None:
                continue
            self.ledger.record_start(SessionStart.from_spawner_state(user, name, entry.get("groups", []), gpu))
            recorded.append(sid)
            alive.append(sid)
        self.ledger.mark_seen(alive, now)
        return {"alive": len(alive), "closed": closed, "recorded": recorded}


# -- culling ---------------------------------------------------------------------------------


def signals_since(session, now: datetime) -> datetime:
    """The first minute whose samples the cull rules of a session read: its start's, at most MAX_MINUTES back."""
    return max(aware_utc(session.started), now - timedelta(minutes=MAX_MINUTES)).replace(second=0, microsecond=0)


def sessions_signals(ledger: Ledger, sessions, now: datetime) -> dict[str, list]:
    """The minute signals of many sessions (from the samples their servers pushed, oldest first), in one query."""
    found = sessions_minutes(ledger, {s.id: signals_since(s, now) for s in sessions})
    return {sid: minute_signals(minutes) for sid, minutes in found.items()}


def minute_signals(minutes) -> list:
    """The cull rules' signals of a session's minute rows (oldest first)."""
    signals = []
    for m in minutes:
        total = m.memory_total_mib or 0
        # a share in a container cannot measure its own memory: that minute's memory is unknown, not 0
        total = 0 if memory_unknown(m) else total
        signals.append(
            MinuteSignal(
                at=aware_utc(m.minute),
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
    notifier: Notifier,
    tz: ZoneInfo,
    memory_threshold: float = 0.9,
    memory_minutes: int = 10,
    currency: Currency | None = None,
    advice_settings: AdviceSettings | None = None,
) -> TickResult:
    """Warn, then stop, the servers the cull rules judge idle; cancel warnings that activity answered.

    The signals are the per-minute samples the servers pushed and the last
    activity they reported (kernel and terminal use, never the Lab's polling).
    The warning time is kept in the ledger, so a restarted service neither
    forgets a warning nor stops a server it has not warned. The warning (and
    its cancellation) goes out through the gateway: in JupyterLab, and by mail
    and webhook where configured. The stop reason is the rule (``gpu_idle``,
    ``inactive``, ``max_age``, ``busy_gpu_idle``).
    """
    result = TickResult()
    pause = LoopSlice()
    catalogue_options = None  # the published profiles, as the advice sees them: read at the first GPU session
    async for chunk in open_session_pages(ledger, pause):
        # read right before its chunk is judged, so the samples are as fresh as one query per session read them
        signals_of = sessions_signals(ledger, chunk, now)
        for s in chunk:
            await pause()
            result.users_checked += 1
            signals = signals_of[s.id]
            rules = rules_for(s.profile, s.group_list, config)
            decision = evaluate(
                rules,
                aware_utc(s.started),
                now,
                signals,
                last_user_activity=aware_utc(s.last_activity),
                has_gpu=s.gpu_count > 0,
                warned=aware_utc(s.cull_warned_at),
                tz=tz,
            )
            if decision.action == "warn":
                ledger.set_cull_warning(s.id, now, decision.rule.kind)
                await notifier.send(cull_message(s, decision, notifier.settings), CHANNELS)
                result.alerts.append((s.user, s.id, 0))
            elif decision.action == "cancel":
                ledger.set_cull_warning(s.id, None, None)
                await notifier.send(cull_message(s, decision, notifier.settings), CHANNELS)
            elif decision.action == "stop":
                try:
                    kept = await stop_session(ledger, hub, s, decision.rule.kind)
                except HubAPIError as e:
                    log.error("could not stop idle %s/%s: %s", s.user, s.server_name, e)
                    continue
                if kept is None:
                    continue
                log.info("stopped %s/%s: %s (the stop's reason: %s)", s.user, s.server_name, decision.rule.kind, kept)
                result.stopped.append((s.user, s.server_name))
                continue
            if catalogue_options is None and s.gpu_count:
                catalogue_options = memory_options(ledger, advice_settings)  # read once per pass
            if s.gpu_count and cap_reached(s, signals, memory_threshold, catalogue_options):
                # a share's (or MIG slice's) cap nearly reached (issue 17): at once, naming the cap and a bigger one
                job_server = s.server_name.startswith(SERVER_PREFIX)
                # a bigger profile is named only when its budgets can pay for it
                affordable = affordable_for(ledger, s, now, tz, currency.format) if currency is not None else None
                message, key = cap_message(
                    s, signals, catalogue_options, None if job_server else currency, affordable=affordable
                )
                await notifier.send(message, ("lab",), once=key, now=now)
            elif s.gpu_count and gpu_memory_high(signals, memory_threshold, memory_minutes):
                # once per session: a notice, never a stop
                # the notice names the next bigger profile the user may use, at the rate the spawner charges
                # (not for a job's server: nobody watches its Lab, and a job cannot be restarted on another profile)
                job_server = s.server_name.startswith(SERVER_PREFIX)
                options = () if currency is None or job_server else memory_options(ledger, advice_settings)
                affordable = affordable_for(ledger, s, now, tz, currency.format) if currency is not None else None
                message, key = memory_message(
                    s, memory_threshold, memory_minutes, options, currency, affordable=affordable
                )
                await notifier.send(message, ("lab",), once=key, now=now)
    return result


def memory_options(ledger: Ledger, settings: AdviceSettings | None):
    """The profiles a "GPU memory high" notice chooses from: as the advice sees them (the admins' edits applied)."""
    return catalogue(apply_to_pricing(ledger.pricing(), load_overrides(ledger)), settings or AdviceSettings())


# -- jobs and finished runs ------------------------------------------------------------------


async def enforce_jobs(ledger: Ledger, hub: HubClient, now: datetime) -> dict:
    """End the jobs the runner could not: over the time limit, never started, or whose server went away.

    A job reported ended whose server still runs a margin later is stopped too: an ended
    job holds no slot and no time limit, so its server must not keep running. A job whose server was
    preempted (issue 16) is not lost: it goes back to ``starting`` and its server is started again, once
    (:func:`requeue_job`); the runner then resumes it (from its checkpoint with ``CheckpointAndResume``).
    """
    summary = {"time_limit": [], "lost": [], "ended_still_running": [], "requeued": []}
    for job, session in ended_jobs_still_running(ledger, now, TIME_LIMIT_MARGIN):
        ledger.claim_stop_reason(session.id, StopReason.JOB_FINISHED)
        try:
            await hub.remove_server(job.user, job.server_name)
        except HubAPIError as e:
            job_log.error("could not stop the server of ended job %s: %s", job.id, e)
            continue
        summary["ended_still_running"].append(job.id)
    for job in active_jobs(ledger):
        session = job_session(ledger, job)
        if session is not None and session.stopped is not None and session.stop_reason == StopReason.PREEMPTED:
            outcome = await requeue_job(ledger, hub, job, session, now)
            if outcome == "requeued":
                summary["requeued"].append(job.id)
            elif outcome == "failed":
                summary["lost"].append(job.id)
            continue
        if session is not None and session.stopped is not None:
            # the server is gone and the runner never reported the end (killed, crashed, stopped by hand)
            reason = session.stop_reason or StopReason.STOPPED
            error = f"The job's server stopped ({reason}) before the notebook finished."
            if update_job(ledger, job.id, state="failed", finished=aware_utc(session.stopped), error=error):
                summary["lost"].append(job.id)
            continue
        started = aware_utc(job.started) or (aware_utc(session.started) if session else None)
        if started is not None and now - started > timedelta(seconds=job.time_limit_seconds) + TIME_LIMIT_MARGIN:
            kept = StopReason.JOB_TIME_LIMIT
            if session is not None:
                kept = ledger.claim_stop_reason(session.id, StopReason.JOB_TIME_LIMIT) or kept
            error = f"Stopped by the service: over the time limit of {job.time_limit_seconds // 60} minute(s)."
            try:
                await hub.remove_server(job.user, job.server_name)
            except HubAPIError as e:
                job_log.error("could not stop job %s over its time limit: %s", job.id, e)
                continue
            if kept != StopReason.JOB_TIME_LIMIT:
                # stopping already for a reason that stays (its budget): the job ends with that reason once its
                # server has stopped (above)
                job_log.info("job %s over its time limit while its server stops (%s)", job.id, kept)
                continue
            update_job(ledger, job.id, state="timed_out", finished=now, error=error)
            summary["time_limit"].append(job.id)
            continue
        if job.state == "starting" and session is None and now - aware_utc(job.created) > START_TIMEOUT:
            user = await hub.user(job.user)
            server = ((user or {}).get("servers") or {}).get(job.server_name)
            if server is None or not server.get("pending"):
                update_job(ledger, job.id, state="failed", finished=now, error="The job's server did not start.")
                summary["lost"].append(job.id)
    return summary


# -- the schedule: stop orders, resumes (issue 16) ----------------------------------------------------


#: How long after a preemption's stop its server is still put back in the queue: the hub stops a server within
#: a minute; a service that was down longer than this leaves the restart to the user.
RESUME_WITHIN = timedelta(hours=6)


@dataclass
class ScheduleFollow:
    """What :func:`enforce_schedule` keeps between ticks: the preemptions it carried out whose sessions have not
    closed yet (by session id), to put them back in the queue once they have.

    A restarted service reads them again from the ledger's preemption records (``loaded``); each is resumed once
    whatever the restarts (its claim in ``gpu_alerts``).
    """

    waiting: dict[str, StopOrder] = field(default_factory=dict)
    loaded: bool = False


def _claim(ledger: Ledger, key: Once, now: datetime) -> bool:
    return ledger.claim_alert(key.user, key.key, key.period_start, key.threshold, RESUME_CLAIM, now, key.revision)


def _unclaim(ledger: Ledger, key: Once) -> None:
    ledger.release_alert(key.user, key.key, key.period_start, key.threshold, RESUME_CLAIM, key.revision)


async def _back_already(ledger: Ledger, hub: HubClient, user: str, server_name: str, since: datetime) -> bool:
    """Whether the server is back (started again after ``since``, or waiting in the hub's queue) without us."""
    if any(s.server_name == server_name and aware_utc(s.started) > since for s in ledger.open_sessions_of(user)):
        return True
    model = await hub.user(user)
    server = ((model or {}).get("servers") or {}).get(server_name)
    return server is not None and bool(server.get("pending") or server.get("ready"))


async def requeue_job(ledger: Ledger, hub: HubClient, job: JobRecord, session: SessionRecord, now: datetime) -> str:
    """Put a job whose server was preempted back in the queue, once: ``requeued``, ``waiting`` (requeued before:
    its server waits in the hub's queue; or the job moved on since ``job`` was read, cancelled say: its server is
    not started, and the next tick judges it afresh), ``retry`` (the hub did not answer: next tick) or ``failed``.

    The job goes back to ``starting`` (its time limit counts again from the new run's start) and its server
    ``job-<id>`` is started again with the job's profile: it waits in the hub's queue like any request, and its
    runner runs the notebook again (``CheckpointAndResume`` goes on from its last checkpoint). A refusal by the
    hub (a budget that cannot pay, a profile gone) fails the job with the hub's message.
    """
    key = resume_once(session)
    if _claim(ledger, key, now):
        # only from the state read before this tick's awaits: a job cancelled (or ended) since is not started again
        if not update_job(
            ledger, job.id, only_if=(job.state,), state="starting", started=None, session_id=session.id, error=None
        ):
            _unclaim(ledger, key)  # the next tick judges the job as it is now
            job_log.info(
                "job %s moved on (%s before) while its server was preempted: not started again", job.id, job.state
            )
            return "waiting"
        # the same group pays as for the run it replaces (service/domain/moves.py)
        options = {**restart_options(session, job.profile), "job_id": job.id}
        try:
            await hub.start_server(job.user, job.server_name, options, display_name=job.id, language=session.language)
        except HubAPIError as e:
            status, message = e.refusal()
            if status >= 500:
                _unclaim(ledger, key)
                job_log.warning("job %s: its server was preempted and could not be started again yet: %s", job.id, e)
                return "retry"
            error = f"The job's server was preempted and could not be started again: {message}"
            update_job(ledger, job.id, state="failed", finished=now, error=error)
            job_log.error("job %s: %s", job.id, error)
            return "failed"
        job_log.info("job %s: its server was preempted; back in the queue to run again", job.id)
        return "requeued"
    if job.state == "starting" and now - aware_utc(session.stopped) > START_TIMEOUT:
        if not await _back_already(ledger, hub, job.user, job.server_name, aware_utc(session.stopped)):
            error = "The job's server did not start again after it was preempted."
            update_job(ledger, job.id, state="failed", finished=now, error=error)
            return "failed"
    return "waiting"


async def enforce_schedule(
    ledger: Ledger,
    hub: HubClient,
    now: datetime,
    notifier: Notifier,
    tz: ZoneInfo,
    follow: ScheduleFollow | None = None,
) -> dict:
    """Carry out the hub scheduler's stop orders (preemptions, reservation ends), and resume what asked for it.

    Each order (:func:`~jupyterhub_gpu.ledger.queries.schedule.stop_orders`, the pending ones, one query):

    - whose session has closed (stopped by its user, culled...): done, nothing else (but a session the hub
      stopped for this very preemption, the service gone before it marked the order done, is still resumed);
    - withdrawn by the hub (its cause is gone: the GPU is not needed after all, the booking was cancelled):
      it never stops the server; if its notice went out, its user is told the stop is off, and why where the
      order's row tells it (a reservation's end whose booking is gone), through the same gateway and events
      (:func:`.domain.schedule.withdrawn_message`), once per withdrawal; then it is done;
    - not noticed yet (new, or moved earlier by the hub): its notice goes out at once through the gateway
      (JupyterLab, and mail and webhooks where configured; event ``preemption`` or ``cull``:
      :func:`.domain.schedule.order_message`), once per channel for the order as given, and it is noticed;
    - whose time has come (:func:`due_at`: a preemption gives its whole grace from its notice, even a late one),
      noticed in an earlier tick (the notice comes before the stop, as an idle warning does: invariant 6): read
      again (the hub may have withdrawn it during this tick's awaits), the session's pending stop reason becomes
      the order's kind (``preempted`` or ``reserved``), the hub stops the server, and the order is done. A hub
      that fails is tried next tick.

    A preempted session whose user asked to be put back in the queue (``resume``) is started again through the
    hub once its session has closed, with the same profile and pool, once (its claim in ``gpu_alerts``): it
    then waits in the hub's queue like any request. A notebook job's server is put back by
    :func:`enforce_jobs` (the job goes back to ``starting``). ``follow`` keeps the preemptions whose sessions
    have not closed yet between ticks (None: read them from the ledger each time).
    """
    result = {"noticed": [], "stopped": [], "closed": [], "withdrawn": [], "resumed": [], "refused": []}
    follow = follow if follow is not None else ScheduleFollow()
    if not follow.loaded:
        for order in preemptions(ledger, now - RESUME_WITHIN):
            if order.done_at is not None and now - order.done_at <= RESUME_WITHIN:
                follow.waiting.setdefault(order.session_id, order)
        follow.loaded = True
    orders = stop_orders(ledger)
    models: dict[str, str] | None = None  # profile -> GPU model, read at the first notice
    for order in orders:
        session = ledger.get_session(order.session_id)
        if session is None or session.stopped is not None:
            mark_order(ledger, order.session_id, done=now)
            result["closed"].append(order.session_id)
            if _preempted_for_this(order, session, now):
                # stopped by the hub for this order, the service gone before it marked it done: resume all the same
                follow.waiting.setdefault(order.session_id, replace(order, done_at=now))
            continue
        if order.withdrawn_at is not None:
            await _close_withdrawn(ledger, order, tz, now, notifier, result)
            continue
        if kept_stop_reason(session.pending_stop_reason, order.kind) != order.kind:
            # a stop is under way for a reason that stays (its budget, a cull, its user's own): it frees the GPU,
            # so the order is done, with no notice of a stop that will not be the order's
            await _overtaken(ledger, hub, session, order, now, result)
            continue
        if order.noticed_at is None:
            if models is None:
                models = {p["slug"]: p["gpu_model"] for p in ledger.pricing() if p.get("gpu_model")}
            job_id = _job_id(ledger, session)
            told = replace(order, stop_at=due_at(order, now))  # a late preemption's notice names the later stop
            message = order_message(told, session, tz, now, notifier.settings, models.get(session.profile), job_id)
            await notifier.send(message, CHANNELS, once=order_once(order), now=now)
            if not mark_order(ledger, order.session_id, noticed=now, as_read=order):
                # moved (told again next tick) or withdrawn (called off next tick) while the notice went out
                log.info("%s/%s: the order changed while its notice went out", order.user, order.server_name)
                continue
            result["noticed"].append(order.session_id)
            log.info("%s/%s told: %s at %s", order.user, order.server_name, order.kind, told.stop_at)
            continue
        if due_at(order, order.noticed_at) > now:
            continue
        # the notices and stops above awaited: the hub may have withdrawn (or moved) this order meanwhile
        current = next(iter(stop_orders(ledger, [order.session_id])), None)
        if current is None or current.noticed_at is None or due_at(current, current.noticed_at) > now:
            continue  # done, or moved later or earlier (told again first)
        if current.withdrawn_at is not None:
            await _close_withdrawn(ledger, current, tz, now, notifier, result)
            continue
        try:
            kept = await stop_session(ledger, hub, session, current.kind)
        except HubAPIError as e:
            log.error("could not stop %s/%s (%s): %s", session.user, session.server_name, current.kind, e)
            continue
        if kept is None:
            continue  # closed since it was read: the next tick marks its order done
        mark_order(ledger, order.session_id, done=now)
        if kept != current.kind:  # another pass of this tick (the budget's) stopped it first, for a reason that stays
            log.info(
                "%s/%s: its %s order is done by the %s stop", session.user, session.server_name, current.kind, kept
            )
            result["closed"].append(order.session_id)
            continue
        log.info("stopped %s/%s: %s", session.user, session.server_name, current.kind)
        result["stopped"].append((session.user, session.server_name))
        if current.kind == PREEMPTED:
            follow.waiting[order.session_id] = replace(current, done_at=now)
    for session_id, order in list(follow.waiting.items()):
        session = ledger.get_session(session_id)
        if session is None or (session.stopped is None and now - (order.done_at or now) > RESUME_WITHIN):
            follow.waiting.pop(session_id, None)
            continue
        if session.stopped is None:
            continue  # the hub is stopping it
        follow.waiting.pop(session_id, None)
        if session.stop_reason != StopReason.PREEMPTED or not session.resume:
            continue
        if session.server_name.startswith(SERVER_PREFIX):
            continue  # a job's server: enforce_jobs puts its job back in the queue
        outcome = await resume_server(ledger, hub, session, now, notifier)
        if outcome == "retry":
            follow.waiting[session_id] = order
        elif outcome in ("resumed", "refused"):
            result[outcome].append(session_id)
    return result


def due_at(order: StopOrder, noticed: datetime) -> datetime:
    """When an order noticed at ``noticed`` may be carried out: a preemption no sooner than the grace the hub
    promised (``stop_at - decided_at``) after its notice, so a notice that went out late (the service was down)
    still gives the whole grace; a reservation's end at its time (the class needs its GPUs), a tick after its
    notice at the earliest."""
    if order.kind != PREEMPTED:
        return order.stop_at
    return max(order.stop_at, noticed + (order.stop_at - order.decided_at))


async def _overtaken(
    ledger: Ledger, hub: HubClient, session: SessionRecord, order: StopOrder, now: datetime, result: dict
) -> None:
    """An order whose session is stopping for a reason that stays: the hub is asked to stop it (as that stop
    has), and the order is done; a hub that fails is asked again next tick."""
    try:
        kept = await stop_session(ledger, hub, session, order.kind)
    except HubAPIError as e:
        log.error("could not stop %s/%s (%s): %s", session.user, session.server_name, session.pending_stop_reason, e)
        return
    mark_order(ledger, order.session_id, done=now)
    result["closed"].append(order.session_id)
    log.info("%s/%s: its %s order is done by the %s stop", order.user, order.server_name, order.kind, kept)


def _preempted_for_this(order: StopOrder, session: SessionRecord | None, now: datetime) -> bool:
    """Whether a closed session was stopped by its preemption order (and recently enough to be resumed)."""
    return (
        session is not None
        and order.kind == PREEMPTED
        and session.stop_reason == StopReason.PREEMPTED
        and now - aware_utc(session.stopped) <= RESUME_WITHIN
    )


async def _close_withdrawn(
    ledger: Ledger, order: StopOrder, tz: ZoneInfo, now: datetime, notifier: Notifier, result: dict
) -> None:
    """A withdrawn order never stops its server: its user, if told of the stop, is told it is off; then it is done."""
    if order.noticed_at is not None:
        told = replace(order, stop_at=due_at(order, order.noticed_at))  # the time its notice named
        cancelled = booking_cancelled(order, lambda booking: get_reservation(ledger, booking, tz) is not None)
        message = withdrawn_message(told, tz, now, notifier.settings, cancelled=cancelled)
        await notifier.send(message, CHANNELS, once=withdrawn_once(order), now=now)
    if not mark_order(ledger, order.session_id, done=now, as_read=order):
        # ordered again while the "stop is off" went out: the new order is told, and carried out, as any other
        log.info("%s/%s: ordered again while its withdrawal was told", order.user, order.server_name)
        return
    result["withdrawn"].append(order.session_id)
    log.info("%s/%s: the %s stop at %s is withdrawn", order.user, order.server_name, order.kind, order.stop_at)


def _job_id(ledger: Ledger, session: SessionRecord) -> str | None:
    """The notebook job a session's server runs (its own: the user's server ``job-<id>``), or None."""
    if not session.server_name.startswith(SERVER_PREFIX):
        return None
    job = get_job(ledger, session.server_name[len(SERVER_PREFIX) :])
    return job.id if job is not None and job.user == session.user else None


async def resume_server(ledger: Ledger, hub: HubClient, session: SessionRecord, now: datetime, notifier: Notifier):
    """Start a preempted server again, once: ``resumed``, ``back`` (its user started it already), ``told``
    (resumed before), ``retry`` (the hub did not answer) or ``refused`` (the hub said no: its user is told)."""
    key = resume_once(session)
    if not _claim(ledger, key, now):
        return "told"
    try:
        if await _back_already(ledger, hub, session.user, session.server_name, aware_utc(session.stopped)):
            return "back"
        await hub.start_server(session.user, session.server_name, resume_options(session), language=session.language)
    except HubAPIError as e:
        status, message = e.refusal()
        if status >= 500:
            _unclaim(ledger, key)
            log.warning("could not put %s/%s back in the queue yet: %s", session.user, session.server_name, e)
            return "retry"
        log.error("the hub would not put %s/%s back in the queue: %s", session.user, session.server_name, message)
        await notifier.send(resume_refused_message(session, message, notifier.settings), CHANNELS, now=now)
        return "refused"
    log.info("preempted %s/%s is back in the queue", session.user, session.server_name)
    return "resumed"


#: Called once per finished run and channel: (session, job or None, channel) -> delivered.
AnnounceRun = Callable[[SessionRecord, "JobRecord | None", str], Awaitable[None]]


def run_announcer(notifier: Notifier, currency: Currency) -> AnnounceRun:
    """The ``announce`` of :func:`announce_finished_runs`: a run's notice on one channel (raises if not delivered)."""

    async def announce(session: SessionRecord, job: JobRecord | None, channel: str) -> None:
        message = run_notice(session, job, currency, notifier.settings)
        await notifier.deliver(channel, message, once=run_once(session))

    return announce


async def announce_finished_runs(
    ledger: Ledger, now: datetime, announce: AnnounceRun, channels: tuple[str, ...], window=timedelta(hours=1)
) -> int:
    """Tell each user once per channel that their run finished, with its cost; returns how many were sent.

    The claim in ``gpu_alerts`` (key ``run:<session>``) comes before the send,
    as for budget alerts: a failed send releases it and is tried next tick.
    """
    sent = 0
    for session in finished_runs(ledger, now - window):
        job = None
        if session.server_name.startswith(SERVER_PREFIX):
            job = run_job(session, get_job(ledger, session.server_name[len(SERVER_PREFIX) :]))
            if job is not None and job.state in ACTIVE_STATES:
                continue  # the runner's report (or the tick) settles the state first
        key = run_once(session)
        for channel in channels:
            send = lambda session=session, job=job, channel=channel: announce(session, job, channel)  # noqa: E731
            sent += await send_once(ledger, key, channel, now, send, f"run notice of {session.id}", job_log.name)
    return sent


# -- right-sizing advice ---------------------------------------------------------------------


def judge(
    ledger: Ledger,
    record: SessionRecord,
    now: datetime,
    settings: AdviceSettings,
    currency: Currency,
    options,
    minutes: list | None = None,
) -> Advice:
    """Advise a session from its minutes (read here unless given) and store the advice."""
    facts = facts_of(record, now, options)
    if minutes is None:
        minutes = session_minutes(ledger, record.id)
    advice = advise(facts, summarize(minutes), options, settings, currency)
    store(ledger, facts, advice, now)
    return advice


def update_advice(ledger: Ledger, now: datetime, settings: AdviceSettings, currency: Currency) -> dict:
    """One pass of the tick: final advice for newly closed sessions, live advice for long-running ones.

    A closed session is judged once, ``CLOSE_DELAY`` after its stop (its last
    samples arrive late), and its user gets a Lab notice when it was advised. A
    running session is judged once it has run ``live_after_minutes`` and again
    every ``LIVE_REFRESH`` (:func:`.advice.sessions_to_judge`). The service runs
    the same pass through :func:`advise_sessions`, which lets the event loop in
    between sessions.
    """
    result = {"final": 0, "live": 0, "advised": 0}
    for _ in _advice_steps(ledger, now, settings, currency, result):
        pass
    return result


async def advise_sessions(ledger: Ledger, now: datetime, settings: AdviceSettings, currency: Currency) -> dict:
    """:func:`update_advice` on the event loop: the loop gets a turn every :data:`LOOP_SLICE`."""
    result = {"final": 0, "live": 0, "advised": 0}
    pause = LoopSlice()
    for _ in _advice_steps(ledger, now, settings, currency, result):
        await pause()
    return result


def _advice_steps(ledger: Ledger, now: datetime, settings: AdviceSettings, currency: Currency, result: dict):
    """The advice pass, one step (a session judged, or a chunk's minutes read) per ``yield``; counts in ``result``."""
    closed, live = sessions_to_judge(ledger, now, settings)
    if not closed and not live:
        return
    # the rates and groups the spawner charges and allows: the admins' edits applied, as for GET pricing
    options = catalogue(apply_to_pricing(ledger.pricing(), load_overrides(ledger)), settings)
    for final, records in ((True, closed), (False, live)):
        for chunk in chunks(records):
            minutes = sessions_minutes(ledger, dict.fromkeys(r.id for r in chunk))
            yield
            for record in chunk:
                advice = judge(ledger, record, now, settings, currency, options, minutes[record.id])
                if final:
                    result["final"] += 1
                    if advice.advised:
                        result["advised"] += 1
                        if aware_utc(record.stopped) >= now - NOTICE_WITHIN:
                            lab_notice(ledger, advice_message(record, advice, currency), now)
                else:
                    result["live"] += 1
                yield


async def send_digests(
    ledger: Ledger,
    settings: AlertSettings,
    now: datetime,
    tz,
    currency: Currency,
    weekday: int,
    hour: int = 8,
    notifier: Notifier | None = None,
) -> list[str]:
    """Send each group's instructors the last week's digest, once per week, at or after ``weekday`` ``hour`` local.

    ``settings`` are the service's :class:`~.notices.AlertSettings`: a group gets
    its digest on its channels that want ``digest`` (configured or stored) and, with
    the deprecated mail settings, by mail to its ``instructor_emails``. A digest is
    claimed in the ledger before it is sent (once per group, week and channel,
    across restarts) and released when sending fails. Groups with nothing advised
    get nothing. Returns the groups that some channel got it for now.
    """
    notifier = notifier or Notifier(ledger, settings)
    groups = digest_groups(notifier)
    if not groups:
        return []
    since, due = digest_window(now, tz, weekday, hour)
    sent = []
    for group in groups:
        # a group's digest speaks the lab's default language (its channels and instructors have none of their own)
        lang = notifier.default_language
        report = summary(ledger, since, due, group, currency, lang)
        if not report["total"]["sessions_advised"]:
            continue
        to = settings.instructor_emails.get(group, ()) if settings.email_enabled else ()
        message, key = digest_message(group, to, report, since, due, tz, lang)
        if any((await notifier.send(message, ("apprise",), once=key, now=now)).values()):
            sent.append(group)
    return sent


def digest_groups(notifier: Notifier) -> list[str]:
    """The groups some channel wants the digest of: mail to ``instructor_emails``, configured or stored channels."""
    settings = notifier.settings
    groups = {g for g, to in settings.instructor_emails.items() if to} if settings.email_enabled else set()
    groups |= {c.owner for c in settings.channels if c.owner_kind == "group" and "digest" in c.events}
    if notifier.stored:
        groups |= set(channel_owners(notifier.ledger, "group", "digest"))
    return sorted(groups)
