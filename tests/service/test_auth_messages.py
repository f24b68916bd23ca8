"""What a refused caller of the gpu service is told, with a real hub and service: the cause and the fix."""

from __future__ import annotations

import os
import subprocess

import pytest
import requests

from tests.conftest import BIN, wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.hub


def test_a_refusal_says_whether_the_token_or_the_oauth_client_lacks_the_scope(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path)
    # the admin holds the custom scopes (role gpu-admins), but the service's OAuth client may pass none on
    allowed = '"oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES),'
    assert allowed in config
    hub = make_hub(config.replace(allowed, '"oauth_client_allowed_scopes": [],'))
    hub.create_users("admin", "stu1")
    service = f"{hub.url}/services/gpu/"
    wait_for(lambda: requests.get(service + "api/v1/openapi.yaml", timeout=5).status_code == 200, 60, what="service")

    # the admin's browser: the scope is held, but the login to the service does not carry it
    browser = hub.login("admin")
    r = browser.get(service + "api/v1/budgets", timeout=30)
    assert r.status_code == 403, r.text[:300]
    message = r.json()["message"]
    assert "This needs the custom:gpu-usage:read or custom:gpu-budgets:write scope, and your login" in message
    assert "held but not granted to the service's OAuth client" in message
    assert "oauth_client_allowed_scopes" in message and "docs/service.md" in message
    # the page says the same in the reader's language
    r = browser.get(service + "admin", headers={"Accept-Language": "zh-CN"}, timeout=30)
    assert r.status_code == 403
    assert "它没有授予该服务的 OAuth 客户端" in r.text and "oauth_client_allowed_scopes" in r.text

    # the admin's own token carries the scope (a token is not limited by the OAuth client)
    token = hub.api("POST", "/users/admin/tokens", json={"note": "t"}).json()["token"]
    r = requests.get(service + "api/v1/budgets", headers={"Authorization": f"token {token}"}, timeout=30)
    assert r.status_code == 200, r.text[:300]

    # a student's token: the token does not carry it
    token = hub.api("POST", "/users/stu1/tokens", json={"note": "t"}).json()["token"]
    r = requests.get(service + "api/v1/budgets", headers={"Authorization": f"token {token}"}, timeout=30)
    assert r.status_code == 403
    assert "the token sent does not carry it" in r.json()["message"]

    # a token the hub does not know
    r = requests.get(service + "api/v1/me", headers={"Authorization": "token not-a-real-token"}, timeout=30)
    assert r.status_code == 403
    assert r.json()["message"].startswith("The token was refused: JupyterHub does not know it")
    assert "/hub/token" in r.json()["message"]
    # no token at all: as before
    r = requests.get(service + "api/v1/me", timeout=30)
    assert r.status_code == 403 and "Authentication required" in r.json()["message"]


def test_the_cli_names_the_labs_time_zone_the_right_url_and_a_refused_token(make_hub, tmp_path):
    hub = make_hub(gpu_hub_config(tmp_path))
    hub.create_users("admin")
    service = f"{hub.url}/services/gpu/"
    wait_for(lambda: requests.get(service + "api/v1/openapi.yaml", timeout=5).status_code == 200, 60, what="service")
    token = hub.api("POST", "/users/admin/tokens", json={"note": "t"}).json()["token"]
    auth = {"Authorization": f"token {token}"}
    # the API says the lab's time zone where it gives times
    assert requests.get(service + "api/v1/usage", headers=auth, timeout=30).json()["timezone"] == "Asia/Shanghai"

    def cli(*argv, url=service, token=token):
        environ = dict(os.environ, JUPYTERHUB_GPU_URL=url, JUPYTERHUB_API_TOKEN=token)
        return subprocess.run([str(BIN / "jupyterhub-gpu"), *argv], env=environ, capture_output=True, text=True)

    assert cli("budget", "set", "--group", "cs231n", "--limit", "50", "--period", "month").returncode == 0
    p = cli("budget", "list")
    assert p.returncode == 0, p.stderr
    assert "PERIOD ENDS (Asia/Shanghai)" in p.stdout
    assert p.stdout.rstrip().endswith(" 00:00")  # months end at the lab's midnight
    p = cli("budget", "show", "--group", "cs231n")
    assert "period ends" in p.stdout and " 00:00 Asia/Shanghai)" in p.stdout

    p = cli("budget", "list", url=f"{hub.url}/")
    assert p.returncode == 1
    assert f"this is not the gpu service: use {hub.url}/services/gpu/" in p.stderr
    p = cli("budget", "list", token="not-a-token")
    assert p.returncode == 1 and "the token was refused (HTTP 403)" in p.stderr
