"""The server extension in a real jupyter server: auth on every verb, simulated GPUs following kernels."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
import requests
from tornado.websocket import websocket_connect

from tests.conftest import free_port, wait_for

BIN = Path(sys.executable).parent
TOKEN = "test-token"
U0 = "GPU-11111111-2222-3333-4444-555555555555"


def server_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTERHUB")}
    env.update(extra)
    return env


GPU_ENV = {
    "JUPYTERHUB_GPU_SESSION_ID": "sess-1",
    "JUPYTERHUB_GPU_PROFILE": "t4",
    "JUPYTERHUB_GPU_PROFILE_NAME": "1× T4",
    "JUPYTERHUB_GPU_MODEL": "T4",
    "JUPYTERHUB_GPU_DEVICES": U0,
    "JUPYTERHUB_GPU_DEVICE_INFO": json.dumps([{"index": "0", "uuid": U0, "name": "Simulated T4", "memory_mib": 16384}]),
    "JUPYTERHUB_GPU_RATE_PER_MINUTE": "0.05",
    "JUPYTERHUB_GPU_CURRENCY": "CNY",
    "JUPYTERHUB_GPU_CURRENCY_SYMBOL": "¥",
    "JUPYTERHUB_GPU_STARTED": "2026-01-01T00:00:00Z",
    "JUPYTERHUB_GPU_SIMULATED": "1",
}


class Server:
    def __init__(self, tmp_path, env, args=()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp_path / "server.log", "wb")
        self.proc = subprocess.Popen(
            [
                str(BIN / "jupyter"),
                "server",
                "--no-browser",
                "--allow-root",
                f"--port={self.port}",
                "--ip=127.0.0.1",
                f"--IdentityProvider.token={TOKEN}",
                f"--ServerApp.root_dir={tmp_path}",
                "--GPUStats.interval=0.2",
                *args,
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        self.tmp_path = tmp_path
        wait_for(self._up, 60, what="jupyter server")

    def _up(self):
        assert self.proc.poll() is None, (self.tmp_path / "server.log").read_text()
        try:
            return requests.get(f"{self.url}/api/status", headers=self.headers, timeout=2).ok
        except requests.RequestException:
            return False

    headers = {"Authorization": f"token {TOKEN}"}

    def stats(self) -> dict:
        r = requests.get(f"{self.url}/gpu/api/v1/stats", headers=self.headers, timeout=5)
        assert r.status_code == 200, r.text
        return r.json()

    def close(self):
        self.proc.terminate()
        self.proc.wait(20)
        self.log.close()


@pytest.fixture
def gpu_server(tmp_path):
    server = Server(tmp_path, server_env(**GPU_ENV))
    yield server
    server.close()


def test_every_verb_needs_a_token(gpu_server):
    for method, path in [
        ("GET", "stats"),
        ("POST", "stats"),
        ("POST", "notices/1/dismiss"),
        ("POST", "stop"),
        ("GET", "stop"),
    ]:
        r = requests.request(method, f"{gpu_server.url}/gpu/api/v1/{path}", timeout=5)
        assert r.status_code in (401, 403, 405), (method, path, r.status_code)
        assert r.status_code != 200
    bad = requests.get(f"{gpu_server.url}/gpu/api/v1/stats", headers={"Authorization": "token wrong"}, timeout=5)
    assert bad.status_code in (401, 403)


def test_simulated_stats_follow_kernel_activity(gpu_server):
    stats = gpu_server.stats()
    assert stats["simulated"] is True and stats["reason"] is None
    (gpu,) = stats["gpus"]
    assert gpu["name"] == "Simulated T4" and gpu["uuid"] == U0
    assert gpu["utilization_percent"] == 0 and gpu["memory_used_mib"] == 0 and gpu["memory_total_mib"] == 16384
    session = stats["session"]
    assert session["profile"] == "t4" and session["rate_per_minute"] == "0.05" and session["currency_symbol"] == "¥"
    assert session["minutes_billed"] > 1000
    assert Decimal(session["cost"]) == session["minutes_billed"] * Decimal("0.05")
    assert "E" not in session["cost"]

    # a kernel holds 1 GiB; a busy kernel makes 45%
    r = requests.post(f"{gpu_server.url}/api/kernels", headers=gpu_server.headers, json={"name": "python3"}, timeout=30)
    kernel_id = r.json()["id"]
    wait_for(lambda: gpu_server.stats()["gpus"][0]["memory_used_mib"] == 1024, 30, what="kernel memory")
    assert gpu_server.stats()["gpus"][0]["utilization_percent"] == 0
    asyncio.run(run_code(gpu_server, kernel_id, "import time; time.sleep(6)"))
    busy = wait_for(lambda: (g := gpu_server.stats()["gpus"][0])["utilization_percent"] == 45 and g, 30, what="busy")
    assert busy["memory_used_mib"] == 1024 and busy["temperature_c"] == 52 and busy["power_w"] == 132.5
    wait_for(lambda: gpu_server.stats()["gpus"][0]["utilization_percent"] == 0, 30, what="idle again")
    history = gpu_server.stats()["history"]
    assert any(h["utilization_percent"] == 45 for h in history) and history[-1]["memory_total_mib"] == 16384
    light = requests.get(f"{gpu_server.url}/gpu/api/v1/stats?history=0", headers=gpu_server.headers, timeout=5).json()
    assert "history" not in light and light["gpus"][0]["uuid"] == U0


async def run_code(server, kernel_id, code):
    ws = await websocket_connect(f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels?token={TOKEN}")
    msg_id = uuid.uuid4().hex
    ws.write_message(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "msg_type": "execute_request",
                    "username": "t",
                    "session": "s",
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "content": {
                    "code": code,
                    "silent": False,
                    "store_history": False,
                    "user_expressions": {},
                    "allow_stdin": False,
                },
                "channel": "shell",
                "buffers": [],
            }
        )
    )
    ws.close()


def test_cpu_only_server_reports_no_gpu_and_why(tmp_path):
    env = dict(GPU_ENV, JUPYTERHUB_GPU_DEVICES="", JUPYTERHUB_GPU_DEVICE_INFO="[]", JUPYTERHUB_GPU_SIMULATED="0")
    server = Server(tmp_path, server_env(**env))
    try:
        stats = server.stats()
    finally:
        server.close()
    assert stats["gpus"] == [] and stats["reason"] == "No GPU is assigned to this server (CPU-only profile)."
    assert stats["session"]["profile"] == "t4"


def test_real_gpu_without_nvml_says_nvml_is_unavailable(tmp_path):
    env = dict(GPU_ENV, JUPYTERHUB_GPU_SIMULATED="0")
    server = Server(tmp_path, server_env(**env))
    try:
        stats = server.stats()
    finally:
        server.close()
    assert stats["simulated"] is False and stats["gpus"] == []
    assert stats["reason"].startswith("NVML is unavailable:")
