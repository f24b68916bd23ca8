"""The one GPU sampler of a single-user server: NVML or simulated readings in a thread.

NVML is read by one thread at a fixed interval (default 2 s), never per
request; handlers return the latest sample. The reader is the GPU backend's
(:class:`jupyterhub_gpu.gpus.backends.GPUReader`):
:class:`jupyterhub_gpu.gpus.nvml.NVMLReader` and, where there is no GPU (the
demo and the tests), :class:`jupyterhub_gpu.gpus.simulated.SimulatedReader`,
which follows the server's real kernel activity as documented there, or for
shares and MIG slices :class:`jupyterhub_gpu.gpus.shared_sim.SharedSimReader`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from jupyterhub_gpu.gpus.device import GPUReading

log = logging.getLogger("jupyterhub_gpu.serverext")


@dataclass
class Aggregate:
    """Averages since the last push to the service.

    Per GPU (``summary()["gpus"]``): the mean utilization and peak memory (on a
    share or MIG slice the server's own: :mod:`jupyterhub_gpu.gpus.shared_sim`,
    :class:`jupyterhub_gpu.gpus.nvml.NVMLReader`), ``scope`` ("own": the server's
    own utilization; "gpu": the whole GPU's), and where the reader knows them
    ``processes`` (the server's processes on the GPU, the most over the period: a server with a process of its own on
    the GPU at any sample of the period is not GPU-idle for it)
    and ``shared_by`` (servers on the GPU, the most over the period).
    """

    samples: int = 0
    utilization_sum: float = 0.0
    memory_used_max_mib: int = 0
    memory_used_sum: float = 0.0
    memory_total_mib: int = 0
    per_gpu: dict = field(default_factory=dict)

    def add(self, readings: list[GPUReading]) -> None:
        if not readings:
            return
        self.samples += 1
        util = sum(r.utilization_percent for r in readings) / len(readings)
        used = sum(r.memory_used_mib for r in readings)
        self.utilization_sum += util
        self.memory_used_sum += used
        self.memory_used_max_mib = max(self.memory_used_max_mib, used)
        self.memory_total_mib = sum(r.memory_total_mib for r in readings)
        for r in readings:
            g = self.per_gpu.setdefault(
                r.uuid,
                {"utilization_sum": 0.0, "memory_used_max_mib": 0, "samples": 0, "processes": None, "shared_by": None},
            )
            g["utilization_sum"] += r.utilization_percent
            g["memory_used_max_mib"] = max(g["memory_used_max_mib"], r.memory_used_mib)
            g["samples"] += 1
            g["scope"] = r.scope  # the latest: "own" or "gpu" (what utilization_percent measures)
            g["memory_known"] = g.get("memory_known", True) and r.memory_known
            if r.processes is not None:  # the most over the period: 0 only if no sample saw an own process
                g["processes"] = r.processes if g["processes"] is None else max(g["processes"], r.processes)
            if r.shared_by is not None:  # the most servers on the GPU over the period
                g["shared_by"] = r.shared_by if g["shared_by"] is None else max(g["shared_by"], r.shared_by)

    def summary(self) -> dict:
        n = max(self.samples, 1)
        return {
            "samples": self.samples,
            "utilization_avg": round(self.utilization_sum / n, 1),
            "memory_used_avg_mib": int(self.memory_used_sum / n),
            "memory_used_max_mib": self.memory_used_max_mib,
            "memory_total_mib": self.memory_total_mib,
            "gpus": [_gpu_summary(uuid, g) for uuid, g in self.per_gpu.items()],
        }


def _gpu_summary(uuid: str, g: dict) -> dict:
    """One GPU's part of the push: its averages, ``scope``, and ``processes``/``shared_by`` where known."""
    summary = {
        "uuid": uuid,
        "utilization_avg": round(g["utilization_sum"] / max(g["samples"], 1), 1),
        "memory_used_max_mib": g["memory_used_max_mib"],
        "scope": g.get("scope", "gpu"),
    }
    for key in ("processes", "shared_by"):
        if g.get(key) is not None:
            summary[key] = g[key]
    if not g.get("memory_known", True):
        summary["memory_known"] = False  # its memory_used_max_mib (0) is no measurement
    return summary


class Sampler:
    """One thread that reads the GPUs every ``interval`` seconds and keeps the latest sample."""

    def __init__(self, reader, interval: float = 2.0, history_seconds: float = 3600, clock=time.time):
        self.reader = reader
        self.interval = interval
        self.clock = clock
        self.latest: list[GPUReading] = []
        self.sampled_at: float | None = None
        self.error: str | None = None
        self.history: deque = deque(maxlen=max(1, int(history_seconds / interval)))
        self.aggregate = Aggregate()
        self.reads = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_once(self) -> None:
        try:
            readings = self.reader.read()
            error = None
        except Exception as e:  # keep the last good sample; say why it is old
            log.warning("GPU sample failed: %s", e)
            readings, error = None, f"{type(e).__name__}: {e}"
        now = self.clock()
        with self._lock:
            self.reads += 1
            self.error = error
            if readings is None:
                return
            self.latest = readings
            self.sampled_at = now
            self.aggregate.add(readings)
            if readings:
                self.history.append(
                    (
                        now,
                        round(sum(r.utilization_percent for r in readings) / len(readings), 1),
                        sum(r.memory_used_mib for r in readings),
                        sum(r.memory_total_mib for r in readings),
                    )
                )

    def snapshot(self) -> tuple[list[GPUReading], float | None, list[tuple], str | None]:
        with self._lock:
            return list(self.latest), self.sampled_at, list(self.history), self.error

    def take_aggregate(self) -> dict:
        """The averages since the last call, and start a new period."""
        with self._lock:
            summary = self.aggregate.summary()
            self.aggregate = Aggregate()
        return summary

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jupyterhub-gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.reader.close()
