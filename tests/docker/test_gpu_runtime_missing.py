"""A GPU profile's spawn on an engine without the NVIDIA runtime (issue 30): the student reads that the lab's GPU
runtime is not set up (not "HTTP 500: Unhandled error starting server"), the admin's log has the fix, once at
the hub's start too. Skipped where the engine serves GPU device requests (a stand-in NVIDIA hook on its PATH).
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.spawners.docker.engine import GPU_RUNTIME_MESSAGE
from tests.docker.test_docker_spawner import IMAGE, remove_by_prefix

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


def test_a_gpu_spawn_without_the_nvidia_runtime_tells_the_student_and_the_admin(make_hub):
    tried = subprocess.run(
        ["docker", "run", "--rm", "--gpus", "1", "--network", "none", "--entrypoint", "true", IMAGE],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if tried.returncode == 0:
        pytest.skip("this Docker engine serves GPU device requests (an NVIDIA device driver is registered)")
    assert "could not select device driver" in tried.stderr, tried.stderr
    prefix = f"jhgpu-test-{uuid.uuid4().hex[:6]}"
    hub = make_hub(config(prefix))
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
        remove_by_prefix(prefix)
