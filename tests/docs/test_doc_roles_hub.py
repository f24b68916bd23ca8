"""A real JupyterHub with the documented registration and roles lets students into the gpu service; without
the documented ``user`` role it does not (JupyterHub 6's default ``user`` role is ``self`` alone).

The hub's config is the docs' block itself (docs/service-api.md, "Roles to grant"), with only the service's
port and config file moved into the test's folder.
"""

from __future__ import annotations

import pytest
import requests

from tests.conftest import Hub, free_port, wait_for
from tests.docs.docs_roles import documented_block

pytestmark = pytest.mark.hub

SPAWNER = """
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 1, "memory_gb": 16}]
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.budget_timezone = "Asia/Shanghai"
c.GPULocalSpawner.profiles = [{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00"}]
c.GPULocalSpawner.ledger_db_url = %(db)r
"""

# the documented block assigns services and load_roles: the test harness's own admin service goes back in
MOVE_INTO_THE_TEST = """
gpu = next(s for s in c.JupyterHub.services if s["name"] == "gpu")
gpu["url"] = "http://127.0.0.1:%(port)d"
gpu["command"] = [a if not a.startswith("--config=") else "--config=%(service_config)s" for a in gpu["command"]]
c.JupyterHub.services.append({"name": "tester", "api_token": %(token)r})
c.JupyterHub.load_roles.append({"name": "tester", "scopes": %(admin_scopes)r, "services": ["tester"]})
"""

WITHOUT_THE_USER_ROLE = """
c.JupyterHub.load_roles = [r for r in c.JupyterHub.load_roles if r["name"] != "user"]
"""

WITH_EXTRA_USER_SCOPES = WITHOUT_THE_USER_ROLE + 'c.JupyterHub.extra_user_scopes = ["access:services!service=gpu"]\n'

WITHOUT_START_SERVERS = """
for role in c.JupyterHub.load_roles:
    if role["name"] == "gpu-service":
        role["scopes"] = [s for s in role["scopes"] if s != "start:servers"]
"""

WITHOUT_NAMED_SERVERS = "c.JupyterHub.allow_named_servers = False\n"

JOB = {"notebook": "work/train.ipynb", "profile": "t4", "time_limit_minutes": 5}


def hub_config(tmp_path, token: str, admin_scopes: list[str], variant: str) -> str:
    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    service_config = tmp_path / "gpu_service_config.py"
    service_config.write_text(
        f"c.GPUService.db_url = {db!r}\n"
        'c.GPUService.currency = "CNY"\n'
        'c.GPUService.timezone = "Asia/Shanghai"\n'
        "c.GPUService.tick_interval = 5\n"
    )
    values = {"db": db, "port": free_port(), "service_config": str(service_config), "token": token}
    values["admin_scopes"] = admin_scopes
    return "\n".join([SPAWNER % values, documented_block().body, MOVE_INTO_THE_TEST % values, variant])


def start_hub(make_hub, tmp_path, variant: str):
    hub = make_hub("", start=False)
    hub.write_config(hub_config(tmp_path, hub.token, Hub.ADMIN_SCOPES, variant))
    hub.start()
    wait_for(
        lambda: requests.get(f"{hub.url}/services/gpu/api/v1/openapi.yaml", timeout=5).status_code == 200,
        60,
        what="the gpu service",
    )
    hub.create_users("stu1")
    return hub


def student_token(hub) -> str:
    return hub.api("POST", "/users/stu1/tokens", json={"note": "own token"}).json()["token"]


def open_the_usage_page(hub, user: str) -> requests.Response:
    browser = hub.login(user)
    return browser.get(f"{hub.url}/services/gpu/", timeout=30)


@pytest.mark.parametrize(
    ("variant", "allowed"),
    [("", True), (WITHOUT_THE_USER_ROLE, False), (WITH_EXTRA_USER_SCOPES, True)],
    ids=["as-documented", "without-the-user-role", "extra_user_scopes-instead"],
)
def test_students_reach_the_service_with_the_documented_roles_only(make_hub, tmp_path, variant, allowed):
    hub = start_hub(make_hub, tmp_path, variant)

    page = open_the_usage_page(hub, "stu1")  # the browser's OAuth flow into the service
    token = student_token(hub)
    me = requests.get(f"{hub.url}/services/gpu/api/v1/me", headers={"Authorization": f"token {token}"}, timeout=30)
    if allowed:
        assert page.status_code == 200, page.text[:500]
        assert any("/hub/api/oauth2/authorize" in h.headers.get("Location", "") for h in page.history)
        assert me.status_code == 200 and me.json()["user"] == "stu1", me.text
    else:
        assert page.status_code == 403, page.text[:500]
        assert "You do not have permission to access JupyterHub service gpu" in page.text
        assert me.status_code == 403 and "access:services!service=gpu" in me.json()["message"], me.text


@pytest.mark.parametrize(
    ("variant", "status", "says"),
    [(WITHOUT_START_SERVERS, 502, "start:servers"), (WITHOUT_NAMED_SERVERS, 400, "Named servers are not enabled")],
    ids=["without-start:servers", "without-named-servers"],
)
def test_jobs_fail_at_once_without_start_servers_or_named_servers(make_hub, tmp_path, variant, status, says):
    """What the roles page says start:servers and allow_named_servers are for. (With both, as documented, jobs
    run: tests/service/test_jobs_hub.py, on a hub with these roles.)"""
    hub = start_hub(make_hub, tmp_path, variant)
    headers = {"Authorization": f"token {student_token(hub)}"}
    r = requests.post(f"{hub.url}/services/gpu/api/v1/jobs", json=JOB, headers=headers, timeout=60)
    assert r.status_code == status and says in r.json()["message"], r.text
    (job,) = requests.get(f"{hub.url}/services/gpu/api/v1/jobs", headers=headers, timeout=30).json()["jobs"]
    assert job["state"] == "failed" and says in job["error"], job
    assert hub.server("stu1", job["server_name"]) is None
