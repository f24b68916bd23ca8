"""The gpu service reconciling with a hub that is restarting: no running server's session is closed as ``reconciled``.

A restarted hub first stops the servers that an interrupted spawn left behind (``reap_orphans``, up to 10 s
for one that does not stop when asked), and JupyterHub starts serving once its spawners have loaded for
``init_spawners_timeout`` seconds, done or not. Until the hub has loaded a user's spawners, its API lists
that user as active (a server of theirs is in its database) with no servers. The service reconciling then
(the listings are ``reconcile_interval`` apart: two fit in a hub's start) found every running server missing
twice and closed its session at its last listing, billing less than it ran, while the server ran on. Now
the hub loads its running servers' spawners, pending its check, before it reaps (and lists them so), and
the service takes a user listed with no server as unknown, not gone
(tests/unit/service/test_reconcile_hub_starting.py).

A real hub with a real single-user server and a real ledger; the service's own reconciliation is called
twice in a row against the hub's API while the hub is still stopping a server it does not know (a process
that ignores SIGTERM, so the hub's start-up stop takes 5 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.env import SESSION_ID
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.hubapi import HubAPIError, HubClient
from jupyterhub_gpu.service.tick import TickContext, reconcile
from tests.conftest import wait_for

pytestmark = pytest.mark.hub

CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 2, "memory_gb": 16}]
c.GPULocalSpawner.profiles = [
    {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00", "default": True},
]
c.GPULocalSpawner.home_dir_template = %(home)r + "/{username}"
c.GPULocalSpawner.ledger_db_url = %(db_url)r
c.JupyterHub.cleanup_servers = False
# serve after 1 s of loading the spawners, as a hub whose start takes longer than the default 10 s does
c.JupyterHub.init_spawners_timeout = 1
"""

#: a server left by an interrupted spawn that does not stop when asked: the restarted hub kills it after 5 s
SLOW_ORPHAN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(600)
"""


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_a_hub_restarting_gets_no_running_servers_session_closed_as_reconciled(make_hub, tmp_path):
    db_url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    hub = make_hub(CONFIG % {"home": str(tmp_path / "homes"), "db_url": db_url})
    hub.create_users("ann")
    hub.start_server("ann", {"profile": "t4"})
    ann = hub.wait_ready("ann")
    session_id = ann["state"]["gpu"]["session_id"]
    api_url = environ_of(ann["state"]["pid"])["JUPYTERHUB_API_URL"]
    orphan = subprocess.Popen(
        [sys.executable, "-c", SLOW_ORPHAN],
        env={"JUPYTERHUB_API_URL": api_url, SESSION_ID: "orphan-0001"},
        start_new_session=True,
    )
    ledger = Ledger(db_url, migrate=False)
    try:
        time.sleep(1)  # the orphan has set its SIGTERM handler
        assert hub.stop(signal.SIGKILL) == -signal.SIGKILL
        hub.start(wait=False)
        # the hub's own API port, as a managed service reaches it: it answers as soon as the hub listens
        client = HubClient(f"http://127.0.0.1:{hub.hub_port}/hub/api", hub.token, timeout=5)

        def answers():
            try:
                return asyncio.run(client.request("GET", "/")) is not None
            except HubAPIError:
                return False

        wait_for(answers, 60, interval=0.05, what="the restarted hub's API")
        ctx = TickContext(ledger=ledger, hub=client)
        missing: dict = {}
        first = asyncio.run(reconcile(ctx, utcnow(), missing))
        listed = asyncio.run(client.active_servers())
        second = asyncio.run(reconcile(ctx, utcnow(), missing))
        # all of it while the hub was still stopping the orphan, before it had loaded its spawners
        assert orphan.poll() is None, "the hub's start was over before the service could list it: nothing was tested"
        assert first["closed"] == second["closed"] == []
        assert ledger.get_session(session_id).stopped is None
        # the hub shows ann's server as JupyterHub shows a server it has yet to check
        assert [(s["user"], s["name"], s["server"]["pending"]) for s in listed] == [("ann", "", "check")]
        # once started, the hub has checked ann's server: running, listed and still billed
        hub.wait_ready("ann")
        assert asyncio.run(reconcile(ctx, utcnow(), missing))["closed"] == []
        assert ledger.get_session(session_id).stopped is None
        assert orphan.wait(timeout=30) == -signal.SIGKILL  # the hub's start-up did stop the orphan
    finally:
        ledger.close()
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
        try:  # cleanup_servers is off in this hub: ann's server would outlive it
            hub.stop_server("ann")
            wait_for(lambda: hub.server("ann") is None, 60, what="ann stopped")
        except Exception:
            with contextlib.suppress(ProcessLookupError):
                os.kill(ann["state"]["pid"], signal.SIGKILL)
            raise
