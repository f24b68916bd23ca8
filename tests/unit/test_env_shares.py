"""The environment of a server on a share or MIG slice: visible uuids, cap, share text."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

from jupyterhub_gpu import env as gpu_env
from jupyterhub_gpu.env import pod_unit
from jupyterhub_gpu.gpus.device import GPUDevice, share_uuid
from jupyterhub_gpu.money import to_micros
from jupyterhub_gpu.session import SessionStart

T4 = GPUDevice("0", "GPU-aaaa", "Simulated T4", 15360, simulated=True)
SHARE = GPUDevice("0", share_uuid("GPU-aaaa", 1, 4), "Simulated T4", 3840, True, "GPU-aaaa", 1, 4)
MIG = GPUDevice("1", "MIG-bbbb", "Simulated A100 MIG 1g.10gb", 9728, True, "GPU-cccc")


def env_for(devices: list[GPUDevice]) -> dict[str, str]:
    return gpu_env.make_gpu_env(
        SessionStart(
            id="s1",
            user="",
            server_name="",
            groups=(),
            profile="p",
            gpus=tuple([d.visible_uuid for d in devices]),
            visible_gpus=tuple([d.visible_uuid for d in devices]),
            rate_micros=to_micros(Decimal("0.01")),
            currency="CNY",
            started=datetime(2026, 1, 1, tzinfo=timezone.utc),
            simulated=True,
        ),
        devices=[d.to_dict() for d in devices],
        memory_limit_mib=gpu_env.memory_limit_of(devices),
        share=gpu_env.share_label(devices),
    )


def test_new_names_are_listed():
    assert gpu_env.MEMORY_LIMIT_MIB in gpu_env.NAMES
    assert gpu_env.SHARE in gpu_env.NAMES
    assert all(n.startswith(gpu_env.PREFIX) for n in gpu_env.NAMES)


def test_a_share_sees_its_parent_gpu_with_a_cap():
    env = env_for([SHARE])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa"
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-aaaa"
    assert env[gpu_env.DEVICES] == "GPU-aaaa"
    assert env[gpu_env.MEMORY_LIMIT_MIB] == "3840"
    assert env[gpu_env.SHARE] == "1/4"
    assert gpu_env.memory_limit_from_env(env) == 3840
    assert gpu_env.share_from_env(env) == "1/4"
    (back,) = gpu_env.devices_from_env(env)
    assert back == SHARE
    assert json.loads(env[gpu_env.DEVICE_INFO])[0]["share_count"] == 4


def test_a_mig_slice_sees_its_own_uuid_and_memory():
    env = env_for([MIG])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "MIG-bbbb"
    assert gpu_env.memory_limit_from_env(env) == 9728
    assert gpu_env.share_from_env(env) == "mig:1g.10gb"
    assert gpu_env.devices_from_env(env) == [MIG]


def test_a_whole_gpu_has_neither_variable():
    env = env_for([T4])
    assert gpu_env.MEMORY_LIMIT_MIB not in env and gpu_env.SHARE not in env
    assert gpu_env.memory_limit_from_env(env) is None
    assert gpu_env.share_from_env(env) == ""
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa"


def test_a_bad_cap_reads_as_none():
    assert gpu_env.memory_limit_from_env({gpu_env.MEMORY_LIMIT_MIB: "lots"}) is None
    assert gpu_env.memory_limit_from_env({gpu_env.MEMORY_LIMIT_MIB: "0"}) is None
    assert gpu_env.memory_limit_from_env({}) is None


def test_a_time_sliced_pod_reads_the_gpu_it_sees_whole_as_its_share():
    # Kubernetes: NVML in the pod lists the physical GPU; the pod's SHARE and cap make it share 0 of k, so the
    # readers count only the pod's own processes' memory against its cap (never its neighbours')
    whole = GPUDevice("0", "GPU-node-0", "Tesla T4", 16384)
    env = {"JUPYTERHUB_GPU_SHARE": "1/4", "JUPYTERHUB_GPU_MEMORY_LIMIT_MIB": "4000"}
    unit = pod_unit(whole, env)
    assert unit.is_share and unit.visible_uuid == "GPU-node-0"
    assert (unit.share_index, unit.share_count, unit.memory_mib) == (0, 4, 4000)
    # without a cap: the GPU's memory over the replicas
    assert pod_unit(whole, {"JUPYTERHUB_GPU_SHARE": "1/4"}).memory_mib == 4096


def test_a_pod_unit_is_left_whole_for_a_whole_gpu_a_mig_slice_or_a_bad_share():
    whole = GPUDevice("0", "GPU-node-0", "Tesla T4", 16384)
    mig = GPUDevice("0:1", "MIG-x", "NVIDIA A100 MIG 1g.10gb", 9984, parent_uuid="GPU-a100")
    assert pod_unit(whole, {}) == whole
    assert pod_unit(mig, {"JUPYTERHUB_GPU_SHARE": "mig:1g.10gb"}) == mig
    for bad in ("1/1", "1/17", "1/x", "2/4", "mig:1g.10gb"):
        assert pod_unit(whole, {"JUPYTERHUB_GPU_SHARE": bad}) == whole
