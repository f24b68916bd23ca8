"""In a real browser: a light session on the simulated A100 gets right-sizing advice in JupyterLab's panel."""

from __future__ import annotations

import re

import pytest
import requests

from jupyterhub_gpu.ledger.queries.advice import advice_of
from jupyterhub_gpu.ledger.store import Ledger
from tests.browser.conftest import shot
from tests.browser.test_lab_browser import close_toasts
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config, service_port

pytestmark = [pytest.mark.browser, pytest.mark.hub]

EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.Spawner.args = c.Spawner.args + ["--GPUStats.push_interval=2", "--GPUStats.interval=1"]
c.Spawner.default_url = "/lab"
"""

ADVICE = """
c.GPUService.advice_min_minutes = 1
c.GPUService.advice_live_after_minutes = 0
"""


def test_the_lab_panel_shows_live_advice_for_a_light_a100_session(make_hub, tmp_path, page):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    (tmp_path / "gpu_service_config.py").open("a").write(ADVICE)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("stu1")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")

    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", "stu1")
    page.fill("input[name=password]", "pw")
    page.click("#login_submit")
    page.goto(f"{hub.url}/hub/spawn")
    page.check("#profile-a100")
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url(re.compile(r".*/user/stu1/lab.*"), timeout=90_000)

    # the advice is in the ledger ...
    (record,) = ledger.sessions(user="stu1")
    row = wait_for(
        lambda: (a := advice_of(ledger, [record.id]).get(record.id)) and a.reason == "advised" and a,
        60,
        what="live advice in the ledger",
    )
    assert row.suggested_profile == "t4" and not row.final

    # ... in the server's stats (from the service's GET me) ...
    token = hub.api("POST", "/users/stu1/tokens", json={"note": "t"}).json()["token"]

    def stats_advice():
        stats = requests.get(
            f"{hub.url}/user/stu1/gpu/api/v1/stats", headers={"Authorization": f"token {token}"}, timeout=10
        ).json()
        return (stats.get("session") or {}).get("advice")

    advice = wait_for(stats_advice, 30, what="the advice in the stats")
    assert advice["suggested_profile"] == "t4" and advice["final"] is False

    # ... and in the panel
    item = page.locator(".jp-gpu-StatusItem")
    item.wait_for(timeout=60_000)
    close_toasts(page)
    item.click()
    box = page.locator(".jp-gpu-Panel .jp-gpu-Advice")
    box.wait_for(state="visible", timeout=30_000)
    text = box.inner_text()
    assert "A cheaper profile would do" in text
    assert "The t4 profile (CN¥0.05/min instead of CN¥0.25/min) would" in text
    assert re.search(r"So far this session would have cost CN¥\d+\.\d\d instead of CN¥\d+\.\d\d\.", text)
    assert box.get_attribute("data-profile") == "t4"
    shot(page, "lab-advice-panel")
