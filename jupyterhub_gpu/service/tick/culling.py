"""Culling in the tick: warn, then stop, the servers the cull rules judge idle; the GPU-memory notices.

The rules are :mod:`jupyterhub_gpu.rules.culling`'s, the notices' words :mod:`..domain.culling`'s; this pass
reads the rules' inputs (the per-minute samples the servers pushed, the last activity they reported) from
the ledger, and applies their decisions through the gateway and the hub. A warning always comes before its
stop, and the warning time is kept in the ledger, so a restarted service neither forgets a
warning nor stops a server it has not warned.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.ledger.queries.jobs import SERVER_PREFIX
from jupyterhub_gpu.ledger.queries.samples import sessions_minutes
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.culling import evaluate
from jupyterhub_gpu.rules.cullrules import MAX_MINUTES, rules_for
from jupyterhub_gpu.rules.moves import affordable_for
from jupyterhub_gpu.rules.signals import MinuteReading, gpu_memory_high, minute_signals
from jupyterhub_gpu.service.domain.culling import cap_message, cap_reached, cull_message, memory_message
from jupyterhub_gpu.service.domain.notices import CHANNELS
from jupyterhub_gpu.service.feeds.advice import profile_options
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.tick.context import LoopSlice, TickContext, TickResult, open_session_pages
from jupyterhub_gpu.service.tick.stops import stop_session

log = logging.getLogger("jupyterhub_gpu.service")

#: A session's GPU memory this full (a fraction of it) ...
MEMORY_THRESHOLD = 0.9
#: ... for this many minutes in a row gets one notice naming a bigger profile (never a stop).
MEMORY_MINUTES = 10


def signals_since(session, now: datetime) -> datetime:
    """The first minute whose samples the cull rules of a session read: its start's, at most MAX_MINUTES back."""
    return max(aware_utc(session.started), now - timedelta(minutes=MAX_MINUTES)).replace(second=0, microsecond=0)


def sessions_signals(ledger: Ledger, sessions, now: datetime) -> dict[str, list]:
    """The minute signals of many sessions (from the samples their servers pushed, oldest first), in one query."""
    found = sessions_minutes(ledger, {s.id: signals_since(s, now) for s in sessions})
    return {sid: minute_signals(MinuteReading.of_row(m) for m in minutes) for sid, minutes in found.items()}


async def enforce_culling(ctx: TickContext, now: datetime) -> TickResult:
    """Warn, then stop, the servers the cull rules judge idle; cancel warnings that activity answered.

    The signals are the per-minute samples the servers pushed and the last
    activity they reported (kernel and terminal use, never the Lab's polling).
    The warning time is kept in the ledger, so a restarted service neither
    forgets a warning nor stops a server it has not warned. The warning (and
    its cancellation) goes out through the gateway: in JupyterLab, and by mail
    and webhook where configured. The stop reason is the rule (``gpu_idle``,
    ``inactive``, ``max_age``, ``busy_gpu_idle``). The rules are ``ctx.cull_rules``.
    """
    ledger, notifier, tz, currency = ctx.ledger, ctx.notifier, ctx.tz, ctx.currency
    config, advice_settings = ctx.cull_rules, ctx.advice_settings
    memory_threshold, memory_minutes = MEMORY_THRESHOLD, MEMORY_MINUTES
    result = TickResult()
    pause = LoopSlice()
    catalogue_options = None  # the published profiles, as the advice sees them: read at the first GPU session
    async for chunk in open_session_pages(ledger, pause):
        # read right before its chunk is judged, so the samples are as fresh as one query per session read them
        signals_of = sessions_signals(ledger, chunk, now)
        decisions = {}
        for s in chunk:
            await pause()
            result.users_checked += 1
            decisions[s.id] = evaluate(
                rules_for(s.profile, s.group_list, config),
                aware_utc(s.started),
                now,
                signals_of[s.id],
                last_user_activity=aware_utc(s.last_activity),
                has_gpu=s.gpu_count > 0,
                warned=aware_utc(s.cull_warned_at),
                tz=tz,
            )
        # the chunk's warnings and cancellations recorded in one transaction, before any of their notices
        marks = [
            (s.id, now, d.rule.kind) if d.action == "warn" else (s.id, None, None)
            for s in chunk
            if (d := decisions[s.id]).action in ("warn", "cancel")
        ]
        if marks:
            await ctx.write(Ledger.set_cull_warnings, marks)
        for s in chunk:
            await pause()
            signals, decision = signals_of[s.id], decisions[s.id]
            if decision.action == "warn":
                await notifier.send(cull_message(s, decision, notifier.settings), CHANNELS)
                result.alerts.append((s.user, s.id, 0))
            elif decision.action == "cancel":
                await notifier.send(cull_message(s, decision, notifier.settings), CHANNELS)
            elif decision.action == "stop":
                try:
                    kept = await stop_session(ctx, s, decision.rule.kind)
                except HubAPIError as e:
                    log.error("could not stop idle %s/%s: %s", s.user, s.server_name, e)
                    continue
                if kept is None:
                    continue
                log.info("stopped %s/%s: %s (the stop's reason: %s)", s.user, s.server_name, decision.rule.kind, kept)
                result.stopped.append((s.user, s.server_name))
                continue
            if catalogue_options is None and s.gpu_count:
                catalogue_options = profile_options(ledger, advice_settings)  # read once per pass
            if s.gpu_count and cap_reached(s, signals, memory_threshold, catalogue_options):
                # a share's (or MIG slice's) cap nearly reached: at once, naming the cap and a bigger one
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
                options = () if currency is None or job_server else profile_options(ledger, advice_settings)
                affordable = affordable_for(ledger, s, now, tz, currency.format) if currency is not None else None
                message, key = memory_message(
                    s, memory_threshold, memory_minutes, options, currency, affordable=affordable
                )
                await notifier.send(message, ("lab",), once=key, now=now)
    return result
