"""An orphan keeps what its student chose: a real hub killed with a server no saved state names, restarted.

A hub killed between launching a server and saving its spawner's state leaves an orphan: the restarted hub
stops it and records its session from the facts in its environment (spawners/startup.py). The session is
billed to the group that paid for it, on its tier (a preemptible session at the preemptible price was not a
full-price one), with its resume choice and language, as the spawner wrote them to the server's environment.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest

from jupyterhub_gpu.clock import isoformat, utcnow
from jupyterhub_gpu.env import POOL, RESUME, SESSION_ID, STARTED, TIER
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.hub.test_local_spawner import environ_of

pytestmark = pytest.mark.hub

CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 2, "memory_gb": 16}]
c.GPULocalSpawner.profiles = [
    {"slug": "t4", "display_name": "One T4", "gpu_model": "T4", "gpu_count": 1,
     "price_per_gpu_hour": "3.00", "default": True},
    {"slug": "t4-spot", "display_name": "One T4, preemptible", "gpu_model": "T4", "gpu_count": 1,
     "price_per_gpu_hour": "3.00", "preemptible": True, "price_factor": "0.4"},
]
c.GPULocalSpawner.home_dir_template = "%(home)s/{username}"
c.GPULocalSpawner.ledger_db_url = %(db)r
c.JupyterHub.load_groups = {"cs231n": {"users": ["ann"]}, "thesis": {"users": ["ann"]}}
c.JupyterHub.cleanup_servers = False
"""

#: a server that ends when asked
ORPHAN = "import time\ntime.sleep(600)\n"


def test_an_orphan_is_recorded_with_its_paying_group_tier_and_resume_choice(make_hub, tmp_path):
    db_url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    hub = make_hub(CONFIG % {"home": tmp_path / "homes", "db": db_url})
    hub.create_users("ann")
    # the second of ann's groups pays, on the preemptible tier, and she asked to be put back in the queue
    r = hub.start_server("ann", {"profile": "t4-spot", "pool": "thesis", "resume": True})
    assert r.status_code in (201, 202), r.text
    env = environ_of(hub.wait_ready("ann")["state"]["pid"])
    assert (env[POOL], env[TIER], env[RESUME]) == ("thesis", "preemptible", "1")
    hub.stop_server("ann")
    hub.wait_stopped("ann")
    # a server of ann's that no saved state names, as a hub killed in the middle of its spawn leaves one
    started = utcnow() - timedelta(seconds=30)
    orphan = subprocess.Popen(
        [sys.executable, "-c", ORPHAN], env={**env, SESSION_ID: "orphan-choices", STARTED: isoformat(started)}
    )
    ended: list = []
    watcher = threading.Thread(target=lambda: (orphan.wait(), ended.append(utcnow())), daemon=True)
    watcher.start()
    try:
        time.sleep(1)
        assert hub.stop(signal.SIGKILL) == -signal.SIGKILL
        hub.start()
        wait_for(lambda: ended, 60, what="the orphan stopped by the restarted hub")
        ledger = Ledger(db_url, migrate=False)
        try:
            row = wait_for(lambda: ledger.get_session("orphan-choices"), 30, what="the orphan's session")
            assert row.stop_reason == "orphaned" and row.user == "ann"
            # before: the default group (cs231n) paid, at full price, with no resume
            assert (row.pool, row.tier, row.resume) == ("thesis", "preemptible", True)
            assert row.rate_micros == 20_000  # ¥3.00 × 0.4 per GPU-hour: ¥0.02 a minute
            assert row.language == "en"
        finally:
            ledger.close()
    finally:
        orphan.kill()
        orphan.wait()
