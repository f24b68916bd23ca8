"""The simulated driver of a shared GPU: each server's own figures, and the whole GPU's over all its servers.

A time-sliced share (:attr:`GPUDevice.is_share`) is one of ``k`` servers on one
physical GPU. A real driver tells each of them its own processes' memory and
utilization (NVML per process, :class:`jupyterhub_gpu.gpus.nvml.NVMLReader`)
and the whole GPU's utilization. The simulation does the same for the servers of
one machine through a **state directory** they share
(``JUPYTERHUB_GPU_SIM_STATE_DIR``, default ``<tempdir>/jupyterhub-gpu-sim/<the hub's API URL>``):

- at each reading a server writes its own kernel activity for its GPU to
  ``<state dir>/<parent uuid>/share-<i>-of-<k>.json`` (a temporary file renamed
  over the old one, so a reader never sees half a file) and reads its
  neighbours' files; a file written more than :data:`STALE_SECONDS` ago is a
  server that went away and is ignored; a server removes its file when it closes;
- its own figures follow its own kernels as a whole simulated GPU does
  (:mod:`jupyterhub_gpu.gpus.simulated`): 1 GiB per running kernel, capped at
  the share's memory (its cap), and 45% per busy kernel: the simulated driver
  gives per-process utilization, so ``utilization_percent`` is the server's own
  with ``scope = "own"``; ``processes`` is its running kernels;
- the whole GPU's figures add up every fresh server of that GPU:
  ``gpu_utilization_percent`` = 45% per busy kernel of all of them (capped at
  100), ``gpu_memory_used_mib`` their memory, ``gpu_memory_total_mib`` the GPU's
  (the cap × k), and ``shared_by`` how many servers have a fresh file (this one
  included); temperature and power are the GPU's (from its utilization).

A MIG slice is not shared: compute and memory are its own (MIG isolates them),
so its reading is the simulated GPU's response to this server's kernels, with
``scope = "own"``, ``processes`` its kernels, the ``gpu_*`` figures those of the
slice and no ``shared_by``; it writes no state file. A whole simulated GPU reads
as :func:`jupyterhub_gpu.gpus.simulated.simulated_reading` says, unchanged.

:class:`SimulatedBackend` registers the simulation as the ``simulated`` backend
(:mod:`.backends`): the inventory of :mod:`.simulated`, read by
:class:`~jupyterhub_gpu.gpus.simulated.SimulatedReader` where every unit is a
whole GPU and by :class:`SharedSimReader` where one is a share or a MIG slice.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from jupyterhub_gpu.env import sim_state_dir_from_env
from jupyterhub_gpu.gpus.backends import GPUBackend
from jupyterhub_gpu.gpus.device import GPUDevice, GPUReading
from jupyterhub_gpu.gpus.nvml import nvidia_device_requests
from jupyterhub_gpu.gpus.simulated import (
    SIM_MEMORY_PER_KERNEL_MIB,
    SIM_UTIL_PER_BUSY_KERNEL,
    KernelActivity,
    SimulatedReader,
    simulated_inventory,
    simulated_reading,
)

#: A neighbour's file older than this (seconds) is a server that went away.
STALE_SECONDS = 10.0

#: A share's state file: ``share-<i>-of-<k>.json`` (:meth:`SharedSimReader._own_file`).
SHARE_FILE = re.compile(r"share-(0|[1-9][0-9]?)-of-([1-9][0-9]?)\.json")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def default_state_dir(hub: str = "") -> Path:
    """Where the servers of this machine meet when no state directory is configured.

    ``hub`` (the hub's API URL, which every server of one hub has) keeps the
    servers of two hubs on one machine apart: both simulate GPUs of the same
    stable UUIDs, and must not count each other's servers.
    """
    base = Path(tempfile.gettempdir()) / "jupyterhub-gpu-sim"
    return base / _UNSAFE.sub("_", hub) if hub else base


def _own_memory(cap_mib: int, kernels: int) -> int:
    return min(cap_mib, SIM_MEMORY_PER_KERNEL_MIB * max(0, kernels))


def _own_util(busy: int) -> int:
    return min(100, SIM_UTIL_PER_BUSY_KERNEL * max(0, busy))


def _gpu_temperature(util: int) -> int:
    return 30 + util // 2


def _gpu_power(util: int) -> float:
    return round(20 + 2.5 * util, 1)


class SharedSimReader:
    """Readings of simulated shares and MIG slices (whole simulated GPUs too), the interface of NVMLReader.

    ``activity`` gives this server's kernel activity; ``state_dir`` is where the
    servers of one machine meet (default :func:`default_state_dir`).
    """

    def __init__(
        self,
        devices: list[GPUDevice],
        activity: Callable[[], KernelActivity],
        state_dir: str | os.PathLike | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.devices = devices
        self.activity = activity
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.clock = clock
        self._written: set[Path] = set()

    # -- the state directory -------------------------------------------------------------
    def _gpu_dir(self, parent_uuid: str) -> Path:
        return self.state_dir / _UNSAFE.sub("_", parent_uuid)

    def _own_file(self, device: GPUDevice) -> Path:
        name = f"share-{device.share_index}-of-{device.share_count}.json"
        return self._gpu_dir(device.parent_uuid or device.uuid) / name

    def _write(self, path: Path, record: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            os.replace(tmp, path)  # atomic: a neighbour reads the old file or the new one, never half of one
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self._written.add(path)

    def _fresh_records(self, device: GPUDevice, own: Path, now: float) -> list[dict]:
        """The fresh records of every server on this GPU, this one's included (it was just written)."""
        records = []
        k = device.share_count or 1
        try:
            # only the files of this GPU's k shares, one per share: a file of any other name is nobody's (a
            # notebook of the same OS user may write into the directory; it must not make a neighbour's
            # "shared by" exceed the share count, nor the samples its server pushes)
            entries = [
                path
                for path in self._gpu_dir(device.parent_uuid or device.uuid).glob("share-*-of-*.json")
                if (m := SHARE_FILE.fullmatch(path.name)) and int(m.group(2)) == k and int(m.group(1)) < k
            ]
        except OSError:
            entries = []
        for path in entries:
            try:
                record = json.loads(path.read_text())
                written = float(record["written"])
                kernels, busy = int(record["kernels"]), int(record["busy"])
                cap = int(record["cap_mib"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # gone meanwhile, or not one of ours
            if path != own and not (now - STALE_SECONDS <= written <= now + STALE_SECONDS):
                continue  # a server that went away without closing (or a clock far off)
            records.append({"kernels": kernels, "busy": busy, "cap_mib": cap})
        return records

    # -- readings ------------------------------------------------------------------------
    def _share_reading(self, d: GPUDevice, activity: KernelActivity, now: float) -> GPUReading:
        own = self._own_file(d)
        self._write(
            own,
            {
                "written": now,
                "pid": os.getpid(),
                "uuid": d.uuid,
                "kernels": activity.kernels,
                "busy": activity.busy,
                "cap_mib": d.memory_mib,
            },
        )
        records = self._fresh_records(d, own, now)
        total_mib = d.memory_mib * (d.share_count or 1)
        gpu_util = min(100, sum(_own_util(r["busy"]) for r in records))
        gpu_used = min(total_mib, sum(_own_memory(r["cap_mib"], r["kernels"]) for r in records))
        return GPUReading(
            index=d.index,
            uuid=d.uuid,
            name=d.name,
            utilization_percent=_own_util(activity.busy),
            memory_used_mib=_own_memory(d.memory_mib, activity.kernels),
            memory_total_mib=d.memory_mib,
            temperature_c=_gpu_temperature(gpu_util),
            power_w=_gpu_power(gpu_util),
            scope="own",
            gpu_utilization_percent=gpu_util,
            gpu_memory_used_mib=gpu_used,
            gpu_memory_total_mib=total_mib,
            shared_by=max(1, min(len(records), d.share_count or 1)),
            processes=activity.kernels,
        )

    def _mig_reading(self, d: GPUDevice, activity: KernelActivity) -> GPUReading:
        util = _own_util(activity.busy)
        used = _own_memory(d.memory_mib, activity.kernels)
        return GPUReading(
            index=d.index,
            uuid=d.uuid,
            name=d.name,
            utilization_percent=util,
            memory_used_mib=used,
            memory_total_mib=d.memory_mib,
            temperature_c=None,  # a MIG slice has no sensors of its own (as NVML says)
            power_w=None,
            scope="own",
            gpu_utilization_percent=util,
            gpu_memory_used_mib=used,
            gpu_memory_total_mib=d.memory_mib,
            processes=activity.kernels,
        )

    def read(self) -> list[GPUReading]:
        activity = self.activity()
        now = self.clock()
        readings = []
        for d in self.devices:
            if d.is_share:
                readings.append(self._share_reading(d, activity, now))
            elif d.is_mig:
                readings.append(self._mig_reading(d, activity))
            else:
                readings.append(simulated_reading(d, activity))
        return readings

    def close(self) -> None:
        """Remove this server's files: its neighbours stop counting it at once."""
        for path in list(self._written):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            self._written.discard(path)


class SimulatedBackend(GPUBackend):
    """The demo's and the tests' GPUs (``simulated_gpus``), every one named "Simulated ..."."""

    name = "simulated"
    simulated = True
    option = "simulated_gpus"
    label = "The GPU simulation"

    def inventory(self, spec=None) -> list[GPUDevice]:
        return simulated_inventory(spec or [])

    def device_requests(self, device_ids: list[str]) -> list[dict]:
        return nvidia_device_requests(device_ids)

    def open_reader(
        self, devices: list[GPUDevice], activity: Callable[[], KernelActivity], env: Mapping[str, str]
    ) -> SimulatedReader | SharedSimReader:
        if not any(d.is_share or d.is_mig for d in devices):
            return SimulatedReader(devices, activity)
        # the servers of one machine meet in a state directory: by default one per hub (its API URL)
        state_dir = sim_state_dir_from_env(env) or default_state_dir(env.get("JUPYTERHUB_API_URL", ""))
        return SharedSimReader(devices, activity, state_dir=state_dir)
