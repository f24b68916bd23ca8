"""The one NVML code: listing the GPUs of this machine, reading their utilization and memory, the ``nvml`` backend.

The hub lists a host's GPUs with :func:`nvml_inventory` (``gpu_backend =
"nvml"``); a server on Kubernetes lists the GPUs the device plugin gave its pod
the same way; the server extension reads its GPUs with :class:`NVMLReader`.
Both take an ``nvml`` module for tests; by default they import ``pynvml``
(nvidia-ml-py), an optional heavy dependency imported only when NVML is used.
A container gets NVIDIA GPUs by :func:`nvidia_device_requests`.
:class:`NVMLBackend` registers all of this as the ``nvml`` backend (:mod:`.backends`).
"""

from __future__ import annotations

import os
import re

from jupyterhub_gpu.gpus.backends import GPUBackend
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


def is_simulated(name: str) -> bool:
    """Whether NVML's name for a device is a simulated one: the stand-in driver (tools/nvml-sim) names every
    GPU "Simulated ...", so that every label the hub, the form and the Lab show stays true."""
    return name.lower().startswith("simulated")


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
                devices.append(
                    GPUDevice(index=str(i), uuid=uuid, name=name, memory_mib=memory, simulated=is_simulated(name))
                )
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
                        simulated=is_simulated(name),
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


#: The inode of the kernel's initial PID namespace (``PROC_PID_INIT_INO``): the namespace NVML's PIDs are in.
INIT_PID_NAMESPACE_INO = 0xEFFFFFFC


def in_initial_pid_namespace(proc: str = "/proc") -> bool:
    """Whether this process sees the host's PIDs, the ones NVML reports (not so in a container's own namespace)."""
    try:
        return os.stat(f"{proc}/self/ns/pid").st_ino == INIT_PID_NAMESPACE_INO
    except OSError:
        return False


def process_tree(root: int, proc: str = "/proc") -> set[int]:
    """``root`` and every process descended from it, from ``/proc/<pid>/stat`` (a snapshot)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return {root}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, ()))
    return tree


_NVIDIA_DEVICE = re.compile(r"^/dev/nvidia[0-9]+$")


def gpu_processes(pids: set[int], proc: str = "/proc") -> int:
    """How many of ``pids`` hold a GPU device (``/dev/nvidiaN``) open: the processes with a CUDA context."""
    count = 0
    for pid in pids:
        try:
            fds = os.listdir(f"{proc}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if _NVIDIA_DEVICE.match(os.readlink(f"{proc}/{pid}/fd/{fd}")):
                    count += 1
                    break
            except OSError:
                continue
    return count


def _is_error(nvml, e: Exception, name: str, value: int) -> bool:
    return getattr(e, "value", None) == getattr(nvml, name, value)


class NVMLReader:
    """Reads the assigned units through NVML: whole GPUs, MIG instances (by UUID) and shares of a GPU.

    A whole GPU reads as the GPU. A **share** is read on its physical GPU
    (:attr:`GPUDevice.visible_uuid`): ``memory_used_mib`` is this server's own
    processes' memory (``nvmlDeviceGetComputeRunningProcesses``, the processes of
    the server's process tree: the server and its kernels), ``memory_total_mib``
    the share's cap, ``utilization_percent`` the own processes' utilization where
    ``nvmlDeviceGetProcessUtilization`` works (``scope = "own"``), else the whole
    GPU's (``scope = "gpu"``); the ``gpu_*`` figures are the whole GPU's. A
    **MIG slice** is this server's alone: its memory and processes (all of them
    the server's) are read on the slice's own handle.

    NVML reports PIDs of the host's PID namespace. Where the server runs in a
    container with its own PID namespace (Docker, Kubernetes), those PIDs cannot
    be matched with the server's own, so a share's reader attributes nothing by
    PID there: ``memory_used_mib`` is 0 (a neighbour's memory is never counted as
    this server's), utilization is the whole GPU's (``scope = "gpu"``), and
    ``processes`` counts the server's processes that hold the GPU open (from its
    own ``/proc``; no PID of NVML's needed). ``pids_in_namespace`` overrides the
    check (None: :func:`in_initial_pid_namespace`).
    """

    def __init__(
        self,
        devices: list[GPUDevice],
        nvml=None,
        *,
        root_pid: int | None = None,
        pids_in_namespace: bool | None = None,
        proc: str = "/proc",
    ):
        if nvml is None:
            import pynvml as nvml  # optional heavy dependency: nvidia-ml-py, only where NVML is used
        self.nvml = nvml
        self.root_pid = os.getpid() if root_pid is None else root_pid
        self.proc = proc
        self.pids_in_namespace = in_initial_pid_namespace(proc) if pids_in_namespace is None else pids_in_namespace
        nvml.nvmlInit()
        self.devices = list(devices)
        self.handles = []
        self._last_seen: dict[str, int] = {}
        for d in devices:
            uuid = d.visible_uuid
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid.encode() if isinstance(uuid, str) else uuid)
            self.handles.append((d, handle))

    def _optional(self, fn, *args):
        try:
            return fn(*args)
        except Exception:  # not supported on this device (MIG slices have no temperature)
            return None

    def _processes(self, handle) -> list:
        """The compute processes on ``handle`` (``[]`` when NVML cannot list them)."""
        return self._optional(self.nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []

    def _own_utilization(self, d: GPUDevice, handle, own: set[int]) -> int | None:
        """The own processes' SM utilization since the last reading, or None where the driver has none per process."""
        nvml = self.nvml
        since = self._last_seen.get(d.uuid, 0)
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, since)
        except Exception as e:
            if _is_error(nvml, e, "NVML_ERROR_NOT_FOUND", 6) or _is_error(nvml, e, "NVML_SUCCESS", 0):
                return 0  # no process ran on the GPU since the last reading (pynvml raises "success" for none)
            return None  # not supported here (or failing): the whole GPU's utilization stands in
        latest: dict[int, tuple[int, int]] = {}
        for s in samples or ():
            stamp = int(getattr(s, "timeStamp", 0))
            self._last_seen[d.uuid] = max(self._last_seen.get(d.uuid, 0), stamp)
            if s.pid in own and stamp >= latest.get(s.pid, (-1, 0))[0]:
                latest[s.pid] = (stamp, int(s.smUtil))
        return min(100, sum(util for _stamp, util in latest.values()))

    def _unit_reading(self, d: GPUDevice, handle, util, memory, temp, power) -> GPUReading:
        gpu_util = int(util.gpu) if util is not None else None
        processes = self._processes(handle)
        memory_known = True
        if d.is_mig:
            # the slice is this server's alone: every process on it is the server's, whatever PIDs NVML gives
            own_used = int(memory.used // 1024**2)
            own_count = len(processes)
            own_util, scope = gpu_util, "own"
            if own_util is None:  # NVML has no utilization for a slice on most drivers: try its processes'
                own_util = self._own_utilization(d, handle, {p.pid for p in processes})
            if own_util is None:
                own_util, scope = 0, "gpu"
        elif self.pids_in_namespace:
            tree = process_tree(self.root_pid, self.proc)
            mine = [p for p in processes if p.pid in tree]
            own_used = sum(int(p.usedGpuMemory or 0) for p in mine) // 1024**2
            own_count = len(mine)
            own_util = self._own_utilization(d, handle, tree)
            scope = "own" if own_util is not None else "gpu"
            if own_util is None:
                own_util = gpu_util if gpu_util is not None else 0
        else:
            # NVML's PIDs are the host's: nothing can be attributed by PID (never a neighbour's memory), so the
            # own memory is unknown (said so: a 0 here is no measurement for the cap notice or the advice)
            own_used, memory_known = 0, False
            own_count = gpu_processes(process_tree(self.root_pid, self.proc), self.proc)
            own_util, scope = (gpu_util if gpu_util is not None else 0), "gpu"
        return GPUReading(
            index=d.index,
            uuid=d.uuid,
            name=d.name,
            utilization_percent=int(own_util),
            memory_used_mib=int(own_used),
            memory_total_mib=int(d.memory_mib) if d.memory_mib else int(memory.total // 1024**2),
            temperature_c=int(temp) if temp is not None else None,
            power_w=round(power / 1000, 1) if power is not None else None,
            scope=scope,
            gpu_utilization_percent=gpu_util,
            gpu_memory_used_mib=int(memory.used // 1024**2),
            gpu_memory_total_mib=int(memory.total // 1024**2),
            shared_by=None,  # NVML does not know the hub's shares; the service counts them (GET me)
            processes=own_count,
            memory_known=memory_known,
        )

    def read(self) -> list[GPUReading]:
        nvml = self.nvml
        readings = []
        for d, handle in self.handles:
            util = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            temp = self._optional(nvml.nvmlDeviceGetTemperature, handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
            power = self._optional(nvml.nvmlDeviceGetPowerUsage, handle)
            if d.is_share or d.is_mig:
                readings.append(self._unit_reading(d, handle, util, memory, temp, power))
                continue
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


def nvidia_device_requests(device_ids: list[str]) -> list[dict]:
    """Docker ``DeviceRequests`` naming exactly these NVIDIA GPUs (none for CPU-only): the NVIDIA runtime's
    ``gpu`` capability with the GPUs' UUIDs (``MIG-...`` ones too), which the container toolkit makes visible."""
    if not device_ids:
        return []
    return [
        {
            "Driver": "",
            "Count": 0,
            "DeviceIDs": list(device_ids),
            "Capabilities": [["gpu"]],
            "Options": {},
        }
    ]


class NVMLBackend(GPUBackend):
    """The host's NVIDIA GPUs as the driver lists them; servers read them with NVML."""

    name = "nvml"
    label = "NVML"
    reads_mig_mode = True

    def inventory(self, spec=None) -> list[GPUDevice]:
        return nvml_inventory()

    def device_requests(self, device_ids: list[str]) -> list[dict]:
        return nvidia_device_requests(device_ids)

    def open_reader(self, devices, activity, env) -> NVMLReader:
        return NVMLReader(devices)

    def inventory_fix(self, spawner_class: str) -> str:
        return (
            "install the NVIDIA driver and nvidia-ml-py on the hub's host (nvidia-smi must work), or declare"
            f' the GPUs: c.{spawner_class}.gpu_backend = "static" with static_gpus'
        )
