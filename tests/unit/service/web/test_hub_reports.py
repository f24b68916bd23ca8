"""Every hub in the reports: the ``hub`` filter's parsing, the hub in a session's JSON and CSV, the culling report
and ``/metrics`` of two hubs on one sqlite ledger (docs/admin.md, "Two hubs on one ledger")."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.ledger.queries.culling import load_culling_inputs
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.web import views
from jupyterhub_gpu.service.web.metrics import make_registry
from jupyterhub_gpu.service.web.params import (
    BadRequest,
    known_hub,
    parse_culling_query,
    parse_hub,
    parse_usage_query,
)
from jupyterhub_gpu.session import SessionStart, StopReason

UTC = timezone.utc
TZ = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 11, 2, 12, 0, 30, tzinfo=UTC)
CNY = Currency.from_config("CNY")


def args(**params) -> dict[str, list[bytes]]:
    return {k: [v.encode()] for k, v in params.items()}


def test_the_hub_filter_is_a_hub_name_given_once():
    assert parse_usage_query(args(hub="lab-docker", all="true"), TZ).hub == "lab-docker"
    assert parse_usage_query(args(all="true"), TZ).hub is None  # every hub
    assert parse_culling_query(args(hub="dept-k8s"), TZ).hub == "dept-k8s"
    assert parse_hub("a") == "a"
    for bad in ("", "Lab", "lab docker", "-lab", "lab/a", "x" * 64, "lab\n"):
        with pytest.raises(BadRequest, match="hub must be 1 to 63 characters"):
            parse_usage_query(args(hub=bad), TZ)
        with pytest.raises(BadRequest, match="hub must be 1 to 63 characters"):
            parse_culling_query(args(hub=bad), TZ)
    with pytest.raises(BadRequest, match="at most once"):
        parse_usage_query({"hub": [b"a", b"b"]}, TZ)


def test_a_hub_the_ledger_has_not_is_refused_naming_the_hubs_it_has():
    assert known_hub("lab-a", ["lab-a", "lab-b"]) == "lab-a"
    assert known_hub(None, []) is None
    with pytest.raises(BadRequest) as e:
        known_hub("lab-c", ["lab-a", "lab-b"])
    assert str(e.value) == "The ledger has no hub named 'lab-c'; its hubs: 'lab-a', 'lab-b'"
    with pytest.raises(BadRequest, match="none yet"):
        known_hub("lab-a", [])


def two_hubs(tmp_path) -> tuple[Ledger, Ledger]:
    """Two hubs' ledgers on one sqlite file: each records its sessions under its own hub name."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    return Ledger(url, hub="lab-docker"), Ledger(url, hub="dept-k8s", migrate=False)


def start(ledger: Ledger, sid: str, user: str, started: datetime, gpus=("GPU-0",)) -> None:
    profile = "t4" if gpus else "cpu"
    ledger.record_start(SessionStart(sid, user, "", ("cs231n",), profile, gpus, 50_000, "CNY", started))


def test_a_session_shows_its_hub_in_json_and_as_the_csvs_last_column(tmp_path):
    lab, dept = two_hubs(tmp_path)
    # the same user on both hubs
    start(lab, "s-lab", "ann", NOW - timedelta(minutes=30))
    start(dept, "s-dept", "ann", NOW - timedelta(minutes=20))
    lab.record_stop("s-lab", NOW - timedelta(minutes=25), "stopped")
    records = lab.sessions(user="ann")
    sessions = views.sessions_json(lab, records, NOW, CNY)
    assert {s["id"]: s["hub"] for s in sessions} == {"s-lab": "lab-docker", "s-dept": "dept-k8s"}
    rows = list(csv.reader(io.StringIO(views.usage_csv(sessions))))
    assert rows[0][-1] == "hub" and rows[0][:16] == list(views.CSV_COLUMNS)[:16]  # the older columns kept in place
    assert {r[0]: r[-1] for r in rows[1:]} == {"s-lab": "lab-docker", "s-dept": "dept-k8s"}
    assert [r.id for r in dept.sessions(hub="dept-k8s")] == ["s-dept"]
    assert lab.hub_names() == ["dept-k8s", "lab-docker"]


def test_the_culling_report_reads_one_hub(tmp_path):
    lab, dept = two_hubs(tmp_path)
    start(lab, "s-lab", "ann", NOW - timedelta(hours=2))
    start(dept, "s-dept", "ann", NOW - timedelta(hours=2))
    for ledger, sid in ((lab, "s-lab"), (dept, "s-dept")):
        ledger.claim_stop_reason(sid, StopReason.GPU_IDLE)
        ledger.record_stop(sid, NOW - timedelta(hours=1), "stopped")
    every, _ = load_culling_inputs(lab, None, NOW)
    one, _ = load_culling_inputs(lab, None, NOW, hub="dept-k8s")
    assert sorted(f.id for f in every) == ["s-dept", "s-lab"]
    assert [f.id for f in one] == ["s-dept"]


def scrape(registry) -> dict:
    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def values_of(found: dict, name: str) -> dict:
    return {labels: v for (n, labels), v in found.items() if n == name}


def test_metrics_carry_the_hub_of_each_session(tmp_path):
    lab, dept = two_hubs(tmp_path)
    start(lab, "run-lab", "ann", NOW - timedelta(minutes=5))
    start(dept, "run-dept-1", "ann", NOW - timedelta(minutes=5))
    start(dept, "run-dept-2", "bob", NOW - timedelta(minutes=5))
    start(lab, "old-lab", "ann", NOW - timedelta(hours=1))
    lab.record_stop("old-lab", NOW - timedelta(minutes=50), "stopped")  # 10 minutes, 0.5 CNY
    found = scrape(make_registry(dept, TZ, clock=lambda: NOW))  # either hub's service reports both hubs
    active = values_of(found, "jupyterhub_gpu_active_sessions")
    assert active[(("hub", "lab-docker"), ("profile", "t4"))] == 1
    assert active[(("hub", "dept-k8s"), ("profile", "t4"))] == 2
    billed = values_of(found, "jupyterhub_gpu_billed_minutes_total")
    assert billed[(("hub", "lab-docker"), ("profile", "t4"))] == 10
    assert (("hub", "dept-k8s"), ("profile", "t4")) not in billed or billed[
        (("hub", "dept-k8s"), ("profile", "t4"))
    ] == 0
    spend = values_of(found, "jupyterhub_gpu_spend_total")
    assert spend == {(("currency", "CNY"), ("group", "cs231n"), ("hub", "lab-docker"), ("profile", "t4")): 0.5}
    stops = values_of(found, "jupyterhub_gpu_stops_total")
    assert stops[(("hub", "lab-docker"), ("reason", "stopped"))] == 1
    assert stops[(("hub", "dept-k8s"), ("reason", "stopped"))] == 0  # every hub's reasons from zero
    # the hub label takes a value per hub, never one per user or session
    assert {dict(labels)["hub"] for labels in active} == {"lab-docker", "dept-k8s"}
