"""The gpu service's API without a hub: body and query parsing, formatting, and the OpenAPI document."""

from __future__ import annotations

import csv
import io
import re
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
import yaml
from tornado import web

from jupyterhub_gpu.billing import BudgetRule, budget_status
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.web import auth, routes, views
from jupyterhub_gpu.service.web.api import openapi
from jupyterhub_gpu.service.web.params import (
    BadRequest,
    UsageQuery,
    parse_budget,
    parse_json_body,
    parse_moment,
    parse_usage_query,
)

SHANGHAI = ZoneInfo("Asia/Shanghai")


def budget(body: bytes, scope="group", subject="cs231n") -> BudgetRule:
    return parse_budget(scope, subject, parse_json_body(body))


def test_a_month_budget_in_money_is_the_default_unit():
    assert budget(b'{"limit": "5000", "period": "month"}') == BudgetRule(
        "group", "cs231n", "month", "money", Decimal(5000)
    )
    # integers are exact too; trailing zeros and exponents are normalised for storage
    assert budget(b'{"limit": 120, "unit": "gpu_hours", "period": "week"}').limit == Decimal(120)
    assert format(budget(b'{"limit": "12.50", "period": "week"}').limit, "f") == "12.5"
    assert format(budget(b'{"limit": "1e3", "period": "week"}').limit, "f") == "1000"
    assert budget(b'{"limit": "0", "period": "week"}').limit == 0  # a zero budget blocks GPU use


def test_a_term_budget_needs_both_dates_in_order():
    rule = budget(b'{"limit": "5000", "period": "term", "term_start": "2026-09-01", "term_end": "2027-01-15"}')
    assert (rule.term_start, rule.term_end) == (date(2026, 9, 1), date(2027, 1, 15))
    one_day = budget(b'{"limit": "1", "period": "term", "term_start": "2026-09-01", "term_end": "2026-09-01"}')
    assert one_day.term_start == one_day.term_end


@pytest.mark.parametrize(
    "body, message",
    [
        (b"", "empty"),
        (b"{limit: 5}", "not valid JSON"),
        (b'{"limit": "5", "period": "month"', "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "must be a JSON object"),
        (b'"5000"', "must be a JSON object"),
        (b'{"limit": NaN, "period": "month"}', "NaN is not a number"),
        (b'{"limit": Infinity, "period": "month"}', "Infinity is not a number"),
        (b'{"limit": "1", "limit": "2", "period": "month"}', "'limit' more than once"),
        (b'{"limit": "5", "period": "month", "owner": "x"}', "Unknown field(s) 'owner'"),
        (b'{"period": "month"}', "limit is required"),
        (b'{"limit": 5000.0, "period": "month"}', "never a float"),
        (b'{"limit": 12.5, "period": "month"}', "never a float"),
        (b'{"limit": "-5", "period": "month"}', "must not be negative"),
        (b'{"limit": -5, "period": "month"}', "must not be negative"),
        (b'{"limit": "five", "period": "month"}', "must be a decimal number"),
        (b'{"limit": "NaN", "period": "month"}', "finite"),
        (b'{"limit": true, "period": "month"}', "got true"),
        (b'{"limit": null, "period": "month"}', "got null"),
        (b'{"limit": ["5"], "period": "month"}', "decimal string"),
        (b'{"limit": "0.0000001", "period": "month"}', "more than six decimal places"),
        (b'{"limit": "1000000000000000", "period": "month"}', "less than"),
        (b'{"limit": "5"}', "period is required"),
        (b'{"limit": "5", "period": "year"}', "period must be one of week, month, term"),
        (b'{"limit": "5", "period": "month", "unit": "euro"}', "unit must be one of money, gpu_hours"),
        (b'{"limit": "5", "period": "term"}', "needs both term_start and term_end"),
        (b'{"limit": "5", "period": "term", "term_start": "2026-09-01"}', "needs both"),
        (
            b'{"limit": "5", "period": "term", "term_start": "2027-01-15", "term_end": "2026-09-01"}',
            "is after term_end",
        ),
        (b'{"limit": "5", "period": "term", "term_start": "1.9.2026", "term_end": "2027-01-15"}', "date like"),
        (b'{"limit": "5", "period": "term", "term_start": "2026-02-30", "term_end": "2027-01-15"}', "not a valid"),
        (b'{"limit": "5", "period": "term", "term_start": 20260901, "term_end": "2027-01-15"}', "date like"),
        (b'{"limit": "5", "period": "month", "term_end": "2027-01-15"}', "only for period 'term'"),
    ],
)
def test_malformed_budget_bodies_are_refused_with_a_message(body, message):
    with pytest.raises(BadRequest) as e:
        budget(body)
    assert message in str(e.value)


@pytest.mark.parametrize(
    "scope, subject, message",
    [
        ("team", "x", "'user' or a 'group'"),
        ("groups", "cs231n", "not 'groups'"),
        ("group", "", "empty"),
        ("group", "   ", "empty"),
        ("user", " alice", "white space"),
        ("user", "a/b", "'/'"),
        ("user", "bad\nname", "control character"),
        ("user", "x" * 256, "longer than 255"),
    ],
)
def test_bad_budget_subjects(scope, subject, message):
    with pytest.raises(BadRequest) as e:
        parse_budget(scope, subject, {"limit": "5", "period": "month"})
    assert message in str(e.value)


def query(**params) -> UsageQuery:
    return parse_usage_query({k: [v.encode()] for k, v in params.items()}, SHANGHAI)


def test_usage_dates_are_local_days_and_until_includes_its_day():
    q = query(since="2026-11-01", until="2026-11-30")
    assert q.since == datetime(2026, 10, 31, 16, tzinfo=timezone.utc)  # midnight in Shanghai
    assert q.until == datetime(2026, 11, 30, 16, tzinfo=timezone.utc)  # the end of 30 November
    assert query(since="2026-11-01T08:00:00Z").since == datetime(2026, 11, 1, 8, tzinfo=timezone.utc)
    assert query(since="2026-11-01T08:00:00+08:00").since == datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert query(since="2026-11-01T08:00").since == datetime(2026, 11, 1, tzinfo=timezone.utc)  # naive: local
    assert query(until="2026-11-01T08:00:00Z").until == datetime(2026, 11, 1, 8, tzinfo=timezone.utc)  # exclusive
    assert query() == UsageQuery()
    assert query(all="true").everyone and not query(all="0").everyone
    assert query(format="csv").format == "csv"
    # JupyterHub's own auth may put a token in the URL; it is not an error
    assert parse_usage_query({"token": [b"abc"]}, SHANGHAI) == UsageQuery()


@pytest.mark.parametrize(
    "params, message",
    [
        ({"since": "yesterday"}, "ISO date"),
        ({"since": "2026-13-01"}, "not a valid date"),
        ({"until": "2026-11-01T25:00"}, "ISO date"),
        ({"since": "2026-11-02", "until": "2026-11-01"}, "must be before"),
        ({"since": "2026-11-01T10:00Z", "until": "2026-11-01T10:00Z"}, "must be before"),
        ({"format": "xml"}, "format must be json or csv"),
        ({"all": "yes"}, "all must be true or false"),
        ({"all": "true", "user": "stu1"}, "do not combine"),
        ({"user": ""}, "empty"),
        ({"group": "a/b"}, "'/'"),
        ({"owner": "stu1"}, "Unknown parameter(s) 'owner'"),
    ],
)
def test_malformed_usage_parameters(params, message):
    with pytest.raises(BadRequest) as e:
        query(**params)
    assert message in str(e.value)


def test_usage_parameters_are_given_once_and_as_utf8():
    with pytest.raises(BadRequest, match="at most once"):
        parse_usage_query({"user": [b"a", b"b"]}, SHANGHAI)
    with pytest.raises(BadRequest, match="UTF-8"):
        parse_usage_query({"user": [b"\xff"]}, SHANGHAI)


def test_parse_moment_of_a_date_in_another_zone():
    assert parse_moment("2026-11-01", "since", ZoneInfo("UTC")) == datetime(2026, 11, 1, tzinfo=timezone.utc)


def test_money_and_quantities_are_plain_decimal_strings():
    assert views.money_str(50_000) == "0.05"
    assert views.money_str(10_000_000) == "10"  # not "1E+1"
    assert views.money_str(0) == "0"
    assert views.decimal_str(Decimal(1) / 60, "gpu_hours") == "0.016667"
    assert views.decimal_str(Decimal("5000.00")) == "5000"


def session(**overrides) -> dict:
    base = {
        "id": "s1",
        "user": "stu1",
        "server_name": "",
        "profile": "t4",
        "gpus": ["GPU-a", "GPU-b"],
        "gpu_count": 2,
        "started": "2026-11-01T00:00:00Z",
        "stopped": "2026-11-01T00:01:01Z",
        "minutes_billed": 2,
        "rate_per_minute": "0.1",
        "cost": "0.2",
        "currency": "CNY",
        "stop_reason": "stopped",
        "running": False,
    }
    return {**base, **overrides}


def test_usage_csv_has_a_header_and_no_formulas():
    text = views.usage_csv([session(), session(id="s2", server_name="=HYPERLINK(1)", user="@x", stopped=None)])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == list(views.CSV_COLUMNS)
    assert rows[1][:5] == ["s1", "stu1", "", "t4", "GPU-a GPU-b"]
    assert rows[2][1:3] == ["'@x", "'=HYPERLINK(1)"]
    assert rows[2][7] == ""  # not stopped yet
    assert views.usage_csv([]) == ",".join(views.CSV_COLUMNS) + "\r\n"


def test_usage_totals_sum_exactly_per_currency():
    totals = views.usage_totals([session(cost="0.1"), session(cost="0.2", minutes_billed=3)], "CNY")
    assert totals == {"sessions": 2, "minutes_billed": 5, "gpu_minutes": 10, "cost": {"CNY": "0.3"}}
    assert views.usage_totals([], "CNY")["cost"] == {"CNY": "0"}


# -- the OpenAPI document describes exactly the routes and methods there are -------------------


def _route_to_openapi(pattern: str) -> str:
    by_id = ("notices", "jobs", "channels", "reservations")
    names = iter(["{id}"] if any(r in pattern for r in by_id) else ["{scope}", "{name}"])
    return re.sub(r"\(\[\^/\]\+\)", lambda _m: next(names), pattern)


def test_the_openapi_document_matches_the_handlers(tmp_path):
    document = yaml.safe_load(openapi.OPENAPI.read_text())
    assert document["openapi"].startswith("3.0")
    service = SimpleNamespace(
        ledger=Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}"), tz=SHANGHAI, notifier=None, tick_health=None
    )
    described = {}
    for route in routes.make_handlers("/services/gpu/", service):
        pattern, handler = route[0], route[1]
        if handler in (auth.OAuthCallbackHandler, openapi.NotFoundHandler):
            continue
        if "/api/v1/" not in pattern and not pattern.endswith("/metrics"):
            continue  # the usage pages and their static files are HTML for browsers, not API
        path = "/metrics" if pattern.endswith("/metrics") else pattern.replace("/services/gpu/api/v1", "")
        path = _route_to_openapi(path)
        methods = {
            m
            for m in ("get", "put", "post", "patch", "delete")
            if getattr(handler, m) is not getattr(web.RequestHandler, m)
        }
        described[path] = methods
    assert described == {path: set(item) - {"parameters", "servers"} for path, item in document["paths"].items()}
    for item in document["paths"].values():
        for method, operation in item.items():
            if method in ("parameters", "servers"):
                continue
            codes = set(operation["responses"])
            assert any(c.startswith("2") for c in codes)
            if operation.get("security") != []:
                assert "403" in codes, (method, operation["operationId"])
    # every reference resolves
    text = openapi.OPENAPI.read_text()
    for ref in set(re.findall(r"#/components/(\w+)/(\w+)", text)):
        assert ref[1] in document["components"][ref[0]], ref


def test_the_openapi_document_is_valid():
    import openapi_spec_validator as validator

    validator.validate(yaml.safe_load(openapi.OPENAPI.read_text()))


# -- budget use from SQL aggregates equals budget use from every session ---------------------------


def test_ledger_statuses_agree_with_budget_status_over_every_session(tmp_path):
    from jupyterhub_gpu.session import SessionStart

    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    now = datetime(2026, 11, 20, 12, tzinfo=timezone.utc)
    # group names that a LIKE could confuse: a wildcard, a quote, a prefix
    groups = [("cs231n",), ("cs_31n",), ('a"cs231n',), ("cs231n", "thesis"), (), ("cs231",), ("c%",)]
    n = 0
    for day in (1, 10, 19, 20):  # 1 November is in the month, 10+ also in the week of 16 November
        for i, group_set in enumerate(groups):
            n += 1
            started = datetime(2026, 11, day, 1 + i, tzinfo=timezone.utc)
            start = SessionStart(
                id=f"s{n}",
                user=f"u{i % 3}",
                server_name="",
                groups=group_set,
                profile="t4",
                gpus=("g",) * (i % 3),
                rate_micros=50_000 * (i + 1),
                currency="CNY",
                started=started,
            )
            ledger.record_start(start)
            if day != 20:  # the sessions of the 20th are still running
                ledger.record_stop(start.id, started + timedelta(seconds=61 * (i + 1)), "stopped")
    rules = [
        BudgetRule(scope, subject, period, unit, Decimal(100))
        for scope, subject in [("group", g) for g in ("cs231n", "cs_31n", 'a"cs231n', "cs231", "c%", "nobody")]
        + [("user", "u0"), ("user", "u2"), ("user", "cs231n")]
        for period in ("week", "month")
        for unit in ("money", "gpu_hours")
    ]
    rules.append(BudgetRule("group", "cs231n", "term", "money", Decimal(5), date(2026, 11, 10), date(2026, 11, 19)))
    every_row = Ledger.usage_rows(ledger.sessions(), now)
    expected = [budget_status(rule, every_row, now, SHANGHAI) for rule in rules]
    assert ledger.statuses_of(rules, now, SHANGHAI) == expected
    assert any(s.used > 0 for s in expected) and any(s.used == 0 for s in expected)
