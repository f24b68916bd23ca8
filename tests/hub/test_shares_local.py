"""Time-sliced shares through a real JupyterHub and real single-user servers (``gpu-local``, simulated GPUs).

Four servers of a ``gpu_share: 4`` profile run on one physical GPU, each sees that GPU with a
cap of a quarter of its memory; a fifth waits; the shares survive a hub restart.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from jupyterhub_gpu.gpus.device import parse_share_uuid
from tests.conftest import wait_for

pytestmark = pytest.mark.hub

CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 1, "memory_gb": 16}]
c.GPULocalSpawner.profiles = [
    {"slug": "t4", "display_name": "One T4", "gpu_model": "T4", "price_per_gpu_hour": "3.00", "default": True},
    {"slug": "t4-quarter", "display_name": "Quarter T4", "gpu_model": "T4", "gpu_share": 4,
     "price_per_gpu_hour": "0.75"},
]
c.GPULocalSpawner.queue_timeout = 300
c.GPULocalSpawner.home_dir_template = "%(home)s/{username}"
c.JupyterHub.cleanup_servers = False
"""


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_four_servers_share_one_gpu_a_fifth_waits_and_a_restart_keeps_the_shares(make_hub, tmp_path):
    hub = make_hub(CONFIG % {"home": tmp_path / "homes"})
    users = ["s0", "s1", "s2", "s3", "s4", "w"]
    hub.create_users(*users)
    form = hub.login("s0").get(f"{hub.url}/hub/spawn/s0", timeout=30).content.decode()
    assert "share 1/4 of a Simulated T4 4 GB — CN¥0.0125/min — 4 of 4 shares free" in form
    assert "1× Simulated T4 16 GB — CN¥0.05/min — 1 of 1 free" in form

    for name in users[:4]:
        assert hub.start_server(name, {"profile": "t4-quarter"}).status_code in (201, 202)
    servers = {name: hub.wait_ready(name) for name in users[:4]}
    units = {name: s["state"]["gpu"]["devices"] for name, s in servers.items()}
    parsed = [parse_share_uuid(u[0]) for u in units.values()]
    assert all(p is not None for p in parsed), units
    (parent,) = {p[0] for p in parsed}
    assert sorted(p[1] for p in parsed) == [0, 1, 2, 3] and {p[2] for p in parsed} == {4}
    for server in servers.values():
        env = environ_of(server["state"]["pid"])
        assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == parent
        assert env["JUPYTERHUB_GPU_DEVICES"] == parent
        assert env["JUPYTERHUB_GPU_SHARE"] == "1/4"
        assert env["JUPYTERHUB_GPU_MEMORY_LIMIT_MIB"] == "4096"
        assert env["JUPYTERHUB_GPU_RATE_PER_MINUTE"] == "0.0125"
        assert server["state"]["gpu"]["visible_devices"] == [parent]

    # a fifth share waits, and so does a whole T4 (after it, in one queue)
    assert hub.start_server("s4", {"profile": "t4-quarter"}).status_code in (201, 202)
    events = hub.progress_events("s4", lambda e: "position" in e.get("message", ""))
    assert events[-1]["message"] == "Waiting for a free share 1/4 of a Simulated T4 — position 1 of 1"
    assert hub.start_server("w", {"profile": "t4"}).status_code in (201, 202)
    events = hub.progress_events("w", lambda e: "position" in e.get("message", ""))
    assert events[-1]["message"] == "Waiting for a free Simulated T4 — position 2 of 2"
    hub.stop_server("s4")
    hub.wait_stopped("s4")

    # a hub restart splits the GPU again as it was: the same four shares, the whole request still waits
    hub.stop_server("w")
    hub.wait_stopped("w")
    assert hub.stop(signal.SIGTERM) == 0
    hub.start()
    assert {name: hub.wait_ready(name)["state"]["gpu"]["devices"] for name in users[:4]} == units
    assert hub.start_server("s4", {"profile": "t4-quarter"}).status_code in (201, 202)
    events = hub.progress_events("s4", lambda e: "position" in e.get("message", ""))
    assert events[-1]["message"] == "Waiting for a free share 1/4 of a Simulated T4 — position 1 of 1"

    # one share freed: the waiting server gets exactly it
    assert hub.stop_server("s2").status_code in (202, 204)
    wait_for(lambda: hub.gpu_state("s4"), 60, what="s4 assigned")
    assert hub.gpu_state("s4")["devices"] == units["s2"]
    hub.wait_ready("s4")


MIG_CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [
    {"model": "A100", "count": 1, "memory_gb": 40, "mig": ["3g.20gb", "1g.10gb"]},
]
c.GPULocalSpawner.profiles = [
    {"slug": "small", "display_name": "A100 1g.10gb", "gpu_model": "A100", "mig": "1g.10gb",
     "price_per_gpu_hour": "1.20"},
    {"slug": "big", "display_name": "A100 3g.20gb", "gpu_model": "A100", "mig": "3g.20gb",
     "price_per_gpu_hour": "3.00"},
]
c.GPULocalSpawner.queue_timeout = 300
c.GPULocalSpawner.home_dir_template = "%(home)s/{username}"
"""


def test_a_mig_profile_gets_its_own_instance_and_only_of_its_slice(make_hub, tmp_path):
    hub = make_hub(MIG_CONFIG % {"home": tmp_path / "homes"})
    hub.create_users("m1", "m2", "b1")
    form = hub.login("m1").get(f"{hub.url}/hub/spawn/m1", timeout=30).content.decode()
    assert "MIG 1g.10gb of a Simulated A100 — CN¥0.02/min — 1 of 1 slices free" in form
    assert hub.start_server("m1", {"profile": "small"}).status_code in (201, 202)
    m1 = hub.wait_ready("m1")
    (uuid,) = m1["state"]["gpu"]["devices"]
    assert uuid.startswith("MIG-")
    env = environ_of(m1["state"]["pid"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == uuid
    assert env["JUPYTERHUB_GPU_SHARE"] == "mig:1g.10gb"
    assert env["JUPYTERHUB_GPU_MEMORY_LIMIT_MIB"] == "10240"
    # the 3g.20gb slice is free, but a 1g.10gb request never gets it
    assert hub.start_server("m2", {"profile": "small"}).status_code in (201, 202)
    events = hub.progress_events("m2", lambda e: "position" in e.get("message", ""))
    assert events[-1]["message"] == "Waiting for a free MIG 1g.10gb slice of a Simulated A100 — position 1 of 1"
    assert hub.start_server("b1", {"profile": "big"}).status_code in (201, 202)
    b1 = hub.wait_ready("b1")
    assert b1["state"]["gpu"]["devices"] != [uuid]
    assert environ_of(b1["state"]["pid"])["JUPYTERHUB_GPU_SHARE"] == "mig:3g.20gb"
    hub.stop_server("m1")
    wait_for(lambda: hub.gpu_state("m2"), 60, what="m2 assigned")
    assert hub.gpu_state("m2")["devices"] == [uuid]
    hub.wait_ready("m2")
