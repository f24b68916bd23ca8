"""The service's hub client against a real hub: each refusal names the missing scope and where to add it."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from jupyterhub_gpu.service.hubapi import HubAPIError, HubClient
from tests.conftest import free_port, wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.hub

TOKENS = {name: secrets.token_hex(16) for name in ("bare", "lister", "full")}

CONFIG = f"""
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.profiles = [{{"slug": "cpu", "gpu_count": 0, "price_per_hour": "0.60"}}]
c.GPULocalSpawner.home_dir_template = "%(home)s/{{username}}"
c.JupyterHub.load_groups = {{"cs231n": {{"users": ["stu1"]}}}}
for name, token in {TOKENS!r}.items():
    c.JupyterHub.services.append({{"name": name, "api_token": token}})
c.JupyterHub.load_roles.append({{"name": "lister", "services": ["lister"], "scopes": ["list:users"]}})
c.JupyterHub.load_roles.append({{
    "name": "full",
    "services": ["full"],
    "scopes": ["list:users", "read:users", "read:groups", "read:servers", "delete:servers"],
}})
"""


def refusal(coroutine) -> str:
    with pytest.raises(HubAPIError) as caught:
        asyncio.run(coroutine)
    return str(caught.value)


def test_each_hub_refusal_names_the_scope_the_role_lacks(make_hub, tmp_path):
    hub = make_hub(CONFIG % {"home": tmp_path / "homes"})
    hub.create_users("stu1")
    assert hub.start_server("stu1", {"profile": "cpu"}).status_code in (201, 202)
    hub.wait_ready("stu1")
    client = {name: HubClient(hub.api_url, token) for name, token in TOKENS.items()}

    message = refusal(client["bare"].active_servers())
    assert "GET /users: HTTP 403" in message
    assert "the gpu service's role lacks the scope list:users, needed to list the running servers" in message
    assert "c.JupyterHub.load_roles" in message and "docs/service.md" in message

    # list:users alone: the hub lists the active users without their servers; every session would look stopped
    message = refusal(client["lister"].active_servers())
    assert "lacks the scope read:servers" in message

    message = refusal(client["lister"].user("stu1"))
    assert "GET /users/stu1: the hub answers without the user's groups" in message and "read:users" in message
    message = refusal(client["lister"].group("cs231n"))
    assert "GET /groups/cs231n: HTTP 403" in message and "read:groups" in message
    message = refusal(client["lister"].stop_server("stu1"))
    assert "DELETE /users/stu1/server: HTTP 403" in message and "delete:servers" in message

    # a job's server: the service may not start servers; the student is not told it is their fault
    with pytest.raises(HubAPIError) as caught:
        asyncio.run(client["full"].start_server("stu1", "job-0123456789ab", {"profile": "cpu"}))
    assert "lacks the scope" in str(caught.value) and "start:servers" in str(caught.value)
    status, text = caught.value.refusal()
    assert status == 502 and "start:servers" in text

    # what is allowed works, and what does not exist is None
    servers = asyncio.run(client["full"].active_servers())
    assert [(s["user"], s["name"], s["groups"]) for s in servers] == [("stu1", "", ["cs231n"])]
    assert asyncio.run(client["full"].user("nobody")) is None
    assert asyncio.run(client["full"].group("nogroup")) is None

    message = refusal(HubClient(hub.api_url, "not-a-token").active_servers())
    assert "HTTP 403" in message and "refused the gpu service's token" in message

    closed = f"http://127.0.0.1:{free_port()}/hub/api"
    message = refusal(HubClient(closed, "x", timeout=5).user("stu1"))
    assert f"the hub cannot be reached at {closed}" in message or f"did not answer at {closed}" in message


def test_the_running_service_logs_the_scope_its_role_lacks(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=1, reconcile=1)
    full = '"scopes": ["list:users", "read:users", "read:groups", "read:servers", "delete:servers", "start:servers"],'
    assert full in config
    # the gpu service's role without list:users (an admin's copy of an older example)
    hub = make_hub(config.replace(full, '"scopes": ["read:users", "read:groups", "read:servers", "delete:servers"],'))

    def refusal_line():
        return next((e for e in hub.log_text().splitlines() if "hub request failed during the tick" in e), None)

    line = wait_for(refusal_line, 60, what="the tick's refusal in the log")
    assert "(reconciliation): GET /users: HTTP 403" in line
    assert "the gpu service's role lacks the scope list:users, needed to list the running servers" in line
    assert "c.JupyterHub.load_roles" in line
    assert "hub unreachable" not in hub.log_text()
