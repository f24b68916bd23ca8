"""Several hubs on one ledger (sqlite and a real PostgreSQL): each row knows its hub, each hub's reads of its own
sessions, orders, jobs and queue leave the other hub's alone, an alert is claimed once whatever the hub, the
schema is migrated once and a newer one is refused, and the doctor's view of the hubs' names."""

from __future__ import annotations

import threading
from datetime import timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.hubnames import DEFAULT_HUB, check_hub_name
from jupyterhub_gpu.ledger.hubs import Member, hub_name_problems
from jupyterhub_gpu.ledger.queries import jobs as job_rows
from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import MIGRATIONS, Ledger, LedgerSchemaError, make_engine
from tests.unit.ledger.test_ledger import T0, make_start


@pytest.fixture
def two(db_url):
    """The ledgers of two hubs, ``lab`` and ``dept``, on one database."""
    lab, dept = Ledger(db_url, hub="lab"), Ledger(db_url, hub="dept")
    yield lab, dept
    lab.close()
    dept.close()


@pytest.mark.parametrize("name", ["default", "lab", "dept-k8s", "a", "lab_2.docker", "x" * 63])
def test_a_valid_hub_name_is_kept(name):
    assert check_hub_name(name) == name


@pytest.mark.parametrize("name", ["", "Lab", "lab hub", "-lab", "lab-", "x" * 64, "lab/1", "实验室", None, 3])
def test_a_bad_hub_name_is_refused_with_what_is_accepted(name):
    with pytest.raises(ValueError) as e:
        check_hub_name(name, "GPUService.hub_name")
    assert "GPUService.hub_name must be 1 to 63 characters" in str(e.value)
    assert repr(name) in str(e.value)


def test_a_ledger_of_a_bad_hub_name_is_not_opened(tmp_path):
    with pytest.raises(ValueError, match="hub_name must be"):
        Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}", hub="Lab A")
    assert not (tmp_path / "l.sqlite").exists()  # refused before anything is written


def test_a_ledger_without_a_hub_name_writes_the_default_hub(ledger):
    ledger.record_start(make_start("s1"))
    assert ledger.hub == DEFAULT_HUB == "default"
    assert ledger.get_session("s1").hub == "default"
    assert [s.id for s in ledger.open_sessions(hub="default")] == ["s1"]


def test_each_session_carries_the_hub_that_recorded_it_and_scoped_reads_keep_to_it(two):
    lab, dept = two
    # equal user and server names on both hubs
    lab.record_start(make_start("a1", user="ann", server_name="gpu"))
    dept.record_start(make_start("d1", user="ann", server_name="gpu", started=T0 + timedelta(seconds=1)))
    dept.record_start(make_start("d2", user="bob"))
    assert lab.get_session("d1").hub == "dept" and dept.get_session("a1").hub == "lab"
    assert [s.id for s in lab.open_sessions(hub=lab.hub)] == ["a1"]
    assert [s.id for s in dept.open_sessions(hub=dept.hub)] == ["d1", "d2"]
    assert [s.id for s in dept.open_sessions(limit=1, hub="dept")] == ["d1"]
    assert [s.id for s in dept.open_sessions(after="d1", limit=5, hub="dept")] == ["d2"]
    assert {s.id for s in lab.open_sessions()} == {"a1", "d1", "d2"}  # unscoped: every hub
    assert [s.id for s in lab.open_sessions_of("ann", hub="lab")] == ["a1"]
    assert [s.id for s in lab.open_sessions_of("ann")] == ["a1", "d1"]
    assert sorted(s.id for s in lab.sessions(hub="dept")) == ["d1", "d2"]
    assert lab.hub_names() == ["dept", "lab"]


def test_budgets_count_the_use_of_every_hub(two):
    lab, dept = two
    lab.record_start(make_start("a1", user="ann"))
    dept.record_start(make_start("d1", user="ann"))
    lab.record_stop("a1", T0 + timedelta(minutes=10), "stopped")
    dept.record_stop("d1", T0 + timedelta(minutes=20), "stopped")
    rule = BudgetRule(scope="group", subject="cs231n", period="month", unit="money", limit=Decimal(100))
    (status,) = dept.statuses_of([rule], T0 + timedelta(hours=1), timezone.utc)
    assert status.used == Decimal("1.5")  # 30 minutes at 0.05: both hubs' minutes, on either hub's ledger


def test_a_recorded_stop_order_is_of_its_sessions_hub_and_each_hub_reads_its_own(two):
    lab, dept = two
    lab.record_start(make_start("a1", user="ann", server_name="gpu"))
    dept.record_start(make_start("d1", user="ann", server_name="gpu"))
    for ledger, sid in ((lab, "a1"), (dept, "d1")):
        session = ledger.get_session(sid)
        assert rows.order_stop(ledger, session, rows.PREEMPTED, T0 + timedelta(minutes=5), "preempt", {}, T0)
    assert [o.session_id for o in rows.stop_orders(lab, hub="lab")] == ["a1"]
    assert [o.session_id for o in rows.stop_orders(dept, hub="dept")] == ["d1"]
    assert [o.session_id for o in rows.preemptions(dept, T0 - timedelta(1), hub="dept")] == ["d1"]
    assert {o.session_id for o in rows.stop_orders(lab)} == {"a1", "d1"}


def queued(key: str, user: str) -> rows.Queued:
    return rows.Queued(
        key=key,
        user=user,
        server_name=key.split("/")[1],
        profile="t4",
        gpu_model="T4",
        count=1,
        tier="standard",
        group=None,
        arrived=T0,
        position=1,
        length=1,
        wait_seconds=None,
        reason_key="queue.busy",
        values={},
        updated=T0,
    )


def test_each_hub_publishes_its_own_queue_and_leaves_the_others(two):
    lab, dept = two
    rows.publish_queue(lab, [queued("ann/gpu", "ann")])
    rows.publish_queue(dept, [queued("ann/gpu", "ann"), queued("bob/", "bob")])  # the same key on another hub
    rows.publish_queue(lab, [queued("ann/gpu", "ann")])  # published again: dept's stay
    assert [(q.hub, q.key) for q in rows.queue(lab, hub="lab")] == [("lab", "ann/gpu")]
    assert sorted((q.hub, q.key) for q in rows.queue(lab)) == [
        ("dept", "ann/gpu"),
        ("dept", "bob/"),
        ("lab", "ann/gpu"),
    ]
    rows.publish_queue(dept, [])
    assert [(q.hub, q.key) for q in rows.queue(dept)] == [("lab", "ann/gpu")]


def test_a_job_belongs_to_the_hub_whose_service_made_it(two):
    lab, dept = two
    request = SimpleNamespace(notebook="train.ipynb", profile="t4", parameters={}, time_limit_seconds=600)
    job = job_rows.create_job(dept, "ann", request, "t4", T0)
    assert job_rows.get_job(lab, job.id).hub == "dept"
    assert [j.id for j in job_rows.active_jobs(lab, hub="lab")] == []
    assert [j.id for j in job_rows.active_jobs(dept, hub="dept")] == [job.id]
    assert [j.id for j in job_rows.active_jobs(lab, "ann")] == [job.id]  # a user's limit counts every hub


def test_an_alert_is_claimed_once_whichever_hubs_claim_it_at_once(two):
    lab, dept = two
    results, barrier = [], threading.Barrier(8)

    def claim(ledger):
        barrier.wait()
        results.append(ledger.claim_alert("ann", "group:cs231n", T0, 100, "email", T0, "r1"))

    threads = [threading.Thread(target=claim, args=(ledger,)) for ledger in (lab, dept) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert len(lab.alerts("ann")) == 1


def _config():
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def test_migrating_a_single_hub_ledger_gives_its_rows_the_default_hub(db_url):
    engine = make_engine(db_url)
    cfg = _config()
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0016")
    with engine.begin() as connection:
        connection.execute(
            text(
                'INSERT INTO gpu_sessions (id, "user", server_name, groups, profile, gpus, gpu_count, simulated,'
                " rate_micros, currency, started, resume) VALUES ('old', 'ann', '', '[]', 't4', '[]', 1, false,"
                " 50000, 'CNY', :t, false)"
            ),
            {"t": T0.replace(tzinfo=None)},
        )
        connection.execute(
            text(
                'INSERT INTO gpu_schedule_orders (session_id, "user", server_name, kind, stop_at, decided_at,'
                " reason_key, reason_values) VALUES ('old', 'ann', '', 'preempted', :t, :t, 'k', '{}')"
            ),
            {"t": T0.replace(tzinfo=None)},
        )
    engine.dispose()
    ledger = Ledger(db_url, hub="lab")  # a hub that now has a name: the old rows are the default hub's
    try:
        assert ledger.get_session("old").hub == "default"
        assert ledger.open_sessions(hub="lab") == []
        assert [o.session_id for o in rows.stop_orders(ledger, hub="default")] == ["old"]
    finally:
        ledger.close()


def test_a_ledger_of_a_newer_schema_is_refused_with_a_clear_message(db_url):
    Ledger(db_url).close()
    engine = make_engine(db_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(LedgerSchemaError) as e:
        Ledger(db_url)
    message = str(e.value)
    assert "schema revision 0099, newer than this jupyterhub-gpu knows" in message
    assert "its newest is 0018" in message and "install that version here too" in message
    assert "secret" not in message


def test_members_of_the_hubs_are_recorded_and_beat(two):
    lab, dept = two
    now = T0
    lab.announce("service", "http://lab:8081/hub/api", now, "1.0")
    dept.announce("hub", "http://dept:8081/hub/api", now)
    lab.heartbeat(now + timedelta(minutes=3))
    members = {m.hub: m for m in dept.hub_members()}
    assert members["lab"].role == "service" and members["lab"].heartbeat == now + timedelta(minutes=3)
    assert members["dept"].api_url == "http://dept:8081/hub/api"
    with pytest.raises(ValueError, match="role"):
        lab.announce("spawner", "", now)
    lab.withdraw()
    assert [m.hub for m in dept.hub_members()] == ["dept"]


def _member(hub, role, url, beat=T0, pid=1):
    return Member(id=f"{hub}{role}{pid}", hub=hub, role=role, host="h", pid=pid, api_url=url, version="",
                  started=T0, heartbeat=beat)  # fmt: skip


def test_the_doctor_finds_two_hubs_under_one_name_and_a_service_under_another_name_than_its_hub():
    now = T0 + timedelta(minutes=1)
    fine = [
        _member("lab", "hub", "http://lab/hub/api"),
        _member("lab", "service", "http://lab/hub/api/"),
        _member("dept", "hub", "http://dept/hub/api"),
        _member("dept", "service", "http://dept/hub/api", pid=2),
    ]
    assert hub_name_problems(fine, now) == []
    same_name = [*fine, _member("lab", "service", "http://dept2/hub/api", pid=3)]
    (problem,) = hub_name_problems(same_name, now)
    assert "two hubs run under the hub name 'lab'" in problem and "http://dept2/hub/api" in problem
    # one of them gone (no heartbeat for an hour): no longer a problem
    gone = [*fine, _member("lab", "service", "http://dept2/hub/api", beat=T0 - timedelta(hours=1), pid=3)]
    assert hub_name_problems(gone, now) == []
    mismatch = [_member("default", "hub", "http://lab/hub/api"), _member("lab", "service", "http://lab/hub/api")]
    problems = hub_name_problems(mismatch, now)
    assert any("spawners record sessions as 'default'" in p and "meters none of them" in p for p in problems)
