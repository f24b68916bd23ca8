"""Through a real hub, in a real browser: the spawn form, JupyterLab's status bar and panel, notices, stop."""

from __future__ import annotations

import re
import shutil
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.store import Ledger
from tests.browser.conftest import shot
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config, service_port

pytestmark = [pytest.mark.browser, pytest.mark.hub]

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"

EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.Spawner.args = c.Spawner.args + ["--GPUStats.push_interval=2", "--GPUStats.interval=1"]
c.Spawner.default_url = "/lab"
"""


def cost_of(text: str) -> Decimal:
    return Decimal(re.search(r"¥(\d+\.\d\d) \(", text).group(1))


def close_toasts(page) -> None:
    """Dismiss our notices as a student would, and put JupyterLab's own news prompt out of the way.

    Toasts cover the corner where the status item and the panel's buttons are.
    """
    container = page.locator("#react-toastify-container")
    dismiss = container.get_by_role("button", name="Dismiss", exact=True)
    for _attempt in range(5):
        # a toast slides in, and the Lab may render it again when its notices refresh (the button is then
        # detached): try again on the toast that is there now
        if not dismiss.count():
            break
        try:
            dismiss.first.click(timeout=3000)
        except PlaywrightTimeoutError:
            continue
        page.wait_for_timeout(1000)
        break
    page.add_style_tag(content="#react-toastify-container { display: none !important; }")


def test_student_sees_cost_gpu_notices_and_can_stop_billing(make_hub, tmp_path, page):
    config = gpu_hub_config(tmp_path, tick=1, grace=3600, min_minutes=0)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("stu1")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    # one minute of a T4 (¥0.05) is 83% of ¥0.06: the 80% notice comes as the session starts
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("0.06")), datetime.now(timezone.utc))

    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", "stu1")
    page.fill("input[name=password]", "pw")
    page.click("#login_submit")
    page.goto(f"{hub.url}/hub/spawn")
    summary = page.locator("[data-profile=t4] .jupyterhub-gpu-summary")
    assert summary.inner_text() == "1× Simulated T4 16 GB — CN¥0.05/min — 4 of 4 free"
    assert page.locator("[data-simulated=true]").is_visible()
    shot(page, "spawn-form")
    page.check("#profile-t4")
    page.click("input[type=submit], button[type=submit]")

    page.wait_for_url(re.compile(r".*/user/stu1/lab.*"), timeout=90_000)
    item = page.locator(".jp-gpu-StatusItem")
    item.wait_for(timeout=60_000)
    wait_for(lambda: "¥" in item.inner_text(), 30, what="the cost in the status bar")
    first_text = item.inner_text()
    assert "T4 (simulated)" in first_text and "GPU 0%" in first_text
    first_cost = cost_of(first_text)
    assert first_cost == Decimal("0.05")

    # the budget notice from the service appears as a JupyterLab notification
    toast = page.locator(".Toastify__toast", has_text="80%")
    toast.first.wait_for(timeout=60_000)

    # the panel: charts render (close the toasts first: they cover the status bar's corner)
    close_toasts(page)
    item.click()
    panel = page.locator(".jp-gpu-Panel")
    panel.wait_for(timeout=10_000)
    assert panel.locator("svg").count() >= 2
    assert "Simulated" in panel.inner_text()
    image = shot(page, "lab-statusbar-panel")
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    shutil.copy(image, DOCS_IMAGES / "lab-statusbar-panel.png")

    # a minute later the cost has grown by one minute's rate
    time.sleep(61)
    wait_for(lambda: cost_of(item.inner_text()) == first_cost + Decimal("0.05"), 30, what="the cost growing")

    # "Stop my server (stop billing)", confirmed: billing ends
    close_toasts(page)
    panel.get_by_role("button", name=re.compile("Stop my server")).click()
    page.locator(".jp-Dialog").get_by_role("button", name=re.compile("Stop my server")).click()
    hub.wait_stopped("stu1", timeout=60)
    (record,) = ledger.sessions(user="stu1")
    assert record.stopped is not None and record.stop_reason == "stopped"
    assert record.minutes == 2 or record.minutes == 3
