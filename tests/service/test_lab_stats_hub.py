"""The server extension inside real single-user servers, talking to the real gpu service."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest
import requests

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.queries.samples import session_minutes
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.hub

EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.Spawner.args = c.Spawner.args + ["--GPUStats.push_interval=1", "--GPUStats.interval=0.5"]
"""


def service_port(config: str) -> int:
    return int(config.split('"url": "http://127.0.0.1:')[1].split('"')[0])


def user_token(hub, name: str) -> str:
    r = hub.api("POST", f"/users/{name}/tokens", json={"note": "test"})
    assert r.status_code == 201, r.text
    return r.json()["token"]


def test_lab_stats_show_cost_budget_and_notices_and_stop_ends_billing(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("stu1")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("0.06")), datetime.now(timezone.utc))
    hub.start_server("stu1", {"profile": "t4"})
    hub.wait_ready("stu1")
    token = user_token(hub, "stu1")
    url = f"{hub.url}/user/stu1/gpu/api/v1"
    headers = {"Authorization": f"token {token}"}

    def stats():
        r = requests.get(f"{url}/stats", headers=headers, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    first = stats()
    assert first["simulated"] is True and first["gpus"][0]["name"] == "Simulated T4"
    assert first["session"]["profile"] == "t4" and first["session"]["rate_per_minute"] == "0.05"
    assert first["session"]["minutes_billed"] == 1 and first["session"]["cost"] == "0.05"

    # the server's samples reach the service, and the service's budget and notices reach the Lab
    session_id = first["session"]["id"]
    wait_for(lambda: session_minutes(ledger, session_id), 30, what="samples in the service")
    s = wait_for(lambda: (s := stats())["notices"] and s["service_available"] and s, 30, what="a budget notice")
    assert s["session"]["budget_unit"] == "money"
    assert s["session"]["budget_remaining"] == "0.01" and s["session"]["budget_minutes_left"] == 0
    assert (s["notices"][0]["kind"] == "budget" and "83%" in s["notices"][0]["message"]) or s["notices"]

    # "Stop my server (stop billing)"
    r = requests.post(f"{url}/stop", headers=headers, timeout=10)
    assert r.status_code == 202, r.text
    hub.wait_stopped("stu1")
    record = ledger.get_session(session_id)
    assert record.stopped is not None and record.stop_reason == "stopped" and record.minutes == 1


def test_a_server_cannot_report_another_users_session(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("stu1", "stu2")
    hub.start_server("stu1", {"profile": "cpu"})
    hub.wait_ready("stu1")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    victim = ledger.open_sessions()[0].id
    token = user_token(hub, "stu2")
    body = {"session_id": victim, "sampled_until": "2026-11-29T20:00:00Z", "samples": 1, "utilization_avg": 99}
    r = requests.post(
        f"{hub.url}/services/gpu/api/v1/samples", json=body, headers={"Authorization": f"token {token}"}, timeout=10
    )
    assert r.status_code == 403
    bad = requests.post(
        f"{hub.url}/services/gpu/api/v1/samples",
        json={**body, "utilization_avg": 101},
        headers={"Authorization": f"token {token}"},
        timeout=10,
    )
    assert bad.status_code == 400 and "utilization_avg" in bad.json()["message"]
    assert session_minutes(ledger, victim) == [] or all(m.utilization_avg < 99 for m in session_minutes(ledger, victim))
