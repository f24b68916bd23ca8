"""A pod on a simulated GPU node (the k8s test layer) reads its GPUs from the IDs the device plugin gave it."""

from __future__ import annotations

from jupyterhub_gpu import env as gpu_env
from jupyterhub_gpu.spawners.kube.objects import make_kube_env

BASE = {"NVIDIA_VISIBLE_DEVICES": "hub-placeholder", "CUDA_VISIBLE_DEVICES": "x", gpu_env.MODEL: "T4"}


def pod_env(simulated: bool, plugin_ids: str | None, **kwargs) -> dict[str, str]:
    """The pod's environment: ours from make_kube_env, then what the device plugin's Allocate adds."""
    env = make_kube_env(
        {**BASE, gpu_env.SIMULATED: "1" if simulated else "0"},
        gpu_count=kwargs.pop("gpu_count", 1),
        gpu_resource="nvidia.com/gpu",
        simulated=simulated,
        **kwargs,
    )
    if plugin_ids is not None:
        env["NVIDIA_VISIBLE_DEVICES"] = plugin_ids
    return env


def test_a_simulated_pod_lists_the_plugins_ids_labelled_simulated():
    env = pod_env(True, "GPU-sim-2,GPU-sim-0")
    assert env[gpu_env.DEVICE_DISCOVERY] == "simulated"
    devices = gpu_env.devices_from_env(env)
    assert [(d.index, d.uuid, d.name, d.simulated) for d in devices] == [
        ("0", "GPU-sim-2", "Simulated T4", True),
        ("1", "GPU-sim-0", "Simulated T4", True),
    ]


def test_a_real_pod_still_asks_nvml_and_never_trusts_the_variable():
    env = pod_env(False, "GPU-sim-1")
    assert env[gpu_env.DEVICE_DISCOVERY] == "nvml"
    # no NVML here: nothing, rather than a GPU named by an environment variable
    assert gpu_env.devices_from_env(env) == []
    # a "simulated" discovery without the session's simulated flag lists nothing either
    forged = {**env, gpu_env.DEVICE_DISCOVERY: "simulated"}
    assert gpu_env.devices_from_env(forged) == []


def test_no_ids_or_the_runtimes_special_words_are_no_gpu():
    for value in (None, "", "void", "none", "all", " , "):
        assert gpu_env.devices_from_env(pod_env(True, value)) == [], value


def test_a_simulated_time_sliced_pod_reads_its_gpu_as_its_share_with_the_cap():
    env = pod_env(True, "GPU-sim-3", memory_limit_mib=3840, share="1/4")
    (device,) = gpu_env.devices_from_env(env)
    assert device.simulated and device.parent_uuid == "GPU-sim-3" and device.share_count == 4
    assert device.memory_mib == 3840


def test_a_cpu_pod_is_not_told_to_discover_anything():
    env = pod_env(True, None, gpu_count=0)
    assert gpu_env.DEVICE_DISCOVERY not in env and env["NVIDIA_VISIBLE_DEVICES"] == "void"
