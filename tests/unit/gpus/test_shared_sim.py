"""The simulated shared-GPU driver: own figures per server, the whole GPU's over the servers of its state directory."""

from __future__ import annotations

import json
import os

from jupyterhub_gpu.gpus.device import GPUDevice, share_uuid
from jupyterhub_gpu.gpus.shared_sim import STALE_SECONDS, SharedSimReader, default_state_dir
from jupyterhub_gpu.gpus.simulated import KernelActivity, simulated_reading

PARENT = "GPU-aaaaaaaa-0000-0000-0000-000000000001"


def share(i: int, k: int = 4, parent: str = PARENT) -> GPUDevice:
    return GPUDevice(
        index="0",
        uuid=share_uuid(parent, i, k),
        name="Simulated T4",
        memory_mib=16384 // k,
        simulated=True,
        parent_uuid=parent,
        share_index=i,
        share_count=k,
    )


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def reader(tmp_path, device, activity, clock):
    return SharedSimReader([device], lambda: activity[0], state_dir=tmp_path, clock=clock)


def test_two_servers_on_one_gpu_see_their_own_memory_and_the_shared_utilization(tmp_path):
    clock = Clock()
    a_act, b_act = [KernelActivity(kernels=2, busy=1)], [KernelActivity(kernels=1, busy=0)]
    a, b = reader(tmp_path, share(0), a_act, clock), reader(tmp_path, share(1), b_act, clock)
    a.read()
    [rb] = b.read()
    [ra] = a.read()
    # own figures: 1 GiB per own kernel under the share's 4 GiB cap, own utilization (per process: scope own)
    assert (ra.memory_used_mib, ra.memory_total_mib, ra.utilization_percent, ra.scope) == (2048, 4096, 45, "own")
    assert (rb.memory_used_mib, rb.memory_total_mib, rb.utilization_percent, rb.scope) == (1024, 4096, 0, "own")
    assert (ra.processes, rb.processes) == (2, 1)
    # the whole GPU's: the same for both
    for r in (ra, rb):
        assert r.gpu_utilization_percent == 45 and r.gpu_memory_used_mib == 3072 and r.gpu_memory_total_mib == 16384
        assert r.shared_by == 2 and r.temperature_c == 52 and r.power_w == 132.5
        assert r.name == "Simulated T4"
    assert ra.uuid == share_uuid(PARENT, 0, 4) and rb.uuid == share_uuid(PARENT, 1, 4)
    # b's kernel gets busy too: both see 90% on the GPU, each its own utilization
    b_act[0] = KernelActivity(kernels=1, busy=1)
    b.read()
    [ra] = a.read()
    assert (ra.utilization_percent, ra.gpu_utilization_percent) == (45, 90)
    a_act[0] = KernelActivity(kernels=2, busy=2)
    [ra] = a.read()
    assert ra.utilization_percent == 90 and ra.gpu_utilization_percent == 100  # capped


def test_own_memory_is_capped_at_the_share(tmp_path):
    [r] = reader(tmp_path, share(0), [KernelActivity(kernels=9, busy=0)], Clock()).read()
    assert r.memory_used_mib == 4096 and r.memory_total_mib == 4096 and r.gpu_memory_used_mib == 4096


def test_a_neighbour_that_went_away_stops_counting(tmp_path):
    clock = Clock()
    a = reader(tmp_path, share(0), [KernelActivity(1, 1)], clock)
    b = reader(tmp_path, share(1), [KernelActivity(1, 1)], clock)
    c = reader(tmp_path, share(2), [KernelActivity(1, 1)], clock)
    b.read(), c.read()
    assert a.read()[0].shared_by == 3
    # b closes: its file goes at once
    b.close()
    [r] = a.read()
    assert r.shared_by == 2 and r.gpu_utilization_percent == 90
    assert sorted(p.name for p in (tmp_path / PARENT).iterdir()) == ["share-0-of-4.json", "share-2-of-4.json"]
    # c is killed (no close): once its file is older than STALE_SECONDS it is ignored
    clock.t += STALE_SECONDS - 1
    assert a.read()[0].shared_by == 2
    clock.t += 2
    [r] = a.read()
    assert r.shared_by == 1 and r.gpu_utilization_percent == 45 and r.utilization_percent == 45


def test_other_gpus_and_bad_files_are_not_counted(tmp_path):
    clock = Clock()
    other = "GPU-bbbbbbbb-0000-0000-0000-000000000002"
    a = reader(tmp_path, share(0), [KernelActivity(1, 1)], clock)
    reader(tmp_path, share(1, parent=other), [KernelActivity(3, 2)], clock).read()
    (tmp_path / PARENT).mkdir(parents=True, exist_ok=True)
    (tmp_path / PARENT / "share-3-of-4.json").write_text("{half a fi")
    (tmp_path / PARENT / "share-2-of-4.json").write_text(json.dumps({"written": "soon", "kernels": 1}))
    [r] = a.read()
    assert r.shared_by == 1 and r.gpu_utilization_percent == 45 and r.gpu_memory_used_mib == 1024


def test_writes_are_atomic_and_leave_no_temporary_files(tmp_path):
    clock = Clock()
    a = reader(tmp_path, share(0), [KernelActivity(1, 0)], clock)
    for _ in range(20):
        a.read()
        clock.t += 1
    assert [p.name for p in (tmp_path / PARENT).iterdir()] == ["share-0-of-4.json"]
    record = json.loads((tmp_path / PARENT / "share-0-of-4.json").read_text())
    assert record["kernels"] == 1 and record["pid"] == os.getpid() and record["cap_mib"] == 4096
    a.close()
    assert list((tmp_path / PARENT).iterdir()) == []
    a.close()  # twice is fine


def test_a_mig_slice_is_its_own_and_writes_no_state(tmp_path):
    mig = GPUDevice("0:1", "MIG-1111", "Simulated A100 MIG 1g.10gb", 10240, simulated=True, parent_uuid="GPU-a100")
    r = SharedSimReader([mig], lambda: KernelActivity(2, 1), state_dir=tmp_path, clock=Clock()).read()[0]
    assert (r.utilization_percent, r.memory_used_mib, r.memory_total_mib, r.scope) == (45, 2048, 10240, "own")
    assert r.gpu_utilization_percent == 45 and r.shared_by is None and r.processes == 2
    assert r.temperature_c is None and r.power_w is None
    assert list(tmp_path.iterdir()) == []


def test_a_whole_simulated_gpu_reads_as_before(tmp_path):
    whole = GPUDevice("0", "GPU-1", "Simulated T4", 16384, simulated=True)
    activity = KernelActivity(1, 1)
    [r] = SharedSimReader([whole], lambda: activity, state_dir=tmp_path).read()
    assert r == simulated_reading(whole, activity) and r.scope == "gpu" and r.shared_by is None
    assert list(tmp_path.iterdir()) == []


def test_the_default_state_dir_is_in_the_temporary_directory_one_per_hub():
    base = default_state_dir()
    assert base.name == "jupyterhub-gpu-sim"
    one, two = default_state_dir("http://127.0.0.1:8081/hub/api"), default_state_dir("http://127.0.0.1:9081/hub/api")
    assert one.parent == two.parent == base and one != two and "/" not in one.name


def test_files_of_other_names_or_counts_never_raise_a_neighbours_shared_by(tmp_path):
    # every demo server runs as one OS user: a notebook may write into the state directory; 17 made-up files
    # would make its neighbour report shared_by 18, which the service refuses with the whole push
    clock = Clock()
    victim = reader(tmp_path, share(0), [KernelActivity(1, 0)], clock)
    gpu_dir = tmp_path / PARENT
    gpu_dir.mkdir(parents=True, exist_ok=True)
    record = json.dumps({"written": clock.t, "kernels": 1, "busy": 1, "cap_mib": 4096})
    for n in range(17):
        (gpu_dir / f"share-{n + 100}-of-4.json").write_text(record)  # no such share of 4
        (gpu_dir / f"share-{n % 2}-of-2.json").write_text(record)  # another share count
        (gpu_dir / f"share-x{n}.json").write_text(record)
    (gpu_dir / "share-01-of-4.json").write_text(record)  # not the one spelling of share 1
    [r] = victim.read()
    assert r.shared_by == 1 and r.gpu_utilization_percent == 0
    # the real neighbours count, and never more than the share count
    for i in (1, 2, 3):
        (gpu_dir / f"share-{i}-of-4.json").write_text(record)
    [r] = victim.read()
    assert r.shared_by == 4 and r.gpu_utilization_percent == 100
