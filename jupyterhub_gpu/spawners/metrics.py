"""The hub process's own GPU metrics, served by JupyterHub at ``/hub/metrics``: the wait queue.

They live in prometheus_client's default registry, the one JupyterHub's
``/hub/metrics`` serves (behind its ``read:metrics`` scope), because the queue
lives in the hub process, where the spawners run; the gpu service's ledger
metrics are at ``/services/gpu/metrics``. The queue's length and its oldest
wait are read from the live queues at scrape time (every
:class:`~.assign.queue.FairQueue` registers itself with :func:`watch`); each
finished wait is observed in :data:`QUEUE_WAIT` with its outcome.
"""

from __future__ import annotations

import time
import weakref
from collections import defaultdict

from prometheus_client import REGISTRY, Histogram
from prometheus_client.core import GaugeMetricFamily

NAMESPACE = "jupyterhub_gpu"

#: How a wait in the queue ended.
OUTCOMES = ("granted", "timeout", "cancelled")

#: Seconds each request waited in the GPU queue, by GPU model and how the wait ended.
QUEUE_WAIT = Histogram(
    "queue_wait_seconds",
    "Seconds a spawn waited in the GPU queue, by GPU model and outcome (granted, timeout, cancelled)",
    labelnames=["model", "outcome"],
    namespace=NAMESPACE,
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600),
    registry=REGISTRY,
)

_queues: weakref.WeakSet = weakref.WeakSet()


def watch(queue) -> None:
    """Count ``queue`` (a FairQueue) in the queue gauges for as long as it lives."""
    _queues.add(queue)


def requested(model: str) -> None:
    """A model asked of a queue: its wait histograms exist from now on, at 0 for every outcome, so that the first
    timeout is an increase Prometheus sees (a series born at 1 has no increase)."""
    for outcome in OUTCOMES:
        QUEUE_WAIT.labels(model=model, outcome=outcome)


def observe_wait(model: str, outcome: str, seconds: float) -> None:
    """One finished wait: how long, for which model, and how it ended (one of :data:`OUTCOMES`)."""
    QUEUE_WAIT.labels(model=model, outcome=outcome).observe(max(0.0, seconds))


class QueueCollector:
    """The waiting requests now, by GPU model: how many, the oldest one's age and its time limit."""

    def describe(self):
        return [
            GaugeMetricFamily(f"{NAMESPACE}_queue_length", "", labels=["model"]),
            GaugeMetricFamily(f"{NAMESPACE}_queue_oldest_wait_seconds", "", labels=["model"]),
            GaugeMetricFamily(f"{NAMESPACE}_queue_timeout_seconds", "", labels=["model"]),
        ]

    def collect(self):
        now = time.monotonic()
        length: dict[str, int] = defaultdict(int)
        oldest: dict[str, float] = defaultdict(float)
        limit: dict[str, float] = {}
        for queue in list(_queues):
            for model in queue.models():
                length[model] += 0
                oldest[model] += 0.0
            for waiter in queue.waiters():
                length[waiter.model] += 1
                waited = now - waiter.since
                if waited >= oldest[waiter.model]:
                    oldest[waiter.model] = waited
                    if waiter.timeout is not None:
                        limit[waiter.model] = waiter.timeout
        families = (
            GaugeMetricFamily(
                f"{NAMESPACE}_queue_length", "Spawns waiting in the GPU queue now, by GPU model", labels=["model"]
            ),
            GaugeMetricFamily(
                f"{NAMESPACE}_queue_oldest_wait_seconds",
                "Seconds the longest-waiting spawn in the GPU queue has waited, by GPU model (0: none waits)",
                labels=["model"],
            ),
            GaugeMetricFamily(
                f"{NAMESPACE}_queue_timeout_seconds",
                "The queue time limit of the longest-waiting spawn, by GPU model (only while one waits)",
                labels=["model"],
            ),
        )
        for model in sorted(length):
            families[0].add_metric([model], length[model])
            families[1].add_metric([model], oldest[model])
            if model in limit:
                families[2].add_metric([model], limit[model])
        yield from families


REGISTRY.register(QueueCollector())
