"""The project's NVML code on the stand-in NVIDIA driver (tools/nvml-sim), loaded by pynvml as the real one.

pynvml opens ``libnvidia-ml.so.1`` by that name; the stand-in, opened first by its path, is the library of
that name in this process (the dynamic loader matches its soname), so everything above the C API is the code
a lab server runs: pynvml, :func:`nvml_inventory`, :class:`NVMLReader`.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pynvml
import pytest

from jupyterhub_gpu.gpus.device import GPUDevice, InventoryError, share_uuid
from jupyterhub_gpu.gpus.nvml import NVMLReader, nvml_inventory
from jupyterhub_gpu.gpus.standin import SimGPU, SimMIG, SimProcess, StandInError, main, parse_gpus
from tests.conftest import ROOT


def a100_with_mig(index: int, processes=()) -> SimGPU:
    return SimGPU(
        index,
        model="A100",
        total_mib=40960,
        mig="on",
        migs=(SimMIG(0, "3g.20gb", 20480), SimMIG(1, "1g.10gb", 10240, processes=processes)),
    )


def test_inventory_lists_gpus_and_mig_devices_as_the_driver_names_them(driver):
    driver.write([SimGPU(0), SimGPU(1), a100_with_mig(2)])
    devices = nvml_inventory()
    uuids = driver.uuids()
    assert [(d.index, d.uuid, d.name, d.memory_mib) for d in devices[:2]] == [
        ("0", uuids[0], "Simulated T4", 15360),
        ("1", uuids[1], "Simulated T4", 15360),
    ]
    migs = devices[2:]
    assert [(d.index, d.name, d.memory_mib, d.parent_uuid) for d in migs] == [
        ("2:0", "Simulated A100 MIG 3g.20gb", 20480, uuids[2]),
        ("2:1", "Simulated A100 MIG 1g.10gb", 10240, uuids[2]),
    ]
    assert [d.uuid for d in migs] == driver.mig_uuids(2)
    # every label stays true: a GPU the stand-in reports is a simulated one wherever it is shown
    assert all(d.simulated for d in devices)


def test_only_the_devices_whose_nodes_exist_are_visible(driver):
    driver.write([SimGPU(0), SimGPU(1), a100_with_mig(2)])
    (driver.dev_dir / "nvidia0").unlink()
    first_mig = driver.mig_uuids(2)[0]
    cap = next(m.cap for g in driver.gpus if g.index == 2 for m in g.with_uuid().migs if m.uuid == first_mig)
    (driver.dev_dir / "nvidia-caps" / f"nvidia-cap{cap}").unlink()
    devices = nvml_inventory()
    # GPU 1 is now NVML's index 0, as in a container given only GPU 1; the A100 shows its one visible slice
    assert [(d.index, d.uuid) for d in devices] == [("0", driver.uuids()[1]), ("1:1", driver.mig_uuids(2)[1])]
    pynvml.nvmlInit()
    try:
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetHandleByUUID(driver.uuids()[0].encode())
    finally:
        pynvml.nvmlShutdown()


def test_readings_follow_the_state_as_it_changes(driver):
    driver.write([SimGPU(0, util=80, processes=(SimProcess(4242, used_mib=4096, sm=80),))])
    device = nvml_inventory()[0]
    reader = NVMLReader([device])
    try:
        first = reader.read()[0]
        assert (first.utilization_percent, first.memory_used_mib, first.memory_total_mib) == (80, 4096, 15360)
        assert first.temperature_c == 70 and first.power_w == 220.0
        driver.update(0, util=0, processes=())
        idle = reader.read()[0]
        assert (idle.utilization_percent, idle.memory_used_mib) == (0, 0)
    finally:
        reader.close()


def test_a_share_reads_its_own_processes_by_pid(driver):
    """In the host's PID namespace a share's own memory and utilization are its process tree's, from NVML's
    per-process figures; a neighbour's process on the same GPU counts only in the GPU's figures."""
    me = os.getpid()
    neighbour = os.getppid()
    mine, theirs = SimProcess(me, used_mib=1024, sm=30), SimProcess(neighbour, used_mib=3072, sm=60)
    driver.write([SimGPU(0, util=90, processes=(mine, theirs))])
    gpu = nvml_inventory()[0]
    share = GPUDevice(
        index="0",
        uuid=share_uuid(gpu.uuid, 1, 4),
        name="Simulated T4",
        memory_mib=gpu.memory_mib // 4,
        simulated=True,
        parent_uuid=gpu.uuid,
        share_index=1,
        share_count=4,
    )
    reader = NVMLReader([share], root_pid=me, pids_in_namespace=True)
    try:
        r = reader.read()[0]
    finally:
        reader.close()
    assert (r.memory_used_mib, r.memory_total_mib, r.processes) == (1024, 3840, 1)
    assert (r.utilization_percent, r.scope) == (30, "own")
    assert (r.gpu_utilization_percent, r.gpu_memory_used_mib, r.gpu_memory_total_mib) == (90, 4096, 15360)


def test_in_a_container_a_share_attributes_nothing_by_pid(driver):
    """NVML's PIDs are the host's: in a container's own PID namespace the reader counts no neighbour's memory."""
    driver.write([SimGPU(0, util=50, processes=(SimProcess(os.getpid(), used_mib=2048, sm=50),))])
    gpu = nvml_inventory()[0]
    share = GPUDevice("0", share_uuid(gpu.uuid, 0, 2), "Simulated T4", 7680, True, gpu.uuid, 0, 2)
    reader = NVMLReader([share], pids_in_namespace=False)
    try:
        r = reader.read()[0]
    finally:
        reader.close()
    assert (r.memory_used_mib, r.memory_known, r.scope, r.utilization_percent) == (0, False, "gpu", 50)


def test_a_mig_slice_reads_its_own_processes_and_has_no_sensors(driver):
    driver.write([a100_with_mig(0, processes=(SimProcess(777, used_mib=512, sm=40),))])
    slices = nvml_inventory()
    reader = NVMLReader(slices)
    try:
        big, small = reader.read()
    finally:
        reader.close()
    assert (big.memory_used_mib, big.processes, big.utilization_percent) == (0, 0, 0)
    assert (small.memory_used_mib, small.processes, small.utilization_percent, small.scope) == (512, 1, 40, "own")
    assert small.temperature_c is None and small.power_w is None


def test_the_driver_answers_with_nvml_error_codes(driver):
    driver.write([SimGPU(0), a100_with_mig(1)])
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetName(handle) == "Simulated T4"
        assert pynvml.nvmlSystemGetDriverVersion() == "550.54.15"
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetHandleByIndex(5)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetMigMode(handle)  # a T4 has no MIG
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            pynvml.nvmlDeviceGetFanSpeed(handle)  # not part of the stand-in: NVML's own answer
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetProcessUtilization(handle, 0)  # no process used it
        a100 = pynvml.nvmlDeviceGetHandleByIndex(1)
        assert pynvml.nvmlDeviceGetMigMode(a100) == [1, 1]
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(a100, 0)
        assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1  # pynvml returns the c_uint
        assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)) == driver.uuids()[1]
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(a100, 5)  # an empty slot
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetTemperature(mig, pynvml.NVML_TEMPERATURE_GPU)
        lib = pynvml.nvmlLib
        small = ctypes.create_string_buffer(4)
        assert lib.nvmlDeviceGetName(handle, small, ctypes.c_uint(4)) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    finally:
        pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_no_state_is_a_machine_without_a_driver(driver):
    with pytest.raises(InventoryError, match="Is the NVIDIA driver installed"):
        nvml_inventory()
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()


def test_a_state_the_driver_cannot_hold_is_refused_and_nothing_is_written(driver):
    for bad in (
        [SimGPU(0, util=101)],
        [SimGPU(0), SimGPU(0)],
        [SimGPU(0, model="T4\nprocess uuid=x pid=1")],
        [SimGPU(0, mig="off", migs=(SimMIG(0, "1g.10gb", 10240),))],
        [SimGPU(0, processes=(SimProcess(0),))],
    ):
        with pytest.raises(StandInError):
            driver.write(bad)
        assert not driver.state_file.exists()
    for text in ("", "T4x0", "T4x99", "T 4", "T4xabc"):
        with pytest.raises(StandInError):
            parse_gpus(text)
    assert main(["--root", str(driver.root), "--gpus", "T4x2,A100"]) == 0
    assert [d.name for d in nvml_inventory()] == ["Simulated T4", "Simulated T4", "Simulated A100"]
    assert main(["--root", str(driver.root), "--gpus", "bogus x"]) == 2


def test_pynvml_in_a_fresh_process_loads_the_standin_by_its_path(driver, standin_library):
    """What a hub or server on a machine with the stand-in does: LD_LIBRARY_PATH, nothing preloaded."""
    driver.write([SimGPU(0), SimGPU(1)])
    env = {**os.environ, **driver.environment(), "LD_LIBRARY_PATH": str(standin_library.parent)}
    code = "from jupyterhub_gpu.gpus.nvml import nvml_inventory; print([d.name for d in nvml_inventory()])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['Simulated T4', 'Simulated T4']"


def test_the_comparison_with_a_real_driver_runs_on_the_standin(driver, standin_library, tmp_path):
    """tools/nvml-sim/compare.py (scripts/gpu-device-check.sh): its probe through the stand-in gives NVML's
    types, units (memory in bytes) and error codes; a changed unit or code is a difference it reports."""
    driver.write([SimGPU(0, util=50, used_mib=2048, processes=(SimProcess(4242, 1024, 10),))])
    env = {**os.environ, **driver.environment(), "LD_LIBRARY_PATH": str(standin_library.parent)}
    tool = str(ROOT / "tools/nvml-sim/compare.py")
    out = subprocess.run([sys.executable, tool, "probe"], env=env, capture_output=True, text=True, check=True)
    probe = json.loads(out.stdout)
    assert probe["memory"] == {"type": "c_nvmlMemory_t", "fields": {"total": "bytes", "free": "bytes", "used": "bytes"}}
    assert probe["utilization"]["fields"] == {"gpu": "small", "memory": "small"}
    assert probe["power"] == {"type": "int", "unit": "large"}  # milliwatts
    assert probe["index_past_the_last"] == {"error": pynvml.NVML_ERROR_INVALID_ARGUMENT}
    assert probe["unknown_uuid"] == {"error": pynvml.NVML_ERROR_NOT_FOUND}
    assert probe["name_buffer_too_small"] == {"error": pynvml.NVML_ERROR_INSUFFICIENT_SIZE}
    (tmp_path / "a.json").write_text(json.dumps(probe))
    same = subprocess.run([sys.executable, tool, "diff", tmp_path / "a.json", tmp_path / "a.json"], capture_output=True)
    assert same.returncode == 0
    (tmp_path / "b.json").write_text(json.dumps({**probe, "power": {"type": "float", "unit": "float"}}))
    other = subprocess.run(
        [sys.executable, tool, "diff", tmp_path / "a.json", tmp_path / "b.json"], capture_output=True, text=True
    )
    assert other.returncode == 1 and "power: real" in other.stdout
