"""Two real single-user servers on shares of one simulated GPU: each its own memory, the GPU's utilization shared.

The servers' environments are what the spawner writes for two shares of one
GPU (:func:`jupyterhub_gpu.env.make_gpu_env`), with one state directory for the
simulated driver (docs in :mod:`jupyterhub_gpu.gpus.shared_sim`).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from decimal import Decimal

import requests

from jupyterhub_gpu.env import SIM_STATE_DIR, make_gpu_env
from jupyterhub_gpu.gpus.device import GPUDevice, share_uuid
from jupyterhub_gpu.money import to_micros
from jupyterhub_gpu.session import SessionStart
from tests.conftest import wait_for
from tests.serverext.test_stats_api import Server, run_code, server_env

PARENT = "GPU-11111111-2222-3333-4444-555555555555"


def share_env(i: int, state_dir) -> dict:
    unit = GPUDevice(
        index="0",
        uuid=share_uuid(PARENT, i, 4),
        name="Simulated T4",
        memory_mib=16384 // 4,
        simulated=True,
        parent_uuid=PARENT,
        share_index=i,
        share_count=4,
    )
    env = make_gpu_env(
        SessionStart(
            id=f"sess-share-{i}",
            user="",
            server_name="",
            groups=(),
            profile="t4-quarter",
            gpus=tuple([unit.visible_uuid]),
            visible_gpus=tuple([unit.visible_uuid]),
            rate_micros=to_micros(Decimal("0.0125")),
            currency="CNY",
            started=datetime(2026, 1, 1, tzinfo=timezone.utc),
            simulated=True,
        ),
        reader="simulated",
        devices=[unit.to_dict()],
        gpu_model="T4",
        profile_name="¼ T4 (simulated)",
        currency_symbol="¥",
        memory_limit_mib=unit.memory_mib,
        share=unit.share_text,
    )
    return server_env(**env, **{SIM_STATE_DIR: str(state_dir)})


def start_kernel(server) -> str:
    r = requests.post(f"{server.url}/api/kernels", headers=server.headers, json={"name": "python3"}, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def gpu(server) -> dict:
    (g,) = server.stats()["gpus"]
    return g


def test_two_servers_on_shares_of_one_gpu(tmp_path):
    state = tmp_path / "sim-state"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = Server(tmp_path / "a", share_env(0, state))
    try:
        b = Server(tmp_path / "b", share_env(1, state))
        try:
            # before any kernel: both on the GPU, nothing used, each with its 4 GiB cap
            first = wait_for(lambda: (g := gpu(a))["shared_by"] == 2 and g, 30, what="a sees b")
            assert first["uuid"] == share_uuid(PARENT, 0, 4) and first["share"] == "1/4"
            assert (first["memory_used_mib"], first["memory_total_mib"], first["gpu_memory_total_mib"]) == (
                0,
                4096,
                16384,
            )
            assert a.stats()["simulated"] is True and first["name"] == "Simulated T4"

            # a: two kernels, one of them busy; b: one idle kernel
            busy = start_kernel(a)
            start_kernel(a)
            start_kernel(b)
            asyncio.run(run_code(a, busy, "import time; time.sleep(10)"))

            def both_settled():
                ga, gb = gpu(a), gpu(b)
                ok = ga["gpu_utilization_percent"] == 45 == gb["gpu_utilization_percent"]
                ok = ok and ga["memory_used_mib"] == 2048 and gb["memory_used_mib"] == 1024
                return ok and (ga, gb)

            ga, gb = wait_for(both_settled, 30, what="both servers' readings")
            # each its own memory and utilization, under its own cap
            assert (ga["memory_used_mib"], ga["memory_total_mib"], ga["utilization_percent"]) == (2048, 4096, 45)
            assert (gb["memory_used_mib"], gb["memory_total_mib"], gb["utilization_percent"]) == (1024, 4096, 0)
            assert ga["processes"] == 2 and gb["processes"] == 1
            # the same GPU: the same shared utilization and memory, shared by 2
            for g in (ga, gb):
                assert g["scope"] == "own" and g["shared_by"] == 2 and g["share"] == "1/4"
                assert g["gpu_memory_used_mib"] == 3072 and g["gpu_memory_total_mib"] == 16384
            assert gb["uuid"] == share_uuid(PARENT, 1, 4)
            # the chart history is the server's own
            assert max(h["memory_used_mib"] for h in a.stats()["history"]) == 2048
            assert max(h["memory_used_mib"] for h in b.stats()["history"]) == 1024
        finally:
            b.close()
        # b's server is gone: its file went with it, a is alone on the GPU again
        alone = wait_for(lambda: (g := gpu(a))["shared_by"] == 1 and g, 8, what="a alone")
        assert alone["gpu_memory_used_mib"] == alone["memory_used_mib"] == 2048
        assert [p.name for p in (state / PARENT).iterdir()] == ["share-0-of-4.json"]
    finally:
        a.close()
    assert list((state / PARENT).iterdir()) == []
