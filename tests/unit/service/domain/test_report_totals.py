"""Reports that add up: per-group savings count each session once, and the usage CSV sums like the page.

A student in two groups pays from one pool; the right-sizing
advice and the culling report per group must count that session once, for the
group that paid, so that the groups' rows add up to the total (as the spend and
the admin page's group totals do). A session crossing the report's window is
in the CSV with its in-window part, so the CSV's column sums are the page's
totals. Real ledger (sqlite), real report functions; the clock is a parameter.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

from jupyterhub_gpu.ledger.models import UsageMinute
from jupyterhub_gpu.ledger.queries.culling import load_culling_inputs
from jupyterhub_gpu.money import Currency, to_micros
from jupyterhub_gpu.service.domain.savings import culling_report
from jupyterhub_gpu.service.feeds.advice import summary
from jupyterhub_gpu.service.tick import TickContext, update_advice
from jupyterhub_gpu.service.web import views
from jupyterhub_gpu.session import SessionStart

UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")
CNY = Currency.from_config("CNY")
GB = 1024
T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


def start(ledger, sid, user, started, groups, pool=None, profile="a100", rate="0.25"):
    ledger.record_start(
        SessionStart(
            sid, user, "", tuple(groups), profile, (f"GPU-{sid}",), to_micros(Decimal(rate)), "CNY", started, pool=pool
        )
    )


def idle_minutes(ledger, sid, user, started, minutes, mem_mib=2048):
    with ledger.Session() as db:
        for i in range(minutes):
            db.add(
                UsageMinute(
                    session_id=sid,
                    minute=(started + timedelta(minutes=i)).replace(tzinfo=None),
                    user=user,
                    pushes=1,
                    samples=2,
                    utilization_tenths_sum=0 if i % 5 else 2 * 600,
                    memory_used_max_mib=mem_mib,
                    memory_total_mib=40 * GB,
                    kernels_max=1,
                    busy_kernels_max=0,
                    gpus="{}",
                )
            )
        db.commit()


# -- right-sizing advice: once per session, for its pool ------------------------------------------------------


def test_advice_savings_per_group_count_a_two_group_student_once_for_the_pool_that_paid(ledger):
    ledger.set_pricing(
        [
            {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05"},
            {"slug": "a100", "display_name": "1× A100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25"},
        ],
        "CNY",
        T0,
    )
    # ann is in cs231n and thesis; thesis pays for her session (she chose it on the form)
    start(ledger, "ann-1", "ann", T0, ("cs231n", "thesis"), pool="thesis")
    start(ledger, "bob-1", "bob", T0, ("cs231n",))
    for sid, user in (("ann-1", "ann"), ("bob-1", "bob")):
        idle_minutes(ledger, sid, user, T0, 60)
        ledger.record_stop(sid, T0 + timedelta(minutes=60), "user")
    assert update_advice(TickContext(ledger=ledger, currency=CNY), T0 + timedelta(hours=3))["advised"] == 2

    report = summary(ledger, None, None, None, CNY)
    total = Decimal(report["total"]["potential_saving"])
    by_group = {g["group"]: g for g in report["by_group"]}
    assert total == Decimal("24")  # 60 minutes of A100 at 0.25 vs T4 at 0.05, twice
    # the groups' rows add up to the total: ann's session is thesis's, not cs231n's too
    assert sum(Decimal(g["potential_saving"]) for g in by_group.values()) == total
    assert by_group["thesis"]["potential_saving"] == "12" and by_group["thesis"]["sessions_judged"] == 1
    assert by_group["cs231n"]["potential_saving"] == "12" and by_group["cs231n"]["sessions_judged"] == 1
    # a group's own report (its page, its instructors' digest) is what it paid for
    assert summary(ledger, None, None, "cs231n", CNY)["total"]["potential_saving"] == "12"
    assert [s["session_id"] for s in summary(ledger, None, None, "thesis", CNY)["sessions"]] == ["ann-1"]
    assert summary(ledger, None, None, "thesis", CNY)["sessions"][0]["pool"] == "thesis"


# -- the culling report: once per session, for its pool --------------------------------------------------------


def test_culling_savings_per_group_count_a_two_group_student_once_for_the_pool_that_paid(ledger):
    start(ledger, "ann-1", "ann", T0, ("cs231n", "thesis"), pool="thesis")
    start(ledger, "bob-1", "bob", T0, ("cs231n",))
    for sid, user in (("ann-1", "ann"), ("bob-1", "bob")):
        idle_minutes(ledger, sid, user, T0, 30)
        ledger.record_stop(sid, T0 + timedelta(minutes=30), "gpu_idle")
    now = T0 + timedelta(days=1)
    since, until = T0 - timedelta(hours=1), now

    def report(group=None):
        facts, counts = load_culling_inputs(ledger, since, until, group)
        return culling_report(facts, counts, since, until, now, timedelta(hours=12), group)

    whole = report()
    groups = {g: report(g) for g in ("cs231n", "thesis")}
    assert whole.total.sessions == 2
    assert sum(r.total.sessions for r in groups.values()) == whole.total.sessions
    assert sum(r.total.gpu_minutes for r in groups.values()) == whole.total.gpu_minutes
    assert sum(r.total.money_micros["CNY"] for r in groups.values()) == whole.total.money_micros["CNY"]
    assert sum(r.billed_gpu_minutes for r in groups.values()) == whole.billed_gpu_minutes == 60
    assert sum(r.billed_idle_gpu_minutes for r in groups.values()) == whole.billed_idle_gpu_minutes
    assert [v.session.id for v in groups["thesis"].savings] == ["ann-1"]
    assert [v.session.id for v in groups["cs231n"].savings] == ["bob-1"]


# -- the usage CSV adds up like the page -----------------------------------------------------------------------


def test_the_usage_csv_has_each_sessions_part_in_the_window_and_sums_to_the_pages_totals(ledger):
    november = datetime(2026, 11, 1, tzinfo=SHANGHAI).astimezone(UTC)
    december = datetime(2026, 12, 1, tzinfo=SHANGHAI).astimezone(UTC)
    # 23:50 on 30 November to 00:30 on 1 December (Shanghai): 10 minutes in November, 30 in December
    start(ledger, "late", "ann", december - timedelta(minutes=10), ("cs231n",), profile="t4", rate="0.05")
    ledger.record_stop("late", december + timedelta(minutes=30), "user")
    start(ledger, "mid", "bob", november + timedelta(days=3), ("cs231n",), profile="t4", rate="0.05")
    ledger.record_stop("mid", november + timedelta(days=3, minutes=20), "user")
    now = december + timedelta(days=2)
    window = (november, december)
    records = ledger.sessions(since=november, until=december, overlapping=True)
    sessions = views.sessions_json(ledger, records, now, CNY, window)
    totals = views.usage_totals(sessions, "CNY")
    rows = list(csv.DictReader(io.StringIO(views.usage_csv(sessions))))

    assert list(rows[0])[:14] == [
        "id",
        "user",
        "server_name",
        "profile",
        "gpus",
        "gpu_count",
        "started",
        "stopped",
        "minutes_billed",
        "rate_per_minute",
        "cost",
        "currency",
        "stop_reason",
        "running",
    ]  # the existing columns keep their places
    late = next(r for r in rows if r["id"] == "late")
    assert (late["minutes_billed"], late["cost"]) == ("40", "2")  # the whole session's charge stays
    assert (late["minutes_in_window"], late["cost_in_window"]) == ("10", "0.5")
    assert sum(int(r["minutes_in_window"]) for r in rows) == totals["minutes_billed"] == 30
    assert sum(Decimal(r["cost_in_window"]) for r in rows) == Decimal(totals["cost"]["CNY"]) == Decimal("1.5")
    # and December's CSV has the rest: the two months add up to the session's charge
    dec_records = ledger.sessions(since=december, until=now, overlapping=True)
    dec = views.sessions_json(ledger, dec_records, now, CNY, (december, now))
    dec_rows = list(csv.DictReader(io.StringIO(views.usage_csv(dec))))
    assert Decimal(late["cost_in_window"]) + Decimal(dec_rows[0]["cost_in_window"]) == Decimal(late["cost"])
