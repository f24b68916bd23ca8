"""A GPU profile's spawn on an engine without the NVIDIA runtime: the student reads that the lab's GPU
runtime is not set up (not "HTTP 500: Unhandled error starting server"), the admin's log has the fix, once at
the hub's start too.

The suite's engine serves GPU device requests (scripts/docker-setup.sh starts it with the stand-in
``nvidia-container-runtime-hook`` on its PATH), so this hub spawns on a dockerd of the test's own
(tests/docker/own_dockerd.py) started without it: no ``nvidia`` device driver, as on a lab server before the
NVIDIA Container Toolkit is installed. The hub's DockerSpawner reaches it through ``DOCKER_HOST``.
"""

from __future__ import annotations

import shutil
import uuid

import pytest

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.spawners.docker.engine import GPU_RUNTIME_MESSAGE
from tests.docker import own_dockerd as own
from tests.docker.test_docker_spawner import IMAGE, try_gpu_request

own_plain_dockerd = own.own_plain_dockerd  # the fixture: a dockerd of the module's own, no NVIDIA hook

pytestmark = pytest.mark.docker


def config(prefix: str) -> str:
    static = [{"index": 0, "uuid": f"GPU-{uuid.UUID(int=9)}", "name": "Tesla T4", "memory_gb": 16}]
    return f"""
c.JupyterHub.spawner_class = "gpu-docker"
c.GPUDockerSpawner.gpu_backend = "static"
c.GPUDockerSpawner.static_gpus = {static!r}
c.GPUDockerSpawner.omit_device_requests = False
c.GPUDockerSpawner.network_name = "host"
c.GPUDockerSpawner.prefix = {prefix!r}
c.GPUDockerSpawner.work_volume_template = {prefix + "-work-{username}"!r}
c.GPUDockerSpawner.currency = "CNY"
c.GPUDockerSpawner.profiles = [
    {{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": {IMAGE!r}, "price_per_gpu_hour": "3.00"}},
]
c.Spawner.args = []
c.GPUDockerSpawner.cmd = ["jupyterhub-singleuser"]
"""


def test_a_gpu_spawn_without_the_nvidia_runtime_tells_the_student_and_the_admin(own_plain_dockerd, make_hub):
    daemon = own_plain_dockerd
    assert "jupyterhub-gpu-sim" not in daemon.path, daemon.path
    tried = try_gpu_request("-H", daemon.host)
    if tried.returncode == 0:  # a safety: its PATH lacks the stand-in hook, yet an NVIDIA hook is registered
        hook = shutil.which(own.NVIDIA_HOOK, path=daemon.path)
        pytest.skip(f"the test's own dockerd serves GPU device requests ({own.NVIDIA_HOOK} on its PATH: {hook})")
    assert "could not select device driver" in tried.stderr, tried.stderr
    prefix = f"jhgpu-test-{uuid.uuid4().hex[:6]}"
    hub = make_hub(config(prefix), start=False)
    hub.env["DOCKER_HOST"] = daemon.host  # the hub's DockerSpawner (and its startup probe) use the own engine
    hub.start()
    try:
        start = [line for line in hub.log_text().splitlines() if "GPU profiles cannot start" in line]
        assert len(start) == 1 and start[0].startswith("[E "), start  # told at the hub's start, once
        assert "NVIDIA Container Toolkit" in start[0] and "restart dockerd" in start[0]

        hub.create_users("gina")
        r = hub.start_server("gina", {"profile": "t4"})
        if r.status_code not in (201, 202):  # failed within the hub's slow_spawn_timeout
            assert r.status_code == 503 and GPU_RUNTIME_MESSAGE in r.json()["message"], r.text
        else:
            events = hub.progress_events("gina", lambda e: e.get("failed"), timeout=120)
            assert GPU_RUNTIME_MESSAGE in events[-1]["message"], events
        hub.wait_stopped("gina")
        assert hub.gpu_state("gina") == {}  # the GPU went back
        log = hub.log_text()
        assert "Unhandled error" not in log and "HTTP 500" not in log
        admin = [line for line in log.splitlines() if "the Docker engine has no NVIDIA runtime" in line]
        assert admin and admin[0].startswith("[E ") and "nvidia-ctk runtime configure" in admin[0], admin
        assert translator("zh-CN")(GPU_RUNTIME_MESSAGE) != GPU_RUNTIME_MESSAGE  # the Chinese is there
    finally:
        hub.cleanup()
        for cid in daemon.docker("ps", "-aq", "--filter", f"name={prefix}", check=False).split():
            daemon.docker("rm", "-f", cid, check=False)
