"""The one GPU device type and the one reading type, shared by the hub's inventory and the server's sampler.

A :class:`GPUDevice` is what the hub schedules (from NVML, config or a
simulation) and what the server extension reads; a :class:`GPUReading` is one
sample of one device (utilization, memory, temperature, power).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


class InventoryError(RuntimeError):
    """The inventory cannot be read or its configuration is invalid."""


@dataclass(frozen=True)
class GPUDevice:
    """One schedulable GPU: a whole GPU, or a MIG instance with its own UUID.

    The server extension knows its GPUs by the same type, from what the spawner
    put in its environment (:func:`jupyterhub_gpu.env.devices_from_env`).
    """

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


@dataclass(frozen=True)
class GPUReading:
    """One sample of one device, as the stats API shows it."""

    index: str
    uuid: str
    name: str
    utilization_percent: int
    memory_used_mib: int
    memory_total_mib: int
    temperature_c: int | None
    power_w: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def check_unique(devices: list[GPUDevice]) -> None:
    """InventoryError when a UUID is listed twice."""
    seen = set()
    for d in devices:
        if d.uuid in seen:
            raise InventoryError(f"GPU {d.uuid} is listed twice")
        seen.add(d.uuid)
