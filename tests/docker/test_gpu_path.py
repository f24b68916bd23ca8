"""The real GPU path of a lab server, on the stand-in NVIDIA driver: real device requests, the NVIDIA hook, NVML.

scripts/docker-setup.sh starts the test dockerd with the stand-in ``nvidia-container-runtime-hook`` on its
PATH (scripts/nvml-sim-setup.sh), so dockerd registers its ``nvidia`` device driver as on a lab server with
the NVIDIA Container Toolkit. Here the hub lists the GPUs with NVML (``gpu_backend = "nvml"`` on the stand-in
library), creates containers WITH their GPU device requests (``omit_device_requests`` off), the hook gives
each container its own GPUs and the driver library, and the server extension in the built image (the CPU
variant of images/tensorflow) reads them with pynvml. The GPUs' load is what the test writes into the
stand-in's state file; every GPU is named "Simulated ...".
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import uuid

import pytest
import requests

from jupyterhub_gpu.gpus.standin import DEFAULT_ROOT, SimGPU, SimMIG, SimProcess, StandIn
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import Hub, free_port, gpu_service_registration, wait_for
from tests.docker.test_docker_spawner import docker as docker_command
from tests.docker.test_docker_spawner import remove_by_prefix, try_gpu_request

pytestmark = pytest.mark.docker

IMAGE = "jupyterhub-gpu/tensorflow:2.15-cpu"
docker = functools.partial(docker_command, timeout=180)


@pytest.fixture(scope="module")
def standin():
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker engine: run `make test` (or `make docker-setup tf-test-image`)")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.fail(f"image {IMAGE} missing: run `make tf-test-image`")
    driver = StandIn(root=DEFAULT_ROOT)
    if not driver.library.exists():
        pytest.fail(f"no stand-in driver in {DEFAULT_ROOT}: run scripts/nvml-sim-setup.sh (make docker-setup)")
    driver.write([SimGPU(0), SimGPU(1), SimGPU(2)])
    if try_gpu_request(image=IMAGE).returncode:
        pytest.fail("the Docker engine has no nvidia device driver: scripts/docker-setup.sh starts it with the hook")
    yield driver
    driver.write([SimGPU(i) for i in range(4)])  # as scripts/nvml-sim-setup.sh leaves it


@pytest.fixture(scope="module")
def hub(standin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpupath")
    prefix = f"jhgpu-nvml-{uuid.uuid4().hex[:6]}"
    db_url = f"sqlite:///{tmp / 'ledger.sqlite'}"
    service_port = free_port()
    service_config = tmp / "gpu_service_config.py"
    # the gpu service culls a GPU idle for 2 minutes (warned after 1)
    service_config.write_text(
        f"""
c.GPUService.db_url = {db_url!r}
c.GPUService.tick_interval = 1
c.GPUService.reconcile_interval = 5
c.GPUService.cull_rules = {{"default": [{{"kind": "gpu_idle", "minutes": 2, "warn_minutes": 1, "util_threshold": 5}}]}}
"""
    )
    hub = Hub(
        tmp,
        f"""
from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES
c.JupyterHub.spawner_class = "gpu-docker"
c.GPUDockerSpawner.gpu_backend = "nvml"
c.GPUDockerSpawner.network_name = "host"
c.GPUDockerSpawner.prefix = {prefix!r}
c.GPUDockerSpawner.work_volume_template = {prefix + "-work-{username}"!r}
c.GPUDockerSpawner.ledger_db_url = {db_url!r}
c.GPUDockerSpawner.budget_min_minutes = 0
c.GPUDockerSpawner.gpu_service_url = "http://127.0.0.1:{service_port}/services/gpu/"
c.GPUDockerSpawner.profiles = [
    {{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": {IMAGE!r},
      "price_per_gpu_hour": "3.00", "mem_limit": "2G", "default": True}},
]
c.GPUDockerSpawner.cmd = ["jupyterhub-singleuser"]
c.Spawner.args = ["--GPUStats.push_interval=2", "--GPUStats.interval=0.5"]
"""
        + gpu_service_registration(f"http://127.0.0.1:{service_port}", service_config),
    )
    hub.env = standin.environment()  # the hub lists the GPUs through the stand-in library, as through NVML
    hub.prefix = prefix
    hub.ledger = Ledger(db_url)
    hub.start()
    yield hub
    hub.cleanup()
    remove_by_prefix(prefix)


def user_token(hub, user: str) -> str:
    r = hub.api("POST", f"/users/{user}/tokens", json={"note": "gpu path test"})
    assert r.status_code == 201, r.text
    return r.json()["token"]


def stats(hub, user: str, token: str) -> dict:
    r = requests.get(f"{hub.url}/user/{user}/gpu/api/v1/stats", headers={"Authorization": f"token {token}"}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def in_container(cid: str, code: str) -> str:
    return docker("exec", cid, "python", "-c", code)


@pytest.mark.timeout(900)
def test_a_gpu_server_reads_its_own_gpu_through_nvml_and_an_idle_gpu_is_culled(standin, hub):
    uuids = standin.uuids()
    hub.create_users("busy", "idle")
    for user in ("busy", "idle"):
        assert hub.start_server(user).status_code in (201, 202)
    devices = {user: hub.wait_ready(user, timeout=180)["state"]["gpu"]["devices"] for user in ("busy", "idle")}
    assert all(len(d) == 1 for d in devices.values()) and devices["busy"] != devices["idle"]
    assert set(devices["busy"] + devices["idle"]) <= set(uuids.values())
    index = {u: i for i, u in uuids.items()}
    busy_gpu, idle_gpu = index[devices["busy"][0]], index[devices["idle"][0]]
    # the busy student's GPU computes; a neighbour on the third GPU too, which nobody may see but its owner
    host_pid = int(docker("inspect", "-f", "{{.State.Pid}}", hub.server("busy")["state"]["object_id"]))
    other = next(i for i in uuids if i not in (busy_gpu, idle_gpu))
    standin.write(
        [
            SimGPU(busy_gpu, util=80, processes=(SimProcess(host_pid, used_mib=4096, sm=80),)),
            SimGPU(idle_gpu),
            SimGPU(other, util=100, used_mib=9000),
        ]
    )

    # the container was created with its GPU device request, which the (stand-in) NVIDIA hook served
    cid = hub.server("busy")["state"]["object_id"]
    info = json.loads(docker("inspect", cid))[0]
    requests_sent = info["HostConfig"]["DeviceRequests"]
    assert [(r["DeviceIDs"], r["Capabilities"]) for r in requests_sent] == [(devices["busy"], [["gpu"]])]
    # NVML inside the container lists exactly its own GPU, named as the driver names it
    listed = in_container(
        cid,
        "from jupyterhub_gpu.gpus.nvml import nvml_inventory; import json;"
        "print(json.dumps([(d.uuid, d.name) for d in nvml_inventory()]))",
    )
    assert json.loads(listed) == [[devices["busy"][0], "Simulated T4"]]
    assert docker("exec", cid, "sh", "-c", "ls /dev | grep '^nvidia[0-9]'") == f"nvidia{busy_gpu}"

    # the Lab's stats: the utilization and memory the driver reports, labelled simulated
    token = user_token(hub, "busy")

    def busy_reading():
        body = stats(hub, "busy", token)
        gpus = body.get("gpus") or []
        return gpus and gpus[0]["utilization_percent"] == 80 and gpus[0]["memory_used_mib"] == 4096 and body

    body = wait_for(busy_reading, 60, what="the busy GPU's reading in the stats API")
    assert body["gpus"][0]["name"] == "Simulated T4" and body["gpus"][0]["memory_total_mib"] == 15360
    assert body.get("simulated") is True
    idle_body = stats(hub, "idle", user_token(hub, "idle"))
    assert [(g["utilization_percent"], g["memory_used_mib"]) for g in idle_body["gpus"]] == [(0, 0)]

    # GPU-idle culling: the idle server is warned, then stopped; the busy one runs on
    hub.wait_stopped("idle", timeout=300)
    (record,) = hub.ledger.sessions(user="idle")
    assert record.stop_reason == "gpu_idle"
    assert [n for n in hub.ledger.notices("idle", include_dismissed=True) if n.kind == "cull"]  # warned first
    assert hub.server("busy") is not None and hub.server("busy").get("ready")
    assert not [n for n in hub.ledger.notices("busy", include_dismissed=True) if n.kind == "cull"]


def test_a_mig_slice_is_listed_in_its_container_as_a_handle_of_its_parent(standin):
    a100 = SimGPU(
        3, model="A100", total_mib=40960, mig="on", migs=(SimMIG(0, "3g.20gb", 20480), SimMIG(1, "1g.10gb", 10240))
    )
    standin.write([SimGPU(0), SimGPU(1), SimGPU(2), a100])
    mig = standin.mig_uuids(3)[1]
    code = (
        "import json; from jupyterhub_gpu.gpus.nvml import nvml_inventory;"
        "print(json.dumps([(d.index, d.uuid, d.name, d.parent_uuid) for d in nvml_inventory()]))"
    )
    out = docker(
        "run", "--rm", "--network", "none", "--user", "1000:100", "--cap-drop", "ALL", "--gpus", f"device={mig}",
        "--entrypoint", "python", IMAGE, "-c", code,
    )  # fmt: skip
    # the container was given one slice: NVML lists its parent as GPU 0, with only that slice (slot 1)
    assert json.loads(out) == [["0:1", mig, "Simulated A100 MIG 1g.10gb", standin.uuids()[3]]]
