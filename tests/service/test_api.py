"""The gpu service's REST API, metrics and CLI with a real hub, the real service and real tokens.

One hub serves the whole module (a hub start costs seconds). The ledger is seeded
with past sessions on fixed dates, so that usage, CSV and metrics have known
values; one test starts a real server to see a live session counted.
"""

from __future__ import annotations

import csv
import io
import os
import re
import secrets
import signal
import subprocess
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import SessionStart
from tests.conftest import BIN, Hub, wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.hub

PROMETHEUS_TOKEN = secrets.token_hex(16)

# (gpu_hub_config lets users reach the service with their own tokens.) An instructor may read usage but
# not change budgets; a Prometheus service may only scrape.
EXTRA_CONFIG = f"""
c.JupyterHub.load_roles.append({{
    "name": "gpu-readers",
    "users": ["prof"],
    "scopes": ["custom:gpu-usage:read"],
}})
c.JupyterHub.services.append({{"name": "prometheus", "api_token": {PROMETHEUS_TOKEN!r}}})
c.JupyterHub.load_roles.append({{
    "name": "metrics-scraper",
    "services": ["prometheus"],
    "scopes": ["custom:gpu-metrics:read", "access:services!service=gpu"],
}})
"""

UTC = timezone.utc


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# (id, user, groups, profile, gpus, rate in micros per minute, started, seconds, stop reason, server name)
SEEDED = [
    ("seed-a", "stu1", ["cs231n"], "t4", ["GPU-sim-t4-0"], 50_000, "2025-03-03T02:00:00", 61, "stopped", ""),
    ("seed-b", "stu2", ["cs231n"], "a100", ["GPU-sim-a100-0"], 250_000, "2025-03-04T02:00:00", 30, "budget", ""),
    # 23:30 UTC on 5 March is 07:30 on 6 March in Asia/Shanghai, the service's time zone
    ("seed-c", "thea", ["thesis"], "a100", ["GPU-sim-a100-0"], 250_000, "2025-03-05T23:30:00", 600, "stopped", ""),
    ("seed-d", "stu1", ["cs231n"], "cpu", [], 10_000, "2025-04-01T00:00:00", 300, "stopped", "=evil"),
]


def seed(ledger: Ledger) -> None:
    for sid, user, groups, profile, gpus, rate, started, seconds, reason, server in SEEDED:
        start = SessionStart(
            id=sid,
            user=user,
            server_name=server,
            groups=tuple(groups),
            profile=profile,
            gpus=tuple(gpus),
            rate_micros=rate,
            currency="CNY",
            started=at(started),
            simulated=True,
        )
        ledger.record_start(start)
        ledger.record_stop(sid, at(started) + timedelta(seconds=seconds), reason)


@dataclass
class Env:
    hub: Hub
    ledger: Ledger
    tokens: dict[str, str]
    db_url: str

    @property
    def service_url(self) -> str:
        return f"{self.hub.url}/services/gpu/"

    def call(self, who: str | None, method: str, path: str, **kwargs) -> requests.Response:
        """A request to the service as ``who`` (a token's owner, or None for anonymous)."""
        headers = kwargs.pop("headers", {})
        if who is not None:
            headers["Authorization"] = f"token {self.tokens[who]}"
        return requests.request(
            method, self.service_url + path, headers=headers, allow_redirects=False, timeout=30, **kwargs
        )

    def budgets(self) -> list[tuple]:
        return [
            (b.scope, b.subject, b.period, b.unit, b.limit, b.term_start, b.term_end) for b in self.ledger.budgets()
        ]


def user_token(hub: Hub, name: str) -> str:
    """The token a user makes for themselves (the hub's default token scopes: everything they may do)."""
    r = requests.post(
        f"{hub.api_url}/users/{name}/tokens",
        json={"note": "test", "auth": {"username": name, "password": "pw"}},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return r.json()["token"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    db_url = f"sqlite:///{root / 'ledger.sqlite'}"
    hub = Hub(root / "hub", gpu_hub_config(root) + EXTRA_CONFIG)
    hub.start()
    try:
        hub.create_users("admin", "stu1", "stu2", "thea", "prof")
        tokens = {name: user_token(hub, name) for name in ("admin", "stu1", "thea", "prof")}
        tokens["prometheus"] = PROMETHEUS_TOKEN
        wait_for(
            lambda: requests.get(f"{hub.url}/services/gpu/api/v1/openapi.yaml", timeout=5).status_code == 200,
            60,
            what="the gpu service",
        )
        ledger = Ledger(db_url)
        seed(ledger)
        yield Env(hub, ledger, tokens, db_url)
    finally:
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


def assert_json_error(r: requests.Response, status: int, fragment: str = "") -> dict:
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert r.headers["Content-Type"].startswith("application/json"), r.headers
    body = r.json()
    assert body["status"] == status and body["message"], body
    assert fragment in body["message"], body
    return body


# -- who may do what -------------------------------------------------------------------------------

WHO = ("anonymous", "stu1", "prof", "prometheus", "admin")
# every endpoint and method, and the status each caller gets: a student reads only their own data, an
# instructor (custom:gpu-usage:read) reads everyone's but changes nothing, the scraper only scrapes
MATRIX = [
    ("GET", "api/v1/me", None, (403, 200, 200, 403, 200)),
    ("POST", "api/v1/me/notices/{notice}/dismiss", None, (403, 200, 404, 403, 404)),
    ("GET", "api/v1/usage", None, (403, 200, 200, 403, 200)),
    ("GET", "api/v1/usage?user=stu1", None, (403, 200, 200, 403, 200)),
    ("GET", "api/v1/usage?user=stu2", None, (403, 403, 200, 403, 200)),
    ("GET", "api/v1/usage?group=cs231n", None, (403, 403, 200, 403, 200)),
    ("GET", "api/v1/usage?all=true&format=csv", None, (403, 403, 200, 403, 200)),
    ("GET", "api/v1/budgets", None, (403, 403, 200, 403, 200)),
    ("GET", "api/v1/budgets/group/matrix", None, (403, 403, 200, 403, 200)),
    ("PUT", "api/v1/budgets/group/matrix", {"limit": "7", "period": "week"}, (403, 403, 403, 403, 200)),
    ("DELETE", "api/v1/budgets/user/matrix-gone", None, (403, 403, 403, 403, 204)),
    ("GET", "api/v1/pricing", None, (403, 200, 200, 200, 200)),
    ("GET", "api/v1/culling", None, (403, 403, 200, 403, 200)),
    ("GET", "api/v1/culling?since=2024-11-01&format=csv", None, (403, 403, 200, 403, 200)),
    ("GET", "metrics", None, (403, 403, 403, 200, 200)),
    ("GET", "api/v1/openapi.yaml", None, (200, 200, 200, 200, 200)),
]


def test_every_endpoint_refuses_whoever_lacks_the_scope(env):
    now = datetime.now(UTC)
    env.ledger.set_budget(BudgetRule("group", "matrix", "month", "money", Decimal(5)), now)
    env.ledger.set_budget(BudgetRule("user", "matrix-gone", "month", "money", Decimal(5)), now)
    notice = env.ledger.add_notice("stu1", "budget", "80% of your budget is used", now, level="warning")
    for method, path, body, statuses in MATRIX:
        path = path.format(notice=notice.id)
        for who, status in zip(WHO, statuses, strict=True):
            before = env.budgets()
            r = env.call(None if who == "anonymous" else who, method, path, json=body)
            assert r.status_code == status, (who, method, path, r.status_code, r.text[:300])
            if status >= 400:
                body_ = assert_json_error(r, status)
                if who == "anonymous":
                    assert "Authentication required" in body_["message"]
                assert env.budgets() == before, (who, method, path)  # a refused request changes nothing
    assert env.ledger.get_budget("group", "matrix").limit == "7"
    assert env.ledger.get_budget("user", "matrix-gone") is None


def test_what_scopes_the_service_sees_in_each_kind_of_token(env):
    """An admin's own token carries the custom scopes; a student's only the access to the service."""
    hub = env.hub

    def scopes(who):
        r = requests.get(f"{hub.api_url}/user", headers={"Authorization": f"token {env.tokens[who]}"}, timeout=10)
        return set(r.json()["scopes"])

    admin, student, scraper = scopes("admin"), scopes("stu1"), scopes("prometheus")
    assert {"custom:gpu-usage:read", "custom:gpu-budgets:write", "custom:gpu-metrics:read"} <= admin
    assert "access:services" in admin
    assert "access:services!service=gpu" in student
    assert not any(s.startswith("custom:") for s in student)
    assert scraper == {"custom:gpu-metrics:read", "access:services!service=gpu"}


def test_a_token_without_access_to_the_service_is_told_what_it_lacks(env):
    r = requests.post(
        f"{env.hub.api_url}/users/stu1/tokens",
        json={"scopes": ["read:users:name!user=stu1"], "auth": {"username": "stu1", "password": "pw"}},
        timeout=10,
    )
    narrow = r.json()["token"]
    r = requests.get(env.service_url + "api/v1/me", headers={"Authorization": f"token {narrow}"}, timeout=10)
    assert_json_error(r, 403, "needs the scope access:services!service=gpu")


def test_a_browser_logs_in_through_oauth_and_gets_json(env):
    session = env.hub.login("stu1")
    r = session.get(env.service_url + "api/v1/me", timeout=30)
    assert r.status_code == 200, r.text[:500]
    assert [h.status_code for h in r.history] and all(h.status_code == 302 for h in r.history)
    assert any("/hub/api/oauth2/authorize" in h.headers["Location"] for h in r.history)
    me = r.json()
    assert me["user"] == "stu1" and me["groups"] == ["cs231n"]
    # the cookie alone does not change anything: the browser must prove it is the service's page (XSRF)
    notice = env.ledger.add_notice("stu1", "info", "hello", datetime.now(UTC))
    r = session.post(f"{env.service_url}api/v1/me/notices/{notice.id}/dismiss", timeout=10)
    assert_json_error(r, 403, "X-XSRFToken")
    assert notice.id in {n.id for n in env.ledger.notices("stu1")}
    # an admin's browser gets the custom scopes through OAuth (the service's oauth_client_allowed_scopes)
    admin = env.hub.login("admin")
    r = admin.get(env.service_url + "api/v1/budgets", timeout=30)
    assert r.status_code == 200 and "budgets" in r.json(), r.text[:300]
    assert admin.get(env.service_url + "metrics", timeout=10).status_code == 200
    # an anonymous browser's API request is refused, not redirected
    r = requests.get(env.service_url + "api/v1/me", allow_redirects=False, timeout=10)
    assert_json_error(r, 403, "Authentication required")


# -- me and notices ---------------------------------------------------------------------------------


def test_a_budget_put_shows_in_me_and_is_replaced_then_deleted(env):
    r = env.call("admin", "PUT", "api/v1/budgets/group/cs231n", json={"limit": "5000", "period": "month"})
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["limit"] == "5000" and created["unit"] == "money" and created["currency"] == "CNY"
    assert "warning" not in created  # the group exists on the hub
    me = env.call("stu1", "GET", "api/v1/me").json()
    (budget,) = [b for b in me["budgets"] if b["subject"] == "cs231n"]
    assert budget["limit"] == "5000" and budget["period"] == "month"
    assert Decimal(budget["spent"]) + Decimal(budget["remaining"]) == Decimal(5000)
    assert budget["period_end"] == created["period_end"] and budget["period_end"].endswith("T16:00:00Z")  # midnight +8
    # replacing answers 200; a term in GPU-hours
    term = {"limit": 40, "unit": "gpu_hours", "period": "term", "term_start": "2026-09-01", "term_end": "2027-01-15"}
    r = env.call("admin", "PUT", "api/v1/budgets/group/cs231n", json=term)
    assert r.status_code == 200, r.text
    assert (r.json()["term_start"], r.json()["term_end"], r.json()["limit"]) == ("2026-09-01", "2027-01-15", "40")
    assert r.json()["period_end"] == "2027-01-15T16:00:00Z"
    listed = env.call("prof", "GET", "api/v1/budgets").json()["budgets"]
    assert next(b for b in listed if b["subject"] == "cs231n")["unit"] == "gpu_hours"
    assert env.call("admin", "DELETE", "api/v1/budgets/group/cs231n").status_code == 204
    assert_json_error(env.call("admin", "DELETE", "api/v1/budgets/group/cs231n"), 404, "has no budget")
    assert_json_error(env.call("admin", "GET", "api/v1/budgets/group/cs231n"), 404, "has no budget")
    assert not [b for b in env.call("stu1", "GET", "api/v1/me").json()["budgets"] if b["subject"] == "cs231n"]


def test_a_budget_for_a_name_the_hub_does_not_know_warns(env):
    r = env.call("admin", "PUT", "api/v1/budgets/group/cs213n", json={"limit": "5", "period": "week"})
    assert r.status_code == 201
    assert "no group named 'cs213n'" in r.json()["warning"]
    env.ledger.delete_budget("group", "cs213n")


@pytest.mark.parametrize(
    "path, body, message",
    [
        ("budgets/group/cs231n", b"{limit: 5}", "not valid JSON"),
        ("budgets/group/cs231n", b"", "empty"),
        ("budgets/group/cs231n", b'{"limit": 5000.0, "period": "month"}', "never a float"),
        ("budgets/group/cs231n", b'{"limit": "-1", "period": "month"}', "must not be negative"),
        ("budgets/group/cs231n", b'{"limit": "5", "period": "month", "x": 1}', "Unknown field(s) 'x'"),
        ("budgets/group/cs231n", b'{"limit": "5", "period": "term"}', "needs both term_start and term_end"),
        (
            "budgets/group/cs231n",
            b'{"limit": "5", "period": "term", "term_start": "2027-01-15", "term_end": "2026-09-01"}',
            "is after term_end",
        ),
        ("budgets/team/cs231n", b'{"limit": "5", "period": "month"}', "'user' or a 'group'"),
        ("budgets/group/%20cs231n", b'{"limit": "5", "period": "month"}', "white space"),
        ("budgets/user/a%2Fb", b'{"limit": "5", "period": "month"}', "'/'"),
    ],
)
def test_malformed_budget_requests_get_400_and_change_nothing(env, path, body, message):
    before = env.budgets()
    r = env.call(
        "admin", "PUT", "api/v1/" + path, data=body, headers={"Content-Type": "application/json"}
    )  # fmt: skip
    assert_json_error(r, 400, message)
    assert env.budgets() == before


def test_notices_are_dismissed_by_their_owner_only(env):
    notice = env.ledger.add_notice("thea", "budget", "95% used", datetime.now(UTC), level="warning")
    assert_json_error(env.call("stu1", "POST", f"api/v1/me/notices/{notice.id}/dismiss"), 404)
    assert_json_error(env.call("thea", "POST", "api/v1/me/notices/abc/dismiss"), 400, "is a number")
    assert_json_error(env.call("thea", "POST", f"api/v1/me/notices/{notice.id}/dismiss", data=b"[1]"), 400)
    assert notice.id in [n["id"] for n in env.call("thea", "GET", "api/v1/me").json()["notices"]]
    r = env.call("thea", "POST", f"api/v1/me/notices/{notice.id}/dismiss")
    assert r.status_code == 200 and r.json()["dismissed"] is True
    assert env.call("thea", "POST", f"api/v1/me/notices/{notice.id}/dismiss").status_code == 200  # idempotent
    assert notice.id not in [n["id"] for n in env.call("thea", "GET", "api/v1/me").json()["notices"]]


# -- usage ----------------------------------------------------------------------------------------


def ids(r: requests.Response) -> list[str]:
    assert r.status_code == 200, r.text[:300]
    return [s["id"] for s in r.json()["sessions"] if s["id"].startswith("seed-")]


def test_usage_filters_by_user_group_and_local_dates(env):
    assert ids(env.call("stu1", "GET", "api/v1/usage")) == ["seed-a", "seed-d"]
    march = "since=2025-03-01&until=2025-03-31"
    assert ids(env.call("stu1", "GET", f"api/v1/usage?{march}")) == ["seed-a"]
    assert ids(env.call("prof", "GET", f"api/v1/usage?group=cs231n&{march}")) == ["seed-a", "seed-b"]
    assert ids(env.call("admin", "GET", "api/v1/usage?all=true&since=2025-01-01&until=2025-12-31")) == [
        "seed-a",
        "seed-b",
        "seed-c",
        "seed-d",
    ]
    # seed-c started at 07:30 on 6 March in Shanghai: "until 5 March" excludes it, "until 6 March" includes it
    assert ids(env.call("admin", "GET", "api/v1/usage?user=thea&until=2025-03-05")) == []
    assert ids(env.call("admin", "GET", "api/v1/usage?user=thea&until=2025-03-06")) == ["seed-c"]
    assert ids(env.call("admin", "GET", "api/v1/usage?user=thea&since=2025-03-06")) == ["seed-c"]
    # a session with minutes on both sides of ``since`` is in the report with the minutes after it
    assert ids(env.call("admin", "GET", "api/v1/usage?user=thea&since=2025-03-05T23:40:00Z")) == []
    late = env.call("admin", "GET", "api/v1/usage?user=thea&since=2025-03-05T23:31:00Z").json()
    assert [(s["id"], s["minutes_in_window"]) for s in late["sessions"]] == [("seed-c", 9)]


def test_usage_json_has_money_as_strings_and_totals(env):
    r = env.call("prof", "GET", "api/v1/usage?group=cs231n&since=2025-01-01&until=2025-12-31")
    data = r.json()
    a = next(s for s in data["sessions"] if s["id"] == "seed-a")
    assert a["minutes_billed"] == 2 and a["cost"] == "0.1" and a["rate_per_minute"] == "0.05"
    assert a["started"] == "2025-03-03T02:00:00Z" and a["stopped"] == "2025-03-03T02:01:01Z"
    assert a["stop_reason"] == "stopped" and a["gpus"] == ["GPU-sim-t4-0"] and a["currency"] == "CNY"
    assert data["totals"] == {"sessions": 3, "minutes_billed": 8, "gpu_minutes": 3, "cost": {"CNY": "0.4"}}
    assert data["group"] == "cs231n" and data["since"] == "2024-12-31T16:00:00Z"


def test_usage_as_csv(env):
    r = env.call("admin", "GET", "api/v1/usage?all=true&since=2025-01-01&until=2025-12-31&format=csv")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert r.text.splitlines()[0] == (
        "id,user,server_name,profile,gpus,gpu_count,started,stopped,minutes_billed,rate_per_minute,cost,currency,"
        "stop_reason,running,minutes_in_window,cost_in_window,hub"
    )
    assert [row["id"] for row in rows] == ["seed-a", "seed-b", "seed-c", "seed-d"]
    c = rows[2]
    assert (c["user"], c["profile"], c["minutes_billed"], c["cost"], c["stop_reason"]) == (
        "thea",
        "a100",
        "10",
        "2.5",
        "stopped",
    )
    assert rows[3]["server_name"] == "'=evil"  # not a formula in a spreadsheet


@pytest.mark.parametrize(
    "query, message",
    [
        ("since=yesterday", "ISO date"),
        ("since=2025-03-02&until=2025-03-01", "must be before"),
        ("format=xml", "format must be json or csv"),
        ("user=stu1&user=stu2", "at most once"),
        ("owner=stu1", "Unknown parameter(s) 'owner'"),
        ("all=maybe", "all must be true or false"),
    ],
)
def test_malformed_usage_parameters_get_400(env, query, message):
    assert_json_error(env.call("stu1", "GET", f"api/v1/usage?{query}"), 400, message)


# -- pricing ------------------------------------------------------------------------------------------


def test_pricing_shows_a_user_only_the_profiles_their_groups_may_use(env):
    published = env.ledger.pricing()
    assert [p["slug"] for p in published] == ["t4", "a100", "cpu"]  # the hub published its profiles
    thesis_only = {"slug": "h100", "display_name": "1× H100", "gpu_model": "H100", "gpu_count": 1}
    env.ledger.set_pricing(
        [*published, {**thesis_only, "rate_per_minute": "0.5", "allowed_groups": ["thesis"]}],
        "CNY",
        datetime.now(UTC),
    )
    try:
        slugs = {who: [p["slug"] for p in env.call(who, "GET", "api/v1/pricing").json()["profiles"]] for who in WHO[1:]}
        assert slugs["stu1"] == ["t4", "a100", "cpu"]
        assert slugs["prof"] == slugs["admin"] == ["t4", "a100", "cpu", "h100"]
        thea = env.call("thea", "GET", "api/v1/pricing").json()
        h100 = thea["profiles"][-1]
        assert h100["slug"] == "h100" and h100["rate_per_minute"] == "0.5" and h100["price_per_hour"] == "30"
        assert h100["allowed_groups"] == ["thesis"] and h100["currency"] == thea["currency"] == "CNY"
        t4 = thea["profiles"][0]
        assert (t4["rate_per_minute"], t4["price_per_hour"], t4["gpu_model"]) == ("0.05", "3", "T4")
    finally:
        env.ledger.set_pricing(published, "CNY", datetime.now(UTC))


# -- what culling saved ------------------------------------------------------------------------------

# Culled sessions in November 2024 (nothing else is there), added to the ledger directly: the reasons the
# service's tick would have stored. (id, user, groups, gpus, rate, started, seconds, stop reason)
TWO_A100 = ["GPU-sim-a100-0", "GPU-sim-a100-1"]
CULLED = [
    # stu1's T4 idles: culled for gpu_idle at 07:10; she starts again at 08:40: 90 minutes saved
    ("cull-1", "stu1", ["cs231n"], ["GPU-sim-t4-0"], 50_000, "2024-11-04T06:00:00", 70 * 60, "gpu_idle"),
    ("cull-2", "stu1", ["cs231n"], ["GPU-sim-t4-0"], 50_000, "2024-11-04T08:40:00", 20 * 60, "stopped"),
    # stu2 leaves two A100s: inactive at 15:05 and no return: 12 hours × 2 GPUs
    ("cull-3", "stu2", ["cs231n"], TWO_A100, 500_000, "2024-11-05T10:00:00", 305 * 60, "inactive"),
    # stu2's budget runs out: reported apart, 12 hours
    ("cull-5", "stu2", ["cs231n"], ["GPU-sim-a100-0"], 250_000, "2024-11-07T02:00:00", 60 * 60, "budget"),
    # a thesis student's day-long training meets max_age at 20:00 in Shanghai, 4 hours before the window ends
    ("cull-4", "ghost", ["thesis"], ["GPU-sim-t4-1"], 50_000, "2024-11-29T12:00:00", 24 * 3600, "max_age"),
]
NOVEMBER_2024 = "since=2024-11-01&until=2024-11-30"


def seed_culled(env) -> None:
    from jupyterhub_gpu.ledger.queries.samples import record_sample
    from jupyterhub_gpu.rules.samples import Sample

    for sid, user, groups, gpus, rate, started, seconds, reason in CULLED:
        profile = "t4" if rate == 50_000 else "a100"
        start = SessionStart(sid, user, "", tuple(groups), profile, tuple(gpus), rate, "CNY", at(started), True)
        if env.ledger.record_start(start):
            env.ledger.record_stop(sid, at(started) + timedelta(seconds=seconds), reason)
            # the samples its server pushed: cull-1 6 idle minutes of 10, cull-3 5 idle minutes (× 2 GPUs)
            pushed = {"cull-1": [2, 2, 1, 0, 3, 4, 50, 80, 1, 0], "cull-3": [0, 1, 2, 3, 4]}.get(sid, [])
            for i, util in enumerate(pushed):
                busy = 1 if sid == "cull-1" and i >= 8 else 0  # a busy kernel is not idle, whatever the GPU says
                until = at(started) + timedelta(minutes=i, seconds=30)
                sample = Sample(sid, until, 2, float(util), 100, 16000, 1, busy, None, None, ())
                record_sample(env.ledger, user, sample)


def test_culling_reports_what_each_rule_saved_in_a_term(env):
    seed_culled(env)
    r = env.call("prof", "GET", f"api/v1/culling?{NOVEMBER_2024}")
    assert r.status_code == 200, r.text[:500]
    data = r.json()
    assert data["window"] == {
        "since": "2024-10-31T16:00:00Z",  # midnight in Shanghai
        "until": "2024-11-30T16:00:00Z",  # the end of 30 November
        "counted_until": "2024-11-30T16:00:00Z",
        "horizon_hours": 12,
        "idle_util_percent": 5,
    }
    assert data["by_reason"] == {
        "gpu_idle": {
            "sessions": 1,
            "minutes_saved": 90,
            "gpu_minutes_saved": 90,
            "gpu_hours_saved": "1.5",
            "money_saved": "4.5",
        },
        "inactive": {
            "sessions": 1,
            "minutes_saved": 720,
            "gpu_minutes_saved": 1440,
            "gpu_hours_saved": "24",
            "money_saved": "360",
        },
        "max_age": {
            "sessions": 1,
            "minutes_saved": 240,
            "gpu_minutes_saved": 240,
            "gpu_hours_saved": "4",
            "money_saved": "12",
        },
        "busy_gpu_idle": {
            "sessions": 0,
            "minutes_saved": 0,
            "gpu_minutes_saved": 0,
            "gpu_hours_saved": "0",
            "money_saved": "0",
        },
    }
    assert data["total"] == {
        "sessions": 3,
        "minutes_saved": 1050,
        "gpu_minutes_saved": 1770,
        "gpu_hours_saved": "29.5",
        "money_saved": "376.5",
    }
    assert data["budget_stops"]["sessions"] == 1 and data["budget_stops"]["money_saved"] == "180"
    # billed: 70 + 20 + 305 × 2 + 60 + 1440 GPU-minutes; idle: 6 + 5 × 2; sampled: 10 + 5 × 2
    assert data["billed_gpu_hours"] == "36.666667"  # 2200 GPU-minutes
    assert data["billed_idle_gpu_hours"] == "0.266667"  # 16
    assert data["billed_unsampled_gpu_hours"] == "36.333333"  # 2180
    assert data["idle_share"] == 0.0073  # 16 / 2200
    assert data["billed_money"] == "244" and data["currency"] == "CNY" and data["group"] is None


def test_culling_by_group_with_another_horizon_and_as_csv(env):
    seed_culled(env)
    cs = env.call("admin", "GET", f"api/v1/culling?{NOVEMBER_2024}&group=cs231n&horizon_hours=1").json()
    assert cs["group"] == "cs231n" and cs["window"]["horizon_hours"] == 1
    # one hour after each cull: stu1 came back later than that; the thesis student is not in cs231n
    assert {k: v["gpu_minutes_saved"] for k, v in cs["by_reason"].items()} == {
        "gpu_idle": 60,
        "inactive": 120,
        "max_age": 0,
        "busy_gpu_idle": 0,
    }
    assert cs["budget_stops"]["gpu_minutes_saved"] == 60
    thesis = env.call("admin", "GET", f"api/v1/culling?{NOVEMBER_2024}&group=thesis").json()
    assert thesis["total"]["sessions"] == 1 and thesis["by_reason"]["max_age"]["money_saved"] == "12"
    assert thesis["billed_gpu_hours"] == "24" and thesis["idle_share"] == 0

    r = env.call("prof", "GET", f"api/v1/culling?{NOVEMBER_2024}&format=csv")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [(row["id"], row["counted_as"], row["ended_by"]) for row in rows] == [
        ("cull-1", "culling", "next_start"),
        ("cull-3", "culling", "horizon"),
        ("cull-5", "budget", "horizon"),
        ("cull-4", "culling", "window_end"),
    ]
    assert (rows[0]["estimated_until"], rows[0]["money_saved"], rows[1]["gpu_hours_saved"]) == (
        "2024-11-04T08:40:00Z",
        "4.5",
        "24",
    )
    # the seeded March 2025 sessions: one budget stop (seed-b), no culls
    march = env.call("admin", "GET", "api/v1/culling?since=2025-03-01&until=2025-03-31").json()
    assert march["total"]["sessions"] == 0 and march["budget_stops"]["sessions"] == 1
    assert march["budget_stops"]["gpu_hours_saved"] == "12" and march["budget_stops"]["money_saved"] == "180"


@pytest.mark.parametrize(
    "query, message",
    [
        ("since=last-term", "ISO date"),
        ("since=2024-11-30&until=2024-11-01", "must be before"),
        ("format=pdf", "format must be json or csv"),
        ("horizon_hours=0", "from 1 to 168"),
        ("horizon_hours=2.5", "whole number"),
        ("group=a%2Fb", "'/'"),
        ("since=2024-11-01&since=2024-12-01", "at most once"),
        ("user=stu1", "Unknown parameter(s) 'user'"),
    ],
)
def test_malformed_culling_parameters_get_400(env, query, message):
    assert_json_error(env.call("prof", "GET", f"api/v1/culling?{query}"), 400, message)


def test_culling_needs_the_usage_read_scope_whatever_the_parameters(env):
    assert_json_error(env.call("stu1", "GET", f"api/v1/culling?{NOVEMBER_2024}"), 403, "custom:gpu-usage:read")
    assert_json_error(env.call("stu1", "GET", "api/v1/culling?format=pdf"), 403, "custom:gpu-usage:read")


# -- metrics --------------------------------------------------------------------------------------


def scrape(env) -> dict[tuple, float]:
    """The scraped samples as ``{(name, (label, value), ...): value}``, parsed by prometheus_client."""
    r = env.call("prometheus", "GET", "metrics")
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain")
    return {
        (sample.name, *sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(r.text)
        for sample in family.samples
    }


#: the sessions' families, labelled with the hub of each session (this hub sets no name: "default")
HUB_FAMILIES = ("active_sessions", "active_gpus", "busy_gpus", "billed_minutes_total", "spend_total", "stops_total")


def m(name: str, **labels) -> tuple:
    if name.removeprefix("jupyterhub_gpu_") in HUB_FAMILIES:
        labels.setdefault("hub", "default")
    return (name, *sorted(labels.items()))


def test_metrics_count_a_real_session(env):
    before = scrape(env)
    assert before[m("jupyterhub_gpu_billed_minutes_total", profile="a100")] >= 11  # seed-b 1 + seed-c 10
    assert before[m("jupyterhub_gpu_spend_total", group="thesis", profile="a100", currency="CNY")] >= 2.5
    assert before[m("jupyterhub_gpu_stops_total", reason="budget")] >= 1
    assert before[m("jupyterhub_gpu_active_sessions", profile="t4")] == 0
    env.ledger.set_budget(BudgetRule("user", "metrics-probe", "month", "gpu_hours", Decimal(3)), datetime.now(UTC))

    hub = env.hub
    r = hub.start_server("thea", {"profile": "t4"})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("thea")
    running = scrape(env)
    assert running[m("jupyterhub_gpu_active_sessions", profile="t4")] == 1
    assert running[m("jupyterhub_gpu_active_gpus", profile="t4")] == 1
    assert running[m("jupyterhub_gpu_budget_limit", scope="user", subject="metrics-probe", unit="gpu_hours")] == 3
    assert running[m("jupyterhub_gpu_budget_remaining", scope="user", subject="metrics-probe", unit="gpu_hours")] == 3
    # counters move only when a session's charge is final
    assert (
        running[m("jupyterhub_gpu_billed_minutes_total", profile="t4")]
        == before[m("jupyterhub_gpu_billed_minutes_total", profile="t4")]
    )
    hub.stop_server("thea")
    hub.wait_stopped("thea")
    (record,) = [s for s in env.ledger.sessions(user="thea") if not s.id.startswith("seed-")]
    assert record.minutes == 1 and record.cost_micros == 50_000

    after = scrape(env)
    assert after[m("jupyterhub_gpu_active_sessions", profile="t4")] == 0
    key = m("jupyterhub_gpu_billed_minutes_total", profile="t4")
    assert after[key] == before[key] + 1
    key = m("jupyterhub_gpu_spend_total", group="thesis", profile="t4", currency="CNY")
    assert after[key] == pytest.approx(before.get(key, 0) + 0.05)
    key = m("jupyterhub_gpu_stops_total", reason="stopped")
    assert after[key] == before[key] + 1
    # thea's session shows in her usage too
    assert env.call("thea", "GET", "api/v1/usage").json()["totals"]["sessions"] == 2
    env.ledger.delete_budget("user", "metrics-probe")


# -- the CLI against the running service -----------------------------------------------------------


def cli(env, *argv, token="admin") -> subprocess.CompletedProcess:
    environ = dict(os.environ, JUPYTERHUB_GPU_URL=env.service_url)
    environ.pop("JUPYTERHUB_API_TOKEN", None)
    if token:
        environ["JUPYTERHUB_API_TOKEN"] = env.tokens[token]
    return subprocess.run([str(BIN / "jupyterhub-gpu"), *argv], env=environ, capture_output=True, text=True, timeout=60)


def test_the_cli_sets_lists_and_deletes_budgets_and_reports_usage(env):
    p = cli(env, "budget", "set", "--group", "thesis", "--limit", "120.50", "--period", "month")
    assert p.returncode == 0, p.stderr
    assert "group thesis: CN¥120.50 per month" in p.stdout
    assert env.ledger.get_budget("group", "thesis").limit == "120.5"

    p = cli(env, "budget", "list")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^group\s+thesis\s+month\s+CN¥120\.50", p.stdout, re.MULTILINE), p.stdout

    p = cli(env, "usage", "--all", "--since", "2025-01-01", "--until", "2025-12-31", "--csv")
    assert p.returncode == 0, p.stderr
    assert [row["id"] for row in csv.DictReader(io.StringIO(p.stdout))] == ["seed-a", "seed-b", "seed-c", "seed-d"]

    p = cli(env, "usage", "--since", "2025-01-01", "--until", "2025-12-31", token="stu1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "2 session(s), 7 minute(s) billed, 2 GPU-minute(s), CN¥0.15"

    # bad arguments: exit 2, nothing sent, nothing changed
    before = env.budgets()
    for argv in (
        ["budget", "set", "--group", "thesis", "--limit", "-1", "--period", "month"],
        ["budget", "set", "--group", "thesis", "--limit", "9", "--period", "term"],
        ["budget", "delete"],
    ):
        p = cli(env, *argv)
        assert p.returncode == 2 and "error:" in p.stderr, (argv, p.stderr)
    assert cli(env, "budget", "list", token=None).returncode == 2
    assert env.budgets() == before

    # API errors: the message, exit 1
    p = cli(env, "budget", "set", "--group", "thesis", "--limit", "1", "--period", "week", token="stu1")
    assert p.returncode == 1 and "custom:gpu-budgets:write" in p.stderr
    assert env.budgets() == before
    p = cli(env, "usage", "--user", "stu2", token="stu1")
    assert p.returncode == 1 and "custom:gpu-usage:read" in p.stderr

    p = cli(env, "budget", "delete", "--group", "thesis")
    assert p.returncode == 0, p.stderr
    p = cli(env, "budget", "delete", "--group", "thesis")
    assert p.returncode == 1 and "has no budget" in p.stderr
    assert env.ledger.get_budget("group", "thesis") is None
