"""GPU-aware culling with a real hub, real servers pushing simulated GPU samples, and the real service."""

from __future__ import annotations

import asyncio
import json
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
c.Spawner.args = c.Spawner.args + ["--GPUStats.push_interval=2", "--GPUStats.interval=0.5"]
"""

RULES = """
c.GPUService.cull_rules = {"default": [{"kind": "gpu_idle", "minutes": 2, "warn_minutes": 1, "util_threshold": 5}]}
"""


def service_port(config: str) -> int:
    return int(config.split('"url": "http://127.0.0.1:')[1].split('"')[0])


async def busy_cell(url: str, token: str, kernel_id: str, seconds: int) -> None:
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
                "content": {"code": f"import time; time.sleep({seconds})", "silent": False},
                "channel": "shell",
                "buffers": [],
            }
        )
    )
    await asyncio.sleep(1)
    ws.close()


def test_idle_gpu_is_warned_then_stopped_and_activity_cancels(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    (tmp_path / "gpu_service_config.py").open("a").write(RULES)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("idle", "busy")
    hub.start_server("idle", {"profile": "t4"})
    hub.start_server("busy", {"profile": "t4"})
    hub.wait_ready("idle")
    hub.wait_ready("busy")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    token = hub.api("POST", "/users/busy/tokens", json={"note": "t"}).json()["token"]
    base = f"{hub.url}/user/busy"
    kernel = requests.post(
        f"{base}/api/kernels", headers={"Authorization": f"token {token}"}, json={"name": "python3"}, timeout=30
    ).json()["id"]

    # about a minute of an idle GPU: both are warned
    warned = wait_for(
        lambda: [n for n in ledger.notices("idle") if n.kind == "cull"], 150, interval=1, what="idle warning"
    )
    assert "idle" in warned[0].message and warned[0].level == "warning"
    wait_for(lambda: [n for n in ledger.notices("busy") if n.kind == "cull"], 30, interval=1, what="busy warned")

    # "busy" answers the warning by using the GPU (a busy kernel drives the simulated GPU to 45%)
    asyncio.run(busy_cell(base, token, kernel, 20))
    cancelled = wait_for(
        lambda: [n for n in ledger.notices("busy") if n.kind == "cull" and n.level == "info"],
        60,
        interval=1,
        what="the warning cancelled",
    )
    assert cancelled

    # "idle" is stopped when its GPU has been idle for the configured 2 minutes
    hub.wait_stopped("idle", timeout=120)
    stopped_at = time.time()
    (record,) = ledger.sessions(user="idle")
    assert record.stop_reason == "gpu_idle"
    assert abs(record.stopped.replace(tzinfo=timezone.utc).timestamp() - stopped_at) < 15
    assert record.minutes in (2, 3)  # billing ended at the stop
    idle_warned = ledger.get_session(record.id)
    assert idle_warned.cull_rule == "gpu_idle"

    # "busy" still runs after its would-be stop time
    assert hub.server("busy")["ready"]
    assert ledger.sessions(user="busy")[0].stopped is None
