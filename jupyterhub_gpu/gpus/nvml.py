"""The one NVML code: listing the GPUs of this machine, and reading their utilization and memory.

The hub lists a host's GPUs with :func:`nvml_inventory` (``gpu_backend =
"nvml"``); a server on Kubernetes lists the GPUs the device plugin gave its pod
the same way; the server extension reads its GPUs with :class:`NVMLReader`.
Both take an ``nvml`` module for tests; by default they import ``pynvml``
(nvidia-ml-py), an optional heavy dependency imported only when NVML is used.
"""

from __future__ import annotations

from jupyterhub_gpu.gpus.device import GPUDevice, GPUReading, InventoryError, check_unique


def _pynvml():
    """The pynvml module, or InventoryError when nvidia-ml-py is not installed."""
    try:
        import pynvml  # optional heavy dependency: nvidia-ml-py, only where NVML is used
    except ImportError as e:  # pragma: no cover - nvidia-ml-py is a dependency
        raise InventoryError(f"nvidia-ml-py is not installed: {e}") from e
    return pynvml


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_inventory(nvml=None) -> list[GPUDevice]:
    """Devices read with NVML; with MIG enabled, each MIG instance is listed by its own UUID."""
    if nvml is None:
        nvml = _pynvml()
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
    check_unique(devices)
    return devices


class NVMLReader:
    """Reads the assigned GPUs (by UUID, MIG instances included) through NVML."""

    def __init__(self, devices: list[GPUDevice], nvml=None):
        if nvml is None:
            import pynvml as nvml  # optional heavy dependency: nvidia-ml-py, only where NVML is used
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = []
        for d in devices:
            handle = nvml.nvmlDeviceGetHandleByUUID(d.uuid.encode() if isinstance(d.uuid, str) else d.uuid)
            self.handles.append((d, handle))

    def _optional(self, fn, *args):
        try:
            return fn(*args)
        except Exception:  # not supported on this device (MIG slices have no temperature)
            return None

    def read(self) -> list[GPUReading]:
        nvml = self.nvml
        readings = []
        for d, handle in self.handles:
            util = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            temp = self._optional(nvml.nvmlDeviceGetTemperature, handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
            power = self._optional(nvml.nvmlDeviceGetPowerUsage, handle)
            readings.append(
                GPUReading(
                    index=d.index,
                    uuid=d.uuid,
                    name=d.name,
                    utilization_percent=int(util.gpu) if util is not None else 0,
                    memory_used_mib=int(memory.used // 1024**2),
                    memory_total_mib=int(memory.total // 1024**2),
                    temperature_c=int(temp) if temp is not None else None,
                    power_w=round(power / 1000, 1) if power is not None else None,
                )
            )
        return readings

    def close(self):
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass
