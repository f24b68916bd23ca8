"""The ``static`` backend: the GPUs an admin declares in ``static_gpus``, read by the servers with NVML.

The doctor compares a static inventory with the GPUs NVML lists on the host
(:attr:`StaticBackend.host_check`), so a copied configuration fails there, not at
a student's first spawn.
"""

from __future__ import annotations

import re

from jupyterhub_gpu.gpus.backends import GPUBackend
from jupyterhub_gpu.gpus.device import GPUDevice, InventoryError, check_unique
from jupyterhub_gpu.gpus.nvml import nvidia_device_requests


def static_inventory(spec: list[dict]) -> list[GPUDevice]:
    """Devices declared in config: ``[{"index": 0, "uuid": "GPU-...", "name": "Tesla T4", "memory_gb": 16}]``.

    A MIG instance (``"uuid": "MIG-..."``, name like "NVIDIA A100-SXM4-40GB MIG 1g.10gb") may name its
    physical GPU in ``parent_uuid``.
    """
    if not isinstance(spec, list) or not spec:
        raise InventoryError("static_gpus must be a non-empty list of {'index','uuid','name','memory_gb'} dicts")
    devices = []
    for n, entry in enumerate(spec):
        allowed = {"index", "uuid", "name", "memory_gb", "memory_mib", "parent_uuid"}
        if not isinstance(entry, dict) or set(entry) - allowed:
            raise InventoryError(f"static_gpus #{n + 1} must be a dict with keys {sorted(allowed)}; got {entry!r}")
        uuid, name = entry.get("uuid"), entry.get("name")
        index = entry.get("index", n)
        if not isinstance(uuid, str) or not re.fullmatch(r"(GPU|MIG)-[A-Za-z0-9-]+", uuid):
            raise InventoryError(f"static_gpus #{n + 1}: 'uuid' must look like 'GPU-…' or 'MIG-…', got {uuid!r}")
        if not isinstance(name, str) or not name.strip():
            raise InventoryError(f"static_gpus #{n + 1}: 'name' must be a non-empty string")
        if isinstance(index, bool) or not isinstance(index, (int, str)):
            raise InventoryError(f"static_gpus #{n + 1}: 'index' must be an integer or string")
        if "memory_mib" in entry:
            mem = entry["memory_mib"]
        else:
            gb = entry.get("memory_gb", 0)
            mem = gb * 1024 if isinstance(gb, int) and not isinstance(gb, bool) else None
        if isinstance(mem, bool) or not isinstance(mem, int) or mem < 0:
            raise InventoryError(f"static_gpus #{n + 1}: memory must be a non-negative integer")
        parent = entry.get("parent_uuid")
        if parent is not None:
            # a MIG instance names the physical GPU it is a slice of (the form and the advice group by it)
            if not uuid.startswith("MIG-"):
                raise InventoryError(f"static_gpus #{n + 1}: 'parent_uuid' is only for MIG instances ('MIG-…' uuids)")
            if not isinstance(parent, str) or not re.fullmatch(r"GPU-[A-Za-z0-9-]+", parent):
                raise InventoryError(f"static_gpus #{n + 1}: 'parent_uuid' must look like 'GPU-…', got {parent!r}")
        devices.append(GPUDevice(index=str(index), uuid=uuid, name=name.strip(), memory_mib=mem, parent_uuid=parent))
    check_unique(devices)
    listed = {d.uuid for d in devices}
    for n, d in enumerate(devices):
        if d.parent_uuid in listed:
            # a MIG-enabled GPU is scheduled only by its instances: listed whole too, it (and shares of it) would
            # be handed out while a slice of it is held
            raise InventoryError(
                f"static_gpus #{n + 1}: its 'parent_uuid' {d.parent_uuid} is listed as a GPU of its own; a"
                " MIG-enabled GPU is listed only by its MIG instances"
            )
    return devices


class StaticBackend(GPUBackend):
    """Declared NVIDIA GPUs: the hub trusts the list, the servers read the GPUs with NVML."""

    name = "static"
    option = "static_gpus"
    reader = "nvml"
    host_check = "nvml"

    def inventory(self, spec=None) -> list[GPUDevice]:
        return static_inventory(spec or [])

    def device_requests(self, device_ids: list[str]) -> list[dict]:
        return nvidia_device_requests(device_ids)
