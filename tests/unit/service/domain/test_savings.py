"""What culling saved: the estimate's ends, exact money, the billed idle share, the ledger queries, JSON and CSV."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.billing import minutes_in_window
from jupyterhub_gpu.ledger.queries.culling import load_culling_inputs
from jupyterhub_gpu.ledger.queries.samples import record_sample
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.idle import MinuteCounts
from jupyterhub_gpu.rules.samples import Sample
from jupyterhub_gpu.service.domain.savings import (
    DEFAULT_HORIZON,
    culling_report,
    estimate_saving,
    next_starts,
)
from jupyterhub_gpu.service.web import views
from jupyterhub_gpu.service.web.params import BadRequest, CullingQuery, parse_culling_query
from jupyterhub_gpu.session import SessionFacts, SessionStart

UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")
T4 = 50_000  # ¥0.05 per minute (¥3.00 per GPU-hour), in micro-units
A100X2 = 500_000  # two A100s at ¥15.00 per GPU-hour: ¥0.50 per minute


def at(text: str, tz=UTC) -> datetime:
    """A time written in ``tz`` (default UTC), as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=tz).astimezone(UTC)


def facts(sid, user, started, stopped=None, reason=None, gpus=1, rate=T4, groups=("cs231n",), currency="CNY", tz=UTC):
    return SessionFacts(
        id=sid,
        user=user,
        started=at(started, tz),
        stopped=at(stopped, tz) if stopped else None,
        stop_reason=reason,
        gpu_count=gpus,
        rate_micros=rate,
        currency=currency,
        groups=tuple(groups),
        profile="t4" if gpus == 1 else "a100x2",
        pool=min(groups, default=None),  # the ledger's default pool: the first group by name
    )


# -- billed minutes in a window -------------------------------------------------------------------


def test_minutes_in_window_counts_the_minutes_that_begin_in_it():
    start = at("2026-11-02T09:00:30")
    assert minutes_in_window(start, 10, None, None) == 10
    # minutes begin at 09:00:30, 09:01:30, ...: [09:02, 09:05) holds those of 09:02:30, 09:03:30, 09:04:30
    assert minutes_in_window(start, 10, at("2026-11-02T09:02:00"), at("2026-11-02T09:05:00")) == 3
    assert minutes_in_window(start, 10, at("2026-11-02T09:00:30"), at("2026-11-02T09:01:30")) == 1
    assert minutes_in_window(start, 10, None, at("2026-11-02T09:00:30")) == 0  # until is exclusive
    assert minutes_in_window(start, 10, at("2026-11-02T09:09:31"), None) == 0  # the last began at 09:09:30
    assert minutes_in_window(start, 10, at("2026-11-01T00:00:00"), at("2026-11-01T01:00:00")) == 0  # before it
    assert minutes_in_window(start, 10, at("2026-11-03T00:00:00"), None) == 0  # after it


# -- one saving: its end and its charge ------------------------------------------------------------


def culled(stopped="2026-11-02T10:00:00", reason="gpu_idle", **kwargs):
    return facts("c1", "ann", "2026-11-02T09:00:00", stopped, reason, **kwargs)


FAR = at("2027-01-01T00:00:00")


@pytest.mark.parametrize(
    "next_start, window_end, now, until, ended_by, minutes",
    [
        ("2026-11-02T11:30:00", FAR, FAR, "2026-11-02T11:30:00", "next_start", 90),  # she came back
        (None, FAR, FAR, "2026-11-02T22:00:00", "horizon", 720),  # forgotten overnight
        ("2026-11-03T09:00:00", FAR, FAR, "2026-11-02T22:00:00", "horizon", 720),  # came back after the horizon
        (None, at("2026-11-02T12:00:00"), FAR, "2026-11-02T12:00:00", "window_end", 120),  # the term ended
        (None, FAR, at("2026-11-02T10:20:00"), "2026-11-02T10:20:00", "now", 20),  # a cull of 20 minutes ago
        ("2026-11-02T10:00:00", FAR, FAR, "2026-11-02T10:00:00", "next_start", 0),  # a restart at once
        ("2026-11-02T22:00:00", FAR, FAR, "2026-11-02T22:00:00", "next_start", 720),  # a tie: the user's start
    ],
)
def test_a_saving_runs_from_the_cull_to_the_earliest_end(next_start, window_end, now, until, ended_by, minutes):
    saving = estimate_saving(culled(), at(next_start) if next_start else None, window_end, now)
    assert (saving.until, saving.ended_by, saving.minutes) == (at(until), ended_by, minutes)
    assert saving.gpu_minutes == minutes and saving.money_micros == minutes * T4


def test_a_saving_is_billed_by_started_minute_like_the_real_charge():
    # started 09:00:00, culled at 10:00:30: 61 minutes billed (the 61st began at 10:00:00)
    session = culled(stopped="2026-11-02T10:00:30")
    # had it run to 10:00:45 it would still have billed 61 minutes: nothing saved
    assert estimate_saving(session, at("2026-11-02T10:00:45"), FAR, FAR).minutes == 0
    # to 10:01:00 still 61 (minutes begin at 10:00:00, and 10:01:00 is the end), to 10:01:01 62
    assert estimate_saving(session, at("2026-11-02T10:01:00"), FAR, FAR).minutes == 0
    assert estimate_saving(session, at("2026-11-02T10:01:01"), FAR, FAR).minutes == 1


def test_gpus_and_rates_multiply_exactly():
    session = culled(gpus=2, rate=33_333)  # a rate of ¥0.033333 per minute: exact in micro-units
    saving = estimate_saving(session, None, FAR, FAR, horizon=timedelta(hours=3))
    assert (saving.minutes, saving.gpu_minutes, saving.money_micros) == (180, 360, 180 * 33_333)
    cpu = culled(gpus=0, rate=10_000)
    saving = estimate_saving(cpu, None, FAR, FAR)
    assert (saving.gpu_minutes, saving.money_micros) == (0, 720 * 10_000)  # money, but no GPU-hours


def test_a_running_session_has_no_saving():
    with pytest.raises(ValueError, match="has not stopped"):
        estimate_saving(facts("r", "ann", "2026-11-02T09:00:00"), None, FAR, FAR)


def test_the_next_start_is_the_same_users_first_start_at_or_after_the_stop():
    sessions = [
        facts("a1", "ann", "2026-11-02T09:00:00", "2026-11-02T10:00:00", "gpu_idle"),
        facts("a2", "ann", "2026-11-02T09:30:00", "2026-11-02T09:45:00", "stopped"),  # a second server, earlier
        facts("b1", "bob", "2026-11-02T10:05:00", "2026-11-02T11:00:00", "stopped"),  # someone else's start
        facts("a3", "ann", "2026-11-02T13:00:00", "2026-11-02T13:00:00", "exited"),  # stopped at its own start
        facts("a4", "ann", "2026-11-02T14:00:00"),  # running
    ]
    assert next_starts(sessions) == {
        "a1": at("2026-11-02T13:00:00"),
        "a2": at("2026-11-02T13:00:00"),
        "a3": at("2026-11-02T14:00:00"),
    }


# -- the report ------------------------------------------------------------------------------------


def term_sessions() -> list[SessionFacts]:
    """The worked example of docs/culling.md ("What culling saved"), in Shanghai time."""
    return [
        # ann's T4 is culled for gpu_idle at 15:10; she starts again at 16:40: 90 minutes saved
        facts("ann-1", "ann", "2026-11-02T14:00:00", "2026-11-02T15:10:00", "gpu_idle", tz=SHANGHAI),
        facts("ann-2", "ann", "2026-11-02T16:40:00", "2026-11-02T17:00:00", "stopped", tz=SHANGHAI),
        # bob leaves his two A100s at 22:50; inactive stops them at 23:05; he does not come back: 12 hours
        facts(
            "bob-1", "bob", "2026-11-03T20:00:00", "2026-11-03T23:05:00", "inactive", gpus=2, rate=A100X2, tz=SHANGHAI
        ),
        # cai's training runs a day; max_age stops it 4 hours before the end of the window
        facts("cai-1", "cai", "2027-01-14T20:00:00", "2027-01-15T20:00:00", "max_age", groups=("thesis",), tz=SHANGHAI),
        # dan's budget runs out: estimated the same way, reported apart
        facts("dan-1", "dan", "2026-11-04T02:00:00", "2026-11-04T03:00:00", "budget", rate=250_000, tz=SHANGHAI),
        # stopped by the user, the server exiting, the reconciler: not culls
        facts("eve-1", "eve", "2026-11-05T02:00:00", "2026-11-05T02:30:00", "stopped", tz=SHANGHAI),
        facts("eve-2", "eve", "2026-11-06T02:00:00", "2026-11-06T02:30:00", "exited", tz=SHANGHAI),
        facts("eve-3", "eve", "2026-11-07T02:00:00", "2026-11-07T02:30:00", "reconciled", tz=SHANGHAI),
    ]


# the term of the docs: since=2026-09-01&until=2027-01-15 in Shanghai
SINCE, UNTIL = at("2026-09-01T00:00:00", SHANGHAI), at("2027-01-16T00:00:00", SHANGHAI)
NOW = at("2027-02-01T00:00:00")


def test_the_worked_example_of_the_docs():
    term = cq(since="2026-09-01", until="2027-01-15")  # what the docs' request asks for
    assert (term.since, term.until) == (SINCE, UNTIL)
    report = culling_report(term_sessions(), {}, SINCE, UNTIL, NOW)
    tallies = {
        reason: (t.sessions, t.minutes, t.gpu_minutes, dict(t.money_micros)) for reason, t in report.by_reason.items()
    }
    assert tallies == {
        "gpu_idle": (1, 90, 90, {"CNY": 90 * T4}),  # 1.5 GPU-hours, ¥4.50
        "inactive": (1, 720, 1440, {"CNY": 720 * A100X2}),  # 24 GPU-hours, ¥360
        "max_age": (1, 240, 240, {"CNY": 240 * T4}),  # 4 GPU-hours, ¥12
        "busy_gpu_idle": (0, 0, 0, {}),
    }
    assert (report.total.sessions, report.total.gpu_minutes, dict(report.total.money_micros)) == (
        3,
        1770,
        {"CNY": 376_500_000},
    )
    assert (report.budget.sessions, report.budget.gpu_minutes, dict(report.budget.money_micros)) == (
        1,
        720,
        {"CNY": 180_000_000},
    )
    assert [(v.session.id, v.ended_by) for v in report.savings] == [
        ("ann-1", "next_start"),
        ("bob-1", "horizon"),
        ("dan-1", "horizon"),
        ("cai-1", "window_end"),
    ]
    # billed: 70 + 20 + 185 × 2 + 1440 + 60 + 3 × 30 GPU-minutes, no samples: nothing known to be idle
    assert report.billed_gpu_minutes == 70 + 20 + 370 + 1440 + 60 + 90
    assert report.billed_idle_gpu_minutes == 0 and report.billed_unsampled_gpu_minutes == report.billed_gpu_minutes
    assert report.idle_share == 0
    assert report.counted_until == UNTIL


def test_a_window_counts_the_culls_in_it_and_the_minutes_that_begin_in_it():
    # November only: cai's cull in January is outside; the horizon is not cut by the window (30 November)
    november = culling_report(
        term_sessions(), {}, at("2026-11-01T00:00:00", SHANGHAI), at("2026-12-01T00:00:00", SHANGHAI), NOW
    )
    assert [v.session.id for v in november.savings] == ["ann-1", "bob-1", "dan-1"]
    assert november.by_reason["max_age"].sessions == 0
    # a window that ends an hour after bob's cull cuts his saving to that hour
    short = culling_report(
        term_sessions(), {}, at("2026-11-03T00:00:00", SHANGHAI), at("2026-11-04T00:05:00", SHANGHAI), NOW
    )
    (bob,) = short.savings
    assert (bob.ended_by, bob.minutes, bob.gpu_minutes) == ("window_end", 60, 120)
    # a window that starts after a session started counts only its later minutes, and not a cull before it
    late = culling_report(
        term_sessions(), {}, at("2026-11-02T15:00:00", SHANGHAI), at("2026-11-02T18:00:00", SHANGHAI), NOW
    )
    assert late.savings[0].session.id == "ann-1" and late.billed_gpu_minutes == 10 + 20
    after_cull = culling_report(
        term_sessions(), {}, at("2026-11-02T15:10:01", SHANGHAI), at("2026-11-02T18:00:00", SHANGHAI), NOW
    )
    assert after_cull.savings == () and after_cull.billed_gpu_minutes == 20


def test_now_bounds_the_window_and_running_sessions_are_billed_until_now():
    sessions = [
        facts("run", "ann", "2026-11-02T09:00:00", gpus=2),
        facts("cut", "bob", "2026-11-02T08:00:00", "2026-11-02T09:30:00", "gpu_idle"),
    ]
    report = culling_report(sessions, {}, None, None, at("2026-11-02T10:00:00"))
    assert report.counted_until == at("2026-11-02T10:00:00")
    assert report.billed_gpu_minutes == 60 * 2 + 90
    (cut,) = report.savings
    assert (cut.ended_by, cut.minutes) == ("now", 30)


def test_a_group_report_keeps_what_it_paid_for_but_finds_next_starts_anywhere():
    sessions = [
        facts("a1", "ann", "2026-11-02T09:00:00", "2026-11-02T10:00:00", "gpu_idle", groups=("cs231n",)),
        # ann's next start is in another group (she left cs231n): she still came back at 11:00
        facts("a2", "ann", "2026-11-02T11:00:00", "2026-11-02T12:00:00", "stopped", groups=("thesis",)),
        facts("b1", "bob", "2026-11-02T09:00:00", "2026-11-02T10:00:00", "inactive", groups=("thesis",)),
    ]
    report = culling_report(sessions, {}, None, None, NOW, group="cs231n")
    assert [(v.session.id, v.ended_by, v.minutes) for v in report.savings] == [("a1", "next_start", 60)]
    assert report.billed_gpu_minutes == 60 and report.by_reason["inactive"].sessions == 0


def test_the_billed_idle_share_uses_the_sampled_minutes_times_the_gpus():
    sessions = [
        facts("one", "ann", "2026-11-02T09:00:00", "2026-11-02T10:00:00", "stopped"),
        facts("two", "bob", "2026-11-02T09:00:00", "2026-11-02T09:40:00", "gpu_idle", gpus=2, rate=A100X2),
        facts("cpu", "cai", "2026-11-02T09:00:00", "2026-11-02T10:00:00", "stopped", gpus=0, rate=10_000),
    ]
    usage = {
        "one": MinuteCounts(sampled=60, idle=15),
        "two": MinuteCounts(sampled=30, idle=30),
        "cpu": MinuteCounts(sampled=60, idle=60),  # no GPUs: no GPU-minutes, idle or not
    }
    report = culling_report(sessions, usage, None, None, NOW)
    assert report.billed_gpu_minutes == 60 + 80
    assert report.billed_idle_gpu_minutes == 15 + 60
    assert report.billed_unsampled_gpu_minutes == 20  # bob's 10 unsampled minutes × 2 GPUs
    assert report.idle_share == pytest.approx(75 / 140)
    assert dict(report.billed_money_micros) == {"CNY": 60 * T4 + 40 * A100X2 + 60 * 10_000}
    # more samples than billed minutes (clock minutes straddle billed ones) never count twice
    capped = culling_report(sessions[:1], {"one": MinuteCounts(sampled=61, idle=61)}, None, None, NOW)
    assert capped.billed_idle_gpu_minutes == 60 and capped.billed_unsampled_gpu_minutes == 0
    assert culling_report([], {}, None, None, NOW).idle_share is None


def test_money_is_kept_per_currency():
    sessions = [
        facts("a", "ann", "2026-11-02T09:00:00", "2026-11-02T10:00:00", "gpu_idle"),
        facts("b", "bob", "2026-11-02T09:00:00", "2026-11-02T10:00:00", "gpu_idle", currency="USD", rate=7_000),
    ]
    report = culling_report(sessions, {}, None, None, NOW, horizon=timedelta(hours=1))
    assert dict(report.total.money_micros) == {"CNY": 60 * T4, "USD": 60 * 7_000}
    data = views.culling_json(report, "CNY")
    assert data["total"]["money_saved"] == "3"
    assert data["total"]["money_saved_other_currencies"] == {"USD": "0.42"}
    assert data["billed_money_other_currencies"] == {"USD": "0.42"}
    assert (
        "money_saved_other_currencies"
        not in views.culling_json(culling_report(sessions[:1], {}, None, None, NOW), "CNY")["total"]
    )


def test_a_negative_horizon_is_refused():
    with pytest.raises(ValueError, match="horizon"):
        culling_report([], {}, None, None, NOW, horizon=timedelta(hours=-1))
    assert DEFAULT_HORIZON == timedelta(hours=12)


# -- JSON and CSV ------------------------------------------------------------------------------------


def test_the_report_as_json():
    data = views.culling_json(culling_report(term_sessions(), {}, SINCE, UNTIL, NOW), "CNY")
    assert data["window"] == {
        "since": "2026-08-31T16:00:00Z",
        "until": "2027-01-15T16:00:00Z",
        "counted_until": "2027-01-15T16:00:00Z",
        "horizon_hours": 12,
        "idle_util_percent": 5,
    }
    assert data["by_reason"]["gpu_idle"] == {
        "sessions": 1,
        "minutes_saved": 90,
        "gpu_minutes_saved": 90,
        "gpu_hours_saved": "1.5",
        "money_saved": "4.5",
    }
    assert data["by_reason"]["inactive"]["gpu_hours_saved"] == "24"
    assert data["by_reason"]["max_age"]["money_saved"] == "12"
    assert data["total"] == {
        "sessions": 3,
        "minutes_saved": 1050,
        "gpu_minutes_saved": 1770,
        "gpu_hours_saved": "29.5",
        "money_saved": "376.5",
    }
    assert data["budget_stops"]["money_saved"] == "180" and data["budget_stops"]["gpu_hours_saved"] == "12"
    assert data["billed_gpu_hours"] == "34.166667" and data["billed_idle_gpu_hours"] == "0"
    assert data["idle_share"] == 0.0 and data["currency"] == "CNY" and data["group"] is None
    assert views.culling_json(culling_report([], {}, None, None, NOW), "CNY")["idle_share"] is None
    assert views.gpu_hours_str(1) == "0.016667" and views.gpu_hours_str(0) == "0"


def test_the_report_as_csv_has_one_row_per_stop_and_no_formulas():
    sessions = [
        *term_sessions(),
        facts("x", "=cmd", "2026-11-08T02:00:00", "2026-11-08T03:00:00", "inactive", tz=SHANGHAI),
    ]
    rows = list(csv.reader(io.StringIO(views.culling_csv(culling_report(sessions, {}, SINCE, UNTIL, NOW)))))
    assert rows[0] == list(views.CULLING_CSV_COLUMNS)
    assert [r[0] for r in rows[1:]] == ["ann-1", "bob-1", "dan-1", "x", "cai-1"]
    ann = dict(zip(rows[0], rows[1], strict=True))
    assert ann == {
        "id": "ann-1",
        "user": "ann",
        "server_name": "",
        "profile": "t4",
        "gpu_count": "1",
        "started": "2026-11-02T06:00:00Z",  # 14:00 in Shanghai
        "stopped": "2026-11-02T07:10:00Z",
        "stop_reason": "gpu_idle",
        "counted_as": "culling",
        "estimated_until": "2026-11-02T08:40:00Z",
        "ended_by": "next_start",
        "minutes_saved": "90",
        "gpu_minutes_saved": "90",
        "gpu_hours_saved": "1.5",
        "money_saved": "4.5",
        "currency": "CNY",
    }
    assert rows[3][8] == "budget"
    assert rows[4][1] == "'=cmd"


# -- parameters --------------------------------------------------------------------------------------


def cq(**params) -> CullingQuery:
    return parse_culling_query({k: [v.encode()] for k, v in params.items()}, SHANGHAI)


def test_culling_parameters_read_dates_like_usage():
    q = cq(since="2026-09-01", until="2027-01-15", group="cs231n", horizon_hours="8", format="csv")
    assert q.since == datetime(2026, 8, 31, 16, tzinfo=UTC)  # midnight in Shanghai
    assert q.until == datetime(2027, 1, 15, 16, tzinfo=UTC)  # the end of 15 January
    assert (q.group, q.horizon, q.format) == ("cs231n", timedelta(hours=8), "csv")
    assert cq() == CullingQuery()
    assert parse_culling_query({"token": [b"abc"]}, SHANGHAI) == CullingQuery()


@pytest.mark.parametrize(
    "params, message",
    [
        ({"since": "last term"}, "ISO date"),
        ({"until": "2027-02-30"}, "not a valid date"),
        ({"since": "2027-01-15", "until": "2026-09-01"}, "must be before"),
        ({"format": "xlsx"}, "format must be json or csv"),
        ({"group": ""}, "empty"),
        ({"group": "a/b"}, "'/'"),
        ({"horizon_hours": "0"}, "from 1 to 168"),
        ({"horizon_hours": "169"}, "from 1 to 168"),
        ({"horizon_hours": "1.5"}, "whole number"),
        ({"horizon_hours": "-2"}, "whole number"),
        ({"user": "ann"}, "Unknown parameter(s) 'user'"),
    ],
)
def test_malformed_culling_parameters(params, message):
    with pytest.raises(BadRequest) as e:
        cq(**params)
    assert message in str(e.value)


def test_culling_parameters_are_given_once_and_as_utf8():
    with pytest.raises(BadRequest, match="at most once"):
        parse_culling_query({"since": [b"2026-09-01", b"2026-10-01"]}, SHANGHAI)
    with pytest.raises(BadRequest, match="UTF-8"):
        parse_culling_query({"group": [b"\xff"]}, SHANGHAI)


# -- from the ledger ---------------------------------------------------------------------------------


def sample(sid: str, minute: str, util: float, busy: int = 0, samples: int = 2) -> Sample:
    return Sample(
        session_id=sid,
        sampled_until=at(minute) + timedelta(seconds=30),
        samples=samples,
        utilization_avg=util,
        memory_used_max_mib=1000,
        memory_total_mib=16000,
        kernels=1,
        busy_kernels=busy,
        last_kernel_activity=None,
        last_activity=None,
        gpus=(),
    )


def test_load_culling_inputs_reads_the_window_and_counts_idle_minutes_in_sql(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")

    def session(sid, user, started, seconds, reason, gpus=("GPU-0",), groups=("cs231n",)):
        start = SessionStart(sid, user, "", groups, "t4" if gpus else "cpu", gpus, T4, "CNY", at(started))
        ledger.record_start(start)
        if seconds is not None:
            ledger.record_stop(sid, at(started) + timedelta(seconds=seconds), reason)

    session("old", "ann", "2026-10-01T09:00:00", 3600, "gpu_idle")  # stopped before the window
    session("edge", "ann", "2026-10-31T23:00:00", 7200, "inactive")  # started before, culled in it
    session("in", "bob", "2026-11-02T09:00:00", 1800, "stopped", gpus=("GPU-0", "GPU-1"))
    session("cpu", "cai", "2026-11-02T09:00:00", 1800, "stopped", gpus=())
    session("run", "dan", "2026-11-29T09:00:00", None, None, groups=("thesis",))
    session("later", "eve", "2026-12-01T00:00:00", 60, "stopped")  # after the window
    minutes = [
        ("edge", "2026-10-31T23:59:00", 1.0, 0),  # before the window: not counted
        ("edge", "2026-11-01T00:00:00", 4.9, 0),  # idle
        ("edge", "2026-11-01T00:01:00", 5.0, 0),  # at the threshold: not idle
        ("edge", "2026-11-01T00:02:00", 0.0, 1),  # a busy kernel: not idle
        ("in", "2026-11-02T09:00:00", 0.0, 0),
        ("in", "2026-11-02T09:01:00", 80.0, 1),
        ("run", "2026-11-29T09:00:00", 2.0, 0),
    ]
    for sid, minute, util, busy in minutes:
        user = {"edge": "ann", "in": "bob", "run": "dan"}[sid]
        record_sample(ledger, user, sample(sid, minute, util, busy))
    record_sample(ledger, "bob", sample("in", "2026-11-02T09:02:00", 0.0, samples=0))  # a push without samples
    since, until = at("2026-11-01T00:00:00"), at("2026-12-01T00:00:00")

    facts_, counts = load_culling_inputs(ledger, since, until)
    assert sorted(f.id for f in facts_) == ["cpu", "edge", "in", "run"]
    edge = next(f for f in facts_ if f.id == "edge")
    assert (edge.stopped, edge.stop_reason, edge.gpu_count, edge.groups) == (
        at("2026-11-01T01:00:00"),
        "inactive",
        1,
        ("cs231n",),
    )
    assert edge.started.tzinfo is not None
    assert counts == {
        "edge": MinuteCounts(sampled=3, idle=1),
        "in": MinuteCounts(sampled=2, idle=1),
        "run": MinuteCounts(sampled=1, idle=1),
    }
    # a group's report asks only for its members' minutes; every session still comes back for next starts
    facts_, counts = load_culling_inputs(ledger, since, until, group="thesis")
    assert len(facts_) == 4 and set(counts) == {"run"}
    # no lower bound: the old session too
    facts_, _ = load_culling_inputs(ledger, None, until)
    assert "old" in {f.id for f in facts_}

    report = culling_report(*load_culling_inputs(ledger, since, until), since, until, at("2026-11-29T09:10:00"))
    (edge_saving,) = report.savings
    assert (edge_saving.ended_by, edge_saving.minutes) == ("horizon", 720)
    # edge: 60 minutes from 00:00 (its first 60 were in October); in: 30 × 2; run: 10 so far; cpu: none
    assert report.billed_gpu_minutes == 60 + 60 + 10
    assert report.billed_idle_gpu_minutes == 1 + 1 * 2 + 1
    ledger.close()


# -- against the simulator's ground truth ------------------------------------------------------------


def test_on_the_sample_trace_the_default_horizon_overstates_and_a_short_one_understates():
    """The trace knows when each user would have stopped their server; the ledger does not.

    The numbers of docs/culling.md ("How good is the estimate"): replay the sample trace with our rules and
    compare, over the culled sessions, the estimate with what always-on would really have billed more.
    """
    from pathlib import Path

    from jupyterhub_gpu.sim.replay import natural_minutes, read_trace, replay, resolve_policy

    path = Path(__file__).resolve().parents[4] / "benchmarks" / "traces" / "sample.jsonl"
    if not path.exists():
        pytest.skip("no sample trace")
    trace = read_trace(path)
    policy = resolve_policy("ours")
    sessions, truth = [], 0
    for i, s in enumerate(trace):
        outcome = replay(s, policy, 1)
        stopped = s.started + timedelta(minutes=outcome.billed_minutes) if outcome.culled else s.natural_end
        reason = outcome.rule if outcome.culled else "stopped"
        sessions.append(SessionFacts(str(i), s.user, s.started, stopped, reason, 1, T4, "CNY"))
        if outcome.culled:
            truth += natural_minutes(s) - outcome.billed_minutes
    far = at("2100-01-01T00:00:00")

    def estimate(hours: int) -> int:
        return culling_report(sessions, {}, None, None, far, horizon=timedelta(hours=hours)).total.gpu_minutes

    assert truth > 0
    by_hours = {h: estimate(h) for h in (1, 2, 3, 6, 12)}
    assert list(by_hours.values()) == sorted(by_hours.values())  # a longer horizon never saves less
    assert by_hours[12] > 3 * truth  # most culled students would have stopped their server within the hour
    assert by_hours[1] < truth  # and a few would have left it running all night
    assert truth < by_hours[3] < 2.5 * truth
