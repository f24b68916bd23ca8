"""A pod evicted by Kueue: found on the pod as Kueue v0.17 marks it, billed to the eviction, written as a preemption."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from jupyterhub_gpu.ledger.queries.schedule import PREEMPTED, stop_orders
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.scheduler.texts import KueueWhy
from jupyterhub_gpu.scheduler.words import reason_words
from jupyterhub_gpu.session import SessionStart, StopReason
from jupyterhub_gpu.spawners.kube import eviction
from jupyterhub_gpu.spawners.kube.eviction import (
    QUEUE_LABEL,
    Eviction,
    eviction_end,
    kueue_managed,
    kueue_why,
    pod_eviction,
    record_eviction,
)

UTC = timezone.utc
T0 = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)
MESSAGE = "Preempted to accommodate a workload (UID: u1, JobUID: j1) due to prioritization in the ClusterQueue"


def pod(conditions=(), grace=30, deleted=None, queue="cs231n"):
    """A pod as Kueue's plain-pod integration leaves one it stops: the condition it patches, then its deletion."""
    meta = {"name": "jupyter-alice", "labels": {QUEUE_LABEL: queue} if queue else {}}
    if deleted:
        meta["deletionTimestamp"] = deleted
    return {
        "metadata": meta,
        "spec": {"terminationGracePeriodSeconds": grace},
        "status": {"phase": "Running", "conditions": list(conditions)},
    }


def termination_target(reason="WorkloadEvictedDueToPreempted", status="True", at="2026-12-01T05:00:00Z"):
    return {
        "type": "TerminationTarget",
        "status": status,
        "reason": reason,
        "message": MESSAGE,
        "lastTransitionTime": at,
    }


def test_kueues_eviction_of_a_pod_is_read_from_its_termination_target():
    found = pod_eviction(pod([{"type": "Ready", "status": "True"}, termination_target()], grace=45))
    assert found == Eviction(
        at=T0,
        reason="WorkloadEvictedDueToPreempted",
        message=MESSAGE,
        grace=timedelta(seconds=45),
    )
    assert found.why == "Preempted" and found.cause == "kueue:WorkloadEvictedDueToPreempted"


@pytest.mark.parametrize(
    "condition",
    [
        termination_target(reason="WorkloadDeleted"),  # the hub's own stop deleted the workload: no eviction
        termination_target(reason="NotAdmitted"),
        termination_target(status="False"),
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},  # not Kueue's
    ],
)
def test_other_stops_are_no_eviction(condition):
    assert pod_eviction(pod([condition])) is None


def test_an_eviction_without_its_time_takes_the_deletion_less_the_grace():
    condition = termination_target(at=None)
    found = pod_eviction(pod([condition], grace=30, deleted="2026-12-01T05:00:30Z"))
    assert found.at == T0
    assert pod_eviction(pod([condition])) is None  # no time to bill to: not guessed


def test_only_a_pod_in_a_local_queue_is_watched():
    assert kueue_managed(pod()) and not kueue_managed(pod(queue="")) and not kueue_managed(None)


def test_billing_ends_at_the_eviction_not_at_the_containers_end():
    spawner = SimpleNamespace(_gpu_eviction=Eviction(T0, "WorkloadEvictedDueToPreempted"))
    assert eviction_end(spawner, T0 + timedelta(seconds=25)) == T0
    assert eviction_end(spawner, None) == T0
    assert eviction_end(SimpleNamespace(_gpu_eviction=None), T0 + timedelta(seconds=25)) == T0 + timedelta(seconds=25)


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield ledger
    ledger.close()


def started(ledger, sid="s1", tier="preemptible"):
    record = SessionStart(
        sid, "alice", "", ("cs231n",), "t4-pre", ("GPU-t4-0",), 20_000, "CNY", T0 - timedelta(hours=1),
        pool="cs231n", tier=tier, resume=True,
    )  # fmt: skip
    ledger.record_start(record)


def test_an_eviction_is_recorded_as_a_preemption_order_and_the_stops_reason(ledger):
    started(ledger)
    eviction = Eviction(T0, "WorkloadEvictedDueToPreempted", grace=timedelta(seconds=30))
    assert record_eviction(ledger, "s1", eviction)
    (order,) = stop_orders(ledger)
    assert (order.kind, order.stop_at, order.decided_at, order.cause) == (
        PREEMPTED,
        T0,
        T0,
        "kueue:WorkloadEvictedDueToPreempted",
    )
    # said after the fact, with Kueue's reason: a preemptible session checkpoints
    assert order.reason_key == "stop.kueue" and order.noticed_at is None
    assert order.values == {"at": T0, "why": KueueWhy("priority", "Preempted")}
    # the spawner finds the pod gone and records what it saw: the eviction's reason stays, billed to the eviction
    ledger.record_stop("s1", T0, StopReason.EXITED)
    session = ledger.get_session("s1")
    assert session.stop_reason == StopReason.PREEMPTED
    assert not record_eviction(ledger, "s1", eviction)  # closed: nothing more


def test_a_standard_sessions_eviction_is_told_to_save_its_work_with_kueues_reason(ledger):
    started(ledger, tier="standard")
    message = RECLAIMED.format(cause="reclamation within the cohort")
    assert record_eviction(ledger, "s1", Eviction(T0, "WorkloadEvictedDueToPreempted", message))
    (order,) = stop_orders(ledger)
    assert order.reason_key == "stop.kueue.save"
    assert order.values == {"at": T0, "why": KueueWhy("reclaim", "Preempted")}
    assert reason_words(order.reason_key, order.values, "en", UTC, T0) == (
        "this server was stopped at 05:00 by the cluster's queue (Kueue): the GPU quota its group had borrowed was"
        " taken back by the group that lent it; work not saved by then may be lost"
    )


#: Kueue v0.17's message of a preemption (pkg/scheduler/preemption: ``preemptionMessage``)
RECLAIMED = (
    "Preempted to accommodate a workload (UID: u1, JobUID: j1) due to {cause}; preemptor path: /cohort/a;"
    " preemptee path: /cohort/b"
)


@pytest.mark.parametrize(
    ("reason", "message", "told"),
    [
        ("Preempted", RECLAIMED.format(cause="prioritization in the ClusterQueue"), KueueWhy("priority", "Preempted")),
        ("Preempted", RECLAIMED.format(cause="reclamation within the cohort"), KueueWhy("reclaim", "Preempted")),
        (
            "Preempted",
            RECLAIMED.format(cause="reclamation within the cohort while borrowing"),
            KueueWhy("reclaim", "Preempted"),
        ),
        ("Preempted", RECLAIMED.format(cause="Fair Sharing within the cohort"), KueueWhy("fair_sharing", "Preempted")),
        ("Preempted", "", KueueWhy("priority", "Preempted")),
        ("ClusterQueueStopped", "The ClusterQueue is stopped", KueueWhy("stopped", "ClusterQueueStopped")),
        ("LocalQueueStopped", "The LocalQueue is stopped", KueueWhy("stopped", "LocalQueueStopped")),
        ("PodsReadyTimeout", "Exceeded the PodsReady timeout", KueueWhy("ready", "PodsReadyTimeout")),
        ("NodeFailures", "Workload was evicted due to node failures", KueueWhy("other", "NodeFailures")),
    ],
)
def test_kueues_reason_is_told_as_what_happened(reason, message, told):
    assert kueue_why(reason, message) == told
    assert Eviction(T0, f"WorkloadEvictedDueTo{reason}", message).told == told


def test_kueues_stopped_event_tells_an_eviction_only_by_a_known_message():
    later = T0 + timedelta(minutes=5)
    events = [
        (later, "Workload is deleted"),  # not an eviction
        (T0, RECLAIMED.format(cause="reclamation within the cohort")),
        (later, "Exceeded the PodsReady timeout default/pod-w"),
    ]
    found = eviction.event_eviction(events)
    assert (found.at, found.reason, found.told) == (
        T0,
        "WorkloadEvictedDueToPreempted",
        KueueWhy("reclaim", "Preempted"),
    )
    assert eviction.event_eviction([(T0, "Exceeded the PodsReady timeout 5m")]).told == KueueWhy(
        "ready", "PodsReadyTimeout"
    )
    assert eviction.event_eviction([(T0, "The ClusterQueue is stopped")]).why == "ClusterQueueStopped"
    assert eviction.event_eviction([(T0, "Not admitted by cluster queue"), (None, RECLAIMED)]) is None


def test_a_stop_already_under_way_for_a_reason_that_stays_is_not_a_preemption(ledger):
    started(ledger)
    ledger.claim_stop_reason("s1", StopReason.BUDGET)
    assert not record_eviction(ledger, "s1", Eviction(T0, "WorkloadEvictedDueToPreempted"))
    assert stop_orders(ledger) == []


class PodHolder:
    """What the watch reads of GPUKubeSpawner: its session, its pod as the reflector holds it, its ledger."""

    def __init__(self, ledger, session):
        self.ledger, self._gpu_session, self.pod = ledger, session, pod()
        self._gpu_eviction = self._gpu_eviction_watch = None
        self._log_name = "alice"
        self.log = logging.getLogger("test")

    def gpu_pod(self):
        return self.pod


def test_the_watch_notes_an_eviction_within_its_interval_and_once(ledger):
    started(ledger)
    holder = PodHolder(ledger, SimpleNamespace(id="s1"))

    async def run():
        watch = eviction.watch(holder)
        assert watch is not None
        watch.every = 0.01
        await asyncio.sleep(0.05)
        assert holder._gpu_eviction is None and stop_orders(ledger) == []
        holder.pod = pod([termination_target()])  # Kueue patched the pod
        await asyncio.wait_for(watch.task, 2)  # it ends once it has noted the eviction
        assert await eviction.check_pod(holder) == holder._gpu_eviction  # a later poll notes nothing new

    asyncio.run(run())
    assert holder._gpu_eviction.at == T0
    assert [o.cause for o in stop_orders(ledger)] == ["kueue:WorkloadEvictedDueToPreempted"]


def test_a_pod_in_no_local_queue_is_not_watched(ledger):
    holder = PodHolder(ledger, SimpleNamespace(id="s1"))
    holder.pod = pod(queue="")

    async def run():
        return eviction.watch(holder)

    assert asyncio.run(run()) is None


def test_a_start_waits_for_the_evicted_pod_of_its_name_to_be_gone(ledger):
    holder = PodHolder(ledger, None)
    holder.pod = pod([termination_target()], deleted="2026-12-01T05:00:30Z")

    async def run():
        waiting = asyncio.ensure_future(eviction.wait_gone(holder, every=0.01))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # KubeSpawner would find it and stop the new start to remove it
        holder.pod = None
        return await asyncio.wait_for(waiting, 2)

    assert asyncio.run(run()) is True
    holder.pod = pod()  # a pod not being deleted (or none) is not waited for
    assert asyncio.run(eviction.wait_gone(holder, every=0.01)) is False
