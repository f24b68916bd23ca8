"""GPU inventory: which GPUs this host has, from NVML, from config, or simulated.

The three backends are chosen in one place, :func:`make_inventory`. A simulated
inventory names every device "Simulated ..." so that no user can mistake it for
real hardware.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from dataclasses import dataclass

BACKENDS = ("nvml", "static", "simulated")
_TOKEN_SPLIT = re.compile(r"[^a-z0-9.]+")
_MIG_SLICE = re.compile(r"\d+g\.\d+gb")


class InventoryError(RuntimeError):
    """The inventory cannot be read or its configuration is invalid."""


@dataclass(frozen=True)
class GPUDevice:
    """One schedulable GPU: a whole GPU, or a MIG instance with its own UUID."""

    index: str
    uuid: str
    name: str
    memory_mib: int
    simulated: bool = False
    parent_uuid: str | None = None

    @property
    def memory_gb(self) -> int:
        return round(self.memory_mib / 1024)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "memory_mib": self.memory_mib,
            "simulated": self.simulated,
            "parent_uuid": self.parent_uuid,
        }


def _tokens(text: str) -> list[str]:
    return [t for t in _TOKEN_SPLIT.split(text.casefold()) if t]


def model_matches(gpu_model: str, device_name: str) -> bool:
    """Whether a profile's ``gpu_model`` names this device.

    The model's words must appear in the device name as consecutive words, so
    "A100" matches "NVIDIA A100-SXM4-40GB" but "L4" does not match "NVIDIA L40S".
    A MIG instance ("NVIDIA A100-SXM4-40GB MIG 1g.5gb") matches only a model that
    asks for MIG or names a slice ("MIG", "1g.5gb"): an "A100" profile means a
    whole A100, never a slice of one.
    """
    want = _tokens(gpu_model)
    have = _tokens(device_name)
    if not want:
        return False
    if "mig" in have and "mig" not in want and not any(_MIG_SLICE.fullmatch(t) for t in want):
        return False
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


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


def static_inventory(spec: list[dict]) -> list[GPUDevice]:
    """Devices declared in config: ``[{"index": 0, "uuid": "GPU-...", "name": "Tesla T4", "memory_gb": 16}]``."""
    if not isinstance(spec, list) or not spec:
        raise InventoryError("static_gpus must be a non-empty list of {'index','uuid','name','memory_gb'} dicts")
    devices = []
    for n, entry in enumerate(spec):
        allowed = {"index", "uuid", "name", "memory_gb", "memory_mib"}
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
        devices.append(GPUDevice(index=str(index), uuid=uuid, name=name.strip(), memory_mib=mem))
    _check_unique(devices)
    return devices


def nvml_inventory(nvml=None) -> list[GPUDevice]:
    """Devices read with NVML; with MIG enabled, each MIG instance is listed by its own UUID."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as e:  # pragma: no cover - nvidia-ml-py is a dependency
            raise InventoryError(f"nvidia-ml-py is not installed: {e}") from e
    try:
        nvml.nvmlInit()
    except Exception as e:
        raise InventoryError(
            f"NVML could not start ({type(e).__name__}: {e}). Is the NVIDIA driver installed?"
            " Use gpu_backend = 'static' to declare GPUs, or 'simulated' for a demo."
        ) from e
    devices = []
    try:
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(nvml.nvmlDeviceGetName(handle))
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            memory = nvml.nvmlDeviceGetMemoryInfo(handle).total // 1024**2
            mig_on = False
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(handle)
                mig_on = current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
            except Exception:
                mig_on = False  # not a MIG-capable GPU
            if not mig_on:
                devices.append(GPUDevice(index=str(i), uuid=uuid, name=name, memory_mib=memory))
                continue
            for j in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
                except Exception:
                    continue  # an empty MIG slot
                devices.append(
                    GPUDevice(
                        index=f"{i}:{j}",
                        uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                        name=_text(nvml.nvmlDeviceGetName(mig)),
                        memory_mib=nvml.nvmlDeviceGetMemoryInfo(mig).total // 1024**2,
                        parent_uuid=uuid,
                    )
                )
    except Exception as e:
        raise InventoryError(f"NVML could not list the GPUs ({type(e).__name__}: {e})") from e
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    _check_unique(devices)
    return devices


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _check_unique(devices: list[GPUDevice]) -> None:
    seen = set()
    for d in devices:
        if d.uuid in seen:
            raise InventoryError(f"GPU {d.uuid} is listed twice")
        seen.add(d.uuid)


def make_inventory(backend: str, static_gpus=None, simulated_gpus=None) -> list[GPUDevice]:
    """The inventory for a backend name: the one place where the backend is chosen."""
    if backend == "nvml":
        return nvml_inventory()
    if backend == "static":
        return static_inventory(static_gpus or [])
    if backend == "simulated":
        return simulated_inventory(simulated_gpus or [])
    raise InventoryError(f"gpu_backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
