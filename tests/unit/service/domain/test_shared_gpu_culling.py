"""Culling on a shared GPU or MIG slice judges each server on its own figures.

The samples go the real way: parsed and bounded as the samples endpoint does (:func:`parse_sample`), merged
into a real sqlite ledger's minute rows, read back as the tick's minute signals and judged by the real tick
against a stand-in hub that records stops.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.gpus.device import share_uuid
from jupyterhub_gpu.ledger.queries.samples import Push, record_samples, session_minutes
from jupyterhub_gpu.rules.culling import evaluate
from jupyterhub_gpu.rules.cullrules import CullRule
from jupyterhub_gpu.rules.idle import own_gpu_utilization
from jupyterhub_gpu.rules.samples import SampleError, parse_sample
from jupyterhub_gpu.rules.signals import MinuteReading, minute_signals
from jupyterhub_gpu.service import tick
from jupyterhub_gpu.service.notify import Notifier
from jupyterhub_gpu.session import SessionStart

UTC = timezone.utc
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
GPU = "GPU-sim-t4-0"
GPU_IDLE_ONLY = {"default": [{"kind": "gpu_idle", "minutes": 30, "warn_minutes": 5}]}


def body(sid: str, at: datetime, util: float, *, scope=None, processes=None, shared_by=None, busy=0, mem=1024):
    gpu = {"uuid": share_uuid(GPU, 0, 4), "utilization_avg": util, "memory_used_max_mib": mem}
    gpu.update(
        {k: v for k, v in (("scope", scope), ("processes", processes), ("shared_by", shared_by)) if v is not None}
    )
    return {
        "session_id": sid,
        "sampled_until": at.isoformat(),
        "samples": 15,
        "utilization_avg": util,
        "memory_used_max_mib": mem,
        "memory_total_mib": 4096,
        "kernels": 1,
        "busy_kernels": busy,
        "gpus": [gpu],
    }


@pytest.mark.parametrize(
    ("util", "scope", "processes", "own"),
    [
        (80.0, "gpu", 0, 0.0),  # the whole GPU's figure, and no process of this server on it: its neighbours'
        (80.0, "gpu", 2, 80.0),  # processes of its own: the whole GPU's figure is all there is
        (80.0, "gpu", None, 80.0),  # process count unknown: as reported
        (0.0, "own", 0, 0.0),  # per-process utilization: the server's own, as reported
        (45.0, "own", 1, 45.0),
        (80.0, None, None, 80.0),  # a whole GPU: as reported
    ],
)
def test_a_server_owns_the_utilization_of_its_own_processes_only(util, scope, processes, own):
    assert own_gpu_utilization(util, scope, processes) == own


def test_a_sample_on_a_shared_gpu_keeps_its_own_utilization():
    sample = parse_sample(body("s", T0, 80.0, scope="gpu", processes=0, shared_by=3))
    assert sample.utilization_avg == 0.0  # the session's figure too: the rules read it
    assert sample.gpus == ((share_uuid(GPU, 0, 4), 0.0, 1024, "gpu", 0, 3, None),)
    busy = parse_sample(body("s", T0, 80.0, scope="gpu", processes=1, shared_by=3))
    assert busy.utilization_avg == 80.0 and busy.gpus[0][1] == 80.0
    whole = parse_sample(body("s", T0, 80.0))  # a server that says nothing of sharing: as before
    assert whole.utilization_avg == 80.0 and whole.gpus == (
        (share_uuid(GPU, 0, 4), 80.0, 1024, None, None, None, None),
    )


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("scope", "mine", "gpus[0].scope must be one of own, gpu, got 'mine'"),
        ("scope", 1, "gpus[0].scope must be one of own, gpu, got 1"),
        ("processes", -1, "gpus[0].processes must be an integer from 0 to 4096, got -1"),
        ("processes", 4097, "gpus[0].processes must be an integer from 0 to 4096, got 4097"),
        ("processes", True, "gpus[0].processes must be an integer from 0 to 4096, got True"),
        ("processes", 1.5, "gpus[0].processes must be an integer from 0 to 4096, got 1.5"),
        ("shared_by", 0, "gpus[0].shared_by must be an integer from 1 to 16, got 0"),
        ("shared_by", 17, "gpus[0].shared_by must be an integer from 1 to 16, got 17"),
        ("shared_by", "2", "gpus[0].shared_by must be an integer from 1 to 16, got '2'"),
        ("neighbour", "bob", "each of gpus must be {uuid, utilization_avg, memory_used_max_mib}"),
    ],
)
def test_out_of_bounds_shared_gpu_fields_are_refused(field, value, error):
    data = body("s", T0, 10.0, scope="own", processes=1, shared_by=2)
    data["gpus"][0][field] = value
    with pytest.raises(SampleError) as e:
        parse_sample(data)
    assert str(e.value).startswith(error)


def test_a_minute_keeps_the_least_precise_scope_the_most_processes_and_the_most_sharers(ledger):
    ledger.record_start(SessionStart("s", "ann", "", (), "t4-quarter", (share_uuid(GPU, 0, 4),), 12_500, "CNY", T0))
    pushes = [
        body("s", T0 + timedelta(seconds=10), 50.0, scope="own", processes=2, shared_by=2),
        body("s", T0 + timedelta(seconds=40), 30.0, scope="gpu", processes=1, shared_by=3),
        body("s", T0 + timedelta(seconds=50), 40.0, scope="own", processes=3, shared_by=1),
    ]
    record_samples(ledger, [Push("ann", parse_sample(p), 1) for p in pushes])
    (row,) = session_minutes(ledger, "s")
    assert json.loads(row.gpus) == {
        share_uuid(GPU, 0, 4): {
            "utilization_max": 50.0,
            "memory_used_max_mib": 1024,
            "scope": "gpu",
            "processes_max": 3,
            "shared_by_max": 3,
        }
    }
    # a whole GPU's row has no shared figures at all
    ledger.record_start(SessionStart("w", "bob", "", (), "t4", (GPU,), 50_000, "CNY", T0))
    whole = body("w", T0 + timedelta(seconds=10), 50.0)
    whole["gpus"][0]["uuid"] = GPU
    record_samples(ledger, [Push("bob", parse_sample(whole), 1)])
    (row,) = session_minutes(ledger, "w")
    assert json.loads(row.gpus) == {GPU: {"utilization_max": 50.0, "memory_used_max_mib": 1024}}


def two_servers_on_one_gpu(ledger, minutes: int, idle_scope: str):
    """ann's server idles on share 0 while bob's, busy, works on share 1 of the same T4, for ``minutes``."""
    for sid, user, i in (("idle", "ann", 0), ("busy", "bob", 1)):
        start = SessionStart(sid, user, "", ("cs101",), "t4-quarter", (share_uuid(GPU, i, 4),), 12_500, "CNY", T0)
        ledger.record_start(start)
    pushes = []
    for m in range(minutes):
        for second in (20, 50):
            at = T0 + timedelta(minutes=m, seconds=second)
            if idle_scope == "gpu":  # no per-process utilization: both report the whole GPU's 80%
                idle = body("idle", at, 80.0, scope="gpu", processes=0, shared_by=2)
            else:  # per-process utilization: ann's own is 0
                idle = body("idle", at, 0.0, scope="own", processes=1, shared_by=2)
            busy = body("busy", at, 80.0, scope=idle_scope, processes=1, shared_by=2, busy=1, mem=3000)
            busy["gpus"][0]["uuid"] = share_uuid(GPU, 1, 4)
            pushes += [Push("ann", parse_sample(idle), 1), Push("bob", parse_sample(busy), 1)]
    record_samples(ledger, pushes)


@pytest.mark.parametrize("scope", ["gpu", "own"])
def test_the_idle_server_is_culled_and_its_busy_neighbour_on_the_same_gpu_is_not(ledger, hub, scope):
    two_servers_on_one_gpu(ledger, 40, scope)
    busy_before = [(r.minute, r.utilization_tenths_sum, r.gpus) for r in session_minutes(ledger, "busy")]
    notifier = Notifier(ledger)

    def tick_at(minute: int):
        now = T0 + timedelta(minutes=minute, seconds=5)
        return asyncio.run(
            tick.enforce_culling(
                tick.TickContext(ledger=ledger, hub=hub.client, notifier=notifier, cull_rules=GPU_IDLE_ONLY), now
            )
        )

    assert tick_at(24).stopped == [] and ledger.get_session("idle").cull_warned_at is None
    tick_at(25)  # 25 idle minutes of 30: warned
    warned = ledger.get_session("idle")
    assert warned.cull_warned_at is not None and warned.cull_rule == "gpu_idle"
    assert ledger.get_session("busy").cull_warned_at is None
    (notice,) = [n for n in ledger.notices("ann") if n.kind == "cull"]
    assert "Your GPU has been idle (under 5%) for 25 minutes" in notice.message
    assert ledger.notices("bob") == []
    result = tick_at(31)
    assert result.stopped == [("ann", "")]
    assert hub.stops == ["/hub/api/users/ann/server"]
    assert ledger.get_session("idle").pending_stop_reason == "gpu_idle"
    busy = ledger.get_session("busy")
    assert busy.stopped is None and busy.pending_stop_reason is None and busy.cull_warned_at is None
    # nothing ann's server reported moved bob's rows
    assert [(r.minute, r.utilization_tenths_sum, r.gpus) for r in session_minutes(ledger, "busy")] == busy_before
    # the hub stops the server and the spawner records the stop, as it does (ann's bill ends there)
    ledger.record_stop("idle", T0 + timedelta(minutes=31, seconds=6), "gpu_idle")
    stopped = ledger.get_session("idle")
    assert (stopped.stop_reason, stopped.minutes) == ("gpu_idle", 32)
    tick_at(39)
    assert hub.stops == ["/hub/api/users/ann/server"]  # bob's server keeps running


def test_a_neighbours_work_is_no_activity_for_the_inactive_rule(ledger):
    """With the whole GPU's utilization only, 80% from bob's work would have kept ann's idle server "active"."""
    two_servers_on_one_gpu(ledger, 20, "gpu")
    rules = (CullRule("inactive", minutes=15, warn_minutes=5),)
    for sid, action in (("idle", "warn"), ("busy", "none")):
        signals = minute_signals(MinuteReading.of_row(m) for m in session_minutes(ledger, sid))
        decision = evaluate(rules, T0, T0 + timedelta(minutes=12), signals, warned=None)
        assert decision.action == action, sid


def test_a_share_that_could_not_measure_its_memory_has_no_memory_figure_for_the_notices(ledger):
    # the push says memory_known false (a share read in a container): the minute keeps it, and its signal has
    # no memory fraction, so neither the cap notice nor the memory-high notice fires on a 0 that was not measured
    ledger.record_start(SessionStart("s", "ann", "", (), "t4-quarter", (share_uuid(GPU, 0, 4),), 12_500, "CNY", T0))
    unknown = body("s", T0 + timedelta(seconds=20), 30.0, scope="gpu", processes=1, mem=0)
    unknown["gpus"][0]["memory_known"] = False
    record_samples(ledger, [Push("ann", parse_sample(unknown), 1)])
    (row,) = session_minutes(ledger, "s")
    assert json.loads(row.gpus)[share_uuid(GPU, 0, 4)]["memory_unknown"] is True
    [signal] = minute_signals([MinuteReading.of_row(row)])
    assert signal.gpu_mem_frac is None and signal.gpu_util == 30.0
    # a measured minute keeps its fraction
    measured = body("s", T0 + timedelta(minutes=1, seconds=20), 30.0, scope="own", processes=1, mem=3900)
    record_samples(ledger, [Push("ann", parse_sample(measured), 1)])
    signals = minute_signals(MinuteReading.of_row(m) for m in session_minutes(ledger, "s"))
    assert signals[-1].gpu_mem_frac == pytest.approx(3900 / 4096)


@pytest.mark.parametrize("value", ["false", 0, 1, "yes"])
def test_memory_known_must_be_a_boolean(value):
    data = body("s", T0, 10.0, scope="gpu", processes=1)
    data["gpus"][0]["memory_known"] = value
    with pytest.raises(SampleError, match=r"gpus\[0\]\.memory_known must be true or false"):
        parse_sample(data)
