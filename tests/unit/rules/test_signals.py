"""The cull rules' signals, made one way from the ledger's rows and from a simulator's trace."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.ledger.queries.samples import record_sample, session_minutes
from jupyterhub_gpu.rules.samples import Sample
from jupyterhub_gpu.rules.signals import MinuteReading, MinuteSignal, minute_signals
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.sim.replay import TraceMinute

UTC = timezone.utc
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def push(ledger, minute: int, util: float, busy: int, samples: int = 3, memory_known=None):
    gpus = (("GPU-0", util, 4000, "own", 1, 2, memory_known),) if memory_known is not None else ()
    sample = Sample(
        "s", T0 + timedelta(minutes=minute, seconds=30), samples, util, 4000, 16000, 1, busy, None, None, gpus
    )
    record_sample(ledger, "ann", sample)


def test_the_ledgers_rows_become_signals_at_their_own_minutes(ledger):
    ledger.record_start(SessionStart("s", "ann", "", (), "t4", ("GPU-0",), 50_000, "CNY", T0))
    push(ledger, 0, 12.5, 1)
    push(ledger, 1, 0.0, 0, samples=0)  # a push without samples: no utilization known
    push(ledger, 3, 40.0, 0, memory_known=False)  # a share that cannot measure its own memory: unknown, not 0
    signals = minute_signals(MinuteReading.of_row(row) for row in session_minutes(ledger, "s"))
    assert signals == [
        MinuteSignal(at=T0, gpu_util=12.5, gpu_mem_frac=0.25, kernel_busy=True),
        MinuteSignal(at=T0 + timedelta(minutes=1), gpu_util=None, gpu_mem_frac=0.25, kernel_busy=False),
        MinuteSignal(at=T0 + timedelta(minutes=3), gpu_util=40.0, gpu_mem_frac=None, kernel_busy=False),
    ]
    assert all(s.at.tzinfo is not None and not s.user_active for s in signals)


def test_a_traces_minutes_become_consecutive_signals_from_its_start():
    trace = [
        TraceMinute(gpu_util=None, gpu_mem_frac=None, kernel_busy=False, user_active=True),
        TraceMinute(gpu_util=80.0, gpu_mem_frac=0.5, kernel_busy=True, user_active=False),
    ]
    assert minute_signals(trace, T0) == [
        MinuteSignal(at=T0, user_active=True),
        MinuteSignal(at=T0 + timedelta(minutes=1), gpu_util=80.0, gpu_mem_frac=0.5, kernel_busy=True),
    ]
