"""Shares of a real GPU (marker ``gpu``): two "servers" on one GPU, each reading only its own processes' memory.

Skipped where NVML cannot start (every CI machine); run on a lent GPU machine by
``scripts/gpu-device-check.sh``. Needs only nvidia-ml-py and the driver's
``libcuda`` (the GPU memory is taken with ``cuMemAlloc`` through ctypes: no
TensorFlow or PyTorch). Each "server" is a process whose child (its "kernel")
holds a different amount of GPU memory, so the reader has to walk the process
tree, as it does for a real server's kernels.
"""

from __future__ import annotations

import ctypes.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout, without installing it (the GPU machine has none of its dependencies)
pytestmark = pytest.mark.gpu

from jupyterhub_gpu.gpus import nvml  # noqa: E402
from jupyterhub_gpu.gpus.device import GPUDevice, InventoryError, share_uuid  # noqa: E402

#: What a CUDA context costs on top of an allocation (driver, lazy module loading): NVML counts it per process.
CONTEXT_OVERHEAD_MIB = 1024

#: A "server": it starts its "kernel" (a child that holds N MiB of GPU memory) and passes on its lines.
SERVER = textwrap.dedent(
    """
    import subprocess, sys
    kernel = subprocess.Popen([sys.executable, "-c", *sys.argv[1:]], stdout=subprocess.PIPE, text=True)
    for line in kernel.stdout:
        print(line.strip(), flush=True)
    sys.exit(kernel.wait())
    """
)

KERNEL = textwrap.dedent(
    """
    import ctypes, os, sys, time
    cuda = ctypes.CDLL("libcuda.so.1")
    def check(result, what):
        if result != 0:
            print(f"failed {what}: CUresult {result}", flush=True)
            sys.exit(1)
    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
    pointer = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(int(sys.argv[1]) * 2**20)), "cuMemAlloc")
    check(cuda.cuMemsetD8_v2(pointer, 1, ctypes.c_size_t(int(sys.argv[1]) * 2**20)), "cuMemsetD8")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    print(f"allocated {os.getpid()}", flush=True)
    time.sleep(float(sys.argv[2]))
    """
)


def _gpu_or_skip() -> GPUDevice:
    try:
        devices = nvml.nvml_inventory()
    except InventoryError as e:
        pytest.skip(f"no usable NVIDIA GPU here: {e}")
    if not devices:
        pytest.skip("NVML lists no GPU")
    if ctypes.util.find_library("cuda") is None and not Path("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists():
        pytest.skip("libcuda is not installed")
    return devices[0]


def _start_server(gpu: GPUDevice, mib: int, seconds: float) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu.uuid}
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, KERNEL, str(mib), str(seconds)], stdout=subprocess.PIPE, text=True, env=env
    )
    line = server.stdout.readline().strip()
    assert line.startswith("allocated "), line
    return server, int(line.split()[1])


def _share(gpu: GPUDevice, i: int, k: int) -> GPUDevice:
    """Share ``i`` of ``k`` of ``gpu``, as the hub's allocator hands it out."""
    return GPUDevice(
        gpu.index,
        share_uuid(gpu.uuid, i, k),
        gpu.name,
        gpu.memory_mib // k,
        parent_uuid=gpu.uuid,
        share_index=i,
        share_count=k,
    )


def test_each_server_reads_its_own_processes_memory_on_a_shared_gpu():
    gpu = _gpu_or_skip()
    print("GPU:", gpu.to_dict(), "initial PID namespace:", nvml.in_initial_pid_namespace())
    a_mib, b_mib = 1024, 3072
    a, a_kernel = _start_server(gpu, a_mib, 40)
    b, b_kernel = _start_server(gpu, b_mib, 40)
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
            deadline = time.time() + 10
            while True:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                if len(procs) >= 2 or time.time() > deadline:
                    break
                time.sleep(0.2)
        finally:
            pynvml.nvmlShutdown()
        reported = {p.pid: (p.usedGpuMemory or 0) // 2**20 for p in procs}
        print("NVML compute processes (pid: MiB):", reported, "kernels:", {"a": a_kernel, "b": b_kernel})
        # NVML's per-process memory: what each allocated, plus its context (whatever the PIDs are)
        used = sorted(reported.values())[-2:]
        assert a_mib <= used[0] <= a_mib + CONTEXT_OVERHEAD_MIB, used
        assert b_mib <= used[1] <= b_mib + CONTEXT_OVERHEAD_MIB, used

        # NVML's PIDs are ours where this process sees the host's namespace (or the driver translated them)
        ours = {a_kernel, b_kernel} <= set(reported)
        if not nvml.in_initial_pid_namespace():
            print("not the host's PID namespace; NVML's PIDs", "are" if ours else "are NOT", "this namespace's")
        k = 4
        share_a, share_b = _share(gpu, 0, k), _share(gpu, 1, k)
        readings = {}
        for name, unit, server in (("a", share_a, a), ("b", share_b, b)):
            reader = nvml.NVMLReader([unit], root_pid=server.pid, pids_in_namespace=True if ours else None)
            try:
                [r] = reader.read()
                time.sleep(1.5)
                [r] = reader.read()  # the second asks per-process utilization since the first
            finally:
                reader.close()
            print(f"server {name}:", r.to_dict())
            readings[name] = r
        ra, rb = readings["a"], readings["b"]
        for r, unit in ((ra, share_a), (rb, share_b)):
            assert r.uuid == unit.uuid and r.memory_total_mib == gpu.memory_mib // k
            assert abs(r.gpu_memory_total_mib - gpu.memory_mib) <= 1
            assert r.gpu_memory_used_mib >= a_mib + b_mib
        if ours:
            # each server's own: its kernel's memory, never the neighbour's
            assert reported[a_kernel] == ra.memory_used_mib and reported[b_kernel] == rb.memory_used_mib
            assert a_mib <= ra.memory_used_mib <= a_mib + CONTEXT_OVERHEAD_MIB
            assert b_mib <= rb.memory_used_mib <= b_mib + CONTEXT_OVERHEAD_MIB
            assert ra.processes == rb.processes == 1
            assert ra.scope in ("own", "gpu") and 0 <= ra.utilization_percent <= 100
        else:
            # PIDs that cannot be matched: nothing attributed, the GPU's utilization, own processes from /proc
            assert ra.memory_used_mib == rb.memory_used_mib == 0 and ra.scope == rb.scope == "gpu"
            assert ra.processes == rb.processes == 1
    finally:
        for pid in (a_kernel, b_kernel):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for server in (a, b):
            server.kill()
            server.wait(timeout=30)
