"""A pod Kueue evicted, as the service carries it out: the student told as of a preemption, even when the server
ended before the tick, and the server put back in the queue (in Kueue mode: a new spawn that waits in Kueue).

The spawner's record of the eviction (:func:`record_eviction`) and the real tick step (:func:`enforce_schedule`)
on a real sqlite ledger, the real gateway and the real hub client talking to the stand-in of the hub's REST API
of ``test_schedule_orders``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from jupyterhub_gpu.ledger.queries.schedule import PREEMPTED, order_stop, stop_orders
from jupyterhub_gpu.scheduler import Grace
from jupyterhub_gpu.service.tick import ScheduleFollow
from jupyterhub_gpu.session import StopReason
from jupyterhub_gpu.spawners.kube.eviction import Eviction, record_eviction
from tests.unit.service.test_schedule_orders import T0, HubDouble, notices, start, tick
from tests.unit.service.test_schedule_orders import ledger as ledger
from tests.unit.service.test_schedule_orders import notifier as notifier
from tests.unit.service.test_schedule_orders import webhook as webhook

EVICTED = Eviction(T0, "WorkloadEvictedDueToPreempted", "Preempted to accommodate a workload", timedelta(seconds=30))
TOLD = (  # after the fact, with Kueue's reason (docs/kubernetes.md, "Preemption and class reservations through Kueue")
    "This server was stopped at 13:00 by the cluster's queue (Kueue): a workload of a higher priority needed its"
    " GPU. Your training was checkpointed as it stopped (CheckpointAndResume saves on the stop). It will be put"
    " back in the queue and start again when a T4 is free."
)


@pytest.fixture
def hub():
    server = HubDouble()
    yield server
    server.close()


def test_an_eviction_whose_server_ended_before_the_tick_is_told_and_resumed(ledger, hub, notifier, webhook):
    start(ledger, server="train", resume=True)
    assert record_eviction(ledger, "s1", EVICTED)
    ledger.record_stop("s1", T0, StopReason.EXITED)  # the spawner found the pod gone; billed to the eviction
    follow = ScheduleFollow()
    result = tick(ledger, hub, notifier, T0 + timedelta(seconds=20), follow)
    assert notices(ledger) == [TOLD]
    (posted,) = webhook.bodies
    assert posted["event"] == "preemption" and posted["stop_at"] == "2026-12-01T05:00:00Z"
    assert result["closed"] == ["s1"] and result["resumed"] == ["s1"]
    options = {"profile": "t4-pre", "pool": "cs231n", "resume": True}
    assert hub.of("POST") == [("/hub/api/users/alice/servers/train", {"user_options": options})]
    assert hub.of("DELETE") == []  # nothing to stop: Kueue did
    # once, whatever the restarts
    tick(ledger, hub, notifier, T0 + timedelta(minutes=1), ScheduleFollow())
    assert notices(ledger) == [TOLD] and len(hub.of("POST")) == 1
    session = ledger.get_session("s1")
    assert session.stop_reason == StopReason.PREEMPTED and session.stopped.replace(tzinfo=None) == T0.replace(
        tzinfo=None
    )


def test_an_eviction_seen_while_the_server_still_ends_is_told_then_stopped_and_resumed(ledger, hub, notifier):
    start(ledger, resume=True)
    record_eviction(ledger, "s1", EVICTED)
    follow = ScheduleFollow()
    first = tick(ledger, hub, notifier, T0 + timedelta(seconds=5), follow)
    assert first["noticed"] == ["s1"] and notices(ledger) == [TOLD]
    second = tick(ledger, hub, notifier, T0 + timedelta(seconds=35), follow)
    assert second["stopped"] == [("alice", "")]  # the hub forgets the server whose pod Kueue deleted
    ledger.record_stop("s1", T0, StopReason.EXITED)
    third = tick(ledger, hub, notifier, T0 + timedelta(seconds=65), follow)
    assert third["resumed"] == ["s1"] and len(notices(ledger)) == 1


def test_a_scheduler_order_of_a_closed_session_is_still_done_without_a_word(ledger, hub, notifier):
    """Only Kueue's evictions are told after the end: an order of the hub's own scheduler stays as it was."""
    session = start(ledger)
    order_stop(ledger, session, PREEMPTED, T0, "preempt", {"grace": Grace(timedelta(minutes=2))}, T0, for_user="bob")
    ledger.record_stop("s1", T0, "stopped")
    assert tick(ledger, hub, notifier, T0 + timedelta(seconds=20))["closed"] == ["s1"]
    assert notices(ledger) == [] and stop_orders(ledger) == []
