"""The server extension's sampler: one reader, at its interval, never per request."""

from __future__ import annotations

import time
from decimal import Decimal

from jupyterhub_gpu.gpus.device import GPUDevice as DeviceInfo
from jupyterhub_gpu.gpus.device import GPUReading
from jupyterhub_gpu.gpus.simulated import KernelActivity, SimulatedReader, simulated_reading
from jupyterhub_gpu.serverext.extension import budget_summary, session_cost, unit_share_text
from jupyterhub_gpu.serverext.sampler import Sampler

T4 = DeviceInfo("0", "GPU-1", "Simulated T4", 16384)


class CountingReader:
    def __init__(self, fail_after=None):
        self.reads = 0
        self.fail_after = fail_after

    def read(self):
        self.reads += 1
        if self.fail_after is not None and self.reads > self.fail_after:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return [GPUReading("0", "GPU-1", "T4", 10 * self.reads, 100 * self.reads, 16384, 40, 30.0)]

    def close(self):
        pass


def test_simulated_gpu_follows_kernels_as_documented():
    assert simulated_reading(T4, KernelActivity(0, 0)).utilization_percent == 0
    one = simulated_reading(T4, KernelActivity(kernels=1, busy=1))
    assert (one.utilization_percent, one.memory_used_mib, one.temperature_c, one.power_w) == (45, 1024, 52, 132.5)
    three = simulated_reading(T4, KernelActivity(kernels=20, busy=3))
    assert three.utilization_percent == 100 and three.memory_used_mib == 16384  # capped
    assert SimulatedReader([T4, T4], lambda: KernelActivity(2, 0)).read()[1].memory_used_mib == 2048


def test_requests_read_the_latest_sample_never_the_gpu():
    reader = CountingReader()
    sampler = Sampler(reader, interval=60)
    sampler.sample_once()
    for _ in range(1000):
        readings, _sampled_at, history, error = sampler.snapshot()
    assert reader.reads == 1 and readings[0].utilization_percent == 10 and error is None
    assert len(history) == 1


def test_the_thread_samples_at_its_interval_and_stops():
    reader = CountingReader()
    sampler = Sampler(reader, interval=0.05)
    sampler.start()
    time.sleep(0.5)
    sampler.stop()
    reads = reader.reads
    assert 5 <= reads <= 12
    time.sleep(0.2)
    assert reader.reads == reads  # stopped


def test_a_failed_read_keeps_the_last_sample_and_says_why():
    reader = CountingReader(fail_after=1)
    sampler = Sampler(reader, interval=60)
    sampler.sample_once()
    sampler.sample_once()
    readings, _, _, error = sampler.snapshot()
    assert readings[0].utilization_percent == 10
    assert "GPU_IS_LOST" in error


def test_aggregates_since_the_last_push():
    sampler = Sampler(CountingReader(), interval=60)
    for _ in range(3):
        sampler.sample_once()
    summary = sampler.take_aggregate()
    assert summary["samples"] == 3 and summary["utilization_avg"] == 20.0
    assert summary["memory_used_max_mib"] == 300 and summary["memory_used_avg_mib"] == 200
    # a whole GPU: what utilization measures (the whole GPU), and nothing of shares
    assert summary["gpus"] == [{"uuid": "GPU-1", "utilization_avg": 20.0, "memory_used_max_mib": 300, "scope": "gpu"}]


class ShareReader:
    """Readings of one share as a shared reader gives them: own figures, processes and shared_by."""

    def __init__(self, rows):
        self.rows = list(rows)

    def read(self):
        util, used, processes, shared_by = self.rows.pop(0)
        return [
            GPUReading(
                "0", "GPU-1/share-0-of-4", "T4", util, used, 4096, 40, 30.0,
                scope="own", gpu_utilization_percent=90, shared_by=shared_by, processes=processes,
            )
        ]  # fmt: skip

    def close(self):
        pass


def test_aggregates_of_a_share_carry_scope_the_most_processes_and_the_most_neighbours():
    sampler = Sampler(ShareReader([(45, 1024, 1, 2), (0, 0, 0, 3), (45, 2048, 2, 2)]), interval=60)
    for _ in range(3):
        sampler.sample_once()
    [gpu] = sampler.take_aggregate()["gpus"]
    assert gpu == {
        "uuid": "GPU-1/share-0-of-4",
        "utilization_avg": 30.0,  # the server's own, not the GPU's 90%
        "memory_used_max_mib": 2048,  # own memory
        "scope": "own",
        "processes": 2,  # the most: one reading without an own process does not make the period idle
        "shared_by": 3,
    }
    assert sampler.take_aggregate()["gpus"] == []  # a new period
    assert sampler.take_aggregate()["samples"] == 0  # a new period


def test_session_cost_and_the_tightest_budget():
    from datetime import datetime, timezone

    session = {"started": "2026-11-29T10:00:00Z", "rate_per_minute": "0.05"}
    now = datetime(2026, 11, 29, 10, 1, 1, tzinfo=timezone.utc)
    assert session_cost(session, now) == (2, Decimal("0.10"))
    me = {
        "budgets": [
            {"unit": "money", "remaining": "87.4"},
            {"unit": "money", "remaining": "3"},
        ]
    }
    assert budget_summary(me, session) == {
        "budget_remaining": "3",
        "budget_unit": "money",
        "budget_minutes_left": 60,
    }
    assert budget_summary(None, session)["budget_remaining"] is None


def test_stats_cost_is_never_in_exponent_form(monkeypatch):
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from jupyterhub_gpu.serverext import extension
    from jupyterhub_gpu.serverext.extension import GPUExtension

    ext = GPUExtension.__new__(GPUExtension)
    ext.session = {"started": "2026-01-01T00:00:00Z", "rate_per_minute": "1", "id": "s", "simulated": False}
    ext.sampler, ext.simulated, ext.reason = None, False, None
    ext.config = SimpleNamespace(interval=2.0, tensorboard_url="")
    ext.activity, ext.service_me, ext.service_available = KernelActivity(), None, False
    # 24,000 minutes at ¥1: Decimal("24000").normalize() prints as "2.4E+4"
    monkeypatch.setattr(extension, "utcnow", lambda: datetime(2026, 1, 17, 16, 0, tzinfo=timezone.utc))
    stats = ext.stats()
    assert stats["session"]["minutes_billed"] == 24000 and stats["session"]["cost"] == "24000"


def test_kubernetes_pods_discover_their_gpus_and_count_gpu_hours_from_the_count(monkeypatch):
    """On Kubernetes the device plugin picks the GPUs: the server lists what NVML shows it, and a GPU-hour
    budget divides by JUPYTERHUB_GPU_COUNT (there is no device list in the environment)."""
    from jupyterhub_gpu.env import devices_from_env

    # no NVIDIA driver on this machine: the pod sees no GPU (the panel then says why), never a made-up one
    assert devices_from_env({"JUPYTERHUB_GPU_DEVICE_DISCOVERY": "nvml", "JUPYTERHUB_GPU_DEVICE_INFO": "[]"}) == []
    monkeypatch.setenv("JUPYTERHUB_GPU_COUNT", "2")
    monkeypatch.delenv("JUPYTERHUB_GPU_DEVICE_INFO", raising=False)
    me = {"budgets": [{"unit": "gpu_hours", "remaining": "1"}]}
    summary = budget_summary(me, {"started": "2026-11-29T10:00:00Z", "rate_per_minute": "0.5"})
    assert summary["budget_minutes_left"] == 30  # 1 GPU-hour over 2 GPUs


def test_kernels_are_counted_once_for_the_stats_and_for_stop_when_done():
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from jupyterhub_gpu.serverext.kernels import KernelCount, count_kernels

    naive = datetime(2026, 11, 29, 10, 0)
    aware = datetime(2026, 11, 29, 10, 5, tzinfo=timezone.utc)
    kernels = {
        "a": SimpleNamespace(execution_state="busy", last_activity=naive),
        "b": SimpleNamespace(execution_state="idle", last_activity=aware),
        "c": SimpleNamespace(execution_state="idle"),
    }

    class Manager:
        def list_kernel_ids(self):
            return [*kernels, "gone"]

        def get_kernel(self, kid):
            return kernels[kid]  # "gone" ended between the listing and the look-up: KeyError

    assert count_kernels(Manager()) == KernelCount(running=3, busy=1, last_activity=aware)
    assert count_kernels(SimpleNamespace(list_kernel_ids=list)) == KernelCount(0, 0, None)


def test_the_stats_name_each_units_share():
    parent = "GPU-1"
    quarter = DeviceInfo("0", f"{parent}/share-2-of-4", "T4", 4096, parent_uuid=parent, share_index=2, share_count=4)
    mig = DeviceInfo("0:1", "MIG-1", "NVIDIA A100-SXM4-40GB MIG 1g.10gb", 9856, parent_uuid="GPU-2")
    assert [unit_share_text(d) for d in (quarter, mig, T4, None)] == ["1/4", "mig:1g.10gb", "", ""]
