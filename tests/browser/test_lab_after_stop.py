"""Through a real hub, in a real browser: once a server stops, its open JupyterLab stops asking jupyterhub-gpu's API.

Before: after a stop the Lab kept polling ``gpu/api/v1/stop-when-done`` every 2 s, and the hub logged a
``424 GET /hub/user/NAME/gpu/api/v1/stop-when-done`` warning each time, for as long as the tab stayed open.
The hub's 424 says the server is not running: the session is over, and the Lab's polls end at the first one.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.browser.test_stop_when_done import EXTRA, service_port
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = [pytest.mark.browser, pytest.mark.hub]

USER = "stu1"
GONE = re.compile(rf"\b424 GET /hub/user/{USER}/gpu/api/v1/(stop-when-done|stats)\b")


def gone_lines(hub) -> list[str]:
    return [line for line in hub.log_text().splitlines() if GONE.search(line)]


def test_the_lab_stops_polling_once_its_server_is_gone(make_hub, tmp_path, page):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users(USER)
    hub.start_server(USER, {"profile": "t4"})
    hub.wait_ready(USER)

    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", "pw")
    page.click("#login_submit")
    page.goto(f"{hub.url}/user/{USER}/lab")
    # the Lab runs with jupyterhub-gpu's extension: its status bar item has its first figures
    page.locator(".jp-gpu-StatusItem").first.wait_for(timeout=90_000)
    time.sleep(3)  # a few polls of a running server
    assert gone_lines(hub) == []

    # the server stops (as a cull, the budget or the admin would stop it); the tab stays open
    assert hub.stop_server(USER).status_code in (202, 204)
    hub.wait_stopped(USER, timeout=60)
    wait_for(lambda: gone_lines(hub), timeout=60, what="the hub's 424 for the Lab's next poll")
    time.sleep(7)  # each poll's next turn (the stats poll's is 5 s) has come
    first = gone_lines(hub)
    # the stop-when-done poll asked every 2 s: 15 s would have added about 7 more lines
    time.sleep(15)
    lines = gone_lines(hub)
    assert lines == first, "\n".join(lines)
    per_endpoint = {e: sum(e in line for line in lines) for e in ("stop-when-done", "stats")}
    assert per_endpoint["stop-when-done"] <= 1 and per_endpoint["stats"] <= 1, per_endpoint
