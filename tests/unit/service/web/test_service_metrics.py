"""The service's /metrics collectors over a real sqlite ledger: GPU idleness, stop reasons, ledger and tick health."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.ledger.queries.samples import record_sample
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.samples import Sample
from jupyterhub_gpu.service.tick import TickHealth
from jupyterhub_gpu.service.web.metrics import make_registry
from jupyterhub_gpu.session import SessionStart, StopReason

UTC = timezone.utc
NOW = datetime(2026, 11, 2, 12, 0, 30, tzinfo=UTC)
TZ = ZoneInfo("Asia/Shanghai")


def scrape(registry) -> dict:
    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def key(name: str, **labels):
    return (name, tuple(sorted(labels.items())))


def start(ledger, sid, user, started, gpus=("GPU-0",), server=""):
    ledger.record_start(
        SessionStart(sid, user, server, ("cs231n",), "t4" if gpus else "cpu", gpus, 50_000, "CNY", started)
    )


def minute(ledger, user, sid, at, util, samples=2):
    sample = Sample(sid, at + timedelta(seconds=30), samples, util, 1000, 16000, 1, 0, None, None, ())
    record_sample(ledger, user, sample)


def test_gpu_idle_seconds_count_from_the_last_busy_minute(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    m = NOW.replace(second=0)
    start(ledger, "busy", "ann", m - timedelta(minutes=30))
    minute(ledger, "ann", "busy", m - timedelta(minutes=2), 80.0)  # busy up to 11:59
    start(ledger, "idle", "bob", m - timedelta(minutes=40), server="exp")
    for i in range(1, 40):
        minute(ledger, "bob", "idle", m - timedelta(minutes=i), 4.9)  # under 5% all along: idle since its start
    start(ledger, "mute", "cai", m - timedelta(hours=2))
    minute(ledger, "cai", "mute", m - timedelta(minutes=90), 0.0)  # last sample 90 minutes ago: not judged
    start(ledger, "cpu", "dan", m - timedelta(minutes=10), gpus=())
    start(ledger, "old", "eve", m - timedelta(days=3))
    minute(ledger, "eve", "old", m - timedelta(minutes=1), 0.0)  # idle for 3 days: shown as the 1-day horizon
    found = scrape(make_registry(ledger, TZ, clock=lambda: NOW))
    idle = {k[1]: v for k, v in found.items() if k[0] == "jupyterhub_gpu_session_gpu_idle_seconds"}
    hub = ("hub", "default")  # the hub of a single hub that sets no name
    assert idle == {
        (
            hub,
            ("profile", "t4"),
            ("server", ""),
            ("user", "ann"),
        ): 90.0,  # from 11:59 (the busy minute's end) to 12:00:30
        (hub, ("profile", "t4"), ("server", "exp"), ("user", "bob")): 40 * 60 + 30.0,
        (hub, ("profile", "t4"), ("server", ""), ("user", "eve")): 86400.0,
    }
    assert found[key("jupyterhub_gpu_ledger_up")] == 1


def test_every_stop_reason_is_counted_from_zero(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    start(ledger, "s1", "ann", NOW - timedelta(hours=1))
    ledger.record_stop("s1", NOW - timedelta(minutes=30), "gpu_idle")
    found = scrape(make_registry(ledger, TZ, clock=lambda: NOW))
    stops = {dict(k[1])["reason"]: v for k, v in found.items() if k[0] == "jupyterhub_gpu_stops_total"}
    assert stops == {r.value: (1 if r is StopReason.GPU_IDLE else 0) for r in StopReason}


def test_an_unreadable_ledger_gives_ledger_up_0_and_no_ledger_family(tmp_path):
    path = tmp_path / "l.sqlite"
    ledger = Ledger(f"sqlite:///{path}")
    start(ledger, "s1", "ann", NOW - timedelta(hours=1))
    health = TickHealth(interval=30, started=1000.0)
    registry = make_registry(ledger, TZ, clock=lambda: NOW, tick_health=health)
    assert scrape(registry)[key("jupyterhub_gpu_active_sessions", hub="default", profile="t4")] == 1
    ledger.close()
    path.write_bytes(b"this is not a database" * 100)  # every later query fails
    found = scrape(registry)
    assert found[key("jupyterhub_gpu_ledger_up")] == 0
    assert not [k for k in found if k[0].startswith(("jupyterhub_gpu_active", "jupyterhub_gpu_budget"))]
    assert found[key("jupyterhub_gpu_tick_interval_seconds")] == 30  # the rest of the scrape still answers


def test_ticks_by_outcome_and_the_last_good_one():
    health = TickHealth(interval=1.5, started=1000.0)
    registry = make_registry(Ledger("sqlite://"), TZ, clock=lambda: NOW, tick_health=health)
    found = scrape(registry)
    assert found[key("jupyterhub_gpu_ticks_total", outcome="ok")] == 0
    assert found[key("jupyterhub_gpu_tick_last_success_timestamp_seconds")] == 1000.0  # the start, before any
    health.record(True, 1010.0)
    health.record(False, 1020.0)
    health.record(False, 1030.0)
    found = scrape(registry)
    assert found[key("jupyterhub_gpu_ticks_total", outcome="ok")] == 1
    assert found[key("jupyterhub_gpu_ticks_total", outcome="failed")] == 2
    assert found[key("jupyterhub_gpu_tick_last_success_timestamp_seconds")] == 1010.0
    assert found[key("jupyterhub_gpu_tick_interval_seconds")] == 1.5
