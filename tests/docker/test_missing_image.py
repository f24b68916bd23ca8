"""A profile whose image is not on the Docker host: the student is told, the admin's log names the image once."""

from __future__ import annotations

import uuid

import docker as docker_py
import pytest

from jupyterhub_gpu.spawners.docker.spawner import missing_images
from tests.conftest import wait_for
from tests.docker.test_docker_spawner import IMAGE, remove_by_prefix

pytestmark = pytest.mark.docker

GHOST = f"jupyterhub-gpu/never-built-{uuid.uuid4().hex[:6]}:1.0"
PULL_FAILED = f"Could not pull the image {GHOST}: "  # and the registry's error (tests/docker/test_image_pull.py)


def config(prefix: str) -> str:
    static = [{"index": 0, "uuid": f"GPU-{uuid.UUID(int=7)}", "name": "Tesla T4", "memory_gb": 16}]
    return f"""
c.JupyterHub.spawner_class = "gpu-docker"
c.GPUDockerSpawner.gpu_backend = "static"
c.GPUDockerSpawner.static_gpus = {static!r}
c.GPUDockerSpawner.omit_device_requests = True
c.GPUDockerSpawner.network_name = "host"
c.GPUDockerSpawner.prefix = {prefix!r}
c.GPUDockerSpawner.work_volume_template = {prefix + "-work-{username}"!r}
c.GPUDockerSpawner.currency = "CNY"
c.GPUDockerSpawner.profiles = [
    {{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": {IMAGE!r}, "price_per_gpu_hour": "3.00"}},
    {{"slug": "ghost", "gpu_count": 0, "image": {GHOST!r}, "price_per_hour": "0.60"}},
    {{"slug": "ghost-t4", "gpu_model": "T4", "gpu_count": 1, "image": {GHOST!r}, "price_per_gpu_hour": "3.00"}},
    {{"slug": "huge", "gpu_count": 0, "image": {IMAGE!r}, "price_per_hour": "0.60", "cpu_limit": 1000,
      "mem_limit": "1000T"}},
]
c.Spawner.args = []
c.GPUDockerSpawner.cmd = ["jupyterhub-singleuser"]
"""


def test_missing_images_lists_only_those_not_on_the_host():
    client = docker_py.APIClient()
    assert missing_images(client, [IMAGE, GHOST, IMAGE, GHOST]) == [GHOST]
    assert missing_images(client, []) == []


def test_a_missing_image_fails_the_spawn_with_a_clear_message_and_one_log_line(make_hub):
    prefix = f"jhgpu-test-{uuid.uuid4().hex[:6]}"
    hub = make_hub(config(prefix))
    try:
        # the hub starts (other profiles work), tries to pull the missing image in the background (no registry
        # has it) and says which image is missing, and the fix
        line = f"the image {GHOST!r} of profile(s) 'ghost', 'ghost-t4' is not on this Docker host"
        log = wait_for(lambda: (t := hub.log_text()) and line in t and t, 30, what="the pre-pull's failure")
        assert f"image {GHOST}: pull failed" in log
        assert line in log and f"docker pull {GHOST}" in log
        assert [entry[:3] for entry in log.splitlines() if line in entry] == ["[E "]
        # and which profile asks for more than the Docker host has (docker info's figures)
        cpus = docker_py.APIClient().info()["NCPU"]
        assert f"profile 'huge': cpu_limit 1000 is more than the {cpus} CPUs of the Docker host" in log
        assert "profile 'huge': mem_limit 1000.0 TiB is more than the" in log
        assert "limits no server" not in log  # DockerSpawner's own defaults (cpu_limit 0) are no setting

        hub.create_users("sam")
        for _attempt in range(2):
            r = hub.start_server("sam", {"profile": "ghost-t4"})
            if r.status_code not in (201, 202):  # failed within the hub's slow_spawn_timeout
                assert r.status_code == 503 and PULL_FAILED in r.json()["message"], r.text
            else:
                events = hub.progress_events("sam", lambda e: e.get("failed"), timeout=120)
                assert PULL_FAILED in events[-1]["message"], events
            hub.wait_stopped("sam")
            assert hub.gpu_state("sam") == {}
        log = hub.log_text()
        assert "Unhandled error" not in log and "HTTP 500" not in log
        assert sum(line in entry for entry in log.splitlines()) == 1  # once per image for this hub
        # the host's one GPU went back: a profile whose image is there gets it
        assert hub.start_server("sam", {"profile": "t4"}).status_code in (201, 202)
        assert len(hub.wait_ready("sam", timeout=120)["state"]["gpu"]["devices"]) == 1
    finally:
        hub.cleanup()
        remove_by_prefix(prefix)
