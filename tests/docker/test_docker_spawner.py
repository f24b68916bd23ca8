"""GPUDockerSpawner against a real Docker engine (make test starts dockerd and builds the image).

The GPUs are the stand-in NVIDIA driver's (tools/nvml-sim; scripts/docker-setup.sh starts the engine with
its hook, so dockerd serves GPU device requests as with the NVIDIA Container Toolkit): the hub lists them
with NVML and each container is created WITH its device request, which the hook serves.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest

from jupyterhub_gpu.gpus.standin import DEFAULT_ROOT, SimGPU, StandIn
from tests.conftest import wait_for

pytestmark = pytest.mark.docker

IMAGE = "jupyterhub-gpu/test-singleuser:latest"
#: the stand-in driver's three GPUs (their uuids depend on index and model only)
STANDIN_GPUS = [SimGPU(i) for i in range(3)]
GPUS = [g.with_uuid().uuid for g in STANDIN_GPUS]


def docker(*args: str, check=True, timeout=120) -> str:
    r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({r.returncode}): {r.stderr[-3000:]}")
    return r.stdout.strip()


def try_gpu_request(*host: str, image: str = IMAGE) -> subprocess.CompletedProcess:
    """``docker [host] run --gpus 1`` of a no-op container: whether (and, in stderr, why not) the engine serves a GPU
    device request (the suite's engine does: the stand-in NVIDIA hook is on its PATH)."""
    return subprocess.run(
        ["docker", *host, "run", "--rm", "--gpus", "1", "--network", "none", "--entrypoint", "true", image],
        capture_output=True,
        text=True,
        timeout=120,
    )


def seed_datasets(name: str) -> None:
    """Create the shared datasets volume ``name`` with one file in it (written as root, read-only later)."""
    docker("volume", "create", name)
    docker(
        "run", "--rm", "--network", "none", "--user", "0", "-v", f"{name}:/d", "--entrypoint", "sh", IMAGE,
        "-c", "echo shared > /d/readme.txt",
    )  # fmt: skip


def remove_by_prefix(prefix: str) -> None:
    """Remove every container and volume whose name starts with a test's prefix."""
    for cid in docker("ps", "-aq", "--filter", f"name={prefix}").split():
        docker("rm", "-f", cid, check=False)
    for vol in docker("volume", "ls", "-q", "--filter", f"name={prefix}").split():
        docker("volume", "rm", "-f", vol, check=False)


@pytest.fixture(scope="module", autouse=True)
def engine():
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker engine: run `make test` (or `make docker-setup test-image`)")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.fail(f"test image {IMAGE} missing: run `make test-image`")


@pytest.fixture
def datasets():
    name = f"jupyterhub-gpu-test-datasets-{uuid.uuid4().hex[:8]}"
    seed_datasets(name)
    yield name
    docker("volume", "rm", "-f", name, check=False)


def standin_hub_config() -> str:
    """Hub config lines that make the stand-in driver (three Simulated T4, :data:`STANDIN_GPUS`) the hub's NVML.

    The state is written now; the hub loads the library by its path before the spawner lists the GPUs (pynvml
    then finds it by its soname), so any hub of these tests reads it, whoever starts the hub.
    """
    standin = StandIn(root=DEFAULT_ROOT)
    standin.write(STANDIN_GPUS)
    return f"""
import ctypes as _ctypes, os as _os
_os.environ.update({standin.environment()!r})
_ctypes.CDLL({str(standin.library)!r})
c.GPUDockerSpawner.gpu_backend = "nvml"
"""


def config(datasets: str, prefix: str) -> str:
    return (
        standin_hub_config()
        + f"""
c.JupyterHub.spawner_class = "gpu-docker"
c.GPUDockerSpawner.network_name = "host"
c.GPUDockerSpawner.prefix = {prefix!r}
c.GPUDockerSpawner.work_volume_template = {prefix + "-work-{username}"!r}
c.GPUDockerSpawner.datasets_volume = {datasets!r}
c.GPUDockerSpawner.pids_limit = 512
c.GPUDockerSpawner.currency = "CNY"
c.GPUDockerSpawner.profiles = [
    {{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": {IMAGE!r},
      "price_per_gpu_hour": "3.00", "mem_limit": "1G", "cpu_limit": 1.5}},
    {{"slug": "t4x2", "gpu_model": "T4", "gpu_count": 2, "image": {IMAGE!r},
      "price_per_gpu_hour": "3.00", "mem_limit": "2G"}},
]
c.Spawner.args = []
c.GPUDockerSpawner.cmd = ["jupyterhub-singleuser"]
"""
    )


@pytest.fixture
def hub(make_hub, datasets):
    prefix = f"jhgpu-test-{uuid.uuid4().hex[:6]}"
    hub = make_hub(config(datasets, prefix))
    hub.prefix = prefix
    yield hub
    hub.cleanup()
    remove_by_prefix(prefix)


def inspect(hub, user: str) -> dict:
    state = hub.server(user)["state"]
    return json.loads(docker("inspect", state["object_id"]))[0]


def test_container_is_hardened_holds_its_gpus_and_mounts_owner_storage(hub, datasets):
    hub.create_users("alice", "bob")
    assert hub.start_server("alice", {"profile": "t4x2"}).status_code in (201, 202)
    assert hub.start_server("bob", {"profile": "t4"}).status_code in (201, 202)
    alice = hub.wait_ready("alice", timeout=120)["state"]["gpu"]
    bob = hub.wait_ready("bob", timeout=120)["state"]["gpu"]
    assert len(alice["devices"]) == 2 and len(bob["devices"]) == 1
    assert not set(alice["devices"]) & set(bob["devices"])
    assert set(alice["devices"]) | set(bob["devices"]) == set(GPUS)

    info = inspect(hub, "alice")
    config, host = info["Config"], info["HostConfig"]
    assert config["Image"] == IMAGE
    assert config["User"] == "1000:100"
    env = dict(e.split("=", 1) for e in config["Env"])
    visible = ",".join(alice["devices"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == visible and env["CUDA_VISIBLE_DEVICES"] == visible
    assert env["JUPYTERHUB_GPU_PROFILE"] == "t4x2"
    assert env["JUPYTERHUB_GPU_RATE_PER_MINUTE"] == "0.1"
    assert env["JUPYTERHUB_GPU_CURRENCY"] == "CNY"
    assert env["JUPYTERHUB_GPU_SESSION_ID"] == alice["session_id"]
    assert env["JUPYTERHUB_GPU_SIMULATED"] == "1"  # the stand-in's GPUs are "Simulated T4"
    assert env["JUPYTERHUB_GPU_READER"] == "nvml"

    # the device request reached the engine, and the (stand-in) NVIDIA hook gave the container those GPUs only
    assert host["DeviceRequests"] == [
        {"Capabilities": [["gpu"]], "Count": 0, "DeviceIDs": alice["devices"], "Driver": "", "Options": {}}
    ]
    assert "jupyterhub-gpu.device-requests" not in config["Labels"]
    nodes = docker("exec", info["Id"], "sh", "-c", "ls /dev | grep '^nvidia[0-9]' || true").split()
    assert sorted(nodes) == sorted(f"nvidia{GPUS.index(u)}" for u in alice["devices"])
    assert config["Labels"]["jupyterhub-gpu.gpus"] == visible
    assert config["Labels"]["jupyterhub-gpu.user"] == "alice"

    assert host["CapDrop"] == ["ALL"]
    assert not host.get("CapAdd")
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["Privileged"] is False
    assert host["Memory"] == 2 * 1024**3
    assert host["PidsLimit"] == 512
    assert host["NetworkMode"] == "host"
    bob_host = inspect(hub, "bob")["HostConfig"]
    assert bob_host["CpuQuota"] == 150_000 and bob_host["CpuPeriod"] == 100_000

    mounts = {m["Destination"]: m for m in info["Mounts"]}
    assert mounts["/home/jovyan/work"]["Name"] == f"{hub.prefix}-work-alice"
    assert mounts["/home/jovyan/work"]["RW"] is True
    assert mounts["/home/jovyan/datasets"]["Name"] == datasets
    assert mounts["/home/jovyan/datasets"]["RW"] is False
    assert set(mounts) == {"/home/jovyan/work", "/home/jovyan/datasets"}

    # inside: uid 1000, no effective capabilities, datasets readable but not writable
    cid = info["Id"]
    assert docker("exec", cid, "id", "-u") == "1000"
    status = docker("exec", cid, "cat", "/proc/1/status")
    assert "CapEff:\t0000000000000000" in status
    assert "NoNewPrivs:\t1" in status
    assert docker("exec", cid, "cat", "/home/jovyan/datasets/readme.txt") == "shared"
    denied = subprocess.run(["docker", "exec", cid, "touch", "/home/jovyan/datasets/x"], capture_output=True, text=True)
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr


def test_storage_persists_and_containers_are_removed_between_sessions(hub):
    hub.create_users("carol")
    hub.start_server("carol", {"profile": "t4"})
    first = inspect(hub, "carol") if hub.wait_ready("carol", timeout=120) else None
    docker("exec", first["Id"], "sh", "-c", "echo kept > /home/jovyan/work/notes.txt")
    hub.stop_server("carol")
    hub.wait_stopped("carol")
    assert docker("ps", "-aq", "--filter", f"id={first['Id']}") == ""  # removed, not just stopped

    hub.start_server("carol", {"profile": "t4"})
    hub.wait_ready("carol", timeout=120)
    second = inspect(hub, "carol")
    assert second["Id"] != first["Id"]
    assert docker("exec", second["Id"], "cat", "/home/jovyan/work/notes.txt") == "kept"
    assert (
        second["Config"]["Labels"]["jupyterhub-gpu.session-id"]
        != first["Config"]["Labels"]["jupyterhub-gpu.session-id"]
    )


def test_only_profile_images_run_and_bad_options_start_no_container(hub):
    hub.create_users("dave")
    r = hub.start_server("dave", {"profile": "t4", "image": "busybox"})
    assert r.status_code == 400 and "Unexpected option(s): image" in r.json()["message"]
    wait_for(lambda: hub.server("dave") is None, 10, what="no server")
    assert docker("ps", "-aq", "--filter", f"name={hub.prefix}") == ""
