"""Prometheus metrics of the gpu service, computed from the ledger when Prometheus scrapes.

Named in JupyterHub's style (namespace ``jupyterhub_gpu``, ``<noun>_<verb>_<unit>``)
and kept in the service's own registry, so that nothing else in the process
leaks into ``/services/gpu/metrics``. Each scrape costs a few small queries: the
open sessions, one aggregate over stopped sessions, and two aggregates per
budget; none of them grows with the ledger's history. Budgets come from
:meth:`.ledger.Ledger.statuses_of`, as everywhere else.

Counters count stopped sessions only: a stopped session's charge is final, so
the counters never go down; running sessions show in the ``active_*`` gauges.
Money is summed as integer micro-units and turned into a float only for the
exposition format, which has no other number type.
"""

from __future__ import annotations

from collections import Counter
from zoneinfo import ZoneInfo

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from tornado import web

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import MICROS
from jupyterhub_gpu.service.domain.statuses import current_statuses
from jupyterhub_gpu.service.web.auth import SCOPE_METRICS_READ, BaseHandler
from jupyterhub_gpu.service.web.context import WebContext

NAMESPACE = "jupyterhub_gpu"


class LedgerCollector:
    """A custom collector: every value is read from the ledger at scrape time."""

    def __init__(self, ledger: Ledger, tz: ZoneInfo, clock=utcnow):
        self.ledger = ledger
        self.tz = tz
        self.clock = clock

    def describe(self):
        # the names without touching the database (the registry calls this on register)
        return [
            GaugeMetricFamily(f"{NAMESPACE}_active_sessions", "", labels=["profile"]),
            GaugeMetricFamily(f"{NAMESPACE}_active_gpus", "", labels=["profile"]),
            CounterMetricFamily(f"{NAMESPACE}_billed_minutes", "", labels=["profile"]),
            CounterMetricFamily(f"{NAMESPACE}_spend", "", labels=["group", "currency"]),
            CounterMetricFamily(f"{NAMESPACE}_stops", "", labels=["reason"]),
            GaugeMetricFamily(f"{NAMESPACE}_budget_limit", "", labels=["scope", "subject", "unit"]),
            GaugeMetricFamily(f"{NAMESPACE}_budget_used", "", labels=["scope", "subject", "unit"]),
            GaugeMetricFamily(f"{NAMESPACE}_budget_remaining", "", labels=["scope", "subject", "unit"]),
        ]

    def collect(self):
        now = self.clock()
        profiles = [p["slug"] for p in self.ledger.pricing()]

        active_sessions = Counter(dict.fromkeys(profiles, 0))
        active_gpus = Counter(dict.fromkeys(profiles, 0))
        for s in self.ledger.open_sessions():
            active_sessions[s.profile] += 1
            active_gpus[s.profile] += s.gpu_count
        sessions = GaugeMetricFamily(
            f"{NAMESPACE}_active_sessions", "GPU sessions running now, by profile", labels=["profile"]
        )
        gpus = GaugeMetricFamily(
            f"{NAMESPACE}_active_gpus", "GPUs held by running sessions, by profile", labels=["profile"]
        )
        for profile in sorted(active_sessions):
            sessions.add_metric([profile], active_sessions[profile])
            gpus.add_metric([profile], active_gpus[profile])
        yield sessions
        yield gpus

        minutes = Counter(dict.fromkeys(profiles, 0))
        spend: Counter = Counter()
        stops: Counter = Counter()
        for row in self.ledger.closed_session_totals():
            minutes[row["profile"]] += row["minutes"]
            stops[row["stop_reason"]] += row["sessions"]
            # a session counts once, for the one group that paid (its pool); "" for none
            spend[(row["pool"] or "", row["currency"])] += row["cost_micros"]
        billed = CounterMetricFamily(
            f"{NAMESPACE}_billed_minutes",
            "Minutes billed for stopped GPU sessions (every started minute), by profile",
            labels=["profile"],
        )
        for profile in sorted(minutes):
            billed.add_metric([profile], minutes[profile])
        yield billed
        money = CounterMetricFamily(
            f"{NAMESPACE}_spend",
            "Money charged for stopped GPU sessions, by the group that paid and currency",
            labels=["group", "currency"],
        )
        for (group, currency), micros in sorted(spend.items()):
            money.add_metric([group, currency], micros / MICROS)
        yield money
        stopped = CounterMetricFamily(f"{NAMESPACE}_stops", "Stopped GPU sessions, by stop reason", labels=["reason"])
        for reason, count in sorted(stops.items()):
            stopped.add_metric([reason], count)
        yield stopped

        yield from self._budgets(now)

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
        for status in current_statuses(self.ledger, self.ledger.budget_rules(), now, self.tz):
            rule = status.rule
            values = [rule.scope, rule.subject, rule.unit]
            limit.add_metric(values, float(status.limit))
            used.add_metric(values, float(status.used))
            remaining.add_metric(values, float(status.remaining))
        yield limit
        yield used
        yield remaining


def make_registry(ledger: Ledger, tz: ZoneInfo, clock=utcnow) -> CollectorRegistry:
    """A registry of the service's own, holding only the ledger collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(ledger, tz, clock))
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
