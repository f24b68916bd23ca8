"""Two hubs on one ledger, each with its own service: the real tick passes of each hub's service, on one real
ledger (sqlite and PostgreSQL), against a stand-in hub per hub that records the stops it is asked for.

Equal user and server names on both hubs (``ann``'s default server): a service culls, stops for budgets,
reconciles and carries out stop orders only for its own hub's sessions, through its own hub; budgets count
both hubs' use; a budget's alert is claimed once, whichever service sends it, and each service then stops its
own hub's server a grace after that one notice.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.scheduler import Grace
from jupyterhub_gpu.service import tick
from jupyterhub_gpu.service.domain.alerts import BudgetAlert
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.tick import deliver
from jupyterhub_gpu.service.web.auth import is_server_token
from jupyterhub_gpu.session import SessionStart
from tests.unit.service.conftest import StopHub

UTC = timezone.utc
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
CNY = Currency.from_config("CNY")
GRACE = {"grace": Grace(timedelta(minutes=5))}
MAX_AGE = {"default": [{"kind": "max_age", "minutes": 60, "warn_minutes": 5}]}


class ListingHub(StopHub):
    """A stand-in hub that also lists its active servers (``servers``: user -> server names), for reconciliation."""

    def __init__(self, servers: dict[str, list[str]]):
        super().__init__()
        listing = [
            {"name": u, "groups": [], "servers": {n: {"state": {}} for n in names}} for u, names in servers.items()
        ]
        handler = self.httpd.RequestHandlerClass

        def do_GET(self):
            body = json.dumps(listing).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        handler.do_GET = do_GET


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def hubs(db_url):
    """``{"lab": (ledger, stand-in hub), "dept": (...)}``: two hubs' services on one ledger."""
    made = {name: (Ledger(db_url, hub=name), StopHub()) for name in ("lab", "dept")}
    yield made
    for ledger, hub in made.values():
        hub.close()
        ledger.close()


def start(ledger: Ledger, sid: str, user: str = "ann", at: datetime = T0, server: str = "") -> None:
    ledger.record_start(SessionStart(sid, user, server, ("cs101",), "t4", ("GPU-sim-t4-0",), 50_000, "CNY", at))


def test_each_service_culls_only_its_own_hubs_sessions_even_with_equal_names(hubs):
    (lab, lab_hub), (dept, dept_hub) = hubs["lab"], hubs["dept"]
    start(lab, "lab-1")
    start(dept, "dept-1")
    now = T0 + timedelta(minutes=56)  # past the warning of a 60-minute max age
    result = asyncio.run(
        tick.enforce_culling(tick.TickContext(ledger=lab, hub=lab_hub.client, cull_rules=MAX_AGE), now)
    )
    assert [a[1] for a in result.alerts] == ["lab-1"]
    assert dept.get_session("dept-1").cull_warned_at is None  # the other hub's session is not warned
    now = T0 + timedelta(minutes=62)
    result = asyncio.run(
        tick.enforce_culling(tick.TickContext(ledger=lab, hub=lab_hub.client, cull_rules=MAX_AGE), now)
    )
    assert result.stopped == [("ann", "")]
    assert lab_hub.stops == ["/hub/api/users/ann/server"] and dept_hub.stops == []
    assert lab.get_session("lab-1").pending_stop_reason == "max_age"
    assert dept.get_session("dept-1").pending_stop_reason is None  # never claimed by the lab's service


def test_a_budget_used_up_on_two_hubs_is_told_once_and_each_service_stops_its_own_server(hubs):
    (lab, lab_hub), (dept, dept_hub) = hubs["lab"], hubs["dept"]
    lab.set_budget(BudgetRule("group", "cs101", "month", "money", Decimal("0.5")), T0 - timedelta(days=1))
    start(lab, "lab-1")
    start(dept, "dept-1")  # ann on both hubs: ¥0.05 a minute each, the group's ¥0.5 is used up after 5 minutes

    def run(ledger, hub, now):
        async def notify(user, groups, status, threshold):
            alert = BudgetAlert.from_status(user, groups, status, threshold, CNY, 60, UTC)
            await deliver(alert, AlertSettings(), ledger, now)

        ctx = tick.TickContext(ledger=ledger, hub=hub.client, budget_grace=timedelta(minutes=1))
        return asyncio.run(tick.enforce_budgets(ctx, now, notify))

    now = T0 + timedelta(minutes=6)  # ¥0.6 of the group's ¥0.5: one hub alone would have used ¥0.3
    first, second = run(lab, lab_hub, now), run(dept, dept_hub, now)
    assert first.stopped == second.stopped == []
    assert [a for a in lab.alerts("ann") if a.threshold == 100 and a.channel == "lab"]  # the final notice, once
    assert len(lab.notices("ann")) == 1  # one Lab notice, not one per hub
    assert run(lab, lab_hub, now + timedelta(seconds=30)).stopped == []  # the grace is not over
    later = now + timedelta(minutes=1, seconds=1)
    assert run(dept, dept_hub, later).stopped == [("ann", "")]
    assert dept_hub.stops == ["/hub/api/users/ann/server"] and lab_hub.stops == []
    assert run(lab, lab_hub, later).stopped == [("ann", "")]
    assert lab_hub.stops == ["/hub/api/users/ann/server"] and dept_hub.stops == ["/hub/api/users/ann/server"]
    assert {lab.get_session(s).pending_stop_reason for s in ("lab-1", "dept-1")} == {"budget"}
    assert len(lab.notices("ann")) == 1
    final = [a.channel for a in lab.alerts("ann") if a.threshold == 100]
    assert "lab" in final and len(final) == len(set(final))  # each channel's claim once, not once per hub


def test_each_service_reconciles_only_its_own_hubs_sessions(db_url):
    lab, dept = Ledger(db_url, hub="lab"), Ledger(db_url, hub="dept")
    lab_hub = ListingHub({})  # the lab's hub runs no server any more
    dept_hub = ListingHub({"ann": [""]})
    try:
        start(lab, "lab-1")
        start(dept, "dept-1")
        start(lab, "lab-2", user="bob")
        missing: dict = {}
        ctx = tick.TickContext(ledger=lab, hub=lab_hub.client)
        first = asyncio.run(tick.reconcile(ctx, T0 + timedelta(minutes=1), missing))
        second = asyncio.run(tick.reconcile(ctx, T0 + timedelta(minutes=2), missing))
        assert first["closed"] == [] and sorted(second["closed"]) == ["lab-1", "lab-2"]
        assert dept.get_session("dept-1").stopped is None  # not the lab's to close, though the lab lists no ann
        # the dept's hub lists ann's server: its session is marked seen, the lab's closed ones stay closed
        summary = asyncio.run(tick.reconcile(tick.TickContext(ledger=dept, hub=dept_hub.client), T0, {}))
        assert summary == {"alive": 1, "closed": [], "recorded": []}
        assert dept.get_session("dept-1").last_seen is not None
        # a lab listing ann's server again does not make the dept's session the lab's
        lab_again = ListingHub({"ann": [""]})
        try:
            ctx = tick.TickContext(ledger=lab, hub=lab_again.client)
            assert asyncio.run(tick.reconcile(ctx, T0 + timedelta(minutes=3), {}))["alive"] == 0
        finally:
            lab_again.close()
    finally:
        lab_hub.close()
        dept_hub.close()
        lab.close()
        dept.close()


def test_each_service_carries_out_only_its_own_hubs_stop_orders(hubs):
    (lab, lab_hub), (dept, dept_hub) = hubs["lab"], hubs["dept"]
    start(lab, "lab-1")
    start(dept, "dept-1")
    stop_at = T0 + timedelta(minutes=5)
    assert rows.order_stop(dept, dept.get_session("dept-1"), rows.PREEMPTED, stop_at, "preempt", GRACE, T0)
    result = asyncio.run(tick.enforce_schedule(tick.TickContext(ledger=lab, hub=lab_hub.client), T0))
    assert result["noticed"] == [] and dept.notices("ann") == []
    (order,) = rows.stop_orders(dept)
    assert order.noticed_at is None and order.hub == "dept"
    result = asyncio.run(tick.enforce_schedule(tick.TickContext(ledger=dept, hub=dept_hub.client), T0))
    assert result["noticed"] == ["dept-1"]
    later = T0 + timedelta(minutes=6)
    assert asyncio.run(tick.enforce_schedule(tick.TickContext(ledger=lab, hub=lab_hub.client), later))["stopped"] == []
    result = asyncio.run(tick.enforce_schedule(tick.TickContext(ledger=dept, hub=dept_hub.client), later))
    assert result["stopped"] == [("ann", "")]
    assert lab_hub.stops == [] and dept_hub.stops == ["/hub/api/users/ann/server"]
    assert lab.get_session("lab-1").pending_stop_reason is None


def test_a_servers_token_never_passes_for_a_session_of_another_hub_even_with_an_equal_token_id(hubs):
    """Each hub numbers its own tokens: ann's server token on the lab may have the id the dept's session keeps."""
    (lab, _), (dept, _) = hubs["lab"], hubs["dept"]
    for ledger, sid in ((lab, "lab-1"), (dept, "dept-1")):
        start = SessionStart(sid, "ann", "", ("cs101",), "t4", ("GPU-0",), 50_000, "CNY", T0, server_token="a17")
        ledger.record_start(start)
    caller = {"kind": "user", "name": "ann", "token_id": "a17", "scopes": []}
    assert is_server_token(caller, lab.get_session("lab-1"), lab.hub)
    assert not is_server_token(caller, lab.get_session("dept-1"), lab.hub)  # what the lab's service asks
    assert is_server_token(caller, dept.get_session("dept-1"), dept.hub)
