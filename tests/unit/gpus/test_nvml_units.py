"""NVMLReader on shares and MIG slices: the server's own processes' memory and utilization, never a neighbour's.

The nvml module is a stand-in (the driver boundary, the one thing faked); the
processes are real (children of this test), read from the real ``/proc``, except
where a container's ``/proc`` is the point (a directory laid out like one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from jupyterhub_gpu.gpus.device import GPUDevice, share_uuid
from jupyterhub_gpu.gpus.nvml import NVMLReader, gpu_processes, in_initial_pid_namespace, process_tree
from jupyterhub_gpu.serverext.sampler import Aggregate

GPU = "GPU-11111111-2222-3333-4444-555555555555"
MIG = "MIG-66666666-7777-8888-9999-000000000000"
MIB = 1024**2


class FakeNVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNVML:
    """A stand-in for pynvml: GPUs by UUID with memory, utilization and compute processes."""

    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_SUCCESS = 0
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus: dict):
        # uuid -> {"total": MiB, "used": MiB, "util": % or None, "procs": [(pid, MiB or None)], "samples": ...}
        self.gpus = gpus
        self.opened = []
        self.since = []

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        if uuid not in self.gpus:
            raise FakeNVMLError(13)
        self.opened.append(uuid)
        return uuid

    def nvmlDeviceGetMemoryInfo(self, h):
        g = self.gpus[h]
        return SimpleNamespace(total=g["total"] * MIB, used=g["used"] * MIB, free=(g["total"] - g["used"]) * MIB)

    def nvmlDeviceGetUtilizationRates(self, h):
        if self.gpus[h].get("util") is None:
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=self.gpus[h]["util"], memory=0)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 50

    def nvmlDeviceGetPowerUsage(self, h):
        return 70_000

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=None if mib is None else mib * MIB)
            for pid, mib in self.gpus[h].get("procs", [])
        ]

    def nvmlDeviceGetProcessUtilization(self, h, since):
        self.since.append(since)
        samples = self.gpus[h].get("samples")
        if isinstance(samples, int):
            raise FakeNVMLError(samples)
        if not samples:
            raise FakeNVMLError(self.NVML_ERROR_NOT_FOUND)
        return [SimpleNamespace(pid=p, timeStamp=t, smUtil=u, memUtil=0) for p, t, u in samples if t > since]


def a_share(i=0, k=4, total=16384):
    return GPUDevice("0", share_uuid(GPU, i, k), "Tesla T4", total // k, parent_uuid=GPU, share_index=i, share_count=k)


@pytest.fixture
def kernels():
    """Two real processes of this test's process tree (a kernel and its child), ended afterwards."""
    kernel = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"]
    )
    child = None
    for _ in range(100):
        found = [p for p in process_tree(kernel.pid) if p != kernel.pid]
        if found:
            child = found[0]
            break
        time.sleep(0.05)
    assert child is not None
    yield kernel.pid, child
    os.kill(child, 9)
    kernel.kill()
    kernel.wait()


def test_process_tree_is_the_server_and_its_descendants(kernels):
    kernel, child = kernels
    tree = process_tree(os.getpid())
    assert {os.getpid(), kernel, child} <= tree
    assert os.getppid() not in tree  # a process above the server is not its own
    assert process_tree(kernel) == {kernel, child}


def test_a_share_reads_its_own_processes_memory_and_utilization(kernels):
    kernel, child = kernels
    neighbour = os.getppid()  # a process outside this server's tree, on the same GPU
    nvml = FakeNVML(
        {
            GPU: {
                "total": 16384,
                "used": 9000,
                "util": 80,
                "procs": [(kernel, 1500), (child, 500), (neighbour, 6000)],
                "samples": [(kernel, 100, 30), (kernel, 200, 25), (child, 150, 10), (neighbour, 200, 45)],
            }
        }
    )
    reader = NVMLReader([a_share()], nvml, pids_in_namespace=True)
    assert nvml.opened == [GPU]  # a share is read on its physical GPU
    [r] = reader.read()
    assert r.uuid == share_uuid(GPU, 0, 4) and r.name == "Tesla T4"
    assert (r.memory_used_mib, r.memory_total_mib) == (2000, 4096)  # own processes, the share's cap
    assert (r.utilization_percent, r.scope, r.processes) == (35, "own", 2)  # the latest sample of each own pid
    assert (r.gpu_utilization_percent, r.gpu_memory_used_mib, r.gpu_memory_total_mib) == (80, 9000, 16384)
    assert r.shared_by is None and r.temperature_c == 50 and r.power_w == 70.0
    # the next reading asks for samples after the last one seen; none since: own utilization 0
    [r] = reader.read()
    assert nvml.since == [0, 200] and r.utilization_percent == 0 and r.scope == "own"


def test_the_neighbours_server_sees_only_its_own(kernels):
    kernel, child = kernels
    nvml = FakeNVML({GPU: {"total": 16384, "used": 9000, "util": 80, "procs": [(kernel, 1500), (child, 500)]}})
    # "the server" is the kernel's sibling tree: none of the GPU's processes are in it
    other = subprocess.Popen(["sleep", "30"])
    try:
        [r] = NVMLReader([a_share(1)], nvml, root_pid=other.pid, pids_in_namespace=True).read()
    finally:
        other.kill()
        other.wait()
    assert (r.memory_used_mib, r.processes, r.utilization_percent) == (0, 0, 0)
    assert r.gpu_memory_used_mib == 9000


def test_without_per_process_utilization_the_whole_gpus_stands_in(kernels):
    kernel, _child = kernels
    nvml = FakeNVML(
        {
            GPU: {
                "total": 16384,
                "used": 3000,
                "util": 70,
                "procs": [(kernel, None)],
                "samples": FakeNVML.NVML_ERROR_NOT_SUPPORTED,
            }
        }
    )
    [r] = NVMLReader([a_share()], nvml, pids_in_namespace=True).read()
    # usedGpuMemory not available (NVML gives None): counted as 0, the process still counts
    assert (r.utilization_percent, r.scope, r.memory_used_mib, r.processes) == (70, "gpu", 0, 1)
    # no sample at all: pynvml raises its "success" (code 0) for an empty list; own utilization is 0
    nvml.gpus[GPU]["samples"] = FakeNVML.NVML_SUCCESS
    [r] = NVMLReader([a_share()], nvml, pids_in_namespace=True).read()
    assert (r.utilization_percent, r.scope) == (0, "own")


def test_in_a_containers_pid_namespace_nothing_is_attributed_by_pid(tmp_path):
    # NVML's PIDs are the host's: its process 7 (a neighbour's, 6000 MiB) is not the container's own process 7
    nvml = FakeNVML({GPU: {"total": 16384, "used": 9000, "util": 80, "procs": [(7, 6000)], "samples": [(7, 1, 90)]}})
    proc = tmp_path / "proc"
    for pid, ppid, fds in [
        (1, 0, ["/dev/null"]),
        (7, 1, ["/dev/nvidia0", "/dev/nvidiactl"]),
        (9, 1, ["/dev/nvidiactl"]),
    ]:
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (python3 (x) y) S {ppid} 1 1 0 -1\n")
        for n, target in enumerate(fds):
            os.symlink(target, proc / str(pid) / "fd" / str(n + 3))
    assert process_tree(1, str(proc)) == {1, 7, 9}
    assert gpu_processes({1, 7, 9}, str(proc)) == 1  # the one with a GPU open (/dev/nvidiactl alone is not)
    [r] = NVMLReader([a_share()], nvml, root_pid=1, pids_in_namespace=False, proc=str(proc)).read()
    assert (r.memory_used_mib, r.memory_total_mib, r.scope) == (0, 4096, "gpu")
    assert (r.utilization_percent, r.gpu_utilization_percent, r.processes) == (80, 80, 1)
    # the 0 is no measurement: the reading says so, and so does the push (the cap notice and the advice skip it)
    assert r.memory_known is False
    aggregate = Aggregate()
    aggregate.add([r])
    assert aggregate.summary()["gpus"][0]["memory_known"] is False


def test_a_mig_slice_is_all_the_servers(kernels):
    neighbourish = os.getppid()  # whatever PIDs NVML gives for the slice: every process on it is this server's
    mig = GPUDevice("0:1", MIG, "NVIDIA A100-SXM4-40GB MIG 1g.10gb", 9856, parent_uuid="GPU-a100")
    nvml = FakeNVML(
        {
            MIG: {
                "total": 9856,
                "used": 2100,
                "util": None,
                "procs": [(neighbourish, 2000)],
                "samples": [(neighbourish, 5, 60)],
            }
        }
    )
    [r] = NVMLReader([mig], nvml, pids_in_namespace=False).read()
    assert nvml.opened == [MIG] and r.memory_known  # a slice's memory is all its own, whatever the PIDs
    assert (r.memory_used_mib, r.memory_total_mib, r.processes) == (2100, 9856, 1)
    assert (r.utilization_percent, r.scope) == (60, "own")  # from its processes: the slice has no utilization rate
    nvml.gpus[MIG]["samples"] = FakeNVML.NVML_ERROR_NOT_SUPPORTED
    [r] = NVMLReader([mig], nvml).read()
    assert (r.utilization_percent, r.scope) == (0, "gpu")


def test_a_whole_gpu_reads_as_before():
    nvml = FakeNVML({GPU: {"total": 16384, "used": 9000, "util": 80, "procs": [(1, 9000)]}})
    [r] = NVMLReader([GPUDevice("0", GPU, "Tesla T4", 16384)], nvml).read()
    assert (r.utilization_percent, r.memory_used_mib, r.memory_total_mib) == (80, 9000, 16384)
    assert r.scope == "gpu" and r.processes is None and r.gpu_utilization_percent is None


def test_the_pid_namespace_check_answers():
    assert isinstance(in_initial_pid_namespace(), bool)
    assert in_initial_pid_namespace("/nonexistent") is False
