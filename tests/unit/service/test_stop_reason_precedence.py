"""The tick's passes agree on why a session stopped: what follows the stop acts on the reason that caused it.

A whole tick (the budget pass, the scheduling pass, the jobs pass, in the service's order) with a real sqlite
ledger, the real gateway (Lab notices in the ledger) and the real hub client talking to an HTTP server that
stands in for the hub's REST API: it records the stops and starts asked of it and, like a hub whose spawner
takes a while to stop a container, leaves the session open until the test records the spawner's stop. The
clock is moved, never waited for.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.queries.culling import load_culling_inputs
from jupyterhub_gpu.ledger.queries.jobs import create_job, get_job, update_job
from jupyterhub_gpu.ledger.queries.schedule import PREEMPTED, order_stop, stop_orders
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.domain.alerts import BudgetAlert
from jupyterhub_gpu.service.domain.jobs import JobRequest
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.domain.savings import culling_report
from jupyterhub_gpu.service.notify import Notifier
from jupyterhub_gpu.service.tick import (
    ScheduleFollow,
    TickContext,
    deliver,
    enforce_budgets,
    enforce_jobs,
    enforce_schedule,
)
from jupyterhub_gpu.session import SessionStart, StopReason
from tests.unit.service.test_schedule_orders import HubDouble

UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")
CNY = Currency.from_config("CNY")
T0 = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)  # 13:00 in Shanghai
GRACE = timedelta(minutes=5)
PRICING = [
    {"slug": "t4-pre", "display_name": "T4 (cheap)", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.02"}
]


@pytest.fixture
def hub():
    server = HubDouble()
    yield server
    server.close()


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.set_pricing(PRICING, "CNY", T0 - timedelta(days=1))
    # ¥1 a month; the job's hour on the cheap T4 (¥0.02 a minute) has used ¥1.20 of it by 13:00
    ledger.set_budget(BudgetRule("user", "alice", "month", "money", Decimal("1")), T0 - timedelta(days=1))
    yield ledger
    ledger.close()


@pytest.fixture
def notifier(ledger):
    notifier = Notifier(ledger, AlertSettings(), stored=False)
    yield notifier
    notifier.close()


def running_job(ledger):
    """A notebook job on the preemptible tier, an hour into its run, its server ``job-<id>``."""
    began = T0 - timedelta(hours=1)
    job = create_job(ledger, "alice", JobRequest("work/train.ipynb", "t4-pre", {}, 3 * 3600), "t4-pre", began)
    start = SessionStart(
        "s-job", "alice", job.server_name, ("cs231n",), "t4-pre", ("GPU-t4-0",), 20_000, "CNY", began,
        pool="cs231n", language="en", tier="preemptible", resume=True,
    )  # fmt: skip
    ledger.record_start(start)
    update_job(ledger, job.id, state="running", started=began, session_id=start.id)
    return get_job(ledger, job.id), ledger.get_session(start.id)


def preempt(ledger, session, stop_at=T0 + timedelta(minutes=2)):
    values = {"grace": "2 min"}
    assert order_stop(ledger, session, PREEMPTED, stop_at, "preempt", values, T0, for_user="bob")


def tick(ledger, hub, notifier, now, follow, parts=("budgets", "schedule", "jobs")):
    """The service's tick, these parts of it, in its order."""

    ctx = TickContext(ledger=ledger, hub=hub.client, notifier=notifier, tz=SHANGHAI, budget_grace=GRACE)

    async def run():
        found = {}
        if "budgets" in parts:

            async def notify(user, groups, status, threshold):  # the service's budget_notify, at the test's clock
                alert = BudgetAlert.from_status(
                    user, groups, status, threshold, CNY, int(GRACE.total_seconds()), SHANGHAI
                )
                await deliver(alert, notifier.settings, ledger, now)

            found["budgets"] = await enforce_budgets(ctx, now, notify)
        if "schedule" in parts:
            found["schedule"] = await enforce_schedule(ctx, now, follow)
        if "jobs" in parts:
            found["jobs"] = await enforce_jobs(ctx, now)
        return found

    return asyncio.run(run())


def notices(ledger):
    return [n.message for n in ledger.notices("alice")]


def test_a_budget_stop_in_the_tick_of_a_due_preemption_stays_a_budget_stop(ledger, hub, notifier):
    job, session = running_job(ledger)
    preempt(ledger, session)
    follow = ScheduleFollow()
    # 13:00: the preemption's notice and the budget's 100% notice go out
    first = tick(ledger, hub, notifier, T0, follow)
    assert first["schedule"]["noticed"] == ["s-job"] and ("alice", "user:alice", 100) in first["budgets"].alerts
    # 13:05: the budget pass stops the used-up job server; the scheduling pass then finds its preemption due
    now = T0 + GRACE
    result = tick(ledger, hub, notifier, now, follow)
    assert result["budgets"].stopped == [("alice", job.server_name)]
    assert ledger.get_session("s-job").pending_stop_reason == StopReason.BUDGET
    assert result["schedule"]["stopped"] == [] and result["schedule"]["closed"] == ["s-job"]
    assert stop_orders(ledger) == [] and follow.waiting == {}  # done: the budget stop frees the GPU
    # the hub stops the server; the spawner records the stop
    ledger.record_stop("s-job", now + timedelta(seconds=3), StopReason.STOPPED)
    assert ledger.get_session("s-job").stop_reason == StopReason.BUDGET
    later = tick(ledger, hub, notifier, now + timedelta(seconds=30), follow)
    # the job is not requeued (its user has no budget): it fails, with the budget as its reason
    assert later["jobs"]["requeued"] == [] and later["jobs"]["lost"] == [job.id]
    assert hub.of("POST") == []
    failed = get_job(ledger, job.id)
    assert (
        failed.state == "failed" and failed.error == "The job's server stopped (budget) before the notebook finished."
    )
    # and the savings report counts a budget stop
    facts, counts = load_culling_inputs(ledger, T0 - timedelta(days=1), now + timedelta(hours=1))
    report = culling_report(facts, counts, T0 - timedelta(days=1), now + timedelta(hours=1), now + timedelta(hours=1))
    assert report.budget.sessions == 1 and [s.reason for s in report.savings] == ["budget"]


def test_a_preemption_under_way_gives_way_to_the_budget_stop(ledger, hub, notifier):
    """The other order: the preemption's stop is asked for first; the budget used up ends the work for good."""
    job, session = running_job(ledger)
    preempt(ledger, session)
    follow = ScheduleFollow()
    tick(ledger, hub, notifier, T0, follow)
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=2), follow)["schedule"]["stopped"] == [
        ("alice", job.server_name)
    ]
    assert ledger.get_session("s-job").pending_stop_reason == StopReason.PREEMPTED
    tick(ledger, hub, notifier, T0 + GRACE, follow)  # the hub is slow to stop it; the budget's grace is over
    assert ledger.get_session("s-job").pending_stop_reason == StopReason.BUDGET
    ledger.record_stop("s-job", T0 + GRACE + timedelta(seconds=3), StopReason.STOPPED)
    later = tick(ledger, hub, notifier, T0 + GRACE + timedelta(seconds=30), follow)
    assert later["jobs"]["requeued"] == [] and hub.of("POST") == []
    assert get_job(ledger, job.id).error == "The job's server stopped (budget) before the notebook finished."


def test_no_preemption_notice_for_a_server_already_stopping_for_its_budget(ledger, hub, notifier):
    job, session = running_job(ledger)
    follow = ScheduleFollow()
    tick(ledger, hub, notifier, T0, follow)  # the budget's 100% notice
    assert tick(ledger, hub, notifier, T0 + GRACE, follow)["budgets"].stopped == [("alice", job.server_name)]
    told = notices(ledger)
    # the hub's scheduler, which does not know of the budget stop, orders a preemption of the still-open session
    preempt(ledger, session, stop_at=T0 + GRACE + timedelta(minutes=2))
    result = tick(ledger, hub, notifier, T0 + GRACE + timedelta(seconds=10), follow, parts=("schedule",))["schedule"]
    assert result["noticed"] == [] and result["closed"] == ["s-job"]
    assert notices(ledger) == told and stop_orders(ledger) == []
    assert ledger.get_session("s-job").pending_stop_reason == StopReason.BUDGET


def test_a_job_over_its_time_limit_while_stopping_for_its_budget_fails_for_its_budget(ledger, hub, notifier):
    job, _ = running_job(ledger)
    update_job(ledger, job.id, time_limit_seconds=3600 + 60)  # its limit (and margin) ends in this very tick
    follow = ScheduleFollow()
    tick(ledger, hub, notifier, T0, follow)
    result = tick(ledger, hub, notifier, T0 + GRACE, follow)
    assert result["budgets"].stopped == [("alice", job.server_name)] and result["jobs"]["time_limit"] == []
    assert ledger.get_session("s-job").pending_stop_reason == StopReason.BUDGET
    assert get_job(ledger, job.id).state == "running"  # until its server has stopped
    ledger.record_stop("s-job", T0 + GRACE + timedelta(seconds=3), StopReason.STOPPED)
    tick(ledger, hub, notifier, T0 + GRACE + timedelta(seconds=30), follow, parts=("jobs",))
    failed = get_job(ledger, job.id)
    assert failed.state == "failed" and "(budget)" in failed.error
