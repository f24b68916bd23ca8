"""The preemptible tier as a student sees it: a real hub, real servers, the real gpu service, Chromium.

A student logs in through the form, reads the preemptible profile's line and the resume choice in the spawn form,
and starts the preemptible A100 with "put it back in the queue" ticked. In JupyterLab, when another user asks for
the full-price A100 through the REST API, the preemption notice appears as a JupyterLab notification naming the
stop time; at that time the server stops (reason ``preempted`` in the ledger), the other user's server starts on
that A100, and the student's server is back in the queue.
"""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import Ledger
from tests.browser.conftest import shot
from tests.browser.test_lab_browser import service_port
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = [pytest.mark.browser, pytest.mark.hub]

GRACE = 20

EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.GPULocalSpawner.profiles = c.GPULocalSpawner.profiles + [
    {"slug": "a100-pre", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": "15.00",
     "preemptible": True, "price_factor": "0.4"},
]
c.GPULocalSpawner.preempt_min_runtime = 0
c.GPULocalSpawner.preempt_grace = %(grace)d
c.GPULocalSpawner.schedule_interval = 1
c.Spawner.args = c.Spawner.args + ["--GPUStats.push_interval=2", "--GPUStats.interval=1"]
c.Spawner.default_url = "/lab"
"""


def test_a_student_on_the_preemptible_tier_is_told_in_jupyterlab_then_preempted(make_hub, tmp_path, page):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    hub = make_hub(config + EXTRA % {"port": service_port(config), "grace": GRACE})
    hub.create_users("stu1", "thea")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")

    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", "stu1")
    page.fill("input[name=password]", "pw")
    page.click("#login_submit")
    page.goto(f"{hub.url}/hub/spawn")
    # the cheaper tier's line: 40% of ¥15.00/h is ¥0.10/min; the choice to be put back in the queue
    line = page.locator("[data-profile=a100-pre] .jupyterhub-gpu-summary").inner_text()
    assert line == (
        "1× Simulated A100 40 GB preemptible — CN¥0.10/min — may be interrupted, your work is checkpointed"
        " — 1 of 1 free"
    ), line
    assert (
        page.locator("[data-profile=a100] .jupyterhub-gpu-summary")
        .inner_text()
        .startswith("1× Simulated A100 40 GB — CN¥0.25/min")
    )
    resume = page.locator("#gpu-resume")
    assert resume.is_visible() and not resume.is_checked()
    assert "put it back in the queue" in page.locator(".jupyterhub-gpu-resume").inner_text()
    page.check("#profile-a100-pre")
    resume.check()
    shot(page, "preemptible-spawn-form")
    page.click("input[type=submit], button[type=submit]")

    page.wait_for_url(re.compile(r".*/user/stu1/lab.*"), timeout=90_000)
    page.locator(".jp-gpu-StatusItem").wait_for(timeout=60_000)
    first = hub.server("stu1")["state"]["gpu"]
    news = page.locator(".Toastify__toast", has_text="Jupyter news")  # JupyterLab's own prompt: out of the way
    try:
        news.get_by_role("button", name="No", exact=True).click(timeout=10_000)
    except PlaywrightTimeoutError:
        pass
    assert first["tier"] == "preemptible" and first["resume"] is True

    # another user asks for the full-price A100 through the REST API: the student's server is told at once
    r = hub.start_server("thea", {"profile": "a100"})
    assert r.status_code == 202, r.text
    (order,) = wait_for(lambda: rows.stop_orders(ledger, pending=False), 30, what="the preemption order")
    assert (order.user, order.kind, order.for_user) == ("stu1", "preempted", "thea")
    stop_time = f"{order.stop_at.astimezone(ZoneInfo('Asia/Shanghai')):%H:%M}"  # the lab's zone
    toast = page.locator(".Toastify__toast", has_text=f"This server will be stopped at {stop_time}")
    toast.first.wait_for(timeout=GRACE * 1000)
    said = toast.first.inner_text()
    assert "to free its GPU for a full-price request" in said, said
    assert "thea" not in said  # whose request it serves is never said
    page.wait_for_timeout(1500)  # the toast has slid in
    shot(page, "preemption-notice")

    # at the stop time: the server stops with reason preempted, billed to there; thea starts on that A100
    stopped = wait_for(
        lambda: next((s for s in ledger.sessions(user="stu1") if s.stopped is not None), None),
        GRACE + 30,
        what="stu1's session closed",
    )
    assert stopped.stop_reason == "preempted"
    assert abs((stopped.stopped - order.stop_at.replace(tzinfo=None)).total_seconds()) < 10, (stopped, order)
    thea = hub.wait_ready("thea", timeout=60)["state"]["gpu"]
    assert thea["devices"] == first["devices"]
    # the student asked to be put back in the queue: the service starts the server again, and it waits
    queued = wait_for(lambda: [q for q in rows.queue(ledger) if q.user == "stu1"], 30, what="stu1 back in the queue")
    assert queued[0].tier == "preemptible" and queued[0].profile == "a100-pre"
