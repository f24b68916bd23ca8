"""Two real hubs, each with its own managed gpu service, on one ledger (PostgreSQL; sqlite too for the budget).

Each hub's spawner (``c.GPULocalSpawner.hub_name``) and service (``c.GPUService.hub_name``) run under the hub's
name; both hubs know the same users and groups and run the same user and server names. A student with servers
on both hubs: the group's budget counts both, runs out once, is told once (one Lab notice, one mail to each
recipient), and each hub's service stops its own server a grace after that notice. A service never reconciles,
culls or stops a session of the other hub, even one of equal user and server names. A class booking made through
one hub's service keeps that hub's GPUs only: the other hub's service neither lists nor cancels it, its spawn form
does not show it, and its scheduler grants a GPU at once and orders no end.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
import requests
from sqlalchemy import text

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import Ledger, make_engine
from tests.conftest import wait_for
from tests.service.conftest import ServiceUsers, gpu_hub_config

pytestmark = pytest.mark.hub

GRACE = 4


def hub_config(tmp_path: Path, name: str, db_url: str, service_lines: str = "", **kwargs) -> str:
    """:func:`gpu_hub_config` in a folder of its own, its spawner and service under the hub name ``name``."""
    folder = tmp_path / name
    folder.mkdir()
    config = gpu_hub_config(folder, db_url=db_url, **kwargs)
    service_config = folder / "gpu_service_config.py"
    service_config.write_text(service_config.read_text() + f"\nc.GPUService.hub_name = {name!r}\n{service_lines}")
    return config + f"\nc.GPULocalSpawner.hub_name = {name!r}\n"


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def ledger_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    return request.getfixturevalue("postgres_url")


def test_a_group_budget_used_up_on_two_hubs_is_told_once_and_both_servers_stop(
    make_hub, tmp_path, ledger_url, smtp_server
):
    common = {"smtp_port": smtp_server.port, "tick": 1, "grace": GRACE, "min_minutes": 0}
    lab = make_hub(hub_config(tmp_path, "lab", ledger_url, **common), name="lab")
    dept = make_hub(hub_config(tmp_path, "dept", ledger_url, **common), name="dept")
    ledger = Ledger(ledger_url)
    try:
        for hub in (lab, dept):
            hub.create_users("stu1")
        # two first minutes of a T4 (¥0.05 each): used up once the student runs on both hubs, half on one
        ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("0.10")), datetime.now(timezone.utc))
        for hub in (lab, dept):
            assert hub.start_server("stu1", {"profile": "t4"}).status_code in (201, 202)
        sessions = wait_for(lambda: len(s := ledger.sessions(user="stu1")) == 2 and s, 90, what="both sessions")
        assert sorted((s.hub, s.pool) for s in sessions) == [("dept", "cs231n"), ("lab", "cs231n")]
        for hub in (lab, dept):
            hub.wait_stopped("stu1", timeout=90)
        wait_for(lambda: len([s for s in ledger.sessions(user="stu1") if s.stopped]) == 2, 30, what="both closed")
        closed = {s.hub: s for s in ledger.sessions(user="stu1")}
        (notice,) = ledger.notices("stu1")  # one warning: each server's Lab reads it, neither hub sent its own
        for hub_name, session in closed.items():
            assert session.stop_reason == "budget", hub_name
            assert (session.stopped - notice.created).total_seconds() >= GRACE, hub_name  # warned, then the grace
        # the alert mail: once to each recipient, not once per hub
        recipients = ["admin@example.edu", "prof@example.edu", "stu1@students.example.edu"]
        wait_for(lambda: len(smtp_server.messages) >= 3, 15, what="the alert mail")
        time.sleep(3)  # both services ticked a few more times
        assert sorted(rcpt for _sender, [rcpt], _message in smtp_server.messages) == recipients
        final = [(a.threshold, a.channel) for a in ledger.alerts("stu1") if a.threshold == 100]
        assert len(final) == len(set(final)) and (100, "email") in final
        # each hub's server was stopped by its own gpu service (the hub logs who asked)
        for hub in (lab, dept):
            assert "DELETE /hub/api/users/stu1/server (gpu@" in hub.log_text(), hub.workdir
    finally:
        ledger.close()


@pytest.mark.postgres
def test_a_service_never_reconciles_culls_or_stops_the_other_hubs_session_of_equal_names(
    make_hub, tmp_path, postgres_url
):
    # the lab's service culls every server at 2 minutes (warned at 1); the dept's keeps the default rules
    max_age = 'c.Culling.rules = {"default": [{"kind": "max_age", "minutes": 2, "warn_minutes": 1}]}\n'
    common = {"tick": 1, "reconcile": 1, "min_minutes": 0}
    lab = make_hub(hub_config(tmp_path, "lab", postgres_url, service_lines=max_age, **common), name="lab")
    dept = make_hub(hub_config(tmp_path, "dept", postgres_url, **common), name="dept")
    ledger = Ledger(postgres_url)
    try:
        for hub in (lab, dept):
            hub.create_users("ann")
        lab.start_server("ann", {"profile": "t4"})
        lab.wait_ready("ann")
        dept.start_server("ann", {"profile": "t4"})  # the same user and server name, started later, on the dept
        dept.wait_ready("ann")
        by_hub = {s.hub: s for s in ledger.sessions(user="ann")}
        assert set(by_hub) == {"lab", "dept"}
        # both services reconcile every second: each lists ann's server on its own hub; neither closes the other
        # hub's session as missing nor as the older of two sessions of one server
        time.sleep(5)
        assert all(s.stopped is None for s in ledger.sessions(user="ann")), [
            (s.hub, s.stop_reason) for s in ledger.sessions(user="ann")
        ]
        warned = wait_for(lambda: ledger.get_session(by_hub["lab"].id).cull_warned_at, 100, what="the lab's warning")
        assert warned is not None and ledger.get_session(by_hub["dept"].id).cull_warned_at is None
        lab.wait_stopped("ann", timeout=120)
        stopped = wait_for(lambda: (s := ledger.get_session(by_hub["lab"].id)).stopped and s, 30, what="closed")
        assert stopped.stop_reason == "max_age"
        time.sleep(3)  # both services ticked again
        other = ledger.get_session(by_hub["dept"].id)
        assert other.stopped is None and other.pending_stop_reason is None and other.cull_warned_at is None
        assert dept.server("ann") is not None and dept.server("ann").get("ready")  # still running on the dept
    finally:
        ledger.close()


def test_a_hub_older_than_the_ledgers_schema_does_not_start_and_says_why(make_hub, tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    Ledger(url).close()
    engine = make_engine(url)
    with engine.begin() as connection:  # another hub on this ledger runs a newer jupyterhub-gpu
        connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    hub = make_hub(hub_config(tmp_path, "lab", url), name="lab", start=False)
    with pytest.raises(AssertionError, match="hub exited"):
        hub.start()
    log = hub.log_text()
    assert "jupyterhub-gpu cannot start: the ledger sqlite:///" in log
    assert "schema revision 0099, newer than this jupyterhub-gpu knows" in log
    assert "Traceback" not in log


@pytest.mark.postgres
def test_a_booking_through_one_hubs_service_keeps_no_gpu_and_is_not_seen_on_the_other_hub(
    make_hub, tmp_path, postgres_url
):
    common = {"tick": 1, "min_minutes": 0, "gpu_pool": {"T4": 4, "A100": 1}}
    lab = make_hub(hub_config(tmp_path, "lab", postgres_url, **common), name="lab")
    dept = make_hub(hub_config(tmp_path, "dept", postgres_url, **common), name="dept")
    ledger = Ledger(postgres_url, hub="dept")
    try:
        admins = {}
        for hub in (lab, dept):
            hub.create_users("admin", "thea")
            token = ServiceUsers(hub, None).token("admin")
            admins[hub.url] = (f"{hub.url}/services/gpu/api/v1", {"Authorization": f"token {token}"})

        def api(hub, method, path, **kwargs):
            url, headers = admins[hub.url]
            return requests.request(method, f"{url}/{path}", headers=headers, timeout=30, **kwargs)

        # the lab's admin books all 4 of the lab's T4s for cs231n, from a minute on (in force: within the lead)
        now = datetime.now(timezone.utc).replace(microsecond=0)
        start, end = (now + timedelta(minutes=m) for m in (1, 31))
        body = {"group": "cs231n", "gpu_model": "T4", "count": 4, "start": start.isoformat(), "end": end.isoformat()}
        r = api(lab, "POST", "reservations", json={**body, "note": "CS231N"})
        assert r.status_code == 201, r.text
        booked = r.json()["id"]
        assert [b["id"] for b in api(lab, "GET", "reservations").json()["reservations"]] == [booked]
        # the department's service neither lists nor cancels it, and books its own 4 T4s in the same window
        assert api(dept, "GET", "reservations").json()["reservations"] == []
        r = api(dept, "DELETE", f"reservations/{booked}")
        assert r.status_code == 404, r.text
        assert [b["id"] for b in api(lab, "GET", "reservations").json()["reservations"]] == [booked]
        # the spawn forms: the lab's tells thea (thesis) of the class's T4s, the department's does not
        forms = {
            n: h.login("thea").get(f"{h.url}/hub/spawn", timeout=30).text for n, h in (("lab", lab), ("dept", dept))
        }
        assert "4 reserved for CS231N" in forms["lab"], re.findall(r"reserved[^<]*", forms["lab"])
        assert "reserved for" not in forms["dept"]
        # thea gets a T4 on the department's hub at once, and its scheduler orders no end for her session
        assert dept.start_server("thea", {"profile": "t4"}).status_code in (201, 202)
        dept.wait_ready("thea")
        time.sleep(3)  # the department's scheduler and service ran again
        (session,) = ledger.sessions(user="thea")
        assert session.hub == "dept" and session.stopped is None
        assert rows.stop_orders(ledger, hub="dept") == []
    finally:
        ledger.close()
