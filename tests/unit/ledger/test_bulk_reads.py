"""The tick's bulk reads give exactly what the per-session reads give, on sqlite and PostgreSQL."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.ledger.queries.samples import Push, record_samples, session_minutes, sessions_minutes
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.samples import Sample
from jupyterhub_gpu.rules.signals import MinuteReading, minute_signals
from jupyterhub_gpu.service import tick
from jupyterhub_gpu.service.tick import LoopSlice, open_session_pages, sessions_signals, signals_since
from jupyterhub_gpu.session import SessionStart, StopReason

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=timezone.utc)
COLUMNS = (
    "session_id",
    "minute",
    "user",
    "pushes",
    "samples",
    "utilization_tenths_sum",
    "memory_used_max_mib",
    "memory_total_mib",
    "kernels_max",
    "busy_kernels_max",
    "last_kernel_activity",
    "gpus",
)


def fill(ledger: Ledger, sessions: int = 23, minutes: int = 12) -> list[str]:
    """Sessions started at different moments (some after the others' first samples), with samples; two closed."""
    rng = random.Random(7)
    ids = []
    for i in range(sessions):
        sid = f"s{i:03d}"
        started = NOW - timedelta(minutes=rng.randint(2, minutes + 3), seconds=rng.randint(0, 59))
        ledger.record_start(
            SessionStart(
                id=sid,
                user=f"u{i % 7}",
                server_name="",
                groups=("cs231n",),
                profile="t4",
                gpus=(f"GPU-sim-t4-{i}",),
                rate_micros=50_000,
                currency="CNY",
                started=started,
                simulated=True,
            )
        )
        ids.append(sid)
    pushes = []
    for i, sid in enumerate(ids):
        if i % 5 == 4:
            continue  # a session without samples
        for m in range(minutes):
            at = NOW - timedelta(minutes=m, seconds=rng.randint(0, 50))
            for _ in range(rng.randint(1, 2)):
                gpu = (f"GPU-sim-t4-{i}", rng.uniform(0, 100), rng.randint(0, 16000))
                util, mem, busy = rng.uniform(0, 100), rng.randint(0, 16000), rng.randint(0, 1)
                sample = Sample(sid, at, 15, util, mem, 16384, 1, busy, None, None, (gpu,))
                pushes.append(Push(f"u{i % 7}", sample))
    record_samples(ledger, pushes)
    for sid in ids[3:5]:
        ledger.record_stop(sid, NOW - timedelta(seconds=5), StopReason.STOPPED)
    return ids


def rows(minutes) -> list[tuple]:
    return [tuple(getattr(m, c) for c in COLUMNS) for m in minutes]


def test_sessions_minutes_are_each_sessions_own(ledger):
    ids = fill(ledger)
    rng = random.Random(3)
    since = {sid: (None if i % 3 == 0 else NOW - timedelta(minutes=rng.randint(0, 14))) for i, sid in enumerate(ids)}
    since["nobody"] = None  # a session without rows: an empty list
    bulk = sessions_minutes(ledger, since)
    assert set(bulk) == set(since)
    assert sum(len(v) for v in bulk.values()) > 100
    for sid, at in since.items():
        assert rows(bulk[sid]) == rows(session_minutes(ledger, sid, since=at)), sid
    all_bounded = {sid: NOW - timedelta(minutes=4) for sid in ids}  # every bound given: filtered in the query
    for sid, minutes in sessions_minutes(ledger, all_bounded).items():
        assert rows(minutes) == rows(session_minutes(ledger, sid, since=all_bounded[sid]))
    assert sessions_minutes(ledger, {}) == {}


def test_sessions_signals_equal_each_sessions_own_signals(ledger):
    fill(ledger)
    open_sessions = ledger.open_sessions()
    for now in (NOW, NOW + timedelta(minutes=7)):
        bulk = sessions_signals(ledger, open_sessions, now)
        assert set(bulk) == {s.id for s in open_sessions}
        for s in open_sessions:
            alone = session_minutes(ledger, s.id, since=signals_since(s, now))
            assert bulk[s.id] == minute_signals(MinuteReading.of_row(m) for m in alone), s.id


def test_open_session_pages_read_every_open_session_once(ledger, monkeypatch):
    fill(ledger)
    monkeypatch.setattr(tick.context, "CHUNK", 4)

    async def pages():
        return [page async for page in open_session_pages(ledger, LoopSlice(0))]

    got = asyncio.run(pages())
    assert [len(p) for p in got] == [4, 4, 4, 4, 4, 1]
    ids = [s.id for page in got for s in page]
    assert ids == sorted(s.id for s in ledger.open_sessions())
    assert ledger.open_sessions(after=ids[-2], limit=4)[0].id == ids[-1]


def test_passes_let_the_event_loop_run(ledger, monkeypatch):
    """With a zero slice, requests waiting on the loop run between the culling pass's sessions."""
    fill(ledger)
    monkeypatch.setattr(tick.context, "CHUNK", 5)

    class Hub:
        async def stop_server(self, user, name):
            pass

    async def main():
        turns = 0

        async def other():
            nonlocal turns
            while True:
                await asyncio.sleep(0)
                turns += 1

        runner = asyncio.create_task(other())
        await asyncio.sleep(0)
        before = turns
        monkeypatch.setattr(tick.context, "LOOP_SLICE", 0)
        result = await tick.enforce_culling(tick.TickContext(ledger=ledger, hub=Hub()), NOW)
        runner.cancel()
        return result, turns - before

    result, turns = asyncio.run(main())
    assert result.users_checked == 21
    assert turns >= 21
