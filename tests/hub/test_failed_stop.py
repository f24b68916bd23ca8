"""A stop the backend fails: the server is made to end, or its GPU stays taken until it has (real hub, gpu-local).

The container engine timing out on a stop cannot be caused for real here: the hub's configuration injects the
failure at the backend (LocalProcessSpawner.stop raises while a marker file exists, and so does the removal of a
server by its session id while a second one does). Everything else is real: the hub, its servers (processes),
the queue, the ledger. JupyterHub forgets a server whose stop raised; before this, its GPU went to the next
request while it still ran on it, unbilled.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import requests

from jupyterhub_gpu.ledger.store import Ledger
from tests.hub.test_local_spawner import config, environ_of

pytestmark = pytest.mark.hub

INJECT = """
import pathlib
from jupyterhub.spawner import LocalProcessSpawner
from jupyterhub_gpu.spawners.local import GPULocalSpawner

STOP_FAILS = pathlib.Path({stop_fails!r})
REMOVAL_FAILS = pathlib.Path({removal_fails!r})
_stop, _reap = LocalProcessSpawner.stop, GPULocalSpawner.gpu_reap.__func__


async def stop(self, now=False):
    if STOP_FAILS.exists():
        raise RuntimeError("injected: the engine timed out on the stop")
    return await _stop(self, now=now)


def reap(cls, probe, pid):
    if REMOVAL_FAILS.exists():
        raise RuntimeError("injected: the engine does not answer")
    return _reap(cls, probe, pid)


LocalProcessSpawner.stop = stop
GPULocalSpawner.gpu_reap = classmethod(reap)
c.GPULocalSpawner.stuck_server_retry = 1
c.GPULocalSpawner.ledger_db_url = {db_url!r}
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_server_whose_stop_fails_is_ended_and_its_gpu_never_serves_two(make_hub, tmp_path):
    stop_fails, removal_fails = tmp_path / "stop-fails", tmp_path / "removal-fails"
    db_url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    inject = INJECT.format(stop_fails=str(stop_fails), removal_fails=str(removal_fails), db_url=db_url)
    hub = make_hub(config(tmp_path, t4=2) + inject)
    hub.create_users("ann", "bob", "cat")
    ledger = Ledger(db_url)
    assert hub.start_server("cat", {"profile": "t4"}).status_code in (201, 202)
    hub.wait_ready("cat")  # cat holds the other T4 throughout: one is left to share out

    pids = []
    try:
        # 1. the stop fails, the removal by session id works: ann's server is ended, then bob gets the T4
        assert hub.start_server("ann", {"profile": "t4"}).status_code in (201, 202)
        ann = hub.wait_ready("ann")["state"]
        pids.append(ann["pid"])
        assert hub.start_server("bob", {"profile": "t4"}).status_code == 202  # waits for the T4
        stop_fails.touch()
        assert hub.stop_server("ann").status_code in (202, 204)
        hub.wait_stopped("ann")
        assert not alive(ann["pid"])
        bob = hub.wait_ready("bob")["state"]
        pids.append(bob["pid"])
        bob_token = environ_of(bob["pid"])["JUPYTERHUB_API_TOKEN"]
        assert requests.get(f"{hub.api_url}/user", headers={"Authorization": f"token {bob_token}"}, timeout=10).ok
        assert bob["gpu"]["devices"] == ann["gpu"]["devices"]
        session = ledger.get_session(ann["gpu"]["session_id"])
        assert session.stopped is not None and session.stop_reason == "stopped"
        assert "the stop of ann" in hub.log_text() and "failed" in hub.log_text()

        # 2. the removal fails too: bob's server runs on; the T4 stays taken until it has ended
        removal_fails.touch()
        hub.stop_server("bob")  # the hub answers as it does to a failed stop; it forgets the server either way
        hub.wait_stopped("bob")
        assert alive(bob["pid"])
        # its token is gone (JupyterHub revokes a server's token only after a stop that worked): it cannot report
        # activity or samples, nor act for bob, while it runs on
        who = requests.get(f"{hub.api_url}/user", headers={"Authorization": f"token {bob_token}"}, timeout=10)
        assert who.status_code == 403, who.text
        assert hub.start_server("ann", {"profile": "t4"}).status_code == 202
        time.sleep(4)  # four retries, each failing: ann waits in the queue, the T4 is not handed out
        assert not (hub.server("ann") or {}).get("ready") and alive(bob["pid"])
        assert "may still run: its GPUs" in hub.log_text()
        # billed to the stop: bob's session is closed, with no minute after it
        assert ledger.get_session(bob["gpu"]["session_id"]).stopped is not None
        removal_fails.unlink()  # the engine answers again: the next retry removes bob's server, then ann starts
        ann_again = hub.wait_ready("ann", timeout=60)["state"]
        assert not alive(bob["pid"])
        assert ann_again["gpu"]["devices"] == bob["gpu"]["devices"]
    finally:  # the hub's own cleanup stops its servers the usual way, even after a failure here
        stop_fails.unlink(missing_ok=True)
        removal_fails.unlink(missing_ok=True)
        for pid in filter(alive, pids):  # a server this test left running, if it failed half-way
            os.kill(pid, signal.SIGKILL)
        ledger.close()
