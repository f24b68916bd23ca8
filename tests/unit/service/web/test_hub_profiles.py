"""Two hubs with their own profiles on one ledger (sqlite and a real PostgreSQL): each hub's service offers,
checks, advises on and counts its own hub's profiles.

The jobs' and pricing's handlers run in a tornado application of their own with a stand-in caller and a
stand-in hub that records the servers it is asked to start; the advice is the tick's own pass.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application

from jupyterhub_gpu.ledger.models import UsageMinute
from jupyterhub_gpu.ledger.queries.advice import advice_of
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings
from jupyterhub_gpu.service.feeds.advice import profile_options
from jupyterhub_gpu.service.tick import TickContext, update_advice
from jupyterhub_gpu.service.web.api import jobs as jobs_api
from jupyterhub_gpu.service.web.api import me as me_api
from jupyterhub_gpu.service.web.api import pricing as pricing_api
from jupyterhub_gpu.service.web.metrics import LedgerCollector
from jupyterhub_gpu.session import SessionStart

CNY = Currency.from_config("CNY")
NOW = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
GB = 1024
ALICE = {"kind": "user", "name": "alice", "groups": ["cs231n"], "scopes": []}

# a lab's Docker hub and the department's Kubernetes hub: other profiles, other prices (a100 on both)
LAB = [
    {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05"},
    {"slug": "a100", "display_name": "1× A100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25"},
]
DEPT = [
    {"slug": "l4", "display_name": "1× L4", "gpu_model": "L4", "gpu_count": 1, "rate_per_minute": "0.08"},
    {"slug": "a100", "display_name": "A100 (dept)", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.20"},
]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def two(request, tmp_path):
    """The ledgers of the two hubs' services, ``lab-docker`` and ``dept-k8s``, each hub's profiles published."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    else:
        url = request.getfixturevalue("postgres_url")
    lab, dept = Ledger(url, hub="lab-docker"), Ledger(url, hub="dept-k8s")
    lab.set_pricing(LAB, "CNY", NOW)
    dept.set_pricing(DEPT, "CNY", NOW)
    yield lab, dept
    lab.close()
    dept.close()


class StandInHub:
    """The hub's API as the jobs' handler uses it: records each server it is asked to start."""

    def __init__(self):
        self.started = []

    async def start_server(self, user, server_name, options, display_name=None):
        self.started.append((user, options["profile"]))


def call(ledger, method, path, body=None, hub=None):
    """``(status, JSON)`` of one request to the jobs' and pricing's handlers of ``ledger``'s service, as alice."""

    def as_alice(cls):
        class Handler(cls):
            async def prepare(self):
                pass

            def get_current_user(self):
                return ALICE

            def now(self):
                return NOW

        return Handler

    async def go():
        ctx = SimpleNamespace(
            ledger=ledger,
            hub=hub or StandInHub(),
            currency=CNY,
            base_url="/services/gpu/",
            job_time_limit_max_minutes=600,
            job_time_limit_minutes=60,
            max_concurrent_jobs=2,
            advice_settings=AdviceSettings(),
            tz=timezone.utc,
            hub_auth=SimpleNamespace(get_token=lambda *a, **k: "t"),
        )
        app = Application(
            [
                (r"/jobs", as_alice(jobs_api.JobsHandler), {"ctx": ctx}),
                (r"/pricing", as_alice(pricing_api.PricingHandler), {"ctx": ctx}),
                (r"/me", as_alice(me_api.MeHandler), {"ctx": ctx}),
            ]
        )
        sock, port = bind_unused_port()
        server = HTTPServer(app)
        server.add_sockets([sock])
        try:
            response = await AsyncHTTPClient().fetch(
                f"http://127.0.0.1:{port}{path}",
                method=method,
                body=None if body is None else json.dumps(body),
                raise_error=False,
            )
        finally:
            server.stop()
        return response.code, json.loads(response.body)

    return asyncio.run(go())


def test_get_pricing_shows_the_services_own_hubs_profiles(two):
    lab, dept = two
    for ledger, expected in ((lab, LAB), (dept, DEPT)):
        code, answer = call(ledger, "GET", "/pricing")
        assert code == 200
        assert [(p["slug"], p["rate_per_minute"]) for p in answer["profiles"]] == [
            (p["slug"], p["rate_per_minute"].rstrip("0")) for p in expected
        ]


def test_the_jobs_api_refuses_a_profile_of_the_other_hub_and_takes_its_own(two):
    lab, dept = two
    hub = StandInHub()
    code, answer = call(dept, "POST", "/jobs", {"notebook": "work/train.ipynb", "profile": "t4"}, hub)
    assert code == 400 and "Unknown profile 't4'" in answer["message"]
    code, answer = call(lab, "POST", "/jobs", {"notebook": "work/train.ipynb", "profile": "l4"}, hub)
    assert code == 400 and "Unknown profile 'l4'" in answer["message"]
    assert hub.started == []  # nothing was started for a refused job
    code, answer = call(dept, "POST", "/jobs", {"notebook": "work/train.ipynb", "profile": "l4"}, hub)
    assert code == 201 and answer["profile"] == "l4"
    code, answer = call(lab, "POST", "/jobs", {"notebook": "work/train.ipynb"}, hub)  # the first allowed: its own
    assert code == 201 and answer["profile"] == "t4"
    assert hub.started == [("alice", "l4"), ("alice", "t4")]


def quiet_a100_session(ledger, sid):
    """A stopped hour on an A100 of ``ledger``'s hub that used 2 GB and was mostly idle: a cheaper GPU serves it."""
    t0 = NOW - timedelta(hours=3)
    ledger.record_start(SessionStart(sid, f"u{sid}", "", ("cs231n",), "a100", ("GPU-x",), 250_000, "CNY", t0))
    with ledger.Session() as db:
        for i in range(60):
            db.add(
                UsageMinute(
                    session_id=sid,
                    minute=(t0 + timedelta(minutes=i)).replace(tzinfo=None),
                    user=f"u{sid}",
                    pushes=1,
                    samples=2,
                    utilization_tenths_sum=0 if i % 5 else 2 * 600,
                    memory_used_max_mib=2 * GB,
                    memory_total_mib=40 * GB,
                    kernels_max=1,
                    busy_kernels_max=0,
                    gpus="{}",
                )
            )
        db.commit()
    ledger.record_stop(sid, t0 + timedelta(minutes=60), "user")


def test_the_advice_of_a_hubs_session_suggests_only_that_hubs_profiles(two):
    lab, dept = two
    assert [o.slug for o in profile_options(lab)] == ["t4", "a100"]
    assert [o.slug for o in profile_options(dept)] == ["l4", "a100"]
    assert [o.slug for o in profile_options(lab, hub="dept-k8s")] == ["l4", "a100"]
    quiet_a100_session(lab, "on-lab")
    quiet_a100_session(dept, "on-dept")
    # each hub's service advises its own hub's sessions, among its own hub's profiles
    assert update_advice(TickContext(ledger=lab, currency=CNY), NOW)["advised"] == 1
    assert update_advice(TickContext(ledger=dept, currency=CNY), NOW)["advised"] == 1
    advice = advice_of(lab, ["on-lab", "on-dept"])
    assert advice["on-lab"].suggested_profile == "t4"
    assert advice["on-dept"].suggested_profile == "l4"


def test_metrics_count_each_hub_with_its_own_profiles(two):
    lab, _dept = two
    lab.announce("service", "", NOW, "test")
    _dept.announce("service", "", NOW, "test")
    registry = CollectorRegistry()
    registry.register(LedgerCollector(lab, timezone.utc, lambda: NOW))
    series = {
        (s.labels["hub"], s.labels["profile"])
        for family in registry.collect()
        if family.name == "jupyterhub_gpu_active_sessions"
        for s in family.samples
    }
    assert series == {("lab-docker", "t4"), ("lab-docker", "a100"), ("dept-k8s", "l4"), ("dept-k8s", "a100")}


def test_get_me_tells_each_session_its_share_from_its_own_hubs_profile(two):
    lab, dept = two
    shared = {"slug": "l4-quarter", "display_name": "¼ L4", "gpu_model": "L4", "gpu_count": 1, "gpu_share": 4}
    dept.set_pricing([*DEPT, {**shared, "rate_per_minute": "0.02"}], "CNY", NOW)
    # alice on the department's cluster, on a time-sliced replica the device plugin picks
    placeholder = ("nvidia.com/gpu.shared:0",)
    dept.record_start(SessionStart("k8s", "alice", "", ("cs231n",), "l4-quarter", placeholder, 20_000, "CNY", NOW))
    lab.record_start(SessionStart("dkr", "alice", "gpu2", ("cs231n",), "t4", ("GPU-x",), 50_000, "CNY", NOW))
    for service in (lab, dept):  # either hub's service tells her both, each from its own hub's profile
        code, answer = call(service, "GET", "/me")
        assert code == 200
        shares = {s["id"]: s["share"] for s in answer["active_sessions"]}
        assert shares == {"k8s": "1/4", "dkr": None}
