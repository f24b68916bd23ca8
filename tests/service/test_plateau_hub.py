"""PlateauStop(stop_server=True) in a real kernel of a real server: the session ends with reason ``plateau``.

A real hub with simulated GPUs, the real gpu service over a sqlite ledger; the kernel trains a tiny
TensorFlow model whose loss is flat from the start, so PlateauStop saves a checkpoint and asks its own
server (with the server's token from the kernel's environment) to stop. The ledger's stop reason is
``plateau``, the run notice carries the cost, and the single A100 is free for the next student's spawn.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from datetime import timezone

import pytest
import requests
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.hub

EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.Spawner.args = c.Spawner.args + [
    "--GPUStats.push_interval=2",
    "--GPUStats.interval=1",
    "--GPUStopWhenDone.save_grace_seconds=2",
]
"""

TRAINING = """
import json, os, sys
import numpy as np
import tensorflow as tf
from jupyterhub_gpu.keras import CheckpointAndResume, PlateauStop

x = np.zeros((32, 4), dtype="float32")
y = np.zeros((32, 1), dtype="float32")
model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1, kernel_initializer="zeros")])
model.compile(optimizer="sgd", loss="mse")
checkpoint = CheckpointAndResume(os.path.expanduser("~/work/checkpoints/flat"), verbose=0)
plateau = PlateauStop(monitor="loss", patience=3, stop_server=True, verbose=0)
model.fit(x, y, epochs=50, batch_size=8, verbose=0, callbacks=[checkpoint, plateau])
open(os.path.expanduser("~/work/plateau.json"), "w").write(json.dumps({"message": plateau.message}))
"""


def service_port(config: str) -> int:
    return int(config.split('"url": "http://127.0.0.1:')[1].split('"')[0])


async def run_cell(url: str, token: str, kernel_id: str, code: str) -> None:
    request = HTTPRequest(
        f"{url}/api/kernels/{kernel_id}/channels".replace("http", "ws", 1),
        headers={"Authorization": f"token {token}"},
    )
    ws = await websocket_connect(request)
    ws.write_message(
        json.dumps(
            {
                "header": {
                    "msg_id": uuid.uuid4().hex,
                    "msg_type": "execute_request",
                    "username": "t",
                    "session": uuid.uuid4().hex,
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "content": {"code": code, "silent": False},
                "channel": "shell",
                "buffers": [],
            }
        )
    )
    await asyncio.sleep(1)
    ws.close()


def test_a_plateau_saves_stops_the_server_with_its_cost_and_frees_the_gpu(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("stu1", "stu2")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    hub.start_server("stu1", {"profile": "a100"})  # the only A100
    hub.wait_ready("stu1")
    token = hub.api("POST", "/users/stu1/tokens", json={"note": "t"}).json()["token"]
    base = f"{hub.url}/user/stu1"
    kernel = requests.post(
        f"{base}/api/kernels", headers={"Authorization": f"token {token}"}, json={"name": "python3"}, timeout=30
    ).json()["id"]
    # the server's stop-now endpoint takes only the reason a kernel may give, and stops nothing otherwise
    now_url = f"{base}/gpu/api/v1/stop-when-done/now"
    headers = {"Authorization": f"token {token}"}
    for body in ({"reason": "budget"}, {"reason": "plateau", "extra": 1}, ["plateau"]):
        r = requests.post(now_url, headers=headers, json=body, timeout=30)
        assert r.status_code == 400 and "reason among plateau" in r.text, r.text
    assert requests.get(now_url, headers=headers, timeout=30).status_code == 405
    state = requests.get(f"{base}/gpu/api/v1/stop-when-done", headers=headers, timeout=30).json()
    assert state["state"] == "off" and state["reason"] == "stop_when_done"
    (tmp_path / "homes/stu1/work").mkdir(parents=True, exist_ok=True)
    asyncio.run(run_cell(base, token, kernel, TRAINING))

    hub.wait_stopped("stu1", timeout=180)
    stopped_seen = time.time()
    (record,) = ledger.sessions(user="stu1")
    assert record.stop_reason == "plateau"
    assert abs(record.stopped.replace(tzinfo=timezone.utc).timestamp() - stopped_seen) < 15
    progress = json.loads((tmp_path / "homes/stu1/work/checkpoints/flat/progress.json").read_text())
    assert progress["reason"] == "plateau" and progress["epoch"] == 4  # the anchor, then 3 flat epochs
    said = json.loads((tmp_path / "homes/stu1/work/plateau.json").read_text())["message"]
    assert "saved" in said and said.endswith(
        "stopping the server: the server saves the open notebooks and stops (its GPU is released)"
    )

    notice = wait_for(lambda: [n for n in ledger.notices("stu1") if n.kind == "run"], 30, what="the run notice")
    assert re.search(
        r"stopped when training reached a plateau \(a checkpoint was saved; the GPU is free\): "
        r"\d+ minutes? billed, CN¥\d+\.\d\d",
        notice[0].message,
    ), notice[0].message
    assert f"{record.minutes} minute" in notice[0].message

    # the A100 is free at once: the next student's spawn gets it
    r = hub.start_server("stu2", {"profile": "a100"})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("stu2")
    (second,) = ledger.sessions(user="stu2")
    assert second.profile == "a100" and second.stopped is None
    hub.stop_server("stu2")
    hub.wait_stopped("stu2", timeout=60)
