"""The server extension reads its GPUs with NVML (pynvml over the stand-in driver, tools/nvml-sim) in a real
jupyter server, as on a lab server: the figures are the driver's, and a share's own memory is its processes'."""

from __future__ import annotations

import json
import os

import requests

from jupyterhub_gpu.gpus.device import share_uuid
from jupyterhub_gpu.gpus.standin import SimGPU, SimProcess
from tests.conftest import wait_for
from tests.serverext.test_stats_api import GPU_ENV, Server, server_env


def stand_in_env(driver, library, devices: list[dict], **extra) -> dict:
    return server_env(
        **{
            **GPU_ENV,
            **driver.environment(),
            "LD_LIBRARY_PATH": str(library.parent),
            "JUPYTERHUB_GPU_READER": "nvml",
            "JUPYTERHUB_GPU_DEVICES": ",".join(dict.fromkeys(d.get("parent_uuid") or d["uuid"] for d in devices)),
            "JUPYTERHUB_GPU_DEVICE_INFO": json.dumps(devices),
            **extra,
        }
    )


def gpus(server) -> list[dict]:
    r = requests.get(f"{server.url}/gpu/api/v1/stats?history=0", headers=server.headers, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["gpus"]


def test_a_whole_gpu_reads_what_the_driver_reports_and_follows_it(tmp_path, driver, standin_library):
    driver.write([SimGPU(0, util=75, used_mib=6000), SimGPU(1, util=100, used_mib=15000)])
    mine = {"index": "0", "uuid": driver.uuids()[0], "name": "Simulated T4", "memory_mib": 15360, "simulated": True}
    server = Server(tmp_path, stand_in_env(driver, standin_library, [mine]))
    try:
        first = wait_for(lambda: gpus(server), 30, what="a reading")
        assert [(g["uuid"], g["utilization_percent"], g["memory_used_mib"]) for g in first] == [
            (driver.uuids()[0], 75, 6000)
        ]  # its own GPU only: never the other one's load
        driver.update(0, util=0, used_mib=0)
        wait_for(lambda: gpus(server)[0]["utilization_percent"] == 0, 30, what="the idle reading")
    finally:
        server.close()


def test_a_share_reads_its_own_processes_memory_through_per_process_nvml(tmp_path, driver, standin_library):
    driver.write([SimGPU(0)])
    parent = driver.uuids()[0]
    unit = {
        "index": "0",
        "uuid": share_uuid(parent, 1, 4),
        "name": "Simulated T4",
        "memory_mib": 3840,
        "simulated": True,
        "parent_uuid": parent,
        "share_index": 1,
        "share_count": 4,
    }
    env = stand_in_env(
        driver, standin_library, [unit], JUPYTERHUB_GPU_SHARE="1/4", JUPYTERHUB_GPU_MEMORY_LIMIT_MIB="3840"
    )
    server = Server(tmp_path, env)
    try:
        # the server's own process uses 1 GiB; a neighbour (another process on the host) 8 GiB of the same GPU
        neighbour = os.getpid()
        procs = (SimProcess(server.proc.pid, used_mib=1024, sm=20), SimProcess(neighbour, used_mib=8192, sm=70))
        driver.write([SimGPU(0, util=90, processes=procs)])

        def own():
            (g,) = gpus(server)
            return g["memory_used_mib"] == 1024 and g

        g = wait_for(own, 30, what="the share's own memory")
        assert (g["memory_total_mib"], g["scope"], g["share"]) == (3840, "own", "1/4")
        assert (g["gpu_memory_used_mib"], g["gpu_utilization_percent"]) == (9216, 90)
        assert g["utilization_percent"] == 20  # its own processes' SM share, not the neighbour's
    finally:
        server.close()
