"""The TensorFlow single-user image (CPU variant) in real containers started by GPUDockerSpawner from a real hub.

`make test` builds jupyterhub-gpu/tensorflow:2.15-cpu from images/tensorflow/Dockerfile
(scripts/build-tf-image.sh cpu). One hub serves every test here; its GPUs are the stand-in NVIDIA driver's
(tools/nvml-sim), so each container is created with its real GPU device request, as in test_docker_spawner.py.
"""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import subprocess
import time
import uuid

import pytest
import requests
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from jupyterhub_gpu.gpus.standin import DEFAULT_ROOT, SimGPU, StandIn
from tests.conftest import Hub, wait_for
from tests.docker.test_docker_spawner import docker as docker_command
from tests.docker.test_docker_spawner import remove_by_prefix

pytestmark = pytest.mark.docker

IMAGE = "jupyterhub-gpu/tensorflow:2.15-cpu"
STANDIN_GPUS = [SimGPU(0), SimGPU(1)]
EXAMPLE = "/opt/jupyterhub-gpu/examples/train-checkpoint-resume.ipynb"


# TensorFlow in a container is slow to start: three minutes a docker command
docker = functools.partial(docker_command, timeout=180)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker engine: run `make test` (or `make docker-setup tf-test-image`)")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.fail(f"image {IMAGE} missing: run `make tf-test-image`")
    prefix = f"jhgpu-tf-{uuid.uuid4().hex[:6]}"
    standin = StandIn(root=DEFAULT_ROOT)
    standin.write(STANDIN_GPUS)
    hub = Hub(
        tmp_path_factory.mktemp("tfhub"),
        f"""
c.JupyterHub.spawner_class = "gpu-docker"
c.GPUDockerSpawner.gpu_backend = "nvml"
c.GPUDockerSpawner.network_name = "host"
c.GPUDockerSpawner.prefix = {prefix!r}
c.GPUDockerSpawner.work_volume_template = {prefix + "-work-{username}"!r}
c.GPUDockerSpawner.environment = {{"JUPYTERHUB_GPU_STARTUP_TIMEOUT": "3"}}
c.GPUDockerSpawner.profiles = [
    {{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": {IMAGE!r},
      "price_per_gpu_hour": "3.00", "mem_limit": "3G"}},
]
c.Spawner.args = []
c.GPUDockerSpawner.cmd = ["jupyterhub-singleuser"]
""",
    )
    hub.prefix = prefix
    hub.env = standin.environment()
    hub.start()
    yield hub
    hub.cleanup()
    remove_by_prefix(prefix)


def container(hub, user: str) -> str:
    return hub.server(user)["state"]["object_id"]


def user_token(hub, user: str) -> str:
    r = hub.api("POST", f"/users/{user}/tokens", json={"note": "tf image test"})
    assert r.status_code == 201, r.text
    return r.json()["token"]


def in_volume(hub, user: str, script: str) -> str:
    """Run ``sh -c script`` as uid 1000 with the user's work volume, without a server."""
    volume = f"{hub.prefix}-work-{user}"
    return docker("run", "--rm", "--network", "none", "--user", "1000:100", "-v", f"{volume}:/home/jovyan/work",
                  "--entrypoint", "sh", IMAGE, "-c", script)  # fmt: skip


def start(hub, user: str) -> str:
    assert hub.start_server(user, {"profile": "t4"}).status_code in (201, 202)
    hub.wait_ready(user, timeout=120)
    return container(hub, user)


def test_image_user_startup_script_example_notebook_and_tensorboard(hub):
    hub.create_users("alice")
    # the startup script is in the user's storage before the server starts
    in_volume(
        hub,
        "alice",
        "mkdir -p ~/work/.jupyterhub-gpu && printf '%s\\n' 'id -u > ~/work/startup-uid' 'echo hello from startup'"
        " 'sleep 120 & echo $! > ~/work/startup-child.pid' 'wait' > ~/work/.jupyterhub-gpu/startup.sh",
    )
    cid = start(hub, "alice")
    labels = json.loads(docker("inspect", cid))[0]["Config"]["Labels"]
    assert labels["jupyterhub-gpu.tensorflow.version"] == "2.15.1"

    # uid 1000, and no way to root: no capabilities, no-new-privileges, no sudo, no setuid program
    assert docker("exec", cid, "id", "-u") == "1000" and docker("exec", cid, "id", "-un") == "jovyan"
    status = docker("exec", cid, "cat", "/proc/1/status")
    assert "CapEff:\t0000000000000000" in status and "NoNewPrivs:\t1" in status
    assert docker("exec", cid, "sh", "-c", "command -v sudo || echo none") == "none"
    setuid = docker("exec", "--user", "0", cid, "sh", "-c", "find / -xdev -type f -perm /6000 2>/dev/null; true")
    assert setuid == ""
    su = subprocess.run(["docker", "exec", cid, "su", "-c", "id -u", "root"], capture_output=True, text=True)
    assert su.returncode != 0 and su.stdout.strip() != "0"

    # the startup script ran as the user and was killed at its 3 s limit, children included
    def startup_log():
        return docker("exec", cid, "cat", "/home/jovyan/work/.jupyterhub-gpu/startup.log", check=False)

    log = wait_for(lambda: "killed at the time limit of 3 s" in (t := startup_log()) and t, 30, what="the kill")
    assert "running /home/jovyan/work/.jupyterhub-gpu/startup.sh as uid 1000" in log and "hello from startup" in log
    assert docker("exec", cid, "cat", "/home/jovyan/work/startup-uid") == "1000"
    child = docker("exec", cid, "cat", "/home/jovyan/work/startup-child.pid")
    assert subprocess.run(["docker", "exec", cid, "kill", "-0", child], capture_output=True).returncode != 0

    # the example notebook runs to completion inside the server's container (nbclient)
    started = time.monotonic()
    output = "--output=/home/jovyan/work/example-ci.ipynb"
    # EXAMPLE_STOP_SERVER=no: a plateau in these 6 epochs must not stop the server the test goes on with
    docker("exec", "-e", "EXAMPLE_RUN=ci", "-e", "EXAMPLE_EPOCHS=6", "-e", "EXAMPLE_STOP_SERVER=no", cid,
           "jupyter", "execute", "--timeout=240", output, EXAMPLE, timeout=300)  # fmt: skip
    ran_for = time.monotonic() - started
    nb = json.loads(docker("exec", cid, "cat", "/home/jovyan/work/example-ci.ipynb"))
    out = "\n".join(
        o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
        for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
    )  # fmt: skip
    assert "TensorFlow 2.15.1" in out and "validation accuracy" in out
    # BudgetGuard read this server's stats with the server's own token (no gpu service here: no budget)
    assert "BudgetGuard: no budget applies to this server" in out
    progress = json.loads(docker("exec", cid, "cat", "/home/jovyan/work/checkpoints/ci/progress.json"))
    assert progress["epoch"] >= 1 and progress["reason"] in ("epoch", "plateau")
    print(f"example notebook: {ran_for:.1f} s, {progress['epoch']} epochs")

    # TensorBoard behind jupyter-server-proxy, reached through the hub's proxy, lists the run
    token = user_token(hub, "alice")
    headers = {"Authorization": f"token {token}"}
    stats = requests.get(f"{hub.url}/user/alice/gpu/api/v1/stats?history=0", headers=headers, timeout=10).json()
    assert stats["tensorboard_url"] == "/user/alice/tensorboard/"  # the panel's "Open TensorBoard"
    info = requests.get(f"{hub.url}/user/alice/server-proxy/servers-info", headers=headers, timeout=10).json()
    (tensorboard,) = [s for s in info["server_processes"] if s["name"] == "tensorboard"]
    assert tensorboard["launcher_entry"]["enabled"] and tensorboard["launcher_entry"]["title"] == "TensorBoard"
    r = requests.get(f"{hub.url}/user/alice/tensorboard/", headers=headers, timeout=90)
    assert r.status_code == 200 and "TensorBoard" in r.text, r.text[:300]

    def runs():
        return requests.get(f"{hub.url}/user/alice/tensorboard/data/runs", headers=headers, timeout=10).json()

    listed = wait_for(lambda: "ci/train" in (rr := runs()) and rr, 40, what="TensorBoard listing the run")
    assert "ci/validation" in listed


MODEL = """
import json, os, time
import numpy as np
import tensorflow as tf
from jupyterhub_gpu.keras import CheckpointAndResume
from jupyterhub_gpu.keras.callbacks import weights_sha256

rng = np.random.default_rng(0)
x = rng.normal(size=(320, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
tf.keras.utils.set_random_seed(int(os.environ.get("SEED", "0")))
model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="adam", loss="binary_crossentropy")

class Probe(tf.keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.begin_sha, self.epochs = weights_sha256(self.model), []
    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(float(os.environ.get("BATCH_SLEEP", "0.05")))

checkpoint = CheckpointAndResume("~/work/checkpoints/preempt", verify=True)
probe = Probe()
"""


def new_kernel(hub, user: str, token: str) -> str:
    headers = {"Authorization": f"token {token}"}
    r = requests.post(f"{hub.url}/user/{user}/api/kernels", headers=headers, json={"name": "python3"}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


async def execute_without_waiting(hub, user: str, token: str, kernel_id: str, code: str) -> None:
    """Start ``code`` in a kernel of ``user``'s server, through the hub's proxy, and leave it running."""
    headers = {"Authorization": f"token {token}"}
    ws = await websocket_connect(
        HTTPRequest(f"ws://127.0.0.1:{hub.port}/user/{user}/api/kernels/{kernel_id}/channels", headers=headers)
    )
    ws.write_message(json.dumps({
        "header": {"msg_id": uuid.uuid4().hex, "msg_type": "execute_request", "username": user, "session": "s",
                   "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False},
    }))  # fmt: skip
    await asyncio.sleep(0.5)
    ws.close()


def test_a_stop_during_training_leaves_a_checkpoint_and_the_next_start_resumes_exactly(hub):
    hub.create_users("bob")
    cid = start(hub, "bob")
    token = user_token(hub, "bob")
    train = MODEL + "model.fit(x, y, batch_size=16, epochs=200, verbose=0, callbacks=[probe, checkpoint])"
    asyncio.run(execute_without_waiting(hub, "bob", token, new_kernel(hub, "bob", token), train))

    def progress():
        text = docker("exec", cid, "cat", "/home/jovyan/work/checkpoints/preempt/progress.json", check=False)
        return json.loads(text) if text else None

    wait_for(lambda: (p := progress()) and p["epoch"] >= 2, 90, what="two epochs of training")
    # the server is stopped as a cull or a budget stop would: the hub stops the container (grace 10 s)
    stopping = time.monotonic()
    assert hub.stop_server("bob").status_code in (202, 204)
    hub.wait_stopped("bob", timeout=60)
    stop_seconds = time.monotonic() - stopping
    saved = json.loads(in_volume(hub, "bob", "cat ~/work/checkpoints/preempt/progress.json"))
    print(f"stop took {stop_seconds:.1f} s; saved {saved}")
    assert saved["reason"] in ("SIGINT", "SIGTERM")  # saved on the stop, not just at the last epoch end
    assert saved["epoch"] >= 2 and saved["weights_sha256"]
    assert stop_seconds < 10  # inside Docker's stop grace period: the checkpoint was not cut off by SIGKILL

    # the next start resumes at the saved epoch with exactly the saved weights
    cid = start(hub, "bob")
    resume = MODEL + (
        f"model.fit(x, y, batch_size=16, epochs={saved['epoch'] + 1}, verbose=0, callbacks=[checkpoint, probe])\n"
        "print(json.dumps({'initial_epoch': checkpoint.initial_epoch, 'epochs': probe.epochs,"
        " 'begin_sha': probe.begin_sha}))"
    )
    resumed = docker("exec", "-e", "SEED=7", "-e", "BATCH_SLEEP=0", cid, "python", "-c", resume, timeout=120)
    result = json.loads(resumed.splitlines()[-1])
    assert result["initial_epoch"] == saved["epoch"]
    assert result["epochs"] == [saved["epoch"]]
    assert result["begin_sha"] == saved["weights_sha256"]
