"""The NVML backend against a real NVIDIA GPU (marker ``gpu``).

Skipped where NVML cannot start, which is every CI machine: these checks run on a
lent GPU machine with ``scripts/gpu-device-check.sh``. That machine has
nvidia-ml-py and PyTorch but not the hub's dependencies: the modules under test
(``jupyterhub_gpu.gpus`` and the server extension's sampler) are pure and import
nothing of JupyterHub. The stats API test needs jupyter_server (carried there as
wheels).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout, without installing it (the GPU machine has none of its dependencies)
pytestmark = pytest.mark.gpu

from jupyterhub_gpu.gpus import names, nvml  # noqa: E402
from jupyterhub_gpu.gpus.device import GPUDevice, InventoryError  # noqa: E402
from jupyterhub_gpu.serverext import sampler  # noqa: E402


def _nvml_or_skip():
    try:
        return nvml.nvml_inventory()
    except InventoryError as e:
        pytest.skip(f"no usable NVIDIA GPU here: {e}")


def _smi() -> list[dict]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in out.strip().splitlines():
        index, uuid, name, memory = (f.strip() for f in line.split(","))
        rows.append({"index": index, "uuid": uuid, "name": name, "memory_mib": int(memory)})
    return rows


def test_nvml_inventory_equals_nvidia_smi():
    devices = _nvml_or_skip()
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not installed")
    smi = _smi()
    print("NVML inventory:", [d.to_dict() for d in devices])
    print("nvidia-smi:", smi)
    # without MIG, one device per GPU, in the same order, with the same UUID, name and memory
    assert [(d.index, d.uuid, d.name) for d in devices] == [(r["index"], r["uuid"], r["name"]) for r in smi]
    for d, r in zip(devices, smi, strict=True):
        assert abs(d.memory_mib - r["memory_mib"]) <= 1
        assert not d.simulated and d.uuid.startswith("GPU-") and d.parent_uuid is None
        # the word a profile would use for this model matches it ("H200" in "NVIDIA H200")
        model = d.name.replace("NVIDIA", "").split()[0]
        assert names.model_matches(model, d.name)
        assert not names.model_matches("Simulated " + model, d.name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LOAD = textwrap.dedent(
    """
    import sys, time, torch
    x = torch.empty(int(sys.argv[1]) * 2**20, dtype=torch.uint8, device="cuda")  # hold N MiB
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    print("loaded", flush=True)
    end = time.time() + float(sys.argv[2])
    while time.time() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
    """
)


def _torch_or_skip():
    try:
        import torch
    except ImportError:
        pytest.skip("PyTorch is not installed (it makes the GPU load)")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")


def test_sampler_reads_real_utilization_and_memory():
    devices = _nvml_or_skip()
    _torch_or_skip()
    d = devices[0]
    info = [GPUDevice(d.index, d.uuid, d.name, d.memory_mib)]
    s = sampler.Sampler(nvml.NVMLReader(info), interval=0.25)
    s.sample_once()
    base = s.latest[0]
    assert base.uuid == d.uuid and base.memory_total_mib == d.memory_mib
    hold_mib = 8192
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(hold_mib), "6"], stdout=subprocess.PIPE, text=True)
    try:
        assert load.stdout.readline().strip() == "loaded"
        s.start()
        time.sleep(4)
        _readings, _at, history, error = s.snapshot()
    finally:
        load.wait(timeout=60)
        s.stop()
    assert error is None
    peak_util = max(h[1] for h in history)
    peak_mem = max(h[2] for h in history)
    print(f"baseline {base.memory_used_mib} MiB {base.utilization_percent}%; load peak {peak_mem} MiB {peak_util}%")
    assert peak_mem >= base.memory_used_mib + hold_mib
    assert peak_util >= 50
    # the load's memory is given back when it exits
    after = nvml.NVMLReader(info)
    try:
        deadline = time.time() + 10
        while (used := after.read()[0].memory_used_mib) > base.memory_used_mib + 512 and time.time() < deadline:
            time.sleep(0.2)
        assert used <= base.memory_used_mib + 512
        r = after.read()[0]
        assert r.temperature_c is not None and 0 < r.temperature_c < 110
        assert r.power_w is not None and r.power_w > 0
    finally:
        after.close()


def test_stats_api_reports_the_real_gpu(tmp_path):
    devices = _nvml_or_skip()
    pytest.importorskip("jupyter_server")
    d = devices[0]
    port, token = _free_port(), "gpu-check-token"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "JUPYTERHUB_GPU_SESSION_ID": "gpu-check",
        "JUPYTERHUB_GPU_PROFILE": "h200",
        "JUPYTERHUB_GPU_PROFILE_NAME": "1x H200",
        "JUPYTERHUB_GPU_MODEL": "H200",
        "JUPYTERHUB_GPU_STARTED": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "JUPYTERHUB_GPU_RATE_PER_MINUTE": "0.5",
        "JUPYTERHUB_GPU_CURRENCY": "CNY",
        "JUPYTERHUB_GPU_SIMULATED": "0",
        "JUPYTERHUB_GPU_DEVICES": d.uuid,
        "JUPYTERHUB_GPU_DEVICE_INFO": json.dumps([d.to_dict() | {"simulated": False}]),
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            "--ServerApp.jpserver_extensions={'jupyterhub_gpu.serverext': True}",
            f"--ServerApp.root_dir={tmp_path}",
            "--GPUStats.interval=0.5",
            "--allow-root",
            "--no-browser",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "server.log", "w"),
    )
    url = f"http://127.0.0.1:{port}/gpu/api/v1/stats?history=0"
    try:
        stats = None
        deadline = time.time() + 60
        while time.time() < deadline and stats is None:
            try:
                req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
                with urllib.request.urlopen(req, timeout=5) as r:
                    stats = json.loads(r.read())
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        assert stats is not None, (tmp_path / "server.log").read_text()[-3000:]
        print("stats:", json.dumps(stats, indent=1))
        assert stats["simulated"] is False and stats["reason"] is None
        [gpu] = stats["gpus"]
        assert gpu["uuid"] == d.uuid and gpu["name"] == d.name
        assert gpu["memory_total_mib"] == d.memory_mib
        assert 0 <= gpu["utilization_percent"] <= 100 and gpu["temperature_c"] > 0
        assert stats["session"]["profile"] == "h200" and stats["session"]["minutes_billed"] >= 1
        # every verb is authenticated: no token, no stats
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(url, timeout=5)
        assert denied.value.code in (401, 403)
    finally:
        server.terminate()
        server.wait(timeout=30)
