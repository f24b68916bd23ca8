"""Simulated GPUs, for the demo and the tests: an inventory and readings, always labelled Simulated.

Every simulated device is named "Simulated ..." so that no user can mistake it
for real hardware. Its readings follow the server's real kernel activity in a
documented way:

- every running kernel holds ``SIM_MEMORY_PER_KERNEL_MIB`` of GPU memory (as a
  TensorFlow kernel that has touched the GPU does), capped at the GPU's total;
- every busy kernel adds ``SIM_UTIL_PER_BUSY_KERNEL`` percentage points of
  utilization, capped at 100; with no busy kernel the GPU is idle (0%);
- temperature is ``30 + util / 2`` °C and power ``20 + 2.5 × util`` W.

So a test that starts one kernel and keeps it busy sees exactly 45% and 1 GiB
per GPU; two busy kernels, 90% and 2 GiB.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass

from jupyterhub_gpu.gpus.device import GPUDevice, GPUReading, InventoryError

SIM_MEMORY_PER_KERNEL_MIB = 1024
SIM_UTIL_PER_BUSY_KERNEL = 45


def simulated_inventory(spec: list[dict]) -> list[GPUDevice]:
    """Devices from ``[{"model": "T4", "count": 2, "memory_gb": 16}, ...]``, named "Simulated T4"."""
    if not isinstance(spec, list):
        raise InventoryError("simulated_gpus must be a list of {'model', 'count', 'memory_gb'} dicts")
    devices = []
    for n, entry in enumerate(spec):
        if not isinstance(entry, dict) or set(entry) - {"model", "count", "memory_gb"}:
            raise InventoryError(
                f"simulated_gpus #{n + 1} must be a dict with keys model, count, memory_gb; got {entry!r}"
            )
        model, count, mem = entry.get("model"), entry.get("count", 1), entry.get("memory_gb", 16)
        if not isinstance(model, str) or not model.strip():
            raise InventoryError(f"simulated_gpus #{n + 1}: 'model' must be a non-empty string")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= 256:
            raise InventoryError(f"simulated_gpus #{n + 1}: 'count' must be an integer from 1 to 256")
        if isinstance(mem, bool) or not isinstance(mem, int) or not 0 < mem <= 4096:
            raise InventoryError(f"simulated_gpus #{n + 1}: 'memory_gb' must be a positive integer")
        for _ in range(count):
            i = len(devices)
            devices.append(
                GPUDevice(
                    index=str(i),
                    # stable across restarts, so saved assignments still name the same device
                    uuid=f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'jupyterhub-gpu-sim/{i}/{model}')}",
                    name=f"Simulated {model.strip()}",
                    memory_mib=mem * 1024,
                    simulated=True,
                )
            )
    return devices


@dataclass(frozen=True)
class KernelActivity:
    """What the simulated GPU reacts to: how many kernels run, and how many are busy."""

    kernels: int = 0
    busy: int = 0


def simulated_reading(device: GPUDevice, activity: KernelActivity) -> GPUReading:
    """The documented response of a simulated GPU to the server's kernels."""
    util = min(100, SIM_UTIL_PER_BUSY_KERNEL * activity.busy)
    memory = min(device.memory_mib, SIM_MEMORY_PER_KERNEL_MIB * activity.kernels)
    return GPUReading(
        index=device.index,
        uuid=device.uuid,
        name=device.name,
        utilization_percent=util,
        memory_used_mib=memory,
        memory_total_mib=device.memory_mib,
        temperature_c=30 + util // 2,
        power_w=round(20 + 2.5 * util, 1),
    )


class SimulatedReader:
    """Readings of simulated GPUs, from the server's kernel activity (the same interface as NVMLReader)."""

    def __init__(self, devices: list[GPUDevice], activity: Callable[[], KernelActivity]):
        self.devices = devices
        self.activity = activity

    def read(self) -> list[GPUReading]:
        activity = self.activity()
        return [simulated_reading(d, activity) for d in self.devices]

    def close(self):
        pass
