"""The one GPU device type and the one reading type, shared by the hub's inventory and the server's sampler.

A :class:`GPUDevice` is what the hub schedules (from NVML, config or a
simulation) and what the server extension reads; a :class:`GPUReading` is one
sample of one device (utilization, memory, temperature, power).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

#: A MIG instance's profile in its NVML name ("NVIDIA A100-SXM4-40GB MIG 1g.10gb", "Simulated A100 MIG 3g.20gb+me").
MIG_NAME_RE = re.compile(r"\bMIG\s+([1-7]g\.[0-9]+gb(?:\+me)?)\s*$")
#: A time-sliced share's uuid: ``<parent uuid>/share-<i>-of-<k>`` (i from 0), in its one spelling (no leading zeros).
SHARE_UUID_RE = re.compile(r"^(?P<parent>.+)/share-(?P<i>0|[1-9][0-9]*)-of-(?P<k>[1-9][0-9]*)$")
#: How many servers may share one GPU (a profile's ``gpu_share``: 2 to this; 1 is a whole GPU).
MAX_SHARES = 16


def share_uuid(parent_uuid: str, index: int, count: int) -> str:
    """The uuid of share ``index`` (from 0) of ``count`` of the GPU ``parent_uuid``."""
    return f"{parent_uuid}/share-{index}-of-{count}"


def parse_share_uuid(text: str) -> tuple[str, int, int] | None:
    """``(parent uuid, share index, share count)`` of a share uuid, or None for any other uuid.

    Only the spelling :func:`share_uuid` writes, with a count a profile may have (2 to :data:`MAX_SHARES`) and
    an index below it: saved state naming one share twice ("share-01-of-4") or a share no profile makes is not
    a share (a restore skips it as an unknown unit)."""
    m = SHARE_UUID_RE.match(text or "") if isinstance(text, str) else None
    if not m:
        return None
    i, k = int(m.group("i")), int(m.group("k"))
    if not 2 <= k <= MAX_SHARES or i >= k:
        return None
    return m.group("parent"), i, k


class InventoryError(RuntimeError):
    """The inventory cannot be read or its configuration is invalid."""


@dataclass(frozen=True)
class GPUDevice:
    """One schedulable unit: a whole GPU, a MIG instance with its own UUID, or a time-sliced share of a GPU.

    A share (``share_count`` set) names its physical GPU in ``parent_uuid`` and
    has ``memory_mib`` = the GPU's memory // ``share_count`` (its cap); its
    uuid is :func:`share_uuid`, and the GPU the container sees is the parent
    (:attr:`visible_uuid`).

    The server extension knows its GPUs by the same type, from what the spawner
    put in its environment (:func:`jupyterhub_gpu.env.devices_from_env`).
    """

    index: str
    uuid: str
    name: str
    memory_mib: int
    simulated: bool = False
    parent_uuid: str | None = None
    #: a time-sliced share: which one (from 0) of how many
    share_index: int | None = None
    share_count: int | None = None

    @property
    def memory_gb(self) -> int:
        return round(self.memory_mib / 1024)

    @property
    def is_share(self) -> bool:
        """A time-sliced share of a physical GPU."""
        return self.share_count is not None

    @property
    def is_mig(self) -> bool:
        """A MIG instance (a slice of its parent GPU with its own UUID)."""
        return self.parent_uuid is not None and not self.is_share

    @property
    def mig_profile(self) -> str | None:
        """A MIG instance's profile ("1g.10gb") from its name; None for anything else."""
        if not self.is_mig:
            return None
        m = MIG_NAME_RE.search(self.name)
        return m.group(1) if m else None

    @property
    def visible_uuid(self) -> str:
        """What NVIDIA_VISIBLE_DEVICES and the Docker device request name: the parent GPU for a share."""
        if self.is_share and self.parent_uuid:
            return self.parent_uuid
        return self.uuid

    @property
    def share_text(self) -> str:
        """ "1/4" for a share (one of four), "" otherwise."""
        return f"1/{self.share_count}" if self.is_share else ""

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "memory_mib": self.memory_mib,
            "simulated": self.simulated,
            "parent_uuid": self.parent_uuid,
            "share_index": self.share_index,
            "share_count": self.share_count,
        }

    @classmethod
    def from_dict(cls, d: dict) -> GPUDevice:
        """The inverse of :meth:`to_dict` (fields other than index, uuid, name and memory_mib optional)."""
        share_index = d.get("share_index")
        share_count = d.get("share_count")
        return cls(
            index=str(d["index"]),
            uuid=d["uuid"],
            name=d["name"],
            memory_mib=int(d["memory_mib"]),
            simulated=bool(d.get("simulated", False)),
            parent_uuid=d.get("parent_uuid"),
            share_index=None if share_index is None else int(share_index),
            share_count=None if share_count is None else int(share_count),
        )


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
    #: "own": utilization_percent is this server's own processes' (per-process utilization);
    #: "gpu": the whole GPU's. On a share or MIG slice memory_used_mib is this server's own memory
    #: and memory_total_mib its cap.
    scope: str = "gpu"
    #: the whole physical GPU, for "GPU busy 40% (shared by 3)" (None when not shared or not known)
    gpu_utilization_percent: int | None = None
    gpu_memory_used_mib: int | None = None
    gpu_memory_total_mib: int | None = None
    #: how many servers hold a share of this GPU, when known
    shared_by: int | None = None
    #: this server's processes on the GPU, when known
    processes: int | None = None
    #: False where the server's own memory cannot be measured (a share read in a container's own PID namespace:
    #: NVML names processes by the host's ids); memory_used_mib is then 0, not a measurement
    memory_known: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def check_unique(devices: list[GPUDevice]) -> None:
    """InventoryError when a UUID is listed twice."""
    seen = set()
    for d in devices:
        if d.uuid in seen:
            raise InventoryError(f"GPU {d.uuid} is listed twice")
        seen.add(d.uuid)
