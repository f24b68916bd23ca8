"""The GPU spawners consume their spawn options: JupyterHub logs no "unhandled user_options" at a spawn."""

from __future__ import annotations

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.hub

CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 1, "memory_gb": 16}]
c.GPULocalSpawner.profiles = [
    {"slug": "t4", "display_name": "One T4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00"},
    {"slug": "cpu", "display_name": "CPU only", "gpu_count": 0, "price_per_hour": "0.60", "default": True},
]
c.GPULocalSpawner.home_dir_template = "%(home)s/{username}"
"""


def test_spawns_through_the_api_and_the_form_log_no_unhandled_options(make_hub, tmp_path):
    hub = make_hub(CONFIG % {"home": tmp_path / "homes"})
    hub.create_users("ana", "ben")
    assert hub.start_server("ana", {"profile": "t4"}).status_code in (201, 202)
    assert hub.wait_ready("ana")
    assert hub.gpu_state("ana")["profile"] == "t4"  # the option was applied

    browser = hub.login("ben")
    r = browser.post(
        f"{hub.url}/hub/spawn/ben",
        data={"profile": "cpu", "_xsrf": browser.cookies.get("_xsrf", "")},
        timeout=60,
    )
    assert r.status_code == 200, r.status_code
    wait_for(lambda: (hub.server("ben") or {}).get("ready"), 90, what="ben's server")
    assert hub.gpu_state("ben")["profile"] == "cpu"

    log = hub.log_text()
    assert "Calling Spawner.start for ben" in log  # the log is the spawns' log (--debug)
    assert "unhandled user_options" not in log
    assert "Unhandled user option" not in log
