"""A GPU pod lists its GPUs with NVML, which sees only those the device plugin gave it (here: the stand-in driver).

On the test cluster the simulated device plugin mounts the stand-in driver and the device nodes of the GPUs the
kubelet chose into the pod (tools/k8s/cmd/gpu-device-plugin-sim); here the stand-in's device directory plays
the pod's /dev. The environment never names a GPU the pod may read.
"""

from __future__ import annotations

from jupyterhub_gpu import env as gpu_env
from jupyterhub_gpu.gpus.standin import SimGPU
from jupyterhub_gpu.spawners.kube.objects import make_kube_env

BASE = {"NVIDIA_VISIBLE_DEVICES": "hub-placeholder", "CUDA_VISIBLE_DEVICES": "x", gpu_env.MODEL: "T4"}


def pod_env(simulated: bool, plugin_ids: str | None, **kwargs) -> dict[str, str]:
    """The pod's environment: ours from make_kube_env, then what the device plugin's Allocate adds."""
    env = make_kube_env(
        {**BASE, gpu_env.SIMULATED: "1" if simulated else "0", gpu_env.READER: "simulated"},
        gpu_count=kwargs.pop("gpu_count", 1),
        gpu_resource="nvidia.com/gpu",
        **kwargs,
    )
    if plugin_ids is not None:
        env["NVIDIA_VISIBLE_DEVICES"] = plugin_ids
    return env


def given_only(driver, *indices: int) -> None:
    """The pod's /dev: the device nodes of the GPUs the plugin chose, and no other."""
    for node in driver.dev_dir.glob("nvidia[0-9]*"):
        if int(node.name[len("nvidia") :]) not in indices:
            node.unlink()


def test_a_pod_on_a_simulated_node_lists_its_gpus_with_nvml_labelled_simulated(driver):
    driver.write([SimGPU(i) for i in range(4)])
    given_only(driver, 2, 0)
    env = pod_env(True, f"{driver.uuids()[2]},{driver.uuids()[0]}")
    assert env[gpu_env.DEVICE_DISCOVERY] == "nvml"
    # the server reads them with NVML too, not with the Python simulation the hub's env once named
    assert gpu_env.reader_from_env(env) == "nvml"
    devices = gpu_env.devices_from_env(env)
    assert [(d.index, d.uuid, d.name, d.simulated) for d in devices] == [
        ("0", driver.uuids()[0], "Simulated T4", True),
        ("1", driver.uuids()[2], "Simulated T4", True),
    ]


def test_the_variable_never_names_a_gpu(driver):
    driver.write([SimGPU(i) for i in range(4)])
    given_only(driver, 1)
    # a forged NVIDIA_VISIBLE_DEVICES names every GPU: NVML still lists the one whose node the pod has
    env = pod_env(False, ",".join(driver.uuids().values()))
    assert [d.uuid for d in gpu_env.devices_from_env(env)] == [driver.uuids()[1]]
    # a discovery the pod's environment made up is no discovery at all
    assert gpu_env.devices_from_env({**env, gpu_env.DEVICE_DISCOVERY: "simulated"}) == []


def test_no_driver_is_no_gpu(driver):
    assert not driver.state_file.exists()
    assert gpu_env.devices_from_env(pod_env(True, "GPU-sim-0")) == []


def test_a_time_sliced_pod_reads_its_gpu_as_its_share_with_the_cap(driver):
    driver.write([SimGPU(i) for i in range(4)])
    given_only(driver, 3)
    env = pod_env(True, driver.uuids()[3], memory_limit_mib=3840, share="1/4")
    (device,) = gpu_env.devices_from_env(env)
    assert device.simulated and device.parent_uuid == driver.uuids()[3] and device.share_count == 4
    assert device.memory_mib == 3840


def test_a_cpu_pod_is_not_told_to_discover_anything():
    env = pod_env(True, None, gpu_count=0)
    assert gpu_env.DEVICE_DISCOVERY not in env and env["NVIDIA_VISIBLE_DEVICES"] == "void"
