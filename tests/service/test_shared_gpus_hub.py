"""Two servers on shares of one simulated T4 with a real hub, real servers and the real service.

Both users start the demo's "¼ T4 (simulated)" profile (``t4-quarter``, ``gpu_share`` 4, as config/demo_config.py
writes it) and land on two shares of ONE GPU (the allocator packs shares). Each server's stats show its own memory
(1 GiB per own kernel in the simulated shared driver) and the GPU's shared utilization; ``GET me`` says the GPU is
shared by 2. The idle one is culled by ``gpu_idle`` (its own utilization is 0, whatever its busy neighbour does),
billed to its stop; the busy one keeps running on its share, now alone on the GPU.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timezone

import pytest
import requests

from jupyterhub_gpu.gpus.device import parse_share_uuid
from jupyterhub_gpu.ledger.queries.samples import session_minutes
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config
from tests.service.test_culling_hub import EXTRA, busy_cell, service_port

pytestmark = pytest.mark.hub

# the demo's profile (config/demo_config.py), with the test hub's T4s
QUARTER = """
c.GPULocalSpawner.profiles = c.GPULocalSpawner.profiles + [{
    "slug": "t4-quarter",
    "display_name": {"en": "¼ T4 (simulated)", "zh-CN": "¼ 块 T4（模拟）"},
    "gpu_model": "T4",
    "gpu_count": 1,
    "gpu_share": 4,
    "price_per_gpu_hour": "0.75",
}]
"""

RULES = """
c.GPUService.cull_rules = {"default": [{"kind": "gpu_idle", "minutes": 2, "warn_minutes": 1, "util_threshold": 5}]}
"""


def test_two_servers_share_one_gpu_each_sees_its_own_part_and_culling_stops_only_the_idle_one(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    (tmp_path / "gpu_service_config.py").open("a").write(RULES)
    hub = make_hub(config + QUARTER + EXTRA % {"port": service_port(config)})
    hub.create_users("idle", "busy")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")

    # one spawn after the other, so that the second one finds the first one's GPU split in quarters
    hub.start_server("busy", {"profile": "t4-quarter"})
    hub.wait_ready("busy")
    hub.start_server("idle", {"profile": "t4-quarter"})
    hub.wait_ready("idle")
    (busy_unit,) = hub.gpu_state("busy")["devices"]
    (idle_unit,) = hub.gpu_state("idle")["devices"]
    busy_share, idle_share = parse_share_uuid(busy_unit), parse_share_uuid(idle_unit)
    assert busy_share and idle_share, (busy_unit, idle_unit)
    assert busy_share[0] == idle_share[0]  # the same physical T4 (packed), not two of the hub's four
    assert busy_share[1] != idle_share[1] and busy_share[2] == idle_share[2] == 4

    tokens = {u: hub.api("POST", f"/users/{u}/tokens", json={"note": "t"}).json()["token"] for u in ("idle", "busy")}

    def headers(user):
        return {"Authorization": f"token {tokens[user]}"}

    def new_kernel(user):
        r = requests.post(
            f"{hub.url}/user/{user}/api/kernels", headers=headers(user), json={"name": "python3"}, timeout=60
        )
        assert r.status_code == 201, r.text
        return r.json()["id"]

    # "busy": two kernels, one of them running a long cell; "idle": one kernel that does nothing
    busy_kernel = new_kernel("busy")
    new_kernel("busy")
    new_kernel("idle")
    asyncio.run(busy_cell(f"{hub.url}/user/busy", tokens["busy"], busy_kernel, 400))

    def gpu_of(user):
        r = requests.get(f"{hub.url}/user/{user}/gpu/api/v1/stats", headers=headers(user), timeout=10)
        assert r.status_code == 200, r.text
        (gpu,) = r.json()["gpus"]
        return gpu

    def both_seen():
        busy, idle = gpu_of("busy"), gpu_of("idle")
        ready = busy["memory_used_mib"] == 2048 and idle["memory_used_mib"] == 1024
        shared = busy["shared_by"] == idle["shared_by"] == 2 and busy["utilization_percent"] == 45
        return ready and shared and (busy, idle)

    busy, idle = wait_for(both_seen, 60, interval=1, what="both servers' own figures on the shared T4")
    for gpu in (busy, idle):
        assert gpu["share"] == "1/4" and gpu["scope"] == "own" and gpu["memory_total_mib"] == 4096  # the cap
        assert gpu["gpu_utilization_percent"] == 45  # the GPU's: "busy"'s one busy kernel, seen by both
    assert (busy["utilization_percent"], idle["utilization_percent"]) == (45, 0)  # each its own

    def me(user):
        r = requests.get(f"{hub.url}/services/gpu/api/v1/me", headers=headers(user), timeout=10)
        assert r.status_code == 200, r.text
        (session,) = r.json()["active_sessions"]
        return session

    for user in ("idle", "busy"):
        session = me(user)
        assert (session["share"], session["memory_limit_mib"], session["shared_by"]) == ("1/4", 4096, 2)
        assert session["profile"] == "t4-quarter" and session["rate_per_minute"] == "0.0125"

    # "idle" is warned, then stopped, for its own idle GPU share; "busy" is never warned
    (idle_record,) = ledger.sessions(user="idle")
    warned = wait_for(
        lambda: [n for n in ledger.notices("idle") if n.kind == "cull"], 150, interval=1, what="idle warning"
    )
    assert "Your GPU has been idle" in warned[0].message
    hub.wait_stopped("idle", timeout=120)
    stopped_at = time.time()
    record = ledger.get_session(idle_record.id)
    assert record.stop_reason == "gpu_idle"
    assert abs(record.stopped.replace(tzinfo=timezone.utc).timestamp() - stopped_at) < 15
    assert record.minutes in (2, 3)  # billed to the stop
    assert record.cost_micros == record.minutes * 12_500
    # what "idle" pushed was its own 0% while the GPU it shared worked at 45% for "busy" in the same minutes
    busy_minutes = {m.minute: m for m in session_minutes(ledger, ledger.sessions(user="busy")[0].id)}
    last = [m for m in session_minutes(ledger, idle_record.id) if m.samples][-2:]
    assert len(last) == 2
    for m in last:
        assert m.utilization_avg == 0 and m.memory_used_max_mib == 1024, m.minute
        # 45% while its kernel ran; a loaded machine may have caught its kernel between two steps in a sample
        assert 0 < busy_minutes[m.minute].utilization_avg <= 45, m.minute
        assert busy_minutes[m.minute].memory_used_max_mib == 2048

    # "busy" keeps running on its share, now alone on the GPU, and was never warned
    assert hub.server("busy")["ready"]
    assert hub.gpu_state("busy")["devices"] == [busy_unit]
    assert not [n for n in ledger.notices("busy") if n.kind == "cull"]
    (busy_record,) = ledger.sessions(user="busy")
    assert busy_record.stopped is None
    assert me("busy")["shared_by"] == 1
    wait_for(lambda: gpu_of("busy")["shared_by"] == 1, 30, interval=1, what="the stopped neighbour gone")
