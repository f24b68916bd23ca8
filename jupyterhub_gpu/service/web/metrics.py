"""Prometheus metrics of the gpu service, computed from the ledger when Prometheus scrapes.

Named in JupyterHub's style (namespace ``jupyterhub_gpu``, ``<noun>_<verb>_<unit>``)
and kept in the service's own registry, so that nothing else in the process
leaks into ``/services/gpu/metrics``. Each scrape costs a few small queries: the
open sessions, one aggregate over stopped sessions, and two aggregates per
budget; none of them grows with the ledger's history. Budgets come from
:meth:`.ledger.Ledger.statuses_of`, as everywhere else.

Several hubs may share the ledger: the sessions' families carry a ``hub`` label (one value per hub, a handful)
and every hub's gpu service reports every hub, as its pages do; budgets hold across hubs and have none
(docs/monitoring.md, several hubs).

Counters count stopped sessions only: a stopped session's charge is final, so
the counters never go down; running sessions show in the ``active_*`` gauges.
Money is summed as integer micro-units and turned into a float only for the
exposition format, which has no other number type.

A ledger that cannot be read does not fail the scrape: the ledger's families are
left out and ``jupyterhub_gpu_ledger_up`` is 0, so Prometheus still sees the
service up and an alert can say which part is down. The ticks' outcomes come
from the service's :class:`~jupyterhub_gpu.service.tick.TickHealth`.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from zoneinfo import ZoneInfo

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from tornado import web

from jupyterhub_gpu.clock import aware_utc, utcnow
from jupyterhub_gpu.ledger.queries.samples import gpu_busy_marks
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import MICROS
from jupyterhub_gpu.rules import idle
from jupyterhub_gpu.service.notify import Notifier
from jupyterhub_gpu.service.tick import TickHealth
from jupyterhub_gpu.service.web.auth import SCOPE_METRICS_READ, BaseHandler
from jupyterhub_gpu.service.web.context import WebContext
from jupyterhub_gpu.session import StopReason

NAMESPACE = "jupyterhub_gpu"
log = logging.getLogger("jupyterhub_gpu.service")
#: How far back a session's GPU idleness is read: a session idle longer shows this long.
IDLE_HORIZON = timedelta(days=1)
#: A session whose server sent no sample for this long is not judged (its sampler may be gone).
SAMPLED_WITHIN = timedelta(minutes=10)
#: Sessions one idleness query asks about.
IDS_PER_QUERY = 500


class LedgerCollector:
    """A custom collector: every value is read from the ledger at scrape time."""

    def __init__(self, ledger: Ledger, tz: ZoneInfo, clock=utcnow):
        self.ledger = ledger
        self.tz = tz
        self.clock = clock

    def describe(self):
        # the names without touching the database (the registry calls this on register)
        return [
            GaugeMetricFamily(f"{NAMESPACE}_ledger_up", ""),
            GaugeMetricFamily(f"{NAMESPACE}_active_sessions", "", labels=["hub", "profile"]),
            GaugeMetricFamily(f"{NAMESPACE}_active_gpus", "", labels=["hub", "profile"]),
            GaugeMetricFamily(f"{NAMESPACE}_session_gpu_idle_seconds", "", labels=["hub", "user", "server", "profile"]),
            GaugeMetricFamily(f"{NAMESPACE}_busy_gpus", "", labels=["hub", "profile"]),
            CounterMetricFamily(f"{NAMESPACE}_billed_minutes", "", labels=["hub", "profile"]),
            CounterMetricFamily(f"{NAMESPACE}_spend", "", labels=["hub", "group", "profile", "currency"]),
            CounterMetricFamily(f"{NAMESPACE}_stops", "", labels=["hub", "reason"]),
            GaugeMetricFamily(f"{NAMESPACE}_budget_limit", "", labels=["scope", "subject", "unit"]),
            GaugeMetricFamily(f"{NAMESPACE}_budget_used", "", labels=["scope", "subject", "unit"]),
            GaugeMetricFamily(f"{NAMESPACE}_budget_remaining", "", labels=["scope", "subject", "unit"]),
        ]

    def collect(self):
        up = GaugeMetricFamily(
            f"{NAMESPACE}_ledger_up", "1 when the service could read the ledger for this scrape, else 0"
        )
        try:
            # every family read before any is given out: a ledger failing half-way gives none of them
            families = list(self._ledger_families(self.clock()))
        except Exception as e:
            log.warning("metrics: the ledger could not be read (%s: %s)", type(e).__name__, e)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _ledger_families(self, now):
        # every hub on the ledger (a few: one per hub that shares it), each with the profiles it published, from
        # the start
        hubs = self.ledger.hub_names() or [self.ledger.hub]
        published = [(p["hub"], p["slug"]) for p in self.ledger.pricing(hub=None) if p["hub"] in hubs]

        open_sessions = self.ledger.open_sessions()
        every = dict.fromkeys(published, 0)
        active_sessions, active_gpus = Counter(every), Counter(every)
        for s in open_sessions:
            active_sessions[(s.hub, s.profile)] += 1
            active_gpus[(s.hub, s.profile)] += s.gpu_count
        sessions = GaugeMetricFamily(
            f"{NAMESPACE}_active_sessions", "GPU sessions running now, by hub and profile", labels=["hub", "profile"]
        )
        gpus = GaugeMetricFamily(
            f"{NAMESPACE}_active_gpus", "GPUs held by running sessions, by hub and profile", labels=["hub", "profile"]
        )
        for key in sorted(active_sessions):
            sessions.add_metric(list(key), active_sessions[key])
            gpus.add_metric(list(key), active_gpus[key])
        yield sessions
        yield gpus
        yield from self._gpu_idle(now, [s for s in open_sessions if s.gpu_count > 0], every)

        minutes = Counter(every)
        spend: Counter = Counter()
        # every reason from the start, so that a first cull is an increase Prometheus sees
        stops: Counter = Counter({(hub, r.value): 0 for hub in hubs for r in StopReason})
        for row in self.ledger.closed_session_totals():
            minutes[(row["hub"], row["profile"])] += row["minutes"]
            stops[(row["hub"], row["stop_reason"])] += row["sessions"]
            # a session counts once, for the one group that paid (its pool); "" for none
            spend[(row["hub"], row["pool"] or "", row["profile"], row["currency"])] += row["cost_micros"]
        billed = CounterMetricFamily(
            f"{NAMESPACE}_billed_minutes",
            "Minutes billed for stopped GPU sessions (every started minute), by hub and profile",
            labels=["hub", "profile"],
        )
        for key in sorted(minutes):
            billed.add_metric(list(key), minutes[key])
        yield billed
        money = CounterMetricFamily(
            f"{NAMESPACE}_spend",
            "Money charged for stopped GPU sessions, by hub, the group that paid, profile and currency",
            labels=["hub", "group", "profile", "currency"],
        )
        for key, micros in sorted(spend.items()):
            money.add_metric(list(key), micros / MICROS)
        yield money
        stopped = CounterMetricFamily(
            f"{NAMESPACE}_stops", "Stopped GPU sessions, by hub and stop reason", labels=["hub", "reason"]
        )
        for key, count in sorted(stops.items()):
            stopped.add_metric(list(key), count)
        yield stopped

        yield from self._budgets(now)

    def _gpu_idle(self, now, sessions, every: dict):
        """Seconds since each running GPU session's GPUs last worked in a minute (:data:`.idle.IDLE`), and the
        GPUs by profile whose latest sampled minute was at or above it (busy now).

        Counted from the end of that minute, or from the session's start (at most IDLE_HORIZON back) when
        there was none; only sessions whose server sent samples in the last SAMPLED_WITHIN are judged.
        """
        busy = Counter(every)  # by (hub, profile)
        family = GaugeMetricFamily(
            f"{NAMESPACE}_session_gpu_idle_seconds",
            f"Seconds since a running GPU session's GPUs last averaged {idle.IDLE.util_percent}% utilization"
            f" in a minute (at most {int(IDLE_HORIZON.total_seconds())}), for sessions whose server sends samples",
            labels=["hub", "user", "server", "profile"],
        )
        horizon = now - IDLE_HORIZON
        for i in range(0, len(sessions), IDS_PER_QUERY):
            chunk = sessions[i : i + IDS_PER_QUERY]
            marks = gpu_busy_marks(self.ledger, [s.id for s in chunk], horizon)
            for s in chunk:
                last_sampled, last_busy = marks[s.id]
                if last_sampled is None or aware_utc(last_sampled) + timedelta(minutes=1) < now - SAMPLED_WITHIN:
                    continue
                if last_busy is not None and last_busy == last_sampled:
                    busy[(s.hub, s.profile)] += s.gpu_count
                since = aware_utc(last_busy) + timedelta(minutes=1) if last_busy else aware_utc(s.started)
                since = max(since, horizon)
                family.add_metric([s.hub, s.user, s.server_name, s.profile], max(0.0, (now - since).total_seconds()))
        yield family
        busy_gpus = GaugeMetricFamily(
            f"{NAMESPACE}_busy_gpus",
            f"GPUs of running sessions whose latest sampled minute averaged {idle.IDLE.util_percent}% utilization"
            " or more, by hub and profile (the busy part of active_gpus)",
            labels=["hub", "profile"],
        )
        for key in sorted(busy):
            busy_gpus.add_metric(list(key), busy[key])
        yield busy_gpus

    def _budgets(self, now):
        labels = ["scope", "subject", "unit"]
        limit = GaugeMetricFamily(
            f"{NAMESPACE}_budget_limit", "Budget limit in its unit (money or GPU-hours)", labels=labels
        )
        used = GaugeMetricFamily(
            f"{NAMESPACE}_budget_used", "Budget used in the current period, in its unit", labels=labels
        )
        remaining = GaugeMetricFamily(
            f"{NAMESPACE}_budget_remaining", "Budget left in the current period, in its unit", labels=labels
        )
        for status in self.ledger.statuses_of(self.ledger.budget_rules(), now, self.tz):
            rule = status.rule
            values = [rule.scope, rule.subject, rule.unit]
            limit.add_metric(values, float(status.limit))
            used.add_metric(values, float(status.used))
            remaining.add_metric(values, float(status.remaining))
        yield limit
        yield used
        yield remaining


class NotifyCollector:
    """The gateway's deliveries since the service started, by Apprise service and outcome."""

    def __init__(self, notifier: Notifier):
        self.notifier = notifier

    def describe(self):
        return [CounterMetricFamily(f"{NAMESPACE}_notifications", "", labels=["service", "outcome"])]

    def collect(self):
        family = CounterMetricFamily(
            f"{NAMESPACE}_notifications",
            "Notices handed to alert channels since the service started, by Apprise service and outcome"
            " (sent; failed: refused or timed out, retried with backoff; deferred: skipped while backing off)",
            labels=["service", "outcome"],
        )
        for (service, outcome), count in sorted(self.notifier.counts.items()):
            family.add_metric([service, outcome], count)
        yield family


class TickCollector:
    """The ticks' outcomes since the service started, the last good tick's time and the tick interval."""

    def __init__(self, health: TickHealth):
        self.health = health

    def describe(self):
        return [
            CounterMetricFamily(f"{NAMESPACE}_ticks", "", labels=["outcome"]),
            GaugeMetricFamily(f"{NAMESPACE}_tick_last_success_timestamp_seconds", ""),
            GaugeMetricFamily(f"{NAMESPACE}_tick_interval_seconds", ""),
        ]

    def collect(self):
        ticks = CounterMetricFamily(
            f"{NAMESPACE}_ticks",
            "Metering ticks since the service started, by outcome (ok: every part ran; failed: a part raised)",
            labels=["outcome"],
        )
        ticks.add_metric(["ok"], self.health.ok)
        ticks.add_metric(["failed"], self.health.failed)
        yield ticks
        last = GaugeMetricFamily(
            f"{NAMESPACE}_tick_last_success_timestamp_seconds",
            "Unix time of the last tick whose every part ran (the service's start before the first)",
        )
        last.add_metric([], self.health.last_ok if self.health.last_ok is not None else self.health.started)
        yield last
        interval = GaugeMetricFamily(f"{NAMESPACE}_tick_interval_seconds", "Seconds between two metering ticks")
        interval.add_metric([], self.health.interval)
        yield interval


def make_registry(
    ledger: Ledger,
    tz: ZoneInfo,
    clock=utcnow,
    notifier: Notifier | None = None,
    tick_health: TickHealth | None = None,
) -> CollectorRegistry:
    """A registry of the service's own: the ledger collector, the gateway's deliveries and the ticks."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(ledger, tz, clock))
    if notifier is not None:
        registry.register(NotifyCollector(notifier))
    if tick_health is not None:
        registry.register(TickCollector(tick_health))
    return registry


class MetricsHandler(BaseHandler):
    """``GET /services/gpu/metrics`` in the Prometheus text format, for tokens with custom:gpu-metrics:read."""

    def initialize(self, ctx: WebContext, registry: CollectorRegistry):
        super().initialize(ctx)
        self.registry = registry

    @web.authenticated
    def get(self):
        self.require_scope(SCOPE_METRICS_READ)
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(self.registry))
