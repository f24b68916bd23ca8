"""The spawn's budget check across hubs: the spawns that passed on any hub hold their first minutes in the ledger.

Two hubs on one ledger (sqlite and PostgreSQL), each with a Ledger of its own (its own connections, as another
process has), check the same student's spawns on a budget with room for exactly one minimum: exactly one passes
(docs/service.md, "Spawn races"). The spawners are real GPULocalSpawners of JupyterHub Users; the clock is moved,
never slept on.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from jupyterhub.spawner import SpawnException

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger import holds
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.spawners import launch
from jupyterhub_gpu.spawners.budget import HOLD_MARGIN, Reservation, budget_check, hold_span

SHANGHAI = ZoneInfo("Asia/Shanghai")
CNY = Currency.from_config("CNY")
T4 = 50_000  # ¥0.05 a minute
NOW = datetime(2026, 12, 10, 2, 0, tzinfo=timezone.utc)
HELD = "held for the first 10 minutes of its servers that are starting or started less than 10 minutes ago"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    return request.getfixturevalue("postgres_url")


def room_for_one(ledger) -> None:
    """ann's own budget: ¥0.75 this month, room for the first 10 minutes of one T4 (¥0.50), not of two."""
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("0.75")), NOW - timedelta(days=1))


def check(ledger, key="ann/", now=NOW):
    return budget_check(
        ledger,
        key,
        Reservation("ann", None, T4, 1),
        reserve=True,
        min_minutes=10,
        now=now,
        tz=SHANGHAI,
        format_money=CNY.format,
        hold_for=timedelta(minutes=16),
    )


def test_two_hubs_checking_the_last_minimum_at_once_pass_one_spawn(db_url):
    lab, dept = Ledger(db_url, hub="lab"), Ledger(db_url, hub="dept")
    room_for_one(lab)
    try:
        for r in range(20):
            barrier = threading.Barrier(2)
            refusals = {}

            def one(ledger, refusals=refusals, barrier=barrier):
                barrier.wait()
                refusals[ledger.hub] = check(ledger)  # the same user and server name on both hubs

            threads = [threading.Thread(target=one, args=(x,)) for x in (lab, dept)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            passed = [hub for hub, refusal in refusals.items() if refusal is None]
            assert len(passed) == 1 and len(refusals) == 2, (r, refusals)
            (refusal,) = [refusal for refusal in refusals.values() if refusal is not None]
            assert HELD in refusal("en") and "¥0.50 held" in refusal("en"), refusal("en")
            (hold,) = holds.held(lab, NOW)
            assert (hold.hub, hold.key) == (passed[0], "ann/")
            assert holds.release(lab if passed[0] == "lab" else dept, "ann/")
    finally:
        lab.close()
        dept.close()


def test_an_expired_hold_no_longer_counts(db_url):
    lab, dept = Ledger(db_url, hub="lab"), Ledger(db_url, hub="dept")
    room_for_one(lab)
    try:
        assert check(lab) is None
        assert HELD in check(dept, now=NOW + timedelta(minutes=15))("en")
        # the lab's hub died while its spawn held: 16 minutes on, the hold has expired and the dept's spawn passes
        assert check(dept, now=NOW + timedelta(minutes=16)) is None
        assert [(h.hub, h.key) for h in holds.held(lab, NOW + timedelta(minutes=16))] == [("dept", "ann/")]
    finally:
        lab.close()
        dept.close()


def make_spawner(db_url: str, hub_name: str):
    """ann's GPULocalSpawner on hub ``hub_name`` (a real JupyterHub User, JupyterHub's ORM in memory)."""
    from jupyterhub import orm
    from jupyterhub.objects import Hub
    from jupyterhub.user import User
    from traitlets.config import Config

    from jupyterhub_gpu.spawners.local import GPULocalSpawner

    c = Config()
    c.GPULocalSpawner.profiles = [
        {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00", "default": True}
    ]
    c.GPULocalSpawner.currency = "CNY"
    c.GPULocalSpawner.gpu_backend = "simulated"
    c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 2, "memory_gb": 16}]
    c.GPULocalSpawner.ledger_db_url = db_url
    c.GPULocalSpawner.hub_name = hub_name
    c.GPULocalSpawner.budget_timezone = "Asia/Shanghai"
    c.GPULocalSpawner.budget_min_minutes = 10
    c.GPULocalSpawner.queue_timeout = 10
    db = orm.new_session_factory("sqlite://")()
    db.add(orm.User(name="ann"))
    db.commit()
    hub = Hub(ip="127.0.0.1", port=8081, base_url="/hub/")
    settings = {"spawner_class": GPULocalSpawner, "config": c, "db": db, "hub": hub, "domain": "", "statsd": None}
    return User(db.query(orm.User).one(), settings).spawners[""]


async def at(now, coro):
    clock = lambda: now  # noqa: E731
    with (
        mock.patch("jupyterhub_gpu.spawners.budget.utcnow", clock),
        mock.patch("jupyterhub_gpu.spawners.queueing.utcnow", clock),
        mock.patch("jupyterhub_gpu.spawners.launch.utcnow", clock),
    ):
        return await coro


def test_a_spawn_on_one_hub_holds_against_the_other_until_its_start_is_recorded(db_url):
    """The lab's spawn passes and holds; the dept's is refused on it; the lab's start recorded, its hold is gone
    (its minimum counts once, as the session's), and a failed spawn holds nothing."""
    lab, dept = make_spawner(db_url, "lab"), make_spawner(db_url, "dept")
    room_for_one(lab.ledger)

    async def scenario():
        await lab.run_pre_spawn_hook()
        (hold,) = holds.held(dept.ledger, NOW)
        assert (hold.hub, hold.key, hold.pool) == ("lab", "ann/", None)
        # the hold lasts the spawn's longest waits: the queue's, the start's, and a margin
        assert hold.expires == (NOW + timedelta(seconds=10 + lab.start_timeout) + HOLD_MARGIN).replace(tzinfo=None)
        assert hold_span(lab) == timedelta(seconds=10 + lab.start_timeout) + HOLD_MARGIN
        dept.user_options = {"profile": "t4"}
        with pytest.raises(SpawnException) as refused:
            await dept.run_pre_spawn_hook()
        assert HELD in str(refused.value) and "¥0.50 held" in str(refused.value), str(refused.value)
        # the lab's start is recorded: the session counts from now on, the hold no more
        lab._gpu_session = SessionStart("s-lab", "ann", "", (), "t4", ("GPU-0",), T4, "CNY", NOW, pool=None)
        await launch._record_start(lab)
        with pytest.raises(SpawnException) as refused:
            await dept.run_pre_spawn_hook()
        # its minimum counts once, as the session's (its first minute charged, 9 held), not also as the hold
        assert "¥0.05 of CN¥0.75" in str(refused.value) and "¥0.45 held" in str(refused.value), str(refused.value)
        assert holds.held(dept.ledger, NOW) == []
        # a spawn refused by its check, or failed after it, holds nothing
        lab.ledger.record_stop("s-lab", NOW, "stopped")
        dept.allocator.release(dept._gpu_key)
        lab.allocator.release(lab._gpu_key)
        with mock.patch.object(type(dept), "gpu_before_queue", side_effect=RuntimeError("image pull failed")):
            with pytest.raises(RuntimeError):
                await dept.run_pre_spawn_hook()
        await lab.run_pre_spawn_hook()  # the failed spawn's hold was dropped before this check: room for one again
        assert [(h.hub, h.key) for h in holds.held(dept.ledger, NOW)] == [("lab", "ann/")]

    lab.user_options = {"profile": "t4"}
    asyncio.run(at(NOW, scenario()))
    lab.allocator.release(lab._gpu_key)
