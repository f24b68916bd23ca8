"""``busy_gpu_idle`` with a real hub, real servers and the real service: a kernel busy on an idle GPU is
warned, then stopped with its own reason; a server whose GPU works under a busy kernel is not."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timezone

import pytest
import requests

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.conftest import ServiceUsers, gpu_hub_config
from tests.service.test_culling_hub import EXTRA, busy_cell, service_port

pytestmark = pytest.mark.hub

RULES = """
c.GPUService.cull_rules = {"default": [{"kind": "busy_gpu_idle", "minutes": 2, "warn_minutes": 1}]}
"""


def hung_samples(hub, user: str, session_id: str, stop: threading.Event) -> None:
    """What the server of a hung kernel reports: one busy kernel, the GPU at 0%, its memory unchanged.

    The simulated GPU follows the kernels (a busy kernel shows 45% and 1 GiB), so the hang is reported
    with the server's own token (what JupyterHub gives the server), merged with what the server itself
    pushes (no kernel: 0% and no memory), so the memory stays the server's own 0 as a hung one's stays put.
    """
    token = ServiceUsers(hub, None).running_server_token(user)  # only the server's own token reports for it
    while not stop.is_set():
        body = {
            "session_id": session_id,
            "sampled_until": isoformat(datetime.now(timezone.utc)),
            "samples": 4,
            "utilization_avg": 0,
            "memory_used_max_mib": 0,
            "kernels": 1,
            "busy_kernels": 1,
        }
        r = requests.post(
            f"{hub.url}/services/gpu/api/v1/samples",
            headers={"Authorization": f"token {token}"},
            json=body,
            timeout=30,
        )
        if r.status_code == 400 and "later than the session's end" in r.text:
            return  # stopped
        stop.wait(5)


def test_a_busy_kernel_on_an_idle_gpu_is_warned_then_stopped_and_a_working_gpu_is_not(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    (tmp_path / "gpu_service_config.py").open("a").write(RULES)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("hung", "working")
    hub.start_server("hung", {"profile": "t4"})
    hub.start_server("working", {"profile": "t4"})
    hub.wait_ready("hung")
    hub.wait_ready("working")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    (hung_session,) = ledger.sessions(user="hung")

    # "working": a real kernel busy for the whole test, its (simulated) GPU at 45% under it
    token = hub.api("POST", "/users/working/tokens", json={"note": "t"}).json()["token"]
    base = f"{hub.url}/user/working"
    kernel = requests.post(
        f"{base}/api/kernels", headers={"Authorization": f"token {token}"}, json={"name": "python3"}, timeout=30
    ).json()["id"]
    asyncio.run(busy_cell(base, token, kernel, 400))

    stop = threading.Event()
    pusher = threading.Thread(target=hung_samples, args=(hub, "hung", hung_session.id, stop), daemon=True)
    pusher.start()
    try:
        warned = wait_for(
            lambda: [n for n in ledger.notices("hung") if n.kind == "cull"], 180, interval=1, what="hung warned"
        )
        assert warned[0].level == "warning" and "kernel is busy" in warned[0].message
        assert ledger.get_session(hung_session.id).cull_rule == "busy_gpu_idle"
        hub.wait_stopped("hung", timeout=150)
    finally:
        stop.set()
        pusher.join(timeout=40)
    # warned once and never cancelled: nothing in its samples looked like GPU work
    assert [n.level for n in ledger.notices("hung") if n.kind == "cull"] == ["warning"]
    (record,) = ledger.sessions(user="hung")
    assert record.stop_reason == "busy_gpu_idle"
    assert record.minutes in (2, 3, 4)  # warned a minute ahead, stopped at the horizon: billing ended there

    # "working" had a busy kernel all along too, but its GPU worked: never warned, still running
    assert not [n for n in ledger.notices("working") if n.kind == "cull"]
    assert hub.server("working")["ready"]
    assert ledger.sessions(user="working")[0].stopped is None
