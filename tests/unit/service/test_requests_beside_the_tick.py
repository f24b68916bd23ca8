"""The requests never wait on the tick: the service's tick runs on a thread and loop of its own and writes through
the ledger's one writer, so a push that comes during a slow tick is answered at once and kept.

The real service (``GPUService``, initialized on a real sqlite ledger, its real writer and tick), a stand-in hub
that answers stops; a pass of the tick is made slow on purpose (it holds its thread, as a long read or a
second of judging a thousand sessions does).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from tornado import web

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.queries.samples import Push, session_minutes
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.ledger.writer import LedgerWriter
from jupyterhub_gpu.rules.cullrules import parse_config
from jupyterhub_gpu.rules.samples import Sample
from jupyterhub_gpu.service.app import GPUService
from jupyterhub_gpu.service.tick import metering
from jupyterhub_gpu.service.web.writes import written
from jupyterhub_gpu.session import SessionStart

#: How long the slow pass holds the tick's thread.
SLOW = 3.0
#: The longest a request may wait on the loop or the writer while the tick is slow (a loaded machine's margin).
PROMPT = 0.5


def start(ledger: Ledger, sid: str, started) -> None:
    ledger.record_start(
        SessionStart(
            id=sid,
            user=f"u-{sid}",
            server_name="",
            groups=("cs231n",),
            profile="t4",
            gpus=(f"GPU-{sid}",),
            rate_micros=50_000,
            currency="CNY",
            started=started,
            simulated=True,
        )
    )


def push(sid: str, at) -> Push:
    return Push(f"u-{sid}", Sample(sid, at, 15, 50.0, 100, 16_384, 1, 1, None, None, ()), 1, None)


@pytest.fixture
def service(tmp_path, monkeypatch, hub):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "service-token")  # the service's own (no hub behind it here)
    app = GPUService()
    app.initialize([f"--GPUService.db_url=sqlite:///{tmp_path / 'ledger.sqlite'}", "--GPUService.currency=CNY"])
    rules = parse_config({"default": [{"kind": "max_age", "minutes": 60, "warn_minutes": 5}]}, "rules")
    app.tick_context = replace(app.tick_context, hub=hub.client, cull_rules=rules)
    app.tick_state.last_reconcile = utcnow()  # no listing of the hub's servers here
    now = utcnow()
    for i in range(20):
        start(app.ledger, f"s{i}", now - timedelta(minutes=10))
    start(app.ledger, "old", now - timedelta(hours=2))  # past max_age: the tick warns it (a write of the tick)
    yield app
    if app.tick_thread is not None:
        app.tick_thread.close()
    app.writer.close()
    app.ledger.close()
    GPUService.clear_instance()


def test_a_push_during_a_slow_tick_is_answered_at_once_and_kept(service, monkeypatch):
    entered, left = threading.Event(), threading.Event()
    times: dict[str, float] = {}
    real = metering.enforce_jobs

    async def slow_jobs(ctx, now):
        times["entered"] = time.monotonic()
        entered.set()
        time.sleep(SLOW)  # noqa: ASYNC251 on purpose: holds its thread as a long read does (on the requests' loop: every request would wait)
        left.set()
        return await real(ctx, now)

    monkeypatch.setattr(metering, "enforce_jobs", slow_jobs)
    at = utcnow()

    async def requests_during_the_tick() -> list[float]:
        ticking = asyncio.ensure_future(service.tick())
        while not entered.is_set():  # noqa: ASYNC110 set by the tick's thread, not this loop
            await asyncio.sleep(0.005)
        times["noticed"] = time.monotonic()
        waits = []
        for i in range(20):  # what POST samples awaits: its push written and committed by the writer
            began = time.monotonic()
            row = await service.writer.push(push(f"s{i}", at))
            waits.append(time.monotonic() - began)
            assert row.pushes == 1
        answered_during_the_tick = not left.is_set()
        await asyncio.wait_for(ticking, 30)
        assert answered_during_the_tick, "the pushes were answered only once the slow pass had let go"
        return waits

    waits = asyncio.run(requests_during_the_tick())
    assert times["noticed"] - times["entered"] < PROMPT  # the requests' loop ran on while the tick held its thread
    assert max(waits) < PROMPT, waits
    # every acknowledged push is in the ledger, and the tick did its own work too (its warning written)
    assert all(sum(m.pushes for m in session_minutes(service.ledger, f"s{i}")) == 1 for i in range(20))
    assert service.ledger.get_session("old").cull_warned_at is not None


def test_the_ticks_writes_go_through_the_ledgers_writer(service, monkeypatch):
    threads: list[str] = []
    real = Ledger.set_cull_warnings

    def set_cull_warnings(ledger, *args):
        threads.append(threading.current_thread().name)
        return real(ledger, *args)

    monkeypatch.setattr(Ledger, "set_cull_warnings", set_cull_warnings)
    noticed: list[str] = []
    add_notice = Ledger.add_notice

    def notice(ledger, *args, **kwargs):
        noticed.append(threading.current_thread().name)
        return add_notice(ledger, *args, **kwargs)

    monkeypatch.setattr(Ledger, "add_notice", notice)
    before = service.writer.written
    asyncio.run(service.tick())
    assert threads == ["jupyterhub-gpu-ledger-writer"]  # not the tick's thread, not the requests' loop
    assert noticed == ["jupyterhub-gpu-ledger-writer"]  # its Lab notice too (the gateway's write)
    assert service.writer.written - before >= 3  # the heartbeat, the warning and its notice, each in its turn
    assert service.ledger.get_session("old").cull_rule == "max_age"


class Handler:
    """What :func:`written` reads of a request's handler."""

    def __init__(self, ledger: Ledger):
        self.ledger = ledger
        self.headers: dict[str, str] = {}

    def set_header(self, name: str, value: str) -> None:
        self.headers[name] = value

    def _(self, text: str, **values) -> str:
        return text.format(**values)


async def test_a_request_after_the_writer_closed_is_answered_503_and_writes_nothing(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        LedgerWriter.of(ledger).close()  # the service's shutdown
        handler = Handler(ledger)
        with pytest.raises(web.HTTPError) as refused:
            await written(handler, Ledger.set_cull_warning, "s1", utcnow(), "max_age")
        assert refused.value.status_code == 503 and handler.headers["Retry-After"] == "5"
        assert LedgerWriter.of(ledger).waiting == 0
    finally:
        ledger.close()
