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

import re
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass

from jupyterhub_gpu.gpus.device import GPUDevice, GPUReading, InventoryError
from jupyterhub_gpu.gpus.names import gpu_family

SIM_MEMORY_PER_KERNEL_MIB = 1024
SIM_UTIL_PER_BUSY_KERNEL = 45
#: A MIG profile's name: compute slices, memory, and "+me" for the media engines.
MIG_PROFILE = re.compile(r"^([1-7])g\.([0-9]+)gb(\+me)?$")


def simulated_inventory(spec: list[dict]) -> list[GPUDevice]:
    """Devices from ``[{"model": "T4", "count": 2, "memory_gb": 16}, ...]``, named "Simulated T4".

    An entry with ``"mig": ["3g.20gb", "1g.10gb", "1g.10gb"]`` lists each of its GPUs as those MIG
    instances (a MIG-enabled GPU is scheduled only by its instances): "Simulated A100 MIG 1g.10gb",
    uuid "MIG-...", the GPU's uuid as ``parent_uuid``, memory from the slice's name.
    """
    if not isinstance(spec, list):
        raise InventoryError("simulated_gpus must be a list of {'model', 'count', 'memory_gb'} dicts")
    devices = []
    physical = 0  # GPUs so far: a GPU's uuid depends on its place only, MIG-enabled or not
    for n, entry in enumerate(spec):
        if not isinstance(entry, dict) or set(entry) - {"model", "count", "memory_gb", "mig"}:
            raise InventoryError(
                f"simulated_gpus #{n + 1} must be a dict with keys model, count, memory_gb (and mig for MIG"
                f" instances); got {entry!r}"
            )
        model, count, mem = entry.get("model"), entry.get("count", 1), entry.get("memory_gb", 16)
        if not isinstance(model, str) or not model.strip():
            raise InventoryError(f"simulated_gpus #{n + 1}: 'model' must be a non-empty string")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= 256:
            raise InventoryError(f"simulated_gpus #{n + 1}: 'count' must be an integer from 1 to 256")
        if isinstance(mem, bool) or not isinstance(mem, int) or not 0 < mem <= 4096:
            raise InventoryError(f"simulated_gpus #{n + 1}: 'memory_gb' must be a positive integer")
        slices = mig_slices(entry.get("mig"), model.strip(), mem, f"simulated_gpus #{n + 1}")
        for _ in range(count):
            i = physical
            physical += 1
            # stable across restarts, so saved assignments still name the same device
            gpu_uuid = f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'jupyterhub-gpu-sim/{i}/{model}')}"
            if slices is None:
                devices.append(
                    GPUDevice(
                        index=str(i),
                        uuid=gpu_uuid,
                        name=f"Simulated {model.strip()}",
                        memory_mib=mem * 1024,
                        simulated=True,
                    )
                )
                continue
            for j, name in enumerate(slices):
                devices.append(
                    GPUDevice(
                        index=f"{i}:{j}",
                        uuid=f"MIG-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'{gpu_uuid}/mig/{j}/{name}')}",
                        name=f"Simulated {model.strip()} MIG {name}",
                        memory_mib=int(MIG_PROFILE.fullmatch(name).group(2)) * 1024,
                        simulated=True,
                        parent_uuid=gpu_uuid,
                    )
                )
    return devices


def mig_slices(value, model: str, memory_gb: int, where: str) -> list[str] | None:
    """The MIG instances of a simulated GPU (None: not MIG-enabled), validated like the driver would."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise InventoryError(
            f"{where}: 'mig' must be a non-empty list of MIG profiles such as ['1g.10gb'], got {value!r}"
        )
    bad = [v for v in value if not isinstance(v, str) or not MIG_PROFILE.fullmatch(v)]
    if bad:
        raise InventoryError(
            f"{where}: 'mig' has {', '.join(map(repr, bad))}, which is not a MIG profile such as '1g.10gb' or '3g.20gb'"
        )
    _, _, whole = gpu_family(model)
    limit = whole if whole > 1 else 7
    compute = sum(int(MIG_PROFILE.fullmatch(v).group(1)) for v in value)
    if compute > limit:
        raise InventoryError(
            f"{where}: 'mig' uses {compute} compute slices ({', '.join(value)}) but one {model} has {limit}"
        )
    memory = sum(int(MIG_PROFILE.fullmatch(v).group(2)) for v in value)
    if memory > memory_gb:
        raise InventoryError(
            f"{where}: 'mig' uses {memory} GB ({', '.join(value)}) but the GPU has {memory_gb} GB ('memory_gb')"
        )
    return list(value)


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
