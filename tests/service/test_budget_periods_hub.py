"""One cross-reset budget scenario through every reader, with a real hub, the real service and real tokens.

The ledger holds a session that ran across the start of the current month (in
the service's time zone, Asia/Shanghai) and one still running since before it.
``GET me``, ``GET budgets``, ``GET budgets/user/NAME``, the admin page's CSV,
the CLI and ``/metrics`` must show the same use of each budget, the spawn
check must refuse by it, and the service's own tick must warn by it.
"""

from __future__ import annotations

import csv
import io
import os
import re
import secrets
import signal
import subprocess
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.billing import BudgetRule, period_window
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import SessionStart
from tests.conftest import BIN, Hub, wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.hub

UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")
PROMETHEUS_TOKEN = secrets.token_hex(16)
EXTRA_CONFIG = f"""
c.JupyterHub.services.append({{"name": "prometheus", "api_token": {PROMETHEUS_TOKEN!r}}})
c.JupyterHub.load_roles.append({{
    "name": "metrics-scraper",
    "services": ["prometheus"],
    "scopes": ["custom:gpu-metrics:read", "access:services!service=gpu"],
}})
# a refusal is the spawn request's answer only within slow_spawn_timeout (0.5 s in the tests' hubs: on a loaded
# machine the budget check takes longer, JupyterHub answers 202 and the spawn fails later)
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 15}}
"""


def user_token(hub: Hub, name: str) -> str:
    r = requests.post(
        f"{hub.api_url}/users/{name}/tokens",
        json={"note": "test", "auth": {"username": name, "password": "pw"}},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return r.json()["token"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("periods")
    db_url = f"sqlite:///{root / 'ledger.sqlite'}"
    hub = Hub(root / "hub", gpu_hub_config(root, grace=2) + EXTRA_CONFIG)
    hub.start()
    try:
        hub.create_users("admin", "stu1", "stu2", "thea")
        tokens = {name: user_token(hub, name) for name in ("admin", "stu1", "stu2")}
        tokens["prometheus"] = PROMETHEUS_TOKEN
        wait_for(
            lambda: requests.get(f"{hub.url}/services/gpu/api/v1/openapi.yaml", timeout=5).status_code == 200,
            60,
            what="the gpu service",
        )
        yield hub, Ledger(db_url), tokens
    finally:
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


def call(hub, tokens, who, path):
    url = f"{hub.url}/services/gpu/{path}"
    return requests.get(url, headers={"Authorization": f"token {tokens[who]}"}, timeout=30, allow_redirects=False)


def test_every_reader_shows_the_same_use_across_a_reset(env):
    hub, ledger, tokens = env
    now = datetime.now(UTC)
    month_start, month_end = period_window("month", now, SHANGHAI)
    if now - month_start < timedelta(minutes=110) or month_end - now < timedelta(minutes=5):
        pytest.skip("too close to a month boundary for a scenario around it")
    ledger.set_budget(BudgetRule("user", "stu1", "month", "money", Decimal(5)), now)
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal(100_000)), now)
    ledger.set_budget(BudgetRule("user", "stu2", "month", "money", Decimal(1)), now)
    # 3 minutes before the reset and 100 after: ¥0.15 last month, ¥5.00 (used up) this month
    started = month_start - timedelta(minutes=3)
    ledger.record_start(
        SessionStart("cross", "stu1", "", ("cs231n",), "t4", ("GPU-sim-t4-0",), 50_000, "CNY", started, True)
    )
    ledger.record_stop("cross", started + timedelta(minutes=103), "stopped")
    # still running since before the reset (no server behind it): the service's tick must count it now
    ledger.record_start(
        SessionStart("run", "stu2", "x", ("cs231n",), "t4", ("GPU-sim-t4-1",), 50_000, "CNY", started, True)
    )

    me = call(hub, tokens, "stu1", "api/v1/me").json()
    mine = {(b["scope"], b["subject"]): b for b in me["budgets"]}
    assert mine[("user", "stu1")]["spent"] == "5" and mine[("user", "stu1")]["state"] == "current"

    listed = {(b["scope"], b["subject"]): b for b in call(hub, tokens, "admin", "api/v1/budgets").json()["budgets"]}
    one = call(hub, tokens, "admin", "api/v1/budgets/user/stu1").json()
    assert listed[("user", "stu1")]["spent"] == one["spent"] == "5"

    page = call(hub, tokens, "admin", "admin?format=csv&table=budgets")
    assert page.status_code == 200, page.text[:300]
    rows = {(r["scope"], r["subject"]): r for r in csv.DictReader(io.StringIO(page.text))}
    assert rows[("user", "stu1")]["spent"] == "5" and rows[("user", "stu1")]["state"] == "current"

    r = call(hub, tokens, "prometheus", "metrics")
    samples = {
        (s.name, *sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }
    assert samples[("jupyterhub_gpu_budget_used", ("scope", "user"), ("subject", "stu1"), ("unit", "money"))] == 5

    environ = dict(os.environ, JUPYTERHUB_GPU_URL=f"{hub.url}/services/gpu/", JUPYTERHUB_API_TOKEN=tokens["admin"])
    p = subprocess.run(
        [str(BIN / "jupyterhub-gpu"), "budget", "show", "--user", "stu1"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "spent CN¥5.00, remaining CN¥0.00 (100.0% used" in p.stdout, p.stdout

    # the spawn check refuses by the same numbers, naming this month and a reset still to come
    r = hub.start_server("stu1", {"profile": "t4"})
    assert r.status_code >= 400, r.text
    month = month_start.astimezone(SHANGHAI).strftime("%B")
    reset = month_end.astimezone(SHANGHAI)
    message = r.json()["message"]
    assert f"CN¥5.00 of CN¥5.00 (your budget) spent in {month}; resets on {reset.day} {reset.strftime('%B')}" in message
    assert ledger.open_sessions_of("stu1") == []

    # the service's tick counts stu2's running session's minutes since the reset: the 100% notice comes
    def told():
        notices = call(hub, tokens, "stu2", "api/v1/me").json()["notices"]
        return [n for n in notices if n["kind"] == "budget" and "Budget used up" in n["message"]]

    wait_for(lambda: told(), 30, what="the 100% notice of a session running across the reset")
    group = next(b for b in call(hub, tokens, "stu2", "api/v1/me").json()["budgets"] if b["subject"] == "cs231n")
    assert Decimal(group["spent"]) > 5  # stu1's ¥5 and stu2's minutes since the reset, from one pool
    assert re.search(r"\d{4}-\d{2}-\d{2} to \d{4}-\d{2}-\d{2}", told()[0]["message"])


def test_a_real_spawn_records_its_pool_and_a_forged_pool_starts_nothing(env):
    hub, ledger, _ = env
    ledger.set_budget(BudgetRule("group", "thesis", "month", "money", Decimal(100)), datetime.now(UTC))
    # thea is in thesis only: cs231n cannot pay for her, whatever she sends
    r = hub.start_server("thea", {"profile": "cpu", "pool": "cs231n"})
    assert r.status_code >= 400 and "The group 'cs231n' cannot pay for cpu" in r.json()["message"], r.text
    assert ledger.open_sessions_of("thea") == [] and hub.server("thea") is None
    r = hub.start_server("thea", {"profile": "cpu"})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("thea")
    (session,) = ledger.open_sessions_of("thea")
    assert session.pool == "thesis" and hub.gpu_state("thea")["pool"] == "thesis"
    hub.stop_server("thea")
    hub.wait_stopped("thea")
    assert ledger.get_session(session.id).pool == "thesis"
