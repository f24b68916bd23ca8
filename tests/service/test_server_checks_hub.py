"""A real hub, the gpu service and a running server: what only the server's own token may do, and a restart
checked before anything is stopped.

- The server's token: a student can make a token with the very scopes JupyterHub gives their server
  (``servers!server=USER/NAME``); it is not the server's token, and the service refuses it (403, saying why)
  for pushing samples and for a restart, while the token JupyterHub gave the server (read from the server
  process's environment) passes.
- A restart on the bigger profile that the spawn's budget check would refuse is refused before the server is
  stopped: the answer says why, the server runs on, its session stays open.
"""

from __future__ import annotations

import signal
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
import requests

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import Hub, wait_for
from tests.service.conftest import ServiceUsers, gpu_hub_config, service_port

pytestmark = pytest.mark.hub


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("server-checks")
    config = gpu_hub_config(root, tick=600, min_minutes=10)
    port = service_port(config)
    # the servers reach the service: their token gets its access scope
    config += f'\nc.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:{port}/services/gpu/"\n'
    hub = Hub(root / "hub", config)
    hub.start()
    try:
        hub.create_users("stu1")
        ledger = Ledger(f"sqlite:///{root / 'ledger.sqlite'}")
        # 1.00 a month: ten minutes of a T4 (0.50) fit, ten minutes of an A100 (2.50) do not
        ledger.set_budget(BudgetRule("user", "stu1", "month", "money", Decimal("1.00")), datetime.now(timezone.utc))
        r = hub.start_server("stu1", {"profile": "t4"})
        assert r.status_code in (201, 202), r.text
        hub.wait_ready("stu1")
        wait_for(
            lambda: requests.get(f"{hub.url}/services/gpu/api/v1/openapi.yaml", timeout=5).status_code == 200,
            60,
            what="the gpu service",
        )
        yield ServiceUsers(hub, ledger)
    finally:
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


def post(env, token: str, path: str, body) -> requests.Response:
    return requests.post(f"{env.url}api/v1/{path}", headers={"Authorization": f"token {token}"}, json=body, timeout=30)


def test_a_token_the_user_made_with_the_servers_scopes_is_not_the_servers_token(env):
    (session,) = env.ledger.sessions(user="stu1")
    assert session.server_token and session.server_token.startswith("a")  # the hub's id of the server's token
    minted = env.minted_server_token("stu1")
    own = env.running_server_token("stu1")
    assert own and own != minted
    sample = {"session_id": session.id, "sampled_until": isoformat(datetime.now(timezone.utc)), "samples": 1}
    r = post(env, minted, "samples", sample)
    assert r.status_code == 403, r.text
    assert "with the token JupyterHub gave it" in r.json()["message"]
    r = post(env, minted, "restart-bigger", {"session_id": session.id, "profile": "a100"})
    assert r.status_code == 403 and "with its own token" in r.json()["message"], r.text
    r = post(env, own, "samples", sample)
    assert r.status_code == 201, r.text


def test_a_restart_its_budget_cannot_pay_is_refused_and_the_server_runs_on(env):
    (session,) = env.ledger.sessions(user="stu1")
    r = post(env, env.server_token("stu1"), "restart-bigger", {"session_id": session.id, "profile": "a100"})
    assert r.status_code == 403, r.text
    message = r.json()["message"]
    assert message.startswith("The restart on a100 would be refused: Budget too low for 10 minutes of this profile")
    assert message.endswith("Your server keeps running.")
    time.sleep(2)  # a stop asked for would be under way by now
    assert env.hub.server("stu1")["ready"] and not env.hub.server("stu1").get("pending")
    (still,) = env.ledger.sessions(user="stu1")
    assert still.id == session.id and still.stopped is None
    # with room in the budget the same restart goes ahead
    env.ledger.set_budget(
        BudgetRule("user", "stu1", "month", "money", Decimal("10.00")), datetime.now(timezone.utc) + timedelta(0)
    )
    r = post(env, env.server_token("stu1"), "restart-bigger", {"session_id": session.id, "profile": "a100"})
    assert r.status_code == 202, r.text
    wait_for(
        lambda: [s for s in env.ledger.sessions(user="stu1") if s.profile == "a100" and s.stopped is None],
        120,
        what="stu1 restarted on the A100",
    )
