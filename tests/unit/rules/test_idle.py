"""Idle is defined once (``rules.idle.IDLE``): change the definition and every consumer follows.

The consumers are the cull rules' decisions (the service's tick and the simulators run them), the culling
report's idle minutes (the ledger's SQL, on a real sqlite ledger), the ``/metrics`` busy marks (SQL too),
the right-sizing advice's busy minutes, and the cull simulator's figures. Each is checked under the
definition in force and under a changed one (a higher threshold, busy kernels not counting): a consumer that
kept its own copy of the threshold or of the kernel rule gives the old answer under the changed one.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.ledger.queries.culling import load_culling_inputs
from jupyterhub_gpu.ledger.queries.samples import gpu_busy_marks, record_sample, session_minutes
from jupyterhub_gpu.rules import idle
from jupyterhub_gpu.rules.advice import summarize
from jupyterhub_gpu.rules.culling import evaluate
from jupyterhub_gpu.rules.cullrules import CullRule, rules_for
from jupyterhub_gpu.rules.idle import IdleRule, MinuteCounts
from jupyterhub_gpu.rules.samples import Sample
from jupyterhub_gpu.rules.signals import MinuteReading, minute_signals
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.sim.replay import OURS, TraceMinute, TraceSession, cull_length, resolve_policy, simulate
from jupyterhub_gpu.sim.trace import TraceParams

UTC = timezone.utc
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
#: the changed definition: GPU work from 50% up, and a busy kernel is no work by itself
CHANGED = IdleRule(util_percent=50, busy_kernel_counts=False)
#: what the server of session "s" pushes: (minute, mean utilization, busy kernels)
MINUTES = [(0, 30.0, 1), (1, 0.0, 1), (2, 2.0, 0)]


@pytest.fixture(params=["in force", "changed"])
def definition(request, monkeypatch):
    """The idle definition of the test: the one in force, or :data:`CHANGED` put in its place."""
    if request.param == "changed":
        monkeypatch.setattr(idle, "IDLE", CHANGED)
    return idle.IDLE


def test_the_definition_in_force():
    assert idle.IDLE == IdleRule(util_percent=5, busy_kernel_counts=True) and idle.IDLE_UTIL_PERCENT == 5
    assert CullRule("gpu_idle", 30, 5).util_threshold == 5.0


@pytest.mark.parametrize("util, busy", [(None, 0), (None, 1), (0.0, 0), (4.9, 0), (5.0, 0), (30.0, 1), (0.0, 2)])
def test_a_minute_is_judged_the_same_on_its_mean_and_on_its_sums(definition, util, busy):
    samples = 0 if util is None else 3
    tenths = 0 if util is None else round(util * 10 * samples)
    assert definition.idle(util, busy > 0) == bool(definition.idle_in_tenths(tenths, samples, busy))
    if util is not None:
        assert definition.gpu_worked(util) == definition.worked_in_tenths(tenths, samples)


@pytest.mark.parametrize("util, busy", [(-1.0, 0), (101.0, 0)])
def test_a_definition_is_checked(util, busy):
    with pytest.raises(ValueError, match="util_percent"):
        IdleRule(util_percent=util)
    with pytest.raises(ValueError, match="busy_kernel_counts"):
        IdleRule(busy_kernel_counts=1)


# -- the consumers ------------------------------------------------------------------------------------------


def test_the_cull_rules_follow(definition):
    """30 minutes at 30% utilization with a kernel busy: work, unless the definition says otherwise."""
    readings = [MinuteReading(gpu_util=30.0, gpu_mem_frac=None, kernel_busy=True) for _ in range(30)]
    signals = minute_signals(readings, T0)
    rules = rules_for("t4", (), None)  # the defaults, at the definition's threshold
    decision = evaluate(rules, T0, T0 + timedelta(minutes=30), signals)
    if definition == CHANGED:
        assert (decision.action, decision.rule.kind) == ("warn", "gpu_idle")
        assert "(under 50%)" in decision.message
    else:
        assert decision.action == "none"
    # a busy kernel alone, on an idle GPU: gpu_idle's case only where kernels do not count
    quiet = minute_signals([MinuteReading(gpu_util=0.0, gpu_mem_frac=None, kernel_busy=True)] * 30, T0)
    decision = evaluate([CullRule("gpu_idle", 30, 5)], T0, T0 + timedelta(minutes=30), quiet)
    assert decision.action == ("warn" if definition == CHANGED else "none")


def sample(minute: int, util: float, busy: int) -> Sample:
    return Sample(
        session_id="s",
        sampled_until=T0 + timedelta(minutes=minute, seconds=30),
        samples=3,
        utilization_avg=util,
        memory_used_max_mib=1000,
        memory_total_mib=16000,
        kernels=1,
        busy_kernels=busy,
        last_kernel_activity=None,
        last_activity=None,
        gpus=(),
    )


@pytest.fixture
def pushed(ledger):
    """A ledger with session "s" (one GPU) and its server's pushes of :data:`MINUTES`."""
    ledger.record_start(SessionStart("s", "ann", "", ("cs231n",), "t4", ("GPU-0",), 50_000, "CNY", T0))
    for minute, util, busy in MINUTES:
        record_sample(ledger, "ann", sample(minute, util, busy))
    return ledger


def test_the_culling_reports_idle_minutes_follow(definition, pushed):
    _facts, counts = load_culling_inputs(pushed, T0, T0 + timedelta(hours=1))
    # in force: only the 2% minute with no kernel; changed: every minute is under 50% and kernels do not count
    assert counts["s"] == MinuteCounts(sampled=3, idle=3 if definition == CHANGED else 1)


def test_the_metrics_busy_marks_follow(definition, pushed):
    [(last_sampled, last_busy)] = gpu_busy_marks(pushed, ["s"], T0).values()
    assert last_sampled.replace(tzinfo=UTC) == T0 + timedelta(minutes=2)
    # in force the GPU worked in the 30% minute; changed, in none
    assert last_busy == (None if definition == CHANGED else T0.replace(tzinfo=None))


def test_the_advice_follows(definition, pushed):
    usage = summarize(session_minutes(pushed, "s"))
    assert usage.sampled_minutes == 3
    assert usage.busy_share == (0.0 if definition == CHANGED else pytest.approx(1 / 3))


def test_the_simulator_follows(definition):
    """The cull simulator's idle GPU-minutes and its culls, and the pool simulator's session lengths."""
    minutes = (TraceMinute(gpu_util=30.0, gpu_mem_frac=0.1, kernel_busy=True, user_active=False),) * 60
    session = TraceSession("ann", "t4", T0.timestamp(), T0.timestamp() + 3600, minutes)
    result = simulate([session], resolve_policy(OURS))
    length, rule = cull_length(minutes)
    if definition == CHANGED:
        assert result["culls_by_rule"] == {"gpu_idle": 1} and result["billed_idle_gpu_minutes"] == 30
        assert (length, rule) == (30, "gpu_idle")
    else:
        assert result["culls"] == 0 and result["billed_idle_gpu_minutes"] == 0
        assert (length, rule) == (60, None)


def test_the_trace_generator_follows(definition):
    """A generated trace's idle minutes are idle and its busy ones busy, as the definition in force says."""
    if definition == CHANGED:
        TraceParams(idle_util_max=40, train_util_min=50, debug_util_min=50)
        with pytest.raises(ValueError, match="idle means under 50%"):
            TraceParams(idle_util_max=50)
    else:
        with pytest.raises(ValueError, match="idle means under 5%"):
            TraceParams(idle_util_max=40)
