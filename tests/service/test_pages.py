"""The usage pages with a real hub, the real service, OAuth logins and the ledger.

One hub serves the hub tests (a hub start costs seconds): students, an instructor
of cs231n (a role with ``custom:gpu-usage:read!group=cs231n``) and an admin log in
through the hub's login form and JupyterHub OAuth, as browsers do. The pure
helpers (language choice, daily series, totals) are tested first,
without a hub.
"""

from __future__ import annotations

import csv
import html
import io
import re
import signal
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import requests

from jupyterhub_gpu import i18n
from jupyterhub_gpu.ledger.queries.overrides import load_overrides
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.overrides import AccessError, parse_override
from jupyterhub_gpu.service.web.pages.series import daily_series, totals_by
from jupyterhub_gpu.service.web.views import table_csv
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.spawners.profiles import apply_overrides, parse_profiles
from tests.conftest import Hub, wait_for
from tests.service.conftest import gpu_hub_config

UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")

# -- without a hub ----------------------------------------------------------------------------------


def test_language_comes_from_the_cookie_then_accept_language():
    assert i18n.negotiate("zh-CN,zh;q=0.9,en;q=0.8") == "zh-CN"
    assert i18n.negotiate("en-US,en;q=0.9,zh-CN;q=0.8") == "en"
    assert i18n.negotiate("fr-FR, zh-TW;q=0.5") == "zh-CN"
    assert i18n.negotiate("de, en;q=0") == "en"  # nothing supported: English
    assert i18n.negotiate("zh;q=0.3, en;q=0.7") == "en"
    assert i18n.negotiate("", None) == "en" and i18n.negotiate(None) == "en"
    assert i18n.negotiate("en", "zh-CN") == "zh-CN"  # the switch wins
    assert i18n.negotiate("zh-CN", "klingon") == "zh-CN"  # a bad cookie is ignored
    _ = i18n.translator("zh-CN")
    assert _("Group {group}", group="cs231n") == "组 cs231n"
    assert i18n.translator("en")("Group {group}", group="cs231n") == "Group cs231n"


# every text of the pages has its Chinese, with the same placeholders: tests/unit/test_i18n.py (the whole package)


def session(sid, user, started, minutes, cost, gpus=1, profile="t4"):
    return {
        "id": sid,
        "user": user,
        "profile": profile,
        "started": started,
        "minutes_billed": minutes,
        "gpu_count": gpus,
        "cost": cost,
        # the page's window holds all of it (a minute counts where it starts: test_budget_periods.py)
        "rate_per_minute": str(Decimal(cost) / minutes),
        "minutes_in_window": minutes,
        "cost_in_window": cost,
    }


def test_daily_series_counts_each_session_on_its_local_start_day_and_fills_the_window():
    sessions = [
        session("a", "stu1", "2025-03-03T02:00:00Z", 2, "0.1"),
        # 23:30 UTC on 5 March is 6 March in Shanghai
        session("b", "thea", "2025-03-05T23:30:00Z", 10, "2.5"),
        session("c", "thea", "2025-03-06T01:00:00Z", 30, "3", gpus=2),
    ]
    since = datetime(2025, 3, 2, tzinfo=SHANGHAI)
    until = datetime(2025, 3, 7, tzinfo=SHANGHAI)
    series = daily_series(sessions, SHANGHAI, since, until, datetime(2026, 1, 1, tzinfo=UTC))
    assert [d["day"] for d in series] == ["2025-03-02", "2025-03-03", "2025-03-04", "2025-03-05", "2025-03-06"]
    assert series[1] == {"day": "2025-03-03", "spend": "0.1", "gpu_hours": "0.03"}
    assert series[4] == {"day": "2025-03-06", "spend": "5.5", "gpu_hours": "1.17"}  # 10 + 60 GPU-minutes
    assert series[3]["spend"] == "0" and series[3]["gpu_hours"] == "0.00"
    assert daily_series([], SHANGHAI, None, None, datetime(2026, 1, 1, tzinfo=UTC)) == []


def test_totals_by_group_sum_exactly_and_sort_by_spend():
    sessions = [
        session("a", "stu1", "2025-03-03T02:00:00Z", 2, "0.10"),
        session("b", "stu2", "2025-03-03T02:00:00Z", 1, "0.25", profile="a100"),
        session("c", "stu1", "2025-03-04T02:00:00Z", 3, "0.15"),
    ]
    rows = totals_by(sessions, lambda s: [s["user"]])
    assert rows == [  # the same spend: more GPU-hours first
        {"name": "stu1", "sessions": 2, "minutes": 5, "gpu_hours": "0.08", "spend": "0.25"},
        {"name": "stu2", "sessions": 1, "minutes": 1, "gpu_hours": "0.02", "spend": "0.25"},
    ]
    text = table_csv(["name", "spend"], [{"name": "=cmd()", "spend": "1"}])
    assert text == "name,spend\r\n'=cmd(),1\r\n"


def test_profile_edits_are_validated_and_applied_over_the_configuration():
    t4 = {"slug": "t4", "gpu_count": 1, "rate_per_minute": "0.05", "allowed_groups": []}
    cpu = {"slug": "cpu", "gpu_count": 0, "rate_per_minute": "0.01", "allowed_groups": []}
    for values, message in [
        ({"price_per_gpu_hour": "-1"}, "must not be negative"),
        ({"price_per_gpu_hour": "abc"}, "decimal number"),
        ({"price_per_gpu_hour": "0.0000001"}, "not a whole number"),
        ({"restrict": "groups", "allowed_groups": ""}, "at least one group"),
        ({"restrict": "groups", "allowed_groups": "a/b"}, "not a group name"),
        ({"restrict": "nobody"}, "must be 'config', 'everyone' or 'groups'"),
    ]:
        with pytest.raises(AccessError, match=re.escape(message)):
            parse_override(t4, values)
    with pytest.raises(AccessError, match="has no GPU"):
        parse_override(cpu, {"price_per_gpu_hour": "3"})
    edit = parse_override(t4, {"price_per_gpu_hour": "6", "restrict": "groups", "allowed_groups": "thesis, cs231n"})
    assert edit.price_per_gpu_hour == Decimal(6) and edit.allowed_groups == ("cs231n", "thesis")
    profiles = parse_profiles(
        [{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00"}], require_image=False
    )
    (changed,) = apply_overrides(profiles, {"t4": edit})
    assert changed.rate_per_minute == Decimal("0.1") and changed.allowed_groups == ("cs231n", "thesis")
    assert changed.image == profiles[0].image and apply_overrides(profiles, {}) == profiles


# -- with a hub --------------------------------------------------------------------------------------

INSTRUCTOR = """
from jupyterhub_gpu.service.web.pages import HUB_TEMPLATES
c.JupyterHub.template_paths = [HUB_TEMPLATES]
c.JupyterHub.load_roles.append({
    "name": "instructors-cs231n",
    "users": ["prof"],
    "scopes": ["custom:gpu-usage:read!group=cs231n"],
})
"""

# (id, user, groups, profile, gpus, rate in micros per minute, started, seconds, stop reason)
SEEDED = [
    ("pg-a", "stu1", ["cs231n"], "t4", ["GPU-sim-t4-0"], 50_000, "2025-03-03T02:00:00", 61, "stopped"),
    ("pg-b", "stu2", ["cs231n"], "a100", ["GPU-sim-a100-0"], 250_000, "2025-03-04T02:00:00", 30, "gpu_idle"),
    ("pg-c", "thea", ["thesis"], "a100", ["GPU-sim-a100-0"], 250_000, "2025-03-05T23:30:00", 600, "stopped"),
    ("pg-d", "stu1", ["cs231n"], "cpu", [], 10_000, "2025-03-20T00:00:00", 300, "budget"),
]
MARCH = "since=2025-03-01&until=2025-03-31"


@dataclass
class Env:
    hub: Hub
    ledger: Ledger
    browsers: dict

    @property
    def url(self) -> str:
        return f"{self.hub.url}/services/gpu/"

    def get(self, who: str, path: str, **kwargs) -> requests.Response:
        return self.browsers[who].get(self.url + path, timeout=30, **kwargs)

    def post(self, who: str, path: str, data: dict, xsrf: bool = True) -> requests.Response:
        browser = self.browsers[who]
        if xsrf:
            page = self.get(who, "admin")
            data = {**data, "_xsrf": re.search(r'name="_xsrf" value="([^"]+)"', page.text).group(1)}
        return browser.post(self.url + path, data=data, timeout=30, allow_redirects=False)

    def budgets(self):
        return [(b.scope, b.subject, b.period, b.unit, b.limit) for b in self.ledger.budgets()]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    hub = Hub(root / "hub", gpu_hub_config(root, gpu_pool={"T4": 4, "A100": 1}) + INSTRUCTOR)
    hub.start()
    try:
        hub.create_users("admin", "stu1", "stu2", "thea", "prof")
        wait_for(
            lambda: requests.get(f"{hub.url}/services/gpu/api/v1/openapi.yaml", timeout=5).status_code == 200,
            60,
            what="the gpu service",
        )
        ledger = Ledger(f"sqlite:///{root / 'ledger.sqlite'}")
        for sid, user, groups, profile, gpus, rate, started, seconds, reason in SEEDED:
            start = datetime.fromisoformat(started).replace(tzinfo=UTC)
            ledger.record_start(
                SessionStart(sid, user, "", tuple(groups), profile, tuple(gpus), rate, "CNY", start, simulated=True)
            )
            ledger.record_stop(sid, start + timedelta(seconds=seconds), reason)
        browsers = {}
        for name in ("admin", "stu1", "thea", "prof"):
            browsers[name] = hub.login(name)
            r = browsers[name].get(f"{hub.url}/services/gpu/", timeout=30)  # through OAuth
            assert r.status_code == 200, r.text[:500]
        yield Env(hub, ledger, browsers)
    finally:
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


def rows_of(html: str) -> list[str]:
    return re.findall(r'<tr data-session="([^"]+)"', html)


@pytest.mark.hub
def test_a_student_sees_only_their_own_data(env):
    home = env.browsers["stu1"].get(f"{env.hub.url}/hub/home", timeout=30).text
    assert 'id="gpu-usage-link"' in home and 'href="/services/gpu/"' in home and 'id="start"' in home
    r = env.get("stu1", f"?{MARCH}")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    assert rows_of(r.text) == ["pg-d", "pg-a"]  # newest first
    assert "¥0.10" in r.text and 'data-simulated="true"' in r.text and "Administration" not in r.text
    assert env.get("stu1", f"users/stu1?{MARCH}").status_code == 200
    for path in ("users/stu2", "users/thea", "groups/cs231n", "groups/thesis", "admin"):
        r = env.get("stu1", path)
        assert r.status_code == 403, (path, r.status_code)
        assert 'id="error" data-status="403"' in r.text and "pg-b" not in r.text
    assert env.get("stu1", "admin?format=csv&table=sessions").status_code == 403
    assert env.get("stu1", "users/stu2?format=csv&table=sessions").status_code == 403
    # bad input is a clear 400
    r = env.get("stu1", "?since=yesterday")
    assert r.status_code == 400 and "since must be an ISO date" in r.text
    assert "table must be one of" in env.get("stu1", "?format=csv&table=secrets").text
    # anonymous browsers are sent to log in; programs without a token are refused
    r = requests.get(env.url + "admin", allow_redirects=False, timeout=10)
    assert r.status_code == 403


@pytest.mark.hub
def test_an_instructor_sees_only_their_groups(env):
    r = env.get("prof", f"groups/cs231n?{MARCH}")
    assert r.status_code == 200, r.text[:300]
    assert sorted(rows_of(r.text)) == ["pg-a", "pg-b", "pg-d"]
    users = re.findall(r'<tr data-name="([^"]+)"><td><a href="/services/gpu/users/', r.text)
    assert users == ["stu2", "stu1"]  # top users by spend: ¥0.25, then ¥0.10 + ¥0.05
    assert 'href="/services/gpu/groups/cs231n"' in r.text  # the nav links their groups
    assert env.get("prof", "groups/thesis").status_code == 403
    assert env.get("prof", "admin").status_code == 403
    assert env.get("prof", "users/thea").status_code == 403
    r = env.get("prof", f"users/stu1?{MARCH}")
    assert r.status_code == 200 and rows_of(r.text) == ["pg-d", "pg-a"]
    # the REST API agrees: an instructor's group, not others
    token = env.browsers["prof"]
    assert token.get(env.url + "api/v1/usage?group=cs231n", timeout=10).status_code == 200
    assert token.get(env.url + "api/v1/usage?group=thesis", timeout=10).status_code == 403
    assert token.get(env.url + "api/v1/usage?all=true", timeout=10).status_code == 403
    assert token.get(env.url + "api/v1/culling?group=cs231n", timeout=10).status_code == 200
    assert token.get(env.url + "api/v1/culling", timeout=10).status_code == 403
    # idle time culled: pg-b was culled (gpu_idle)
    culled = list(csv.DictReader(io.StringIO(env.get("prof", f"groups/cs231n?{MARCH}&format=csv&table=culling").text)))
    assert {r["name"]: r["sessions"] for r in culled} == {
        "gpu_idle": "1",
        "inactive": "0",
        "max_age": "0",
        "busy_gpu_idle": "0",
    }


@pytest.mark.hub
def test_csv_exports_equal_the_ledger_rows(env):
    r = env.get("admin", f"admin?{MARCH}&format=csv&table=sessions")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    records = {rec.id: rec for rec in env.ledger.sessions(since=datetime(2025, 3, 1, tzinfo=SHANGHAI))}
    records = {k: v for k, v in records.items() if k.startswith("pg-")}
    assert sorted(row["id"] for row in rows if row["id"].startswith("pg-")) == sorted(records)
    for row in rows:
        rec = records[row["id"]]
        assert row["user"] == rec.user and row["profile"] == rec.profile and row["stop_reason"] == rec.stop_reason
        assert int(row["minutes_billed"]) == rec.minutes
        assert Decimal(row["cost"]) * 1_000_000 == rec.cost_micros
    # the page's CSV is the API's
    api = env.browsers["admin"].get(env.url + "api/v1/usage?all=true&since=2025-03-01&until=2025-03-31&format=csv")
    assert api.text == r.text
    # every other table exports too, and sums agree with the ledger
    groups_csv = env.get("admin", f"admin?{MARCH}&format=csv&table=groups").text
    groups = {row["name"]: row for row in csv.DictReader(io.StringIO(groups_csv))}
    assert Decimal(groups["cs231n"]["spend"]) == Decimal("0.10") + Decimal("0.25") + Decimal("0.05")
    assert Decimal(groups["thesis"]["spend"]) == Decimal("2.50")
    for table in ("users", "profiles", "daily", "utilization", "culling", "budgets", "pricing"):
        r = env.get("admin", f"admin?{MARCH}&format=csv&table={table}")
        assert r.status_code == 200 and r.text.count("\r\n") >= 1, table
    daily = list(csv.DictReader(io.StringIO(env.get("admin", f"admin?{MARCH}&format=csv&table=daily").text)))
    assert len(daily) == 31 and sum(Decimal(d["spend"]) for d in daily) == Decimal("2.90")
    # a student's own export has exactly their rows
    own = list(csv.DictReader(io.StringIO(env.get("stu1", f"?{MARCH}&format=csv&table=sessions").text)))
    assert [row["id"] for row in own] == ["pg-a", "pg-d"]


@pytest.mark.hub
def test_budget_form_is_validated_xsrf_protected_and_refuses_the_spawn(env):
    before = env.budgets()
    good = {"scope": "group", "subject": "cs231n", "limit": "0.40", "unit": "money", "period": "month"}
    # without the page's XSRF token the cookie does not authenticate the POST
    r = env.post("admin", "admin/budgets", good, xsrf=False)
    assert r.status_code == 403 and "reload the page" in r.text
    # a student may not, even with a token from their own page
    stu_page = env.get("stu1", "")
    assert "budget-form" not in stu_page.text
    for data, message in [
        ({**good, "limit": "-5"}, "must not be negative"),
        ({**good, "limit": "abc"}, "decimal number"),
        ({**good, "limit": ""}, "limit is required"),
        ({**good, "period": "year"}, "period must be one of"),
        ({**good, "period": "term"}, "needs both term_start and term_end"),
        ({**good, "subject": "a/b"}, "contains '/'"),
        ({**good, "scope": "team"}, "'user' or a 'group'"),
    ]:
        r = env.post("admin", "admin/budgets", data)
        assert r.status_code == 400, (data, r.status_code)
        assert message in r.text.replace("&#39;", "'"), (message, re.findall(r'id="budget-error"[^<]*', r.text))
        assert env.budgets() == before
    r = env.post("admin", "admin/budgets", good)
    assert r.status_code == 303 and r.headers["Location"].endswith("admin?saved=budget#budgets")
    assert Decimal(env.ledger.get_budget("group", "cs231n").limit) == Decimal("0.40")
    # the student sees the group's budget as their balance
    assert 'data-subject="cs231n"' in env.get("stu1", "").text
    # ¥0.40 covers 8 minutes of T4, less than the 10 a spawn needs: refused at spawn
    r = env.hub.start_server("stu1", {"profile": "t4"})
    assert r.status_code == 403 and "Budget too low" in r.json()["message"], r.text
    r = env.post("admin", "admin/budgets", {**good, "action": "delete"})
    assert r.status_code == 303 and env.ledger.get_budget("group", "cs231n") is None
    assert env.post("admin", "admin/budgets", {**good, "action": "delete"}).status_code == 400


@pytest.mark.hub
def test_price_and_access_edits_reach_the_pricing_api_and_the_spawn_form(env):
    r = env.post("admin", "admin/profiles/a100", {"price_per_gpu_hour": "0.0000001"})
    assert r.status_code == 400 and "not a whole number" in r.text and not load_overrides(env.ledger)
    assert env.post("admin", "admin/profiles/nope", {"price_per_gpu_hour": "1"}).status_code == 404
    r = env.post(
        "admin", "admin/profiles/a100", {"price_per_gpu_hour": "30", "restrict": "groups", "allowed_groups": "thesis"}
    )
    assert r.status_code == 303, r.text[:300]
    pricing = {p["slug"]: p for p in env.browsers["admin"].get(env.url + "api/v1/pricing").json()["profiles"]}
    assert pricing["a100"]["rate_per_minute"] == "0.5" and pricing["a100"]["allowed_groups"] == ["thesis"]
    stu_pricing = env.browsers["stu1"].get(env.url + "api/v1/pricing").json()["profiles"]
    assert "a100" not in {p["slug"] for p in stu_pricing}
    # the spawner reads the edit: stu1's spawn form has no A100 any more, thea's shows the new rate
    assert 'data-profile="a100"' not in env.hub.login("stu1").get(f"{env.hub.url}/hub/spawn", timeout=30).text
    thea_form = env.hub.login("thea").get(f"{env.hub.url}/hub/spawn", timeout=30).text
    assert "¥0.50/min" in thea_form, re.findall(r"jupyterhub-gpu-summary[^<]*<", thea_form)
    r = env.post("admin", "admin/profiles/a100", {"action": "reset"})
    assert r.status_code == 303 and not load_overrides(env.ledger)
    # saving the configured values (empty prices, "as configured") keeps no edit
    r = env.post("admin", "admin/profiles/t4", {"price_per_gpu_hour": "", "restrict": "config"})
    assert r.status_code == 303 and not load_overrides(env.ledger)
    assert 'data-profile="a100"' in env.hub.login("stu1").get(f"{env.hub.url}/hub/spawn", timeout=30).text


def xsrf_of(page: requests.Response) -> str:
    return re.search(r'name="_xsrf" value="([^"]+)"', page.text).group(1)


@pytest.mark.hub
def test_schedule_forms_book_cancel_and_set_shares_through_the_hubs_login(env):
    """The forms of docs/scheduling.md through real logins: XSRF, the API's rules, the API's answers."""
    prof, admin = env.browsers["prof"], env.browsers["admin"]
    group_page = env.get("prof", "groups/cs231n")
    assert group_page.status_code == 200 and 'id="reservation-form"' in group_page.text
    form = {"gpu_model": "T4", "count": "3", "start": "2030-01-08T14:00", "end": "2030-01-08T16:00", "note": "hub"}
    url = env.url + "groups/cs231n/reservations"
    # without the page's XSRF token the login does not count: refused, nothing stored
    r = prof.post(url, data=form, timeout=30, allow_redirects=False)
    assert r.status_code == 403 and "reload the page" in r.text
    assert prof.get(env.url + "api/v1/reservations", timeout=10).json()["reservations"] == []
    r = prof.post(url, data={**form, "_xsrf": xsrf_of(group_page)}, timeout=30, allow_redirects=False)
    assert r.status_code == 303, env.hub.log_text()[-5000:]
    assert r.headers["Location"].endswith("groups/cs231n?saved=reservation#reservations")
    (made,) = prof.get(env.url + "api/v1/reservations", timeout=10).json()["reservations"]
    assert (made["start"], made["created_by"], made["note"]) == ("2030-01-08T14:00:00+08:00", "prof", "hub")
    # the same group's booking over its own: the API's 409, on the page, nothing stored
    r = prof.post(url, data={**form, "count": "1", "_xsrf": xsrf_of(group_page)}, timeout=30, allow_redirects=False)
    assert r.status_code == 409 and "overlaps cs231n's reservation of 3 T4s" in html.unescape(r.text)
    assert len(prof.get(env.url + "api/v1/reservations", timeout=10).json()["reservations"]) == 1
    # another group's form: 403 for the instructor of cs231n
    r = prof.post(env.url + "groups/thesis/reservations", data={**form, "_xsrf": xsrf_of(group_page)}, timeout=30)
    assert r.status_code == 403
    # the admin page lists it with a cancel button; the admin sets a share there
    page = env.get("admin", "admin")
    assert f'data-reservation="{made["id"]}"' in page.text and 'id="share-form"' in page.text
    r = admin.post(
        env.url + "admin/shares",
        data={"group": "thesis", "gpu_model": "A100", "share": "2", "_xsrf": xsrf_of(page)},
        timeout=30,
        allow_redirects=False,
    )
    assert r.status_code == 303, r.text[:300]
    shares = admin.get(env.url + "api/v1/shares", timeout=10).json()["shares"]
    assert [(s["group"], s["gpu_model"], s["share"]) for s in shares] == [("thesis", "A100", 2)]
    r = admin.post(
        env.url + "admin/shares",
        data={"group": "thesis", "gpu_model": "A100", "action": "clear", "_xsrf": xsrf_of(page)},
        timeout=30,
        allow_redirects=False,
    )
    assert r.status_code == 303 and admin.get(env.url + "api/v1/shares", timeout=10).json()["shares"] == []
    # the instructor cancels the booking from the group page
    r = prof.post(
        url,
        data={"action": "cancel", "id": made["id"], "_xsrf": xsrf_of(group_page)},
        timeout=30,
        allow_redirects=False,
    )
    assert r.status_code == 303 and prof.get(env.url + "api/v1/reservations", timeout=10).json()["reservations"] == []
    # a student's own page has their (empty) queue
    assert "Nothing is waiting." in env.get("stu1", "").text


@pytest.mark.hub
def test_pages_speak_chinese_from_the_browser_or_the_switch(env):
    browser = env.browsers["admin"]
    r = browser.get(env.url + f"admin?{MARCH}", headers={"Accept-Language": "zh-CN,zh;q=0.9"}, timeout=30)
    assert "按组花费" in r.text and '<html lang="zh-CN">' in r.text and "Spend by group" not in r.text
    r = browser.get(env.url + f"admin?{MARCH}&lang=en", headers={"Accept-Language": "zh-CN"}, timeout=30)
    assert "Spend by group" in r.text
    r = browser.get(env.url + "admin", headers={"Accept-Language": "zh-CN"}, timeout=30)  # the cookie stays
    assert "Spend by group" in r.text
    browser.get(env.url + "?lang=zh-CN", timeout=30)
    assert "我的用量" in browser.get(env.url, timeout=30).text
    # the switch's cookie is at the hub's base URL: the hub's spawn form follows the same choice
    assert {c.path for c in browser.cookies if c.name == i18n.COOKIE} == {"/"}
    form = browser.get(f"{env.hub.url}/hub/spawn", headers={"Accept-Language": "en"}, timeout=30).content.decode()
    assert "按开始的分钟计费" in form and "Billing is per started minute" not in form
    browser.get(env.url + "?lang=en", timeout=30)
    # the chart library is served locally
    r = requests.get(env.url + "static/chart.umd.min.js", timeout=10)
    assert r.status_code == 200 and "Chart.js v4" in r.text[:200]
