"""Every hub of a shared ledger on a real hub's usage pages, its REST reports, their CSV and the CLI.

One hub with its gpu service; its ledger also holds a session of each of two other hubs (``lab-docker``,
``dept-k8s``), written under their names as their spawners write them, the same user on both. The admin page
lists both with their hub and sums them by hub; ``hub=`` narrows the page, its CSV exports, ``GET usage`` and
``GET culling`` to one hub; a hub the ledger has not gets a 400 naming the hubs it has (on a page in the
reader's language), and the CLI's ``--hub`` passes it and prints that refusal. Two real hubs with their own
services on one ledger: tests/service/test_two_hubs*.py.
"""

from __future__ import annotations

import csv
import html
import io
import re
import signal
from datetime import datetime, timedelta, timezone

import pytest
import requests

from jupyterhub_gpu import cli
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import SessionStart
from tests.conftest import Hub, wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.hub

UTC = timezone.utc
STARTED = datetime(2025, 3, 3, 2, 0, tzinfo=UTC)
MARCH = "since=2025-03-01&until=2025-03-31"
ADMIN_TOKEN_SCOPES = ["custom:gpu-usage:read", "access:services!service=gpu"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-reports")
    db_url = f"sqlite:///{root / 'ledger.sqlite'}"
    hub = Hub(root / "hub", gpu_hub_config(root, db_url=db_url))
    hub.start()
    try:
        hub.create_users("admin", "ann")
        wait_for(
            lambda: requests.get(f"{hub.url}/services/gpu/api/v1/openapi.yaml", timeout=5).status_code == 200,
            60,
            what="the gpu service",
        )
        # each hub's spawner writes its sessions under its own name: the same user, one session on each hub
        for hub_name, sid, minutes in (("lab-docker", "on-docker", 2), ("dept-k8s", "on-k8s", 10)):
            ledger = Ledger(db_url, hub=hub_name)
            start = SessionStart(sid, "ann", "", ("cs231n",), "t4", ("GPU-sim-t4-0",), 50_000, "CNY", STARTED)
            ledger.record_start(start)
            ledger.record_stop(sid, STARTED + timedelta(minutes=minutes), "stopped")
            ledger.close()
        browser = hub.login("admin")
        assert browser.get(f"{hub.url}/services/gpu/", timeout=30).status_code == 200  # through OAuth
        r = hub.api("POST", "/users/admin/tokens", json={"note": "test", "scopes": ADMIN_TOKEN_SCOPES})
        assert r.status_code == 201, r.text
        yield hub, browser, r.json()["token"]
    finally:
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


def page(env, path: str, **kwargs) -> requests.Response:
    hub, browser, _token = env
    return browser.get(f"{hub.url}/services/gpu/{path}", timeout=30, **kwargs)


def api(env, path: str) -> requests.Response:
    hub, _browser, token = env
    return requests.get(
        f"{hub.url}/services/gpu/api/v1/{path}", headers={"Authorization": f"token {token}"}, timeout=30
    )


def hubs_of_rows(text: str) -> dict[str, str]:
    """``{session id: hub}`` of the page's sessions table (its ``data-hub`` and its Hub cell agree)."""
    found = {}
    row = r'<tr data-session="([^"]+)" data-user="[^"]*" data-hub="([^"]*)">\s*(?:<td>.*?</td>\s*)?'
    for sid, hub_attr, cell in re.findall(row + r'<td class="hub">([^<]*)</td>', text, flags=re.S):
        assert hub_attr == cell
        found[sid] = cell
    return found


def test_the_admin_page_lists_every_hub_and_sums_by_hub(env):
    r = page(env, f"admin?{MARCH}")
    assert r.status_code == 200, r.text[:500]
    assert hubs_of_rows(r.text) == {"on-docker": "lab-docker", "on-k8s": "dept-k8s"}
    assert 'id="hubs-table"' in r.text and 'id="hub" name="hub"' in r.text  # the sums and the filter
    assert '<tr data-name="dept-k8s">' in r.text and '<tr data-name="lab-docker">' in r.text
    one = page(env, f"admin?{MARCH}&hub=dept-k8s")
    assert one.status_code == 200
    assert hubs_of_rows(one.text) == {"on-k8s": "dept-k8s"}
    assert "¥0.50" in one.text  # dept-k8s's 10 minutes at 0.05; lab-docker's 0.10 is not counted
    # the page's CSV link keeps the hub
    assert "hub=dept-k8s&amp;format=csv&amp;table=sessions" in one.text


def test_the_csv_of_the_page_and_of_the_api_carry_every_hub(env):
    for text in (
        page(env, f"admin?{MARCH}&format=csv&table=sessions").text,
        api(env, f"usage?all=true&{MARCH}&format=csv").text,
    ):
        rows = list(csv.DictReader(io.StringIO(text)))
        assert {r["id"]: r["hub"] for r in rows} == {"on-docker": "lab-docker", "on-k8s": "dept-k8s"}
    rows = list(csv.DictReader(io.StringIO(page(env, f"admin?{MARCH}&format=csv&table=hubs").text)))
    assert {r["name"]: r["spend"] for r in rows} == {"dept-k8s": "0.5", "lab-docker": "0.1"}
    rows = list(csv.DictReader(io.StringIO(api(env, f"usage?all=true&{MARCH}&format=csv&hub=lab-docker").text)))
    assert [r["id"] for r in rows] == ["on-docker"]
    data = api(env, f"usage?all=true&{MARCH}&hub=dept-k8s").json()
    assert data["hub"] == "dept-k8s" and [s["hub"] for s in data["sessions"]] == ["dept-k8s"]
    assert data["totals"]["minutes_billed"] == 10
    assert api(env, "culling?hub=lab-docker").json()["hub"] == "lab-docker"


def test_a_bad_hub_filter_is_a_clear_400_on_pages_api_and_cli(env, monkeypatch, capsys):
    r = api(env, f"usage?all=true&{MARCH}&hub=dept-k8")
    assert r.status_code == 400
    message = r.json()["message"]
    assert "no hub named 'dept-k8'" in message and "'dept-k8s'" in message and "'lab-docker'" in message
    assert "hub must be 1 to 63 characters" in api(env, "usage?all=true&hub=Dept").json()["message"]
    assert api(env, "culling?hub=dept-k8").status_code == 400
    r = page(env, "admin?hub=dept-k8")
    assert r.status_code == 400 and "The ledger has no hub named dept-k8; its hubs:" in html.unescape(r.text)
    r = page(env, "admin?hub=dept-k8&lang=zh-CN")
    assert r.status_code == 400 and "账本中没有名为 dept-k8 的中心" in html.unescape(r.text)
    assert "on-k8s" not in r.text  # nothing shown for it
    # the CLI passes --hub and prints the service's refusal (exit 1)
    hub, _browser, token = env
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token)
    monkeypatch.setenv("JUPYTERHUB_GPU_URL", f"{hub.url}/services/gpu/")
    out = io.StringIO()
    assert cli.main(["usage", "--all", "--hub", "dept-k8", "--since", "2025-03-01"], out=out) == 1
    assert "no hub named 'dept-k8'" in capsys.readouterr().err
    out = io.StringIO()
    assert cli.main(["usage", "--all", "--since", "2025-03-01", "--until", "2025-03-31"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:2] == ["HUB", "USER"]
    assert sorted(line.split()[0] for line in lines[1:3]) == ["dept-k8s", "lab-docker"]
    out = io.StringIO()
    assert cli.main(["usage", "--all", "--hub", "lab-docker", "--since", "2025-03-01"], out=out) == 0
    assert out.getvalue().splitlines()[0].split()[0] == "USER"  # one hub listed: no HUB column
