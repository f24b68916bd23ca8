"""Two servers on shares of one simulated GPU, in real containers of the TensorFlow image (CPU variant).

A real hub with GPUDockerSpawner hands two users a quarter each of its one simulated T4. No NVIDIA runtime
exists here, so the test-only switch ``omit_device_requests`` records the exact request in the container's
``jupyterhub-gpu.device-requests`` label: both name the PARENT GPU's UUID, the same one (the runtime knows no
shares; a share's uuid never reaches Docker). Each environment carries the cap (a quarter of the GPU's
memory) and ``1/4``; and a kernel started through the server applies it: the image's kernel config loads
serverext/memcap.py, whose lines appear in the container's log, and TensorFlow is limited when the notebook
imports it (on 0 GPUs: the CPU build).
"""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import subprocess
import uuid

import pytest
import requests
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from jupyterhub_gpu.gpus.device import parse_share_uuid
from jupyterhub_gpu.gpus.simulated import simulated_inventory
from tests.conftest import Hub, wait_for
from tests.docker.test_docker_spawner import docker as docker_command
from tests.docker.test_docker_spawner import remove_by_prefix

pytestmark = pytest.mark.docker

IMAGE = "jupyterhub-gpu/tensorflow:2.15-cpu"
SIMULATED = [{"model": "T4", "count": 1, "memory_gb": 16}]
(GPU,) = simulated_inventory(SIMULATED)

# TensorFlow in a container is slow to start: three minutes a docker command
docker = functools.partial(docker_command, timeout=180)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker engine: run `make test` (or `make docker-setup tf-test-image`)")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.fail(f"image {IMAGE} missing: run `make tf-test-image`")
    prefix = f"jhgpu-share-{uuid.uuid4().hex[:6]}"
    hub = Hub(
        tmp_path_factory.mktemp("sharehub"),
        f"""
c.JupyterHub.spawner_class = "gpu-docker"
c.GPUDockerSpawner.gpu_backend = "simulated"
c.GPUDockerSpawner.simulated_gpus = {SIMULATED!r}
c.GPUDockerSpawner.omit_device_requests = True
c.GPUDockerSpawner.network_name = "host"
c.GPUDockerSpawner.prefix = {prefix!r}
c.GPUDockerSpawner.work_volume_template = {prefix + "-work-{username}"!r}
c.GPUDockerSpawner.currency = "CNY"
c.GPUDockerSpawner.profiles = [
    {{"slug": "t4-quarter", "display_name": "Quarter T4", "gpu_model": "T4", "gpu_count": 1, "gpu_share": 4,
      "image": {IMAGE!r}, "price_per_gpu_hour": "0.75", "mem_limit": "3G"}},
]
c.Spawner.args = []
c.GPUDockerSpawner.cmd = ["jupyterhub-singleuser"]
""",
    )
    hub.prefix = prefix
    hub.start()
    yield hub
    hub.cleanup()
    remove_by_prefix(prefix)


def user_token(hub, user: str) -> str:
    r = hub.api("POST", f"/users/{user}/tokens", json={"note": "shares test"})
    assert r.status_code == 201, r.text
    return r.json()["token"]


async def execute(hub, user: str, token: str, kernel_id: str, code: str, timeout: float = 180) -> str:
    """Run ``code`` in a kernel of ``user``'s server through the hub's proxy; its stdout once it is done."""
    headers = {"Authorization": f"token {token}"}
    ws = await websocket_connect(
        HTTPRequest(f"ws://127.0.0.1:{hub.port}/user/{user}/api/kernels/{kernel_id}/channels", headers=headers)
    )
    msg_id = uuid.uuid4().hex
    ws.write_message(json.dumps({
        "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": user, "session": "s",
                   "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False},
    }))  # fmt: skip
    out, errors = [], []

    async def until_idle():
        while True:
            raw = await ws.read_message()
            assert raw is not None, "the kernel's websocket closed"
            if not isinstance(raw, str):
                continue
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])
            elif kind == "error":
                errors.append("\n".join(msg["content"]["traceback"]))
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                return

    try:
        await asyncio.wait_for(until_idle(), timeout)
    finally:
        ws.close()
    assert not errors, errors
    return "".join(out)


STATE = """
import json, sys
_s = sys.modules["jupyterhub_gpu.serverext.memcap"].state
print(json.dumps({"cap": _s.cap_mib, "unit": _s.unit, "tensorflow": _s.tensorflow, "gpus": _s.tensorflow_gpus}))
"""


def test_two_shares_of_one_gpu_name_the_same_physical_gpu_and_their_kernels_apply_the_cap(hub):
    hub.create_users("alice", "bob")
    for user in ("alice", "bob"):
        assert hub.start_server(user, {"profile": "t4-quarter"}).status_code in (201, 202)
    servers = {user: hub.wait_ready(user, timeout=180) for user in ("alice", "bob")}

    units = {user: s["state"]["gpu"]["devices"] for user, s in servers.items()}
    shares = {user: [parse_share_uuid(u) for u in devices] for user, devices in units.items()}
    assert [p for (p, _, _) in shares["alice"]] == [p for (p, _, _) in shares["bob"]] == [GPU.uuid]
    assert {k for (_, _, k) in shares["alice"] + shares["bob"]} == {4}
    assert units["alice"] != units["bob"]  # two different shares of the one GPU

    cap = str(GPU.memory_mib // 4)
    assert cap == "4096"
    containers = {}
    for user, server in servers.items():
        info = json.loads(docker("inspect", server["state"]["object_id"]))[0]
        containers[user] = info["Id"]
        config, host = info["Config"], info["HostConfig"]
        # the exact request that would reach the NVIDIA runtime: the physical GPU, never the share
        assert json.loads(config["Labels"]["jupyterhub-gpu.device-requests"]) == [
            {"Capabilities": [["gpu"]], "Count": 0, "DeviceIDs": [GPU.uuid], "Driver": "", "Options": {}}
        ]
        assert not host.get("DeviceRequests")  # left out by the test-only switch
        assert config["Labels"]["jupyterhub-gpu.gpus"] == ",".join(units[user])
        env = dict(e.split("=", 1) for e in config["Env"])
        assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == GPU.uuid
        assert env["JUPYTERHUB_GPU_MEMORY_LIMIT_MIB"] == cap
        assert env["JUPYTERHUB_GPU_SHARE"] == "1/4"
        assert [d["uuid"] for d in json.loads(env["JUPYTERHUB_GPU_DEVICE_INFO"])] == units[user]

    # a kernel of alice's server applies the cap at its start, and limits TensorFlow at its import
    token = user_token(hub, "alice")
    headers = {"Authorization": f"token {token}"}
    r = requests.post(f"{hub.url}/user/alice/api/kernels", headers=headers, json={"name": "python3"}, timeout=60)
    assert r.status_code == 201, r.text
    kernel_id = r.json()["id"]
    started = json.loads(asyncio.run(execute(hub, "alice", token, kernel_id, STATE)).strip().splitlines()[-1])
    assert started == {"cap": 4096, "unit": "share 1/4", "tensorflow": "to be limited at its import", "gpus": None}
    out = asyncio.run(execute(hub, "alice", token, kernel_id, "import tensorflow as tf\nprint(tf.__version__)"))
    assert out.strip() == "2.15.1"
    imported = json.loads(asyncio.run(execute(hub, "alice", token, kernel_id, STATE)).strip().splitlines()[-1])
    assert imported["tensorflow"] == "TensorFlow logical device limit set on 0 GPUs (no GPU visible)"
    assert imported["gpus"] == 0

    # both lines are in the server's log (the container's), where an admin reads them
    head = "jupyterhub-gpu: GPU memory cap 4096 MiB (share 1/4): "
    expected = [
        head + "TensorFlow to be limited at its import; PyTorch not installed",
        head + "TensorFlow logical device limit set on 0 GPUs (no GPU visible)",
    ]

    def cap_lines():
        r = subprocess.run(["docker", "logs", containers["alice"]], capture_output=True, text=True, timeout=60)
        lines = [line for line in (r.stdout + r.stderr).splitlines() if line.startswith("jupyterhub-gpu: GPU memory")]
        return lines if len(lines) >= len(expected) else None

    assert wait_for(cap_lines, 30, what="the cap's lines in alice's container log") == expected
